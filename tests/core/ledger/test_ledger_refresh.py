"""ReservationRefresh: every live row's reservation by row, judged and applied as the
ReservationUpdate of those rows would be (what the simulator commits every tick)."""

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from kalena.core.ledger import Ledger, PlaceBatch, RemoveBatch, ReservationRefresh, ReservationUpdate
from kalena.core.resources import CPU, GPU, NDIM, RAM, STORAGE
from kalena.core.verdict import ReasonCode
from kalena.testing.builders import batch
from kalena.testing.clusters import synthetic_cluster

CLUSTER = synthetic_cluster(6, 20, 0, seed=5)


def grown(ops: list[tuple[int, float]]) -> Ledger:
    """A ledger with batch rows placed and removed: holes among the rows in use."""
    L = CLUSTER.ledger()
    for k, (n, cpu) in enumerate(ops):
        if cpu > 0:
            L.apply(PlaceBatch(batch(f"j/b{k}", cpu=cpu, ram=0.5), n, L.node_epoch(n)))
        elif L.batch_ids():
            wid = L.batch_ids()[n % len(L.batch_ids())]
            L.apply(RemoveBatch(wid, L.node_of(wid), L.node_epoch(L.node_of(wid))))
    return L


def by_row(L: Ledger, live: np.ndarray, spare: int, seed: int) -> np.ndarray:
    """Reservations by row: a random share of each live row's request (gpu at its request, some
    rows unchanged, a -0.0 among them), and large finite values where no row is in use."""
    rs = L.row_arrays()
    rng = np.random.default_rng(seed)
    out = np.full((rs.high + spare, NDIM), 1e9)
    req = rs.request[live]
    res = req * rng.uniform(0, 1.2, size=(len(live), 1))
    keep = rng.random(len(live)) < 0.3
    res[keep] = rs.reservation[live][keep]
    res[:, GPU] = req[:, GPU]
    res[req[:, CPU] == 0, CPU] = -0.0
    out[live] = res
    return out


def state(L: Ledger) -> tuple:
    rs = L.row_arrays()
    live = rs.live_rows()
    return (
        rs.reservation[live].tobytes(),
        rs.version[live].tobytes(),
        L.reservation_sum.tobytes(),
        L.node_epochs.tobytes(),
        L.global_epoch,
    )


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 5), st.sampled_from([0.0, 0.0, 0.25, 1.0, 2.0])), max_size=30),
    st.integers(0, 3),
    st.integers(0, 2**31 - 1),
)
@example([(0, 1.0), (1, 1.0), (2, 1.0), (0, 0.0)], 2, 1)  # a hole below the high mark
def test_refresh_writes_what_the_update_of_every_live_row_writes(ops, spare, seed):
    a, b = grown(ops), grown(ops)
    live = a.row_arrays().live_rows()
    values = by_row(a, live, spare, seed)
    ra = a.apply(ReservationUpdate(live, values[live], a.global_epoch))
    rb = b.apply(ReservationRefresh(values, b.global_epoch))
    assert ra.accepted and rb.accepted and ra.global_epoch == rb.global_epoch
    assert state(a) == state(b)  # bit for bit: reservations, versions, sums, epochs
    assert np.array_equal(b.reservation_sum, b.recompute().reservation)


REFRESH_STALE = [
    # what happens between read and commit, accepted
    ("place", False),  # a row in use now was placed since
    ("remove", True),  # a row gone since is simply not written
    ("update", False),  # a row in use changed since
    ("nothing", True),
]


@pytest.mark.parametrize(("between", "ok"), REFRESH_STALE, ids=[c[0] for c in REFRESH_STALE])
def test_refresh_is_stale_only_when_a_row_in_use_was_placed_or_changed(between, ok):
    L = grown([(1, 1.0), (2, 1.0)])
    epoch = L.global_epoch
    live = L.row_arrays().live_rows()
    values = by_row(L, live, 4, 7)
    if between == "place":
        L.apply(PlaceBatch(batch("j/new", cpu=0.5), 0, L.node_epoch(0)))
        values = np.vstack([values, np.zeros((4, NDIM))])  # covers the new row, still stale
    elif between == "remove":
        wid = L.batch_ids()[0]
        L.apply(RemoveBatch(wid, L.node_of(wid), L.node_epoch(L.node_of(wid))))
    elif between == "update":
        other = L.row_arrays().reservation[live].copy()
        other[0, CPU] *= 0.5
        assert L.apply(ReservationUpdate(live, other, L.global_epoch)).accepted
    r = L.apply(ReservationRefresh(values, epoch))
    assert r.accepted is ok
    if not ok:
        assert r.reasons[0].code is ReasonCode.STALE_EPOCH and "since" in r.reasons[0].detail


def test_refresh_input_is_checked():
    L = grown([(0, 1.0)])
    h = L.row_arrays().high
    with pytest.raises(ValueError, match=rf"cover the {h} rows in use"):
        L.apply(ReservationRefresh(np.zeros((h - 1, NDIM)), L.global_epoch))
    with pytest.raises(ValueError, match="shape"):
        ReservationRefresh(np.zeros((h, NDIM - 1)), 0)
    with pytest.raises(ValueError, match="finite and non-negative"):
        ReservationRefresh(np.full((h, NDIM), np.nan), 0)
    values = L.row_arrays().reservation[:h].copy()
    values[0, GPU] = L.row_arrays().request[0, GPU] + 1.0
    with pytest.raises(ValueError, match="gpu reservation must equal the request"):
        L.apply(ReservationRefresh(values, L.global_epoch))


