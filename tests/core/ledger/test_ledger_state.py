"""The dual ledger: loading the blueprint, every commitment kind, epochs and slack."""

import numpy as np
import pytest

from kalena.core.ledger import (
    Eviction,
    Ledger,
    PlaceBatch,
    RemovalCause,
    RemoveBatch,
    ReservationUpdate,
    from_blueprint,
)
from kalena.core.model import Tier
from kalena.core.resources import CPU, GPU, RAM, stack
from kalena.core.verdict import Reason, ReasonCode
from kalena.testing.builders import batch, node, workload
from kalena.testing.clusters import ledger_of

DIMS8 = {
    "cpu": 8,
    "ram": 16,
    "storage": 100,
    "disk_read": 100,
    "disk_write": 100,
    "net_in": 1000,
    "net_out": 1000,
}


def nodes():
    return [node("n0", gpu=1, **DIMS8), node("n1", gpu=2, **DIMS8)]


def base() -> Ledger:
    return ledger_of(
        nodes(),
        [
            (workload("prod/web-0", cpu=4, ram=8), "n0"),
            (workload("prod/web-1", cpu=2, ram=4), "n1"),
            (workload("prod/trainer", cpu=1, ram=1, gpu=1), "n0"),
        ],
    )


def place(ledger: Ledger, wid: str, n: int, **req):
    return ledger.apply(PlaceBatch(batch(wid, **req), n, ledger.node_epoch(n)))


def test_blueprint_loads_production_into_both_ledgers():
    L = base()
    assert L.production_ids() == ("prod/web-0", "prod/web-1", "prod/trainer")
    assert L.request_sum[0, [CPU, RAM, GPU]].tolist() == [5, 9, 1]
    assert np.array_equal(L.request_sum, L.reservation_sum)
    assert L.service_count.tolist() == [2, 1] and L.batch_count.tolist() == [0, 0]
    assert L.global_epoch == 0 and L.node_epochs.tolist() == [0, 0]


def test_slack_is_capacity_minus_reservations_with_gpu_always_zero():
    L = base()
    s = L.slack()
    assert s[0, [CPU, RAM]].tolist() == [3, 7] and s[1, [CPU, RAM]].tolist() == [6, 12]
    assert s[:, GPU].tolist() == [0, 0]  # n1 has 2 idle GPUs: still no slack


def test_module_level_from_blueprint_and_batch_entries_skipped():
    ns = nodes()
    ws = [workload("a/s", cpu=1), batch("a/b", cpu=1)]
    L = from_blueprint(ns, stack(n.allocatable for n in ns), ws, {"a/s": "n1", "a/b": 0})
    assert L.production_ids() == ("a/s",) and "a/b" not in L and L.node_of("a/s") == 1


BAD_BLUEPRINTS = [
    ("unknown-workload", [workload("a/s", cpu=1)], {"a/zzz": "n0"}, "unknown workload"),
    ("unknown-node", [workload("a/s", cpu=1)], {"a/s": "n9"}, "unknown node 'n9'"),
    ("node-index-out-of-range", [workload("a/s", cpu=1)], {"a/s": 7}, "node index 7"),
    ("daemonset", [workload("a/ds", cpu=1, is_daemonset=True)], {"a/ds": "n0"}, "DaemonSet"),
    (
        "overfills",
        [workload("a/s", cpu=6), workload("a/t", cpu=3)],
        {"a/s": "n0", "a/t": "n0"},
        "overfills node 'n0' on cpu",
    ),
]


@pytest.mark.parametrize(
    ("ws", "placement", "msg"), [c[1:] for c in BAD_BLUEPRINTS], ids=[c[0] for c in BAD_BLUEPRINTS]
)
def test_bad_blueprint_is_a_configuration_error(ws, placement, msg):
    ns = nodes()
    with pytest.raises(ValueError, match=msg):
        Ledger.from_blueprint(ns, stack(n.allocatable for n in ns), ws, placement)


def test_bad_capacity_and_duplicate_nodes():
    with pytest.raises(ValueError, match="shape"):
        Ledger(nodes(), np.zeros((3, 8)))
    with pytest.raises(ValueError, match="non-negative"):
        Ledger(nodes(), -np.ones((2, 8)))
    with pytest.raises(ValueError, match="appears twice"):
        Ledger([node("a"), node("a")], np.ones((2, 8)))


