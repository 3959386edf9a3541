"""PNG plots (matplotlib, Agg): a run's slack view and reservation-accuracy CDFs, a sweep's safety curve.

* ``slack_cluster.png`` and ``slack_node.png``: Borg's Figure 12 view of cpu over the run: capacity,
  the sum of requests (Borg's "limit"; seed 000 Appendix A maps it to the Kubernetes request), the
  sum of reservations and the sum of usage, with production's own usage for contrast. The gap
  between requests and reservations is what Kalena reclaims.
* ``reservation_cdf.png``: CDFs over production pods and samples of reservation/request and
  usage/request, for cpu and ram (seed 000 §6.3 metric 6).
* ``compare.png`` (``--compare``): the arms side by side: the batch cpu in use over the run in
  each, against the capacity the blueprint left unallocated (all a plain cluster may give batch),
  and the batch work done so far in each.
* ``safety.png`` (``kalena calibrate``): each setting's reclaimed capacity against its disruptions,
  the Pareto front and the knee.

The representative node is the active node whose time-mean gap between requests and
reservations is the median among active nodes (ties: lowest index).
"""

from __future__ import annotations

import io
from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np

from kalena.core.resources import CPU
from kalena.sim.arms import ArmSeries
from kalena.sim.calibration import pareto_front
from kalena.sim.engine import Simulation
from kalena.sim.report import ACCURACY_PLOT, COMPARE_PLOT, SLACK_CLUSTER_PLOT, SLACK_NODE_PLOT

COLOURS = {"capacity": "#222222", "requests": "#d62728", "reservations": "#1f77b4", "usage": "#2ca02c"}
ARM_COLOURS = {"kalena": "#1f77b4", "kalena-no-reclaim": "#ff7f0e", "baseline": "#7f7f7f"}


