"""Validating a compacted cluster (issue 14): a simulated day on it beside the full cluster's.

Borg's compaction stopped at "the workload fits"; a simulator can also run it. The compacted
cluster (the nodes a compaction trial kept, production where the trial's packer put it) gets the
day the full cluster got: the same seed, so the same production usage model, and the same batch
population, generated for the full cluster's capacity (:func:`kalena.sim.engine.population`), so
it faces the work the full cluster did with fewer nodes. Both days report the SLO proxy of the
Pareto sweep (:mod:`kalena.sim.pareto`: production's OOM kills, evictions and unmet cpu) and the
work done, side by side.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kalena.core.cluster import Cluster
from kalena.sim.config import SimConfig
from kalena.sim.engine import Simulation, population
from kalena.sim.pareto import DEFAULT_MAX_UNMET, KEPT, meets_slo, unmet_share
from kalena.sim.report import build_report

#: report keys beside the SLO proxy that say how the batch fared
BATCH_KEPT = ("batch_tasks_pending_at_end", "batch_tasks_completed")


def day(
    cluster: Cluster,
    capacity_of: Cluster,
    config: SimConfig,
    progress: Callable[[int, int], None] | None = None,
) -> dict[str, Any]:
    """One run on ``cluster`` with the batch population of ``capacity_of``'s capacity: the kept
    figures, the unmet share and whether the SLO proxy holds."""
    sim = Simulation(cluster, config, tasks=population(capacity_of.capacity_matrix(), config))
    sim.run(progress)
    return slo_figures(sim)


def slo_figures(sim: Simulation) -> dict[str, Any]:
    """A finished run's SLO proxy and work (the figures :func:`day` reports)."""
    report = build_report(sim)
    figures = {k: report[k] for k in (*KEPT, *BATCH_KEPT)}
    figures["nodes"] = len(sim.cluster.nodes)
    figures["production_unmet_share"] = round(unmet_share(figures), 6)
    figures["meets_slo"] = meets_slo(figures, DEFAULT_MAX_UNMET)
    return figures