def test_place_batch_touches_only_the_reservation_ledger():
    L = base()
    q = L.request_sum.copy()
    r = place(L, "jobs/b0", 0, cpu=2, ram=3)
    assert r.accepted and r.reasons == () and r.global_epoch == 1
    assert np.array_equal(L.request_sum, q)
    assert L.reservation_sum[0, [CPU, RAM]].tolist() == [7, 12]
    assert L.node_epochs.tolist() == [1, 0] and L.batch_count.tolist() == [1, 0]
    assert dict(L.namespace_running()) == {"jobs": 1}
    assert L.reservation_of("jobs/b0")[[CPU, RAM]].tolist() == [2, 3]  # reservation starts at request
    assert L.batch_ids() == ("jobs/b0",)


def test_place_rejections_are_data():
    L = base()
    misfit = place(L, "jobs/big", 0, cpu=3.5, ram=8)
    assert not misfit.accepted
    assert [(x.code, x.dimension) for x in misfit.reasons] == [
        (ReasonCode.INSUFFICIENT_RESOURCE, "cpu"),
        (ReasonCode.INSUFFICIENT_RESOURCE, "ram"),
    ]
    assert misfit.reasons[0].shortfall == pytest.approx(0.5)
    gpu = place(L, "jobs/g", 1, cpu=1, gpu=1)
    assert [x.code for x in gpu.reasons] == [ReasonCode.GPU_REQUESTED]
    assert place(L, "jobs/ok", 1, cpu=1).accepted
    again = place(L, "jobs/ok", 0, cpu=1)
    assert [x.code for x in again.reasons] == [ReasonCode.STALE_EPOCH] and "already placed" in again.reasons[
        0
    ].detail
    assert L.global_epoch == 1 and len(L) == 4


def test_place_service_or_daemonset_is_a_bug():
    L = base()
    with pytest.raises(ValueError, match="only batch"):
        L.apply(PlaceBatch(workload("prod/x", cpu=1), 0, 0))
    with pytest.raises(ValueError, match="only batch"):
        L.apply(PlaceBatch(batch("x/ds", cpu=1, is_daemonset=True), 0, 0))
    with pytest.raises(IndexError):
        L.apply(PlaceBatch(batch("x/y", cpu=1), 5, 0))
    with pytest.raises(TypeError):
        L.apply("not a commitment")  # type: ignore[arg-type]


def test_placements_stamped_in_sequence_apply_and_a_rejection_stales_the_rest():
    L = base()
    seq = [PlaceBatch(batch(f"j/b{i}", cpu=1), 1, i) for i in range(3)]
    assert [r.accepted for r in L.apply_all(seq)] == [True, True, True]
    L2 = base()
    seq = [PlaceBatch(batch("j/huge", cpu=99), 1, 0), PlaceBatch(batch("j/b1", cpu=1), 1, 1)]
    r = L2.apply_all(seq)
    assert [x.accepted for x in r] == [False, False]
    assert r[1].reasons[0].code is ReasonCode.STALE_EPOCH


STALE = [
    # id, epoch the commitment read, other node changed?, accepted
    ("fresh", 0, False, True),
    ("other-node-moved-is-fine", 0, True, True),
    ("own-node-moved", -1, False, False),
    ("from-the-future", 5, False, False),
]


@pytest.mark.parametrize(("delta", "other", "ok"), [c[1:] for c in STALE], ids=[c[0] for c in STALE])
def test_per_node_epoch_guard(delta, other, ok):
    L = base()
    assert place(L, "j/first", 0, cpu=1).accepted  # node 0 now at epoch 1
    if other:
        assert place(L, "j/other", 1, cpu=1).accepted
    e = L.node_epoch(0) + delta if delta >= 0 else 0
    r = L.apply(PlaceBatch(batch("j/b", cpu=1), 0, e))
    assert r.accepted is ok
    if not ok:
        assert r.reasons[0].code is ReasonCode.STALE_EPOCH and "j/b" not in L


