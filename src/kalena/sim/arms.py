"""The three arms over seeds and batch loads: what reclamation makes possible, with intervals.

For each batch load and seed the cluster runs three times on the same inputs (same seed, so the
same production usage and batch population): Kalena (reclamation on), Kalena without reclamation,
and the baseline (no Kalena: batch by requests into unallocated capacity, only the kernel's
sharing). Per load, over the seeds, the mean and a 95 % interval (percentile bootstrap of the
mean, :data:`RESAMPLES` resamples, its generator seeded so the interval is reproducible) of:

(a) work enabled by reclamation: (batch cpu with reclamation - batch cpu in the baseline) / all cpu;
(b) Borg's task-level figure: cpu of batch pods whose placement needed reclaimed capacity / all cpu;
(c) the per-node figure, an upper bound: ``reclaimed_work_fraction``;

and production's harm beside them per arm: cpu unmet and cpu lost to interference (core-seconds),
OOM kills. ``kalena sweep seeds`` runs it; ``bench/bench_arms.py`` records it.

``kalena simulate --compare`` (and ``kalena replay --compare``) runs the other two arms of one
seed with :func:`compare_arm`, in worker processes beside the first: each sends back its report
and the :class:`ArmSeries` its plot draws, not the run itself.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np

from kalena.core.cluster import Cluster
from kalena.core.resources import CPU
from kalena.sim.batch import recorded
from kalena.sim.config import SimConfig
from kalena.sim.engine import Simulation
from kalena.sim.recorded import Samples
from kalena.sim.report import build_report

#: arm -> the SimConfig switches that make it
ARMS: dict[str, dict[str, bool]] = {
    "kalena": {},
    "kalena-no-reclaim": {"reclaim": False},
    "baseline": {"reclaim": False, "enforce": False},
}
#: the report keys a run keeps
KEEP = (
    "batch_cpu_core_hours",
    "production_cpu_core_hours",
    "task_reclaimed_work_fraction",
    "reclaimed_work_fraction",
    "production_unmet_cpu_core_seconds",
    "production_interference_cpu_core_seconds",
    "production_oom_kills",
    "batch_oom_kills",
    "evictions_total",
    "batch_tasks_completed",
    "restoration_violations",
)
RESAMPLES = 10_000
#: the production harm reported per arm: name in the summary -> report key
HARM = {
    "production_unmet_cpu_core_seconds": "production_unmet_cpu_core_seconds",
    "production_interference_cpu_core_seconds": "production_interference_cpu_core_seconds",
}


def run(cluster: Cluster, hours: float, seed: int, load: float, arm: str) -> dict[str, Any]:
    """One arm's run: the kept figures of its report (and its wall seconds)."""
    sim = Simulation(cluster, SimConfig(hours=hours, seed=seed, batch_load_factor=load, **ARMS[arm]))
    sim.run()
    report = build_report(sim)
    return {k: report[k] for k in (*KEEP, "wall_seconds")}


@dataclass(frozen=True, eq=False)
class ArmSeries:
    """What ``compare.png`` draws of one arm: a few kilobytes, where the run is hundreds of MB."""

    arm: str  # ``SimConfig.arm``
    t: np.ndarray  # the sample times, seconds
    batch_cpu: np.ndarray  # batch cpu in use at each sample: all usage minus production's, cores
    unallocated_cpu: float  # the cpu no production request holds, cores over every node
    nodes: int
    seed: int

    @classmethod
    def of(cls, sim: Simulation) -> ArmSeries:
        m = sim.metrics
        k = m.samples
        return cls(
            arm=sim.cfg.arm,
            t=m.t[:k].copy(),
            batch_cpu=m.cluster[:k, 3] - m.cluster[:k, 4],
            unallocated_cpu=float(m.unallocated[:, CPU].sum()),
            nodes=sim.ledger.n_nodes,
            seed=sim.cfg.seed,
        )


def compare_configs(base: SimConfig) -> tuple[SimConfig, SimConfig]:
    """The arms a comparison runs beside ``base`` (reclamation on): without reclamation, then the
    baseline."""
    return (
        dataclasses.replace(base, **ARMS["kalena-no-reclaim"]),
        dataclasses.replace(base, **ARMS["baseline"]),
    )


def compare_arm(
    cluster: Cluster,
    config: SimConfig,
    batch: dict[str, Any] | None = None,
    production: Samples | None = None,
) -> tuple[dict[str, Any], ArmSeries]:
    """One arm of a comparison, run to its end (in a worker process: its arguments and result
    are pickled): its report and its plot's series. ``batch``: the arguments of a recorded batch
    population (:func:`kalena.sim.batch.recorded`), ``production`` recorded usage (``kalena
    replay``); None: the generated ones."""
    tasks = None if batch is None else recorded(**batch)
    sim = Simulation(cluster, config, tasks, production)
    sim.run()
    return build_report(sim), ArmSeries.of(sim)


def interval(values: list[float], rng: np.random.Generator) -> dict[str, float]:
    """Mean and a 95 % percentile-bootstrap interval of the mean."""
    v = np.asarray(values, dtype=np.float64)
    means = rng.choice(v, size=(RESAMPLES, len(v)), replace=True).mean(axis=1)
    lo, hi = np.quantile(means, [0.025, 0.975])
    return {"mean": float(v.mean()), "lo": float(lo), "hi": float(hi), "n": len(v)}


def interval_text(x: dict[str, float]) -> str:
    """An interval of a fraction as a person reads it: ``12.3 % [10.1, 14.0]``."""
    return f"{100 * x['mean']:.1f} % [{100 * x['lo']:.1f}, {100 * x['hi']:.1f}]"


def summarise(runs: dict[tuple[float, int, str], dict[str, Any]]) -> dict[str, Any]:
    """Per load (a string key, for JSON): the seeds, (a), (b), (c) and the harm per arm."""
    rng = np.random.default_rng(0)
    out: dict[str, Any] = {}
    for load in sorted({k[0] for k in runs}):
        seeds = sorted({k[1] for k in runs if k[0] == load})
        a, b, c = [], [], []
        harm: dict[str, dict[str, list[float]]] = {arm: {key: [] for key in HARM} for arm in ARMS}
        oom = dict.fromkeys(ARMS, 0)
        for s in seeds:
            on, base = runs[(load, s, "kalena")], runs[(load, s, "baseline")]
            total = on["batch_cpu_core_hours"] + on["production_cpu_core_hours"]
            a.append((on["batch_cpu_core_hours"] - base["batch_cpu_core_hours"]) / total if total else 0.0)
            b.append(on["task_reclaimed_work_fraction"])
            c.append(on["reclaimed_work_fraction"])
            for arm in ARMS:
                r = runs[(load, s, arm)]
                for key, field in HARM.items():
                    harm[arm][key].append(r[field])
                oom[arm] += int(r["production_oom_kills"])
        out[f"{load:g}"] = {
            "seeds": seeds,
            "work_enabled_by_reclamation": interval(a, rng),
            "task_level": interval(b, rng),
            "per_node_upper_bound": interval(c, rng),
            **{key: {arm: interval(harm[arm][key], rng) for arm in ARMS} for key in HARM},
            "production_oom_kills": oom,
        }
    return out
