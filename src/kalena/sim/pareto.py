"""The Pareto threshold sweep (seed 000 §6, metric 10): how full should the planner pack?

Kuberina caps each node's capacity at X % while it packs production, and emits the blueprint
against the real capacity: the lower X, the more nodes production spreads over and the more
headroom each keeps; the higher X, the more nodes are left empty for batch. Only a tool that sits
downstream of the planner can measure where total useful work peaks, so Kalena emulates the
planner with its own packer (:func:`kalena.core.packing.pack` with ``cap_fraction = X / 100``)
and runs the simulated day with reclamation on at each X.

A point's figures: the active nodes of its blueprint, the useful work (production plus batch
cpu, core-hours), and the SLO proxy of issue 13 (production's unmet and interfered cpu, its time
above its reservation, its OOM kills and evictions). A point **meets the SLO** when production
suffers no OOM kill and no eviction and its unmet cpu stays within ``max_unmet`` of the cpu it
used. The **optimum** is the X with the most useful work among the points that meet it (the
lowest X among equals). A point whose production does not pack at all is reported, not run.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kalena.core.cluster import Cluster
from kalena.core.packing import pack

DEFAULT_POINTS = (70, 75, 80, 85, 90, 95, 100)
#: Production cpu unmet, as a share of the cpu production used, that the SLO tolerates.
DEFAULT_MAX_UNMET = 0.01
#: The report's keys a point keeps (issue 13's SLO proxy and the work).
KEPT = (
    "production_cpu_core_hours",
    "batch_cpu_core_hours",
    "production_unmet_cpu_core_seconds",
    "production_interference_cpu_core_seconds",
    "production_above_reservation_fraction",
    "production_oom_kills",
    "production_evictions",
    "batch_tasks_completed",
    "restoration_violations",
)


@dataclass(frozen=True, slots=True)
class Point:
    x: int  # the cap, % of each node's capacity
    active_nodes: int | None  # None: production does not pack at this cap
    pending: int  # production pods the packer could not place
    figures: dict[str, Any]  # the kept report keys; empty when not run

    @property
    def ran(self) -> bool:
        return bool(self.figures)

    @property
    def useful_core_hours(self) -> float:
        return float(self.figures["production_cpu_core_hours"] + self.figures["batch_cpu_core_hours"])

    def unmet_share(self) -> float:
        return unmet_share(self.figures)

    def meets_slo(self, max_unmet: float = DEFAULT_MAX_UNMET) -> bool:
        return self.ran and meets_slo(self.figures, max_unmet)


def unmet_share(figures: dict[str, Any]) -> float:
    """Production's unmet cpu over the cpu it used (a run's kept figures)."""
    used = figures["production_cpu_core_hours"] * 3600.0
    return float(figures["production_unmet_cpu_core_seconds"] / used) if used > 0 else 0.0


def meets_slo(figures: dict[str, Any], max_unmet: float = DEFAULT_MAX_UNMET) -> bool:
    """The SLO proxy (module docstring): no production OOM kill or eviction, unmet cpu within
    ``max_unmet`` of what production used."""
    return (
        figures["production_oom_kills"] == 0
        and figures["production_evictions"] == 0
        and unmet_share(figures) <= max_unmet
    )


def run_point(cluster: Cluster, x: int, hours: float, seed: int) -> Point:
    """Pack production at X % (a blueprint), then simulate ``hours`` on it with reclamation on."""
    from kalena.sim import SimConfig, Simulation, build_report

    result = pack(cluster, cap_fraction=x / 100.0)
    if not result.complete:
        return Point(x, None, len(result.pending), {})
    placed = dataclasses.replace(cluster, placement=result.placement)
    sim = Simulation(placed, SimConfig(hours=hours, seed=seed))
    sim.run()
    report = build_report(sim)
    return Point(x, result.active_nodes, 0, {k: report[k] for k in KEPT})


def optimum(points: Sequence[Point], max_unmet: float = DEFAULT_MAX_UNMET) -> Point | None:
    """The most useful work among the points that meet the SLO (the lowest X among equals)."""
    ok = [p for p in points if p.meets_slo(max_unmet)]
    return max(ok, key=lambda p: (p.useful_core_hours, -p.x)) if ok else None


def plot(points: Sequence[Point], best: Point | None, max_unmet: float) -> bytes:
    """Useful work against X, the points that break the SLO marked, the optimum ringed (PNG)."""
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ran = [p for p in points if p.ran]
    fig, ax = plt.subplots(figsize=(7, 4.2))
    xs = [p.x for p in ran]
    ax.plot(xs, [p.useful_core_hours for p in ran], "-", color="0.6", zorder=1)
    good = [p for p in ran if p.meets_slo(max_unmet)]
    bad = [p for p in ran if not p.meets_slo(max_unmet)]
    ax.scatter(
        [p.x for p in good], [p.useful_core_hours for p in good], color="tab:green", label="meets the SLO"
    )
    ax.scatter(
        [p.x for p in bad], [p.useful_core_hours for p in bad], color="tab:red", marker="x", label="breaks it"
    )
    if best is not None:
        ax.scatter(
            [best.x],
            [best.useful_core_hours],
            s=220,
            facecolors="none",
            edgecolors="k",
            label=f"optimum: {best.x} %",
        )
    for p in ran:
        ax.annotate(
            f"{p.active_nodes}",
            (p.x, p.useful_core_hours),
            textcoords="offset points",
            xytext=(0, 7),
            ha="center",
            fontsize=8,
        )
    unpacked = [p.x for p in points if not p.ran]
    for k, x in enumerate(unpacked):
        ax.axvline(x, color="0.8", ls=":", zorder=0, label="production does not pack" if k == 0 else None)
    ax.set_xlabel("planner's capacity cap X (% of each node); labels: active nodes")
    ax.set_ylabel("useful work: production + batch cpu (core-hours)")
    ax.set_title(
        f"Pareto threshold sweep\nSLO: no production OOM kill or eviction, unmet cpu <= {max_unmet:.1%}",
        fontsize=10,
    )
    ax.margins(x=0.06, y=0.18)
    ax.legend(loc="best", fontsize=8)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    return buf.getvalue()