def test_remove_batch_and_refuse_production():
    L = base()
    place(L, "j/b", 1, cpu=1, ram=1)
    before = L.reservation_sum.copy()
    wrong_node = L.apply(RemoveBatch("j/b", 0, L.node_epoch(0)))
    assert wrong_node.reasons[0].code is ReasonCode.STALE_EPOCH
    unknown = L.apply(RemoveBatch("j/nope", 1, L.node_epoch(1)))
    assert unknown.reasons[0].code is ReasonCode.STALE_EPOCH
    prod = L.apply(RemoveBatch("prod/web-1", 1, L.node_epoch(1), RemovalCause.DELETED))
    assert not prod.accepted and prod.reasons[0].code is ReasonCode.RESTORATION_VIOLATION
    assert np.array_equal(L.reservation_sum, before)
    done = L.apply(RemoveBatch("j/b", 1, L.node_epoch(1), RemovalCause.FINISHED))
    assert done.accepted and "j/b" not in L and L.batch_count.tolist() == [0, 0]
    assert L.reservation_sum[1, CPU] == 2 and dict(L.namespace_running()) == {}


def test_eviction_of_batch_and_the_limit_breach_override():
    L = base()
    place(L, "j/b", 0, cpu=1)
    assert L.apply(Eviction("j/b", 0, L.node_epoch(0))).accepted and "j/b" not in L
    refused = L.apply(Eviction("prod/web-0", 0, L.node_epoch(0)))
    assert not refused.accepted and refused.reasons[0].code is ReasonCode.RESTORATION_VIOLATION
    # the estimator had lowered web-0 to 1 core; the override restarts it at its request
    view = L.rows()
    res = view.reservations.copy()
    res[view.ids.index("prod/web-0"), CPU] = 1.0
    assert L.apply(ReservationUpdate(view.rows, res, view.global_epoch)).accepted
    assert L.reservation_sum[0, CPU] == 2.0
    why = (Reason(ReasonCode.LIMIT_BREACH, "ram", used=9, capacity=8),)
    q = L.request_sum.copy()
    ok = L.apply(Eviction("prod/web-0", 0, L.node_epoch(0), limit_breach_override=True, reasons=why))
    assert ok.accepted and "prod/web-0" in L and L.node_of("prod/web-0") == 0
    assert L.reservation_sum[0, CPU] == 5.0 and np.array_equal(L.request_sum, q)
    (rec,) = L.overrides
    assert (rec.workload_id, rec.node, rec.global_epoch, rec.reasons) == (
        "prod/web-0",
        0,
        ok.global_epoch,
        why,
    )


def test_reservation_update_moves_only_reservations_and_bumps_changed_nodes():
    L = base()
    view = L.rows()
    res = view.reservations.copy()
    res[view.ids.index("prod/web-1"), [CPU, RAM]] = [0.5, 1.0]
    q = L.request_sum.copy()
    r = L.apply(ReservationUpdate(view.rows, res, view.global_epoch))
    assert r.accepted
    assert np.array_equal(L.request_sum, q)
    assert L.reservation_sum[1, [CPU, RAM]].tolist() == [0.5, 1.0]
    assert L.node_epochs.tolist() == [0, 1]  # node 0's rows did not move
    assert L.slack()[1, CPU] == 7.5
    same = L.apply(ReservationUpdate(view.rows, res, L.global_epoch))
    assert same.accepted and L.global_epoch == 1  # nothing moved: no epoch bump


def test_reservation_update_gpu_must_equal_request():
    L = base()
    view = L.rows()
    res = view.reservations.copy()
    res[view.ids.index("prod/trainer"), GPU] = 0.5
    with pytest.raises(ValueError, match="gpu reservation must equal the request"):
        L.apply(ReservationUpdate(view.rows, res, view.global_epoch))


BULK_STALE = [
    # id, what happens between read and commit, accepted
    ("unrelated-new-batch-row", "place", True),
    ("covered-row-removed", "remove", False),
    ("covered-row-changed", "update", False),
]