def test_refresh_copies_unless_handed_over():
    values = np.ones((3, NDIM))
    kept = ReservationRefresh(values, 0)
    values[0, 0] = 5.0  # the caller writes its array again: the commitment is unchanged
    assert kept.reservations[0, 0] == 1.0 and not kept.reservations.flags.writeable
    handed = ReservationRefresh(values, 0, copy=False)
    assert handed.reservations is values and not values.flags.writeable


def test_rows_not_in_use_are_never_read():
    L = grown([(0, 1.0), (1, 1.0), (2, 1.0), (0, 0.0)])
    rs = L.row_arrays()
    live = rs.live_rows()
    assert len(live) < rs.high  # a hole below the high mark
    values = np.full((rs.high + 2, NDIM), 7.0)  # the hole and the spare rows differ from the ledger's
    values[live] = rs.reservation[live]  # every row in use as it is
    before = state(L)
    r = L.apply(ReservationRefresh(values, L.global_epoch))
    assert r.accepted and state(L) == before  # nothing moved: no epoch bumped, no sum changed


# a refresh of some columns ------------------------------------------------------------------------
COLUMNS = (CPU, RAM)


def columns_of(values: np.ndarray, dims: tuple[int, ...]) -> np.ndarray:
    return np.ascontiguousarray(values[:, list(dims)])


@settings(max_examples=60, deadline=None)
@example([("refresh", 0, 0.0), ("place", 0, 0.1), ("remove", 0, 0.0), ("refresh", 0, 0.0)], (CPU,))
@given(
    st.lists(
        st.one_of(
            st.tuples(st.just("place"), st.integers(0, 5), st.sampled_from([0.1, 0.25, 0.7, 1.3])),
            st.tuples(st.just("remove"), st.integers(0, 40), st.just(0.0)),
            st.tuples(st.just("refresh"), st.integers(0, 2**31 - 1), st.just(0.0)),
        ),
        max_size=40,
    ),
    st.sampled_from([(CPU,), COLUMNS, (CPU, RAM, STORAGE), (RAM, GPU)]),
)
def test_a_refresh_of_some_columns_is_the_whole_row_refresh_that_leaves_the_others(ops, dims):
    """Bit for bit the same reservations, versions, epochs and sums, also where placements and
    removals with values off those columns (storage here) left sums that drift from scratch."""
    a, b = CLUSTER.ledger(), CLUSTER.ledger()
    for k, (op, x, v) in enumerate(ops):
        if op == "place":
            w = batch(f"j/b{k}", cpu=v, ram=v / 3, storage=v / 7)
            for L in (a, b):
                L.apply(PlaceBatch(w, x, L.node_epoch(x)))
        elif op == "remove" and a.batch_ids():
            wid = a.batch_ids()[x % len(a.batch_ids())]
            for L in (a, b):
                L.apply(RemoveBatch(wid, L.node_of(wid), L.node_epoch(L.node_of(wid))))
        elif op == "refresh":
            rs = a.row_arrays()
            live = rs.live_rows()
            values = rs.reservation[: rs.high].copy()  # the other columns as the ledger has them
            fresh = by_row(a, live, 0, x)
            values[live[:, None], list(dims)] = fresh[live][:, list(dims)]
            before = a.global_epoch
            ra = a.apply(ReservationRefresh(values, a.global_epoch))
            rb = b.apply(ReservationRefresh(columns_of(values, dims), b.global_epoch, dims=dims))
            assert ra.accepted and rb.accepted and ra.global_epoch == rb.global_epoch
            assert state(a) == state(b)
            if ra.global_epoch != before:  # a refresh that moved a row sums from scratch (one
                # that moved none leaves the sums as the adds and drops left them, both forms)
                assert np.array_equal(b.reservation_sum, b.recompute().reservation)
    assert state(a) == state(b)


def test_a_refresh_of_some_columns_is_checked():
    L = grown([(0, 1.0), (1, 2.0)])
    h = L.row_arrays().high
    for bad in ((RAM, CPU), (CPU, CPU), (NDIM,), (-1,), ()):
        with pytest.raises(ValueError, match="dims must be distinct dimension indices"):
            ReservationRefresh(np.zeros((h, max(len(bad), 1))), 0, dims=bad)
    with pytest.raises(ValueError, match=r"shape \(rows, 2\)"):
        ReservationRefresh(np.zeros((h, NDIM)), 0, dims=COLUMNS)
    with pytest.raises(ValueError, match=rf"cover the {h} rows in use"):
        L.apply(ReservationRefresh(np.zeros((h - 1, 2)), L.global_epoch, dims=COLUMNS))
    values = columns_of(L.row_arrays().reservation[:h], (CPU, GPU))
    values[L.row_arrays().live_rows()[0], 1] += 1.0
    before = state(L)
    with pytest.raises(ValueError, match="gpu reservation must equal the request"):
        L.apply(ReservationRefresh(values, L.global_epoch, dims=(CPU, GPU)))
    assert state(L) == before  # nothing written


def test_a_refresh_of_some_columns_that_moves_nothing_changes_nothing():
    L = grown([(0, 1.0), (1, 1.0), (2, 1.0), (0, 0.0)])
    rs = L.row_arrays()
    values = np.full((rs.high + 2, 2), 7.0)  # the hole and the spare rows differ from the ledger's
    values[rs.live_rows()] = rs.reservation[rs.live_rows()][:, list(COLUMNS)]
    before = state(L)
    assert L.apply(ReservationRefresh(values, L.global_epoch, dims=COLUMNS)).accepted
    assert state(L) == before