def representative_node(sim: Simulation) -> int:
    m = sim.metrics
    k = m.samples
    active = np.flatnonzero(m.active)
    if not len(active):
        return 0
    gap = (m.node[:k, active, 0] - m.node[:k, active, 1]).mean(axis=0)
    order = sorted(range(len(active)), key=lambda i: (float(gap[i]), int(active[i])))
    return int(active[order[len(order) // 2]])


def _slack_axes(ax, hours, capacity, requests, reservations, usage, production=None) -> None:  # type: ignore[no-untyped-def]
    ax.plot(hours, capacity, color=COLOURS["capacity"], lw=1.6, label="capacity (after Phase 0)")
    ax.plot(hours, requests, color=COLOURS["requests"], lw=1.3, label="sum of requests (Borg's limit)")
    ax.plot(hours, reservations, color=COLOURS["reservations"], lw=1.3, label="sum of reservations")
    ax.plot(hours, usage, color=COLOURS["usage"], lw=1.0, label="sum of usage")
    if production is not None:
        ax.plot(hours, production, color=COLOURS["usage"], lw=0.9, ls="--", label="production usage")
    ax.fill_between(
        hours,
        reservations,
        requests,
        where=requests > reservations,
        color=COLOURS["reservations"],
        alpha=0.08,
    )
    ax.set_xlabel("simulated hours")
    ax.set_ylabel("cpu cores")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right", fontsize=8, framealpha=0.9)


def _png(fig) -> bytes:  # type: ignore[no-untyped-def]
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    return buf.getvalue()


def slack_plots(sim: Simulation) -> dict[str, bytes]:
    m = sim.metrics
    k = m.samples
    hours = m.t[:k] / 3600.0
    arm = "reclamation on" if sim.cfg.reclaim else "reclamation off"
    out: dict[str, bytes] = {}
    fig, ax = plt.subplots(figsize=(10, 5))
    c = m.cluster[:k]
    _slack_axes(ax, hours, c[:, 0], c[:, 1], c[:, 2], c[:, 3], c[:, 4])
    if (c[:, 2] > c[:, 0]).any():  # say why, where a reader would otherwise take it for a bug
        ax.text(
            0.01,
            0.02,
            "reservations above capacity: batch runs cpu-bound at its request and the estimator's\n"
            "margin reserves above usage (batch has no cpu limit below the node's capacity)",
            transform=ax.transAxes,
            fontsize=8,
            va="bottom",
            color=COLOURS["reservations"],
        )
    ax.set_title(f"Cluster cpu, {sim.ledger.n_nodes} nodes ({arm}): the slack view (Borg Fig. 12)")
    fig.tight_layout()
    out[SLACK_CLUSTER_PLOT] = _png(fig)

    n = representative_node(sim)
    fig, ax = plt.subplots(figsize=(10, 5))
    cap = np.full(k, float(sim.cap[n, CPU]))
    _slack_axes(ax, hours, cap, m.node[:k, n, 0], m.node[:k, n, 1], m.node[:k, n, 2])
    ax.set_title(
        f"Node {sim.ledger.nodes[n].name} cpu ({arm}): median requests-to-reservations gap among active nodes"
    )
    fig.tight_layout()
    out[SLACK_NODE_PLOT] = _png(fig)
    return out


def accuracy_plot(sim: Simulation) -> bytes | None:
    acc = sim.metrics.accuracy_arrays()
    if not len(acc["cpu_reservation"]):
        return None
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.5), sharey=True)
    for ax, dim in zip(axes, ("cpu", "ram"), strict=True):
        for key, label, colour in (
            (f"{dim}_reservation", "reservation / request", COLOURS["reservations"]),
            (f"{dim}_usage", "usage / request", COLOURS["usage"]),
        ):
            x = np.sort(acc[key])
            y = np.arange(1, len(x) + 1) / len(x)
            ax.plot(x, y, color=colour, lw=1.5, label=label)
        ax.axvline(1.0, color=COLOURS["requests"], lw=1.0, ls=":", label="request")
        ax.set_xlim(0, max(1.6, float(np.quantile(acc[f"{dim}_reservation"], 0.995)) * 1.05))
        ax.set_xlabel(f"{dim}: fraction of request")
        ax.set_title(f"{dim}")
        ax.grid(alpha=0.3)
        ax.legend(loc="lower right", fontsize=8)
    axes[0].set_ylabel("CDF over production pods and samples")
    fig.suptitle(
        f"Reservation accuracy ({sim.cfg.policy.estimator} estimator), "
        f"every {sim.cfg.accuracy_every_s:g} s past startup grace"
    )
    fig.tight_layout()
    return _png(fig)


def compare_plot(arms: list[tuple[str, ArmSeries]]) -> bytes:
    """The arms of one ``--compare`` (label, what its finished run drew): batch cpu in use and work done."""
    fig, (use, work) = plt.subplots(1, 2, figsize=(13, 4.8))
    for label, arm in arms:
        hours = arm.t / 3600.0
        colour = ARM_COLOURS.get(arm.arm)
        use.plot(hours, arm.batch_cpu, color=colour, lw=1.3, label=label)
        # the work integrated sample to sample (the report's figure integrates every tick)
        done = np.concatenate([[0.0], np.cumsum(np.diff(arm.t) * arm.batch_cpu[1:])]) / 3600.0
        work.plot(hours, done, color=colour, lw=1.5, label=label)
    free = arms[0][1].unallocated_cpu
    use.axhline(free, color=COLOURS["capacity"], lw=1.0, ls=":", label="unallocated capacity (C - Q)")
    use.set_title("Batch cpu in use")
    use.set_ylabel("cpu cores")
    work.set_title("Batch work done")
    work.set_ylabel("core-hours")
    for ax in (use, work):
        ax.set_xlabel("simulated hours")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend(loc="best", fontsize=8, framealpha=0.9)
    first = arms[0][1]
    fig.suptitle(f"The arms on the same inputs: {first.nodes} nodes, seed {first.seed}")
    fig.tight_layout()
    return _png(fig)


def render_plots(sim: Simulation, others: list[tuple[str, ArmSeries]] | None = None) -> dict[str, bytes]:
    """Every plot of the run as PNG bytes, by file name (the caller writes them, all or none);
    ``others``: the compared arms, the run itself first (labelled)."""
    out = slack_plots(sim)
    acc = accuracy_plot(sim)
    if acc is not None:
        out[ACCURACY_PLOT] = acc
    if others:
        out[COMPARE_PLOT] = compare_plot(others)
    return out


def safety_curve(rows: list[dict[str, Any]], best: int) -> bytes:
    """``safety.png`` of ``kalena calibrate``: each setting's reclaimed capacity against its
    disruptions, the Pareto front, and the knee (``rows[best]``) circled."""
    x = [r["disruptions_per_hour"] for r in rows]
    y = [r["reclaimed_cpu_core_hours"] for r in rows]
    fig, ax = plt.subplots(figsize=(8, 5.5))
    ax.scatter(x, y, color="#1f77b4", zorder=3)
    front = pareto_front(x, y)
    ax.plot(
        [x[i] for i in front],
        [y[i] for i in front],
        color="#1f77b4",
        alpha=0.5,
        label="safety curve (Pareto front)",
    )
    for r, xi, yi in zip(rows, x, y, strict=True):
        ax.annotate(
            f"m={r['margin']:g}\nh={r['half_life_s']:g}s",
            (xi, yi),
            fontsize=7,
            xytext=(4, 4),
            textcoords="offset points",
        )
    ax.scatter(
        [x[best]],
        [y[best]],
        s=220,
        facecolors="none",
        edgecolors="#d62728",
        linewidths=2,
        zorder=4,
        label="knee: the shipped default",
    )
    ax.set_xlabel("disruptions per simulated hour (evictions + kernel OOM kills)")
    ax.set_ylabel("reclaimed cpu (core-hours, mean over seeds)")
    ax.set_title("Calibration: reclaimed capacity against disruption (seed 000 §6.4)")
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    return _png(fig)
