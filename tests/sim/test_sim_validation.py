"""The validation day of a compacted cluster: the full cluster's batch, fewer nodes, the SLO proxy."""

from __future__ import annotations

import numpy as np

from kalena.core.compaction import compacted, trial
from kalena.sim import SimConfig, Simulation
from kalena.sim.engine import population
from kalena.sim.synthetic import synthetic_cluster
from kalena.sim.validation import day


def test_a_compacted_cluster_faces_the_full_cluster_s_batch_and_reports_its_slo() -> None:
    full = synthetic_cluster(12, 60, seed=1)
    small = compacted(full, trial(full, np.random.default_rng(0)))
    assert len(small.nodes) < len(full.nodes)
    cfg = SimConfig(hours=0.25, seed=3)
    same = population(full.capacity_matrix(), cfg)
    assert len(same) == len(Simulation(full, cfg).tasks)  # what the full cluster's own day gets
    assert len(population(small.capacity_matrix(), cfg)) < len(same)  # not the small cluster's own
    figures = day(small, full, cfg)
    assert figures["nodes"] == len(small.nodes)
    assert figures["restoration_violations"] == 0
    assert figures["batch_tasks_completed"] + figures["batch_tasks_pending_at_end"] <= len(same)
    assert isinstance(figures["meets_slo"], bool)
    assert figures["production_unmet_share"] >= 0.0
