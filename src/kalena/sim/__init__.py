"""The simulator shell: Kuberina-planned clusters replayed through the unchanged policy core.

Public API (README.md in this folder has the file map, one tick and every metric's formula):

* :class:`SimConfig`: the run (hours, seed, estimator, reclamation on/off) and the core's configs;
* :class:`Simulation`: ``Simulation(cluster, config).run(progress)``;
* :func:`build_report` / :func:`compare_reports`: ``report.json`` as a dict;
* :func:`simulate`: all three in one call.
"""

from __future__ import annotations

from typing import Any

from kalena.core.cluster import Cluster
from kalena.sim.config import SimConfig
from kalena.sim.engine import Simulation
from kalena.sim.report import build_report
from kalena.sim.report import compare as compare_reports


def simulate(cluster: Cluster, config: SimConfig) -> tuple[Simulation, dict[str, Any]]:
    """Run one arm to the end and return it with its report."""
    sim = Simulation(cluster, config)
    sim.run()
    return sim, build_report(sim)


__all__ = ["SimConfig", "Simulation", "build_report", "compare_reports", "simulate"]
