"""The ledger's bulk loads are the loop they stand for, bit for bit.

``from_blueprint`` adds production in one vectorised step and ``place_until_refused`` places a
cluster's bound batch in one (a cluster shell rebuilds its ledger each pass: 23,000 rows cost
0.54 s one by one). Against the loop of ``PlaceBatch`` (each at the node's current epoch, a node's
later ones skipped once one is refused) they must give the same rows, sums, versions, epochs and
refusals; a freed row is reused as the loop would reuse it."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kalena.core.ledger import Ledger, PlaceBatch, RemoveBatch, ReservationRefresh
from kalena.core.ledger.commitments import CommitResult, RemovalCause
from kalena.core.ledger.state import _BULK_FROM
from kalena.core.model import NodeSpec, Selector, Tier, WorkloadSpec
from kalena.core.resources import Resources
from kalena.core.verdict import Reason, ReasonCode

CAP = Resources.from_mapping({"cpu": 4.0, "ram": 8.0, "gpu": 1.0})
VALUES = st.sampled_from([0.1, 0.2, 0.3, 0.7, 1.0, 1.5, 2.5])


def _spec(wid: str, cpu: float, ram: float, tier: Tier, gpu: float = 0.0) -> WorkloadSpec:
    req = Resources.from_mapping({"cpu": cpu, "ram": ram, "gpu": gpu})
    return WorkloadSpec(id=wid, requests=req, tier=tier, namespace=wid[:1], labels={"app": wid[:2]})


CASE = st.tuples(
    st.integers(1, 4),  # nodes
    st.lists(st.tuples(st.integers(0, 3), VALUES, VALUES), max_size=8),  # production
    # (node, cpu, ram, gpu, an id repeated: rarely, since the loop itself answers a load with one)
    st.lists(
        st.tuples(st.integers(0, 3), VALUES, VALUES, st.booleans(), st.integers(0, 19).map(lambda x: x == 0)),
        max_size=20,
    ),
    st.integers(0, 3),  # batch placed and removed first (freed rows to reuse)
)


def _state(ledger: Ledger):
    rs = ledger.row_arrays()
    live = rs.live_rows()
    return (
        live.tolist(),
        rs.node[live].tolist(),
        rs.version[live].tolist(),
        [rs.ids[r] for r in live],
        rs.reservation[live].tobytes(),
        ledger.reservation_sum.tobytes(),
        ledger.request_sum.tobytes(),
        ledger.batch_count.tolist(),
        ledger.node_epochs.tolist(),
        ledger.global_epoch,
    )


@settings(max_examples=150, deadline=None)
@given(CASE)
def test_the_bulk_loads_are_the_loop(case):
    n_nodes, prod, batch, churn = case
    nodes = [NodeSpec(f"n{i}", allocatable=CAP) for i in range(n_nodes)]
    # at most 8 x 2.5 / 8 = 2.5 cores of production on a node of 4: room left for the churn below
    prod_specs = [_spec(f"p{i}", c / 8, r / 8, Tier.SERVICE) for i, (_, c, r) in enumerate(prod)]
    placement = {w.id: f"n{k % n_nodes}" for w, (k, _, _) in zip(prod_specs, prod, strict=True)}
    pairs = []
    for i, (k, c, r, gpu, dup) in enumerate(batch):
        wid = "b0" if dup and i else f"b{i}"  # some ids twice: the second is refused as placed
        pairs.append((_spec(wid, c, r, Tier.BATCH, gpu=0.5 if gpu and c > 2 else 0.0), k % n_nodes))
    made = []
    for _ in range(2):
        ledger = Ledger.from_blueprint(nodes, [CAP] * n_nodes, prod_specs, placement)
        for j in range(churn):  # rows freed before the load: both must reuse them alike
            w = _spec(f"x{j}", 0.1, 0.1, Tier.BATCH)
            assert ledger.apply(PlaceBatch(w, 0, ledger.node_epoch(0))).accepted
        for j in range(churn):
            ledger.apply(RemoveBatch(f"x{j}", 0, ledger.node_epoch(0), RemovalCause.FINISHED))
        made.append(ledger)
    bulk, loop = made
    # the bulk production load sums as the from-scratch yardstick does, bit for bit
    assert bulk.incremental().request.tobytes() == bulk.recompute().request.tobytes()

    placed, refused = bulk.place_until_refused(pairs)
    want_placed, want_refused, stopped = [], {}, set()
    for i, (w, k) in enumerate(pairs):
        if k in stopped:
            want_placed.append(False)
            continue
        r = loop.apply(PlaceBatch(w, k, loop.node_epoch(k)))
        want_placed.append(r.accepted)
        if not r.accepted:
            stopped.add(k)
            want_refused[i] = r
    assert placed.tolist() == want_placed
    assert sorted(refused) == sorted(want_refused)
    for i, r in refused.items():
        assert [x.code for x in r.reasons] == [x.code for x in want_refused[i].reasons]
        assert r.reasons == want_refused[i].reasons
        # as the loop gives it: the node's epoch at its turn, the ledger's epoch after it
        assert r.commitment == want_refused[i].commitment
        assert r.global_epoch == want_refused[i].global_epoch
    assert _state(bulk) == _state(loop)
    # the selector index, built late for the bulk ledger, answers as the one kept all along
    for sel in (Selector(match_labels={"app": "b1"}), Selector(names=("p0", "b0"))):
        assert sorted(bulk.matching_rows(sel).tolist()) == sorted(loop.matching_rows(sel).tolist())
    # and both go on alike
    w = _spec("late", 0.1, 0.1, Tier.BATCH)
    took = [led.apply(PlaceBatch(w, 0, led.node_epoch(0))).accepted for led in (bulk, loop)]
    assert took[0] == took[1]
    assert _state(bulk) == _state(loop)
    late = bulk.matching_rows(Selector(names=("late",))).tolist()
    assert late == ([bulk.row_arrays().ids.tolist().index("late")] if took[0] else [])


def test_a_refusal_is_the_loops_even_when_later_ones_on_other_nodes_are_taken():
    """(The hypothesis case above draws repeated ids often, which the loop itself answers.)"""
    nodes = [NodeSpec(f"n{i}", allocatable=CAP) for i in range(2)]
    pairs = [
        (_spec("b0", 0.5, 1.0, Tier.BATCH), 0),
        (_spec("b1", 3.9, 1.0, Tier.BATCH), 0),  # does not fit beside b0
        (_spec("b2", 0.5, 1.0, Tier.BATCH), 0),  # not tried: node 0 refused one
        (_spec("b3", 0.5, 1.0, Tier.BATCH), 1),
        (_spec("b4", 0.5, 0.5, Tier.BATCH, gpu=1.0), 1),  # gpu: never placed by Kalena
    ]
    bulk, loop = (Ledger.from_blueprint(nodes, [CAP] * 2, [], {}) for _ in range(2))
    placed, refused = bulk.place_until_refused(pairs)
    assert placed.tolist() == [True, False, False, True, False]
    want, stopped = {}, set()
    for i, (w, n) in enumerate(pairs):
        if n not in stopped and not (r := loop.apply(PlaceBatch(w, n, loop.node_epoch(n)))).accepted:
            stopped.add(n)
            want[i] = r
    assert sorted(refused) == sorted(want) == [1, 4]
    assert refused == want  # the commitment (its node's epoch then), the reasons and the epoch then
    assert refused[1].global_epoch == 1 and refused[4].global_epoch == 2
    assert [x.code for x in refused[4].reasons] == [ReasonCode.GPU_REQUESTED]


def test_an_empty_load_and_a_bad_node_index():
    ledger = Ledger.from_blueprint([NodeSpec("a", allocatable=CAP)], [CAP], [], {})
    placed, refused = ledger.place_until_refused([])
    assert placed.size == 0 and refused == {}
    with pytest.raises(IndexError, match="node index 3"):
        ledger.place_until_refused([(_spec("b", 0.1, 0.1, Tier.BATCH), 3)])
    with pytest.raises(ValueError, match="only batch"):
        ledger.place_until_refused([(_spec("p", 0.1, 0.1, Tier.SERVICE), 0)])
    assert np.all(ledger.reservation_sum == 0)


# ``apply_all`` takes a scheduling pass's many placements at once: the loop it stands for, bit for bit


def _one_by_one(ledger: Ledger, cs) -> list:
    """The rule of ``apply_all`` written as its loop: once one is refused on a node, the later ones
    on it are stale."""
    out, failed = [], set()
    for c in cs:
        if c.node in failed:
            why = Reason(
                ReasonCode.STALE_EPOCH,
                detail="an earlier commitment of this decision on the node was rejected",
            )
            out.append(CommitResult(c, False, (why,), ledger.global_epoch))
            continue
        r = ledger.apply(c)
        if not r.accepted:
            failed.add(c.node)
        out.append(r)
    return out


DECISION = st.lists(
    st.tuples(
        st.integers(0, 3),  # node
        VALUES,
        VALUES,
        st.sampled_from(["ok"] * 8 + ["stale", "gpu", "huge"]),
    ),
    min_size=_BULK_FROM,
    max_size=_BULK_FROM + 16,
)


@settings(max_examples=200, deadline=None)
@given(
    st.integers(1, 4),
    st.integers(0, 6),
    DECISION,
    st.sampled_from([None] * 5 + ["twice", "placed", "service"]),  # one placement the loop must say
)
def test_a_pass_of_placements_is_the_loop(n_nodes, resident, decision, odd):
    nodes = [NodeSpec(f"n{i}", allocatable=CAP) for i in range(n_nodes)]
    prod = [_spec(f"p{i}", 0.5, 0.5, Tier.SERVICE) for i in range(n_nodes)]
    made = []
    for _ in range(2):
        led = Ledger.from_blueprint(nodes, [CAP] * n_nodes, prod, {w.id: f"n{i}" for i, w in enumerate(prod)})
        for j in range(resident):  # batch already there (one of them placed again below)
            w = _spec(f"r{j}", 0.2, 0.2, Tier.BATCH)
            assert led.apply(PlaceBatch(w, j % n_nodes, led.node_epoch(j % n_nodes))).accepted
        made.append(led)
    bulk, loop = made
    # stamped as a decision stamps them (a node's first at its epoch, each later one +1), some spoiled
    cs, seen = [], {}
    for i, (k, c, r, how) in enumerate(decision):
        how = odd if odd and i == len(decision) // 2 else how
        n = k % n_nodes
        e = bulk.node_epoch(n) + seen.get(n, 0) + (1 if how == "stale" else 0)
        seen[n] = seen.get(n, 0) + 1
        wid = {"twice": "b0", "placed": "r0" if resident else "b0"}.get(how, f"b{i}")
        tier = Tier.SERVICE if how == "service" else Tier.BATCH
        cs.append(PlaceBatch(_spec(wid, 40.0 if how == "huge" else c, r, tier, 0.5 * (how == "gpu")), n, e))

    def outcome(run):  # the results, or the error where the loop meets a service workload
        try:
            return [(r.accepted, r.reasons, r.global_epoch) for r in run(cs)]
        except ValueError as e:
            return str(e)

    assert outcome(bulk.apply_all) == outcome(lambda cs: _one_by_one(loop, cs))
    assert _state(bulk) == _state(loop)
    # and both go on alike: a refresh of every row, then one more placement
    rs = bulk.row_arrays()
    fresh = rs.reservation[: rs.high].copy()
    fresh[:, 0] = 0.05  # cpu (gpu stays at the request)
    for led in (bulk, loop):
        assert led.apply(ReservationRefresh(fresh, led.global_epoch)).accepted
    w = _spec("late", 0.1, 0.1, Tier.BATCH)
    took = [led.apply(PlaceBatch(w, 0, led.node_epoch(0))).accepted for led in (bulk, loop)]
    assert took[0] == took[1]
    assert _state(bulk) == _state(loop)
