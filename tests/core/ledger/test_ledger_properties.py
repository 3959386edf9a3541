"""Properties over random commitment sequences: the ledger's invariants hold after every step."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from kalena.core.ledger import (
    Blueprint,
    Eviction,
    PlaceBatch,
    RemoveBatch,
    ReservationUpdate,
    restoration_violations,
    sum_violations,
)
from kalena.core.ledger.fit import tolerant_capacity
from kalena.core.resources import GPU
from kalena.core.verdict import ReasonCode
from kalena.testing.builders import batch
from kalena.testing.clusters import synthetic_cluster

CLUSTER = synthetic_cluster(12, 40, 0, seed=3)
BLUEPRINT = Blueprint.of(CLUSTER.nodes, CLUSTER.production, CLUSTER.placement)

op = st.one_of(
    st.tuples(
        st.just("place"),
        st.integers(0, 11),  # node
        st.sampled_from([0.1, 0.5, 1.0, 4.0, 12.0]),  # cpu
        st.sampled_from([0.25, 1.0, 8.0, 40.0]),  # ram
        st.sampled_from([0, 0, 0, 1]),  # gpu (never placed)
        st.booleans(),  # stale epoch?
    ),
    st.tuples(st.just("remove"), st.integers(0, 10_000), st.booleans()),
    st.tuples(st.just("evict"), st.integers(0, 10_000), st.booleans()),
    st.tuples(st.just("update"), st.floats(0.0, 1.5), st.integers(0, 2**31 - 1)),
)


def check(L, q0):
    assert restoration_violations(L, BLUEPRINT) == ()
    assert sum_violations(L) == ()
    assert np.array_equal(L.request_sum, q0)  # the request ledger never moves
    assert np.all(L.slack()[:, GPU] == 0)
    assert L.batch_count.sum() == len(L) - L.production_count


@settings(max_examples=120, deadline=None)
@given(st.lists(op, max_size=40))
def test_invariants_hold_after_any_sequence(ops):
    L = CLUSTER.ledger()
    q0 = L.request_sum.copy()
    serial = 0
    for o in ops:
        if o[0] == "place":
            _, n, cpu, ram, gpu, stale = o
            serial += 1
            w = batch(f"j/b{serial}", cpu=cpu, ram=ram, gpu=gpu)
            req = w.requests.array()
            would_fit = bool(np.all(L.reservation_sum[n] + req <= tolerant_capacity(L.capacity[n])))
            epoch = L.node_epoch(n) - 1 if stale else L.node_epoch(n)
            r = L.apply(PlaceBatch(w, n, epoch))
            if stale:
                assert not r.accepted and r.reasons[0].code is ReasonCode.STALE_EPOCH
            elif gpu:
                assert not r.accepted and r.reasons[0].code is ReasonCode.GPU_REQUESTED
            else:
                assert r.accepted is would_fit  # accepted iff it fit the reservation ledger then
                if not would_fit:
                    assert all(x.code is ReasonCode.INSUFFICIENT_RESOURCE for x in r.reasons)
        elif o[0] in ("remove", "evict"):
            _, pick, override = o
            ids = L.batch_ids() + L.production_ids()
            wid = ids[pick % len(ids)]
            n = L.node_of(wid)
            is_batch = wid in L.batch_ids()
            c = (
                RemoveBatch(wid, n, L.node_epoch(n))
                if o[0] == "remove"
                else Eviction(wid, n, L.node_epoch(n), limit_breach_override=override)
            )
            r = L.apply(c)
            expect = is_batch or (o[0] == "evict" and override)
            assert r.accepted is expect
            assert (wid in L) is (not is_batch or not r.accepted)  # production never leaves
            # the whole-list form agrees with the lookup, for the id alone and among others
            assert L.holds_none([wid]) is (wid not in L)
            assert L.holds_none(["never/placed", wid, "nor/this"]) is (wid not in L)
        else:
            _, scale, seed = o
            view = L.rows()
            frac = np.random.default_rng(seed).uniform(0, scale, size=(len(view.rows), 1))
            res = view.requests * frac
            res[:, GPU] = view.requests[:, GPU]
            assert L.apply(ReservationUpdate(view.rows, res, view.global_epoch)).accepted
        check(L, q0)
    # removing every batch workload restores the blueprint exactly
    for wid in L.batch_ids():
        n = L.node_of(wid)
        assert L.apply(RemoveBatch(wid, n, L.node_epoch(n))).accepted
    check(L, q0)
    assert len(L) == L.production_count == len(BLUEPRINT.ids)
    assert L.batch_count.sum() == 0
