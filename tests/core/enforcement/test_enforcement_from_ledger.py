"""The ledger -> snapshot bridge and the eviction commitments it stamps."""

import numpy as np

from kalena.core.enforcement import (
    EvictionConfig,
    NodeConditions,
    eviction_commitments,
    plan_evictions,
    snapshot_from_ledger,
)
from kalena.core.ledger import Ledger, PlaceBatch, ReservationUpdate
from kalena.core.resources import RAM, Resources
from kalena.core.verdict import ReasonCode
from kalena.testing.builders import batch, node, workload


def _ledger():
    nodes = [node("a", cpu=8, ram=16), node("b", cpu=8, ram=16)]
    cap = [Resources.of(cpu=8, ram=16)] * 2
    prod = workload("prod/web-0", cpu=2, ram=8)
    ledger = Ledger.from_blueprint(nodes, cap, [prod], {prod.id: "a"})
    for i, (ram, prio) in enumerate([(2, 1), (3, 0), (1, 2)]):
        w = batch(f"jobs/b{i}", cpu=1, ram=ram, priority=prio)
        assert ledger.apply(PlaceBatch(w, 0, ledger.node_epoch(0))).accepted
    return ledger


def test_snapshot_carries_ledger_reservations_and_epoch():
    ledger = _ledger()
    rows = ledger.rows()
    res = rows.reservations.copy()
    res[0, RAM] = 5.0  # the production workload's reservation has decayed
    assert ledger.apply(ReservationUpdate(rows.rows, res, rows.global_epoch)).accepted
    snap = snapshot_from_ledger(ledger, 0)
    assert snap.node == "a" and snap.epoch == ledger.node_epoch(0)
    assert snap.ids == ("prod/web-0", "jobs/b0", "jobs/b1", "jobs/b2")
    assert snap.reservation[0, RAM] == 5.0 and np.array_equal(snap.request[1:, RAM], [2, 3, 1])
    assert snapshot_from_ledger(ledger, 1).ids == ()


def test_plan_commits_in_order_with_successive_epochs():
    ledger = _ledger()
    # Production's memory rises to 12 GiB: 12 + 2 + 3 + 1 = 18 > 16 on ram.
    usage = {"prod/web-0": Resources.of(ram=12)}
    snap = snapshot_from_ledger(ledger, 0, usage=usage, conditions=NodeConditions.of(triggered=("ram",)))
    plan = plan_evictions(snap, EvictionConfig(min_run_time_s=0), now=1000.0)
    assert [v.workload for v in plan.victims] == ["jobs/b1"]  # lowest priority first; 15 <= 16 then
    commits = eviction_commitments(plan.victims, 0, snap.epoch)
    assert [c.node_epoch for c in commits] == [snap.epoch]
    assert all(r.accepted for r in ledger.apply_all(commits))
    assert "jobs/b1" not in ledger and "prod/web-0" in ledger


def test_a_stale_plan_is_rejected_whole():
    ledger = _ledger()
    usage = {"prod/web-0": Resources.of(ram=16)}
    snap = snapshot_from_ledger(ledger, 0, usage=usage, conditions=NodeConditions.of(triggered=("ram",)))
    plan = plan_evictions(snap, EvictionConfig(min_run_time_s=0), now=1000.0)
    assert len(plan.victims) == 3
    commits = eviction_commitments(plan.victims, 0, snap.epoch)
    assert [c.node_epoch for c in commits] == [snap.epoch, snap.epoch + 1, snap.epoch + 2]
    # Something else changed the node after the snapshot: every commitment of the plan is stale.
    assert ledger.apply(PlaceBatch(batch("jobs/late", cpu=0.1, ram=0.1), 0, ledger.node_epoch(0))).accepted
    results = ledger.apply_all(commits)
    assert not any(r.accepted for r in results)
    assert all(r.reasons[0].code is ReasonCode.STALE_EPOCH for r in results)