@pytest.mark.parametrize(("between", "ok"), [c[1:] for c in BULK_STALE], ids=[c[0] for c in BULK_STALE])
def test_bulk_update_is_stale_only_when_a_covered_row_moved(between, ok):
    L = base()
    place(L, "j/a", 1, cpu=1)
    view = L.rows()
    res = view.reservations * 0.5
    res[:, GPU] = view.requests[:, GPU]
    if between == "place":
        place(L, "j/new", 0, cpu=1)
    elif between == "remove":
        L.apply(RemoveBatch("j/a", 1, L.node_epoch(1)))
    else:
        other = view.reservations.copy()
        other[0, CPU] = 3.0
        L.apply(ReservationUpdate(view.rows, other, view.global_epoch))
    r = L.apply(ReservationUpdate(view.rows, res, view.global_epoch))
    assert r.accepted is ok
    if not ok:
        assert r.reasons[0].code is ReasonCode.STALE_EPOCH


def test_reservation_update_shape_and_values_validated():
    with pytest.raises(ValueError, match="shape"):
        ReservationUpdate(np.array([0, 1]), np.zeros((3, 8)), 0)
    with pytest.raises(ValueError, match="twice"):
        ReservationUpdate(np.array([0, 0]), np.zeros((2, 8)), 0)
    with pytest.raises(ValueError, match="non-negative"):
        ReservationUpdate(np.array([0]), -np.ones((1, 8)), 0)
    L = base()
    with pytest.raises(IndexError):
        L.apply(ReservationUpdate(np.array([99]), np.zeros((1, 8)), 0))


def test_reservation_breach_is_reported_not_prevented():
    L = base()
    place(L, "j/b", 0, cpu=3)
    view = L.rows()
    res = view.reservations.copy()
    res[view.ids.index("prod/web-0"), CPU] = 5.0  # usage spike above its 4-core request
    assert L.apply(ReservationUpdate(view.rows, res, view.global_epoch)).accepted
    assert L.reservation_breaches()[0, CPU] and L.slack()[0, CPU] == -1.0
    assert L.request_sum[0, CPU] == 5.0  # the request ledger does not see usage


def test_many_rows_grow_and_stay_consistent():
    L = ledger_of([node("big", cpu=10_000, ram=10_000)])
    for i in range(3000):
        assert place(L, f"j/b{i}", 0, cpu=1, ram=1).accepted
    for i in range(0, 3000, 2):
        assert L.apply(RemoveBatch(f"j/b{i}", 0, L.node_epoch(0))).accepted
    assert len(L) == 1500 and L.reservation_sum[0, CPU] == 1500
    assert L.row_arrays().capacity >= 3000
    assert all(L.spec(w).tier is Tier.BATCH for w in L.batch_ids())


def test_row_of_names_the_row_arrays_index_and_follows_row_reuse():
    L = base()
    rs = L.row_arrays()
    assert [L.row_of(w) for w in L.production_ids()] == [0, 1, 2]
    assert place(L, "b/x", 1, cpu=1).accepted
    row = L.row_of("b/x")
    assert rs.specs[row].id == "b/x" and rs.node[row] == 1 and rs.is_batch[row]
    assert L.apply(RemoveBatch("b/x", 1, L.node_epoch(1))).accepted
    assert place(L, "b/y", 0, cpu=1).accepted
    assert L.row_of("b/y") == row  # the freed row is reused
    with pytest.raises(KeyError):
        L.row_of("b/x")


DUPLICATE_ROWS = [
    # id, rows, duplicated
    ("adjacent", [0, 0], True),
    ("unsorted-apart", [2, 0, 1, 2], True),
    ("unsorted-distinct", [2, 0, 1], False),
    ("empty", [], False),
]


@pytest.mark.parametrize(("rows", "dup"), [c[1:] for c in DUPLICATE_ROWS], ids=[c[0] for c in DUPLICATE_ROWS])
def test_reservation_update_rejects_a_row_named_twice_in_any_order(rows, dup):
    make = lambda: ReservationUpdate(np.array(rows, dtype=np.int64), np.zeros((len(rows), 8)), 0)  # noqa: E731
    if dup:
        with pytest.raises(ValueError, match="twice"):
            make()
    else:
        assert make().rows.tolist() == rows  # order kept as given


