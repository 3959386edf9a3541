"""Checkpoints of a simulated run, as compaction takes them: the ledger's reservations at a moment."""

from __future__ import annotations

import numpy as np
import pytest

from kalena.core.model import Tier
from kalena.data import irina_paths
from kalena.ir import load_cluster
from kalena.sim import SimConfig, Simulation, build_report
from kalena.sim.checkpoint import Checkpoint, run_with_checkpoints, take, worst


@pytest.fixture(scope="module")
def run():
    infra, workloads, blueprint = irina_paths()
    placed, plain = load_cluster(infra, workloads, blueprint), load_cluster(infra, workloads)
    sim = Simulation(placed, SimConfig(hours=1.0))
    seen: list[int] = []
    checkpoints = run_with_checkpoints(sim, plain, every_s=1200.0, progress=lambda k, _t: seen.append(k))
    return sim, plain, checkpoints, seen


def test_a_checkpoint_every_interval_holding_the_ledgers_reservations(run):
    sim, cluster, checkpoints, seen = run
    assert [c.time for c in checkpoints] == [1200.0, 2400.0, 3600.0]
    assert seen == list(range(1, sim.cfg.ticks + 1))  # the caller's progress still sees every tick
    last = checkpoints[-1]
    rs = sim.ledger.row_arrays()
    live = rs.live_rows()
    # at the run's end, the last checkpoint is the ledger itself: every reservation, once
    total = last.load.production_reservation.sum(axis=0) + last.load.batch_reservation.sum(axis=0)
    assert np.allclose(total, rs.reservation[live].sum(axis=0))
    assert len(last.load.batch) == int(rs.is_batch[live].sum()) > 0
    assert all(w.tier is Tier.BATCH for w in last.load.batch)
    assert last.load.production_reservation.shape == (len(cluster.workloads), 8)
    assert take(sim, cluster).load.batch == last.load.batch  # taking it again changes nothing


def test_the_worst_checkpoint_reserves_the_largest_share(run):
    _, cluster, checkpoints, _ = run
    w = worst(checkpoints, cluster)
    assert w.share(cluster) == max(c.share(cluster) for c in checkpoints) > 0.5
    with pytest.raises(ValueError, match="no checkpoint"):
        worst([], cluster)
    assert isinstance(w, Checkpoint)


def test_a_run_kept_for_its_checkpoints_runs_the_same_and_has_no_report(run):
    sim, cluster, checkpoints, _ = run
    infra, workloads, blueprint = irina_paths()
    bare = Simulation(load_cluster(infra, workloads, blueprint), SimConfig(hours=1.0), measured=False)
    got = run_with_checkpoints(bare, cluster, every_s=1200.0)
    for a, b in zip(checkpoints, got, strict=True):  # the same state at every checkpoint, bit for bit
        assert a.time == b.time and a.load.batch == b.load.batch
        assert np.array_equal(a.load.batch_reservation, b.load.batch_reservation)
        assert np.array_equal(a.load.production_reservation, b.load.production_reservation)
    assert np.array_equal(bare.task_states(), sim.task_states())
    assert bare.metrics.sums["ticks"] == 0 < sim.metrics.sums["ticks"]  # the figures were skipped
    with pytest.raises(ValueError, match="not measured"):
        build_report(bare)