def test_reservation_update_bumps_each_moved_node_once():
    L = base()
    view = L.rows()
    res = view.reservations.copy()
    for wid in ("prod/web-0", "prod/trainer"):  # both on n0
        res[view.ids.index(wid), CPU] = 0.5
    assert L.apply(ReservationUpdate(view.rows, res, view.global_epoch)).accepted
    assert L.node_epochs.tolist() == [1, 0] and L.global_epoch == 1


def test_bulk_update_sum_is_bitwise_the_from_scratch_sum_through_row_churn():
    # The bulk update re-sums U from the rows through a bin index kept per add and drop; it must
    # be recompute()'s sum to the last bit, across row reuse and growth past the first allocation.
    L = ledger_of([node(f"n{i}", cpu=10_000, ram=10_000) for i in range(3)])
    rng = np.random.default_rng(5)
    for i in range(1500):
        assert place(L, f"j/b{i}", i % 3, cpu=float(rng.uniform(0.1, 3)), ram=1).accepted
    for i in range(0, 1500, 3):
        n = L.node_of(f"j/b{i}")
        assert L.apply(RemoveBatch(f"j/b{i}", n, L.node_epoch(n))).accepted
    view = L.rows()
    res = (
        view.requests
        * rng.uniform(0.1, 1.0, (len(view.rows), 8))
        * 10.0 ** rng.integers(-5, 3, (len(view.rows), 1))
    )
    assert L.apply(ReservationUpdate(view.rows, res, view.global_epoch)).accepted
    assert L.reservation_sum.tobytes() == L.recompute().reservation.tobytes()
    assert L.row_arrays().capacity > 1024


def test_production_ids_are_built_once_and_survive_batch_churn():
    L = base()
    ids = L.production_ids()
    assert place(L, "b/x", 1, cpu=1).accepted
    assert L.apply(RemoveBatch("b/x", 1, L.node_epoch(1))).accepted
    assert L.production_ids() is ids == ("prod/web-0", "prod/web-1", "prod/trainer")


def test_reservation_update_gpu_names_the_first_differing_row_and_keeps_equal_ones():
    L = base()
    view = L.rows()
    res = view.reservations.copy()
    res[view.ids.index("prod/web-0"), CPU] = 3.0  # an ordinary move next to an unchanged gpu
    assert L.apply(ReservationUpdate(view.rows, res, view.global_epoch)).accepted
    view = L.rows()
    res = view.reservations.copy()
    res[:, GPU] = 0.5  # every row now differs from its gpu request; the first one is named
    with pytest.raises(ValueError, match="'prod/web-0' differs"):
        L.apply(ReservationUpdate(view.rows, res, view.global_epoch))


def test_reservation_update_span_covers_unsorted_rows():
    u = ReservationUpdate(np.array([5, 2, 9]), np.zeros((3, 8)), 0)
    assert u.row_span == (2, 9) and u.rows.tolist() == [5, 2, 9]
    assert ReservationUpdate(np.array([], dtype=np.int64), np.zeros((0, 8)), 0).row_span == (0, -1)
    L = base()
    with pytest.raises(IndexError):
        L.apply(ReservationUpdate(np.array([1, -1]), np.zeros((2, 8)), 0))


def test_reservation_update_without_copy_takes_the_arrays_read_only_and_applies_the_same():
    rows = np.array([0, 3], dtype=np.int64)
    res = np.ones((2, 8))
    u = ReservationUpdate(rows, res, 7, copy=False)
    assert np.shares_memory(u.rows, rows) and u.reservations is res and not res.flags.writeable
    assert u.row_span == (0, 3) and u.global_epoch == 7
    copied = ReservationUpdate(np.array([0, 3]), np.ones((2, 8)), 7)
    assert copied.reservations.base is None  # the default still copies
    with pytest.raises(ValueError, match="finite and non-negative"):
        ReservationUpdate(rows, np.full((2, 8), np.nan), 7, copy=False)
    a, b = base(), base()
    view = a.rows()
    res = view.reservations.copy()
    res[view.ids.index("prod/web-0"), CPU] = 3.0
    ra = a.apply(ReservationUpdate(view.rows, res.copy(), view.global_epoch))
    rb = b.apply(ReservationUpdate(view.rows.copy(), res.copy(), view.global_epoch, copy=False))
    assert ra.accepted and rb.accepted
    assert np.array_equal(a.reservation_sum, b.reservation_sum)
