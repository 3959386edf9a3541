"""What reclamation makes possible: the simulator's three arms over seeds and batch loads.

    python bench/bench_arms.py [--hours 6] [--seeds 5] [--loads 0.5,1,2] [--workers 2]
                               [--drop-empty-nodes] [--json PATH] [--runs-log PATH]

For each batch load and seed, Irina runs three times on the same inputs: Kalena (reclamation on),
Kalena without reclamation, and the baseline (no Kalena: batch by requests into unallocated
capacity, only the kernel's sharing). Per load, over the seeds, the mean and a 95 % interval
(percentile bootstrap of the mean, 10,000 resamples) of:

(a) work enabled by reclamation: (batch cpu with reclamation - batch cpu in the baseline) / all cpu;
(b) Borg's task-level figure: cpu of batch pods whose placement needed reclaimed capacity / all cpu;
(c) the per-node figure, an upper bound: ``reclaimed_work_fraction``;
and production harm beside them: cpu unmet and cpu lost to interference (core-seconds) and OOM
kills, per arm.
``--drop-empty-nodes``: the same on Irina without the nodes its blueprint leaves empty (d).

Runs go to ``--workers`` processes (a progress bar counts them). One 6 h run takes 15-40 s here.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from typing import Any

import numpy as np
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from kalena.data import irina_paths
from kalena.ir import load_cluster
from kalena.sim import SimConfig, Simulation, build_report
from machine import machine_info  # bench/ is on sys.path when a script runs

ARMS: dict[str, dict[str, bool]] = {
    "kalena": {},
    "kalena-no-reclaim": {"reclaim": False},
    "baseline": {"reclaim": False, "enforce": False},
}
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
)


def _one(
    hours: float, seed: int, load: float, arm: str, drop: bool
) -> tuple[float, int, str, dict[str, Any]]:
    cluster = load_cluster(*irina_paths())
    if drop:
        cluster = cluster.without_empty_nodes()
    cfg = SimConfig(hours=hours, seed=seed, batch_load_factor=load, **ARMS[arm])
    sim = Simulation(cluster, cfg)
    sim.run()
    report = build_report(sim)
    return load, seed, arm, {k: report[k] for k in (*KEEP, "wall_seconds")}


def interval(values: list[float], rng: np.random.Generator) -> dict[str, float]:
    """Mean and a 95 % percentile-bootstrap interval of the mean."""
    v = np.asarray(values, dtype=np.float64)
    means = rng.choice(v, size=(10_000, len(v)), replace=True).mean(axis=1)
    lo, hi = np.quantile(means, [0.025, 0.975])
    return {"mean": float(v.mean()), "lo": float(lo), "hi": float(hi), "n": len(v)}


def summarise(runs: dict[tuple[float, int, str], dict[str, Any]]) -> dict[str, Any]:
    rng = np.random.default_rng(0)
    out: dict[str, Any] = {}
    for load in sorted({k[0] for k in runs}):
        seeds = sorted({k[1] for k in runs if k[0] == load})
        a, b, c = [], [], []
        harm: dict[str, dict[str, list[float]]] = {arm: {"unmet": [], "slow": [], "oom": []} for arm in ARMS}
        for s in seeds:
            on, base = runs[(load, s, "kalena")], runs[(load, s, "baseline")]
            total = on["batch_cpu_core_hours"] + on["production_cpu_core_hours"]
            a.append((on["batch_cpu_core_hours"] - base["batch_cpu_core_hours"]) / total)
            b.append(on["task_reclaimed_work_fraction"])
            c.append(on["reclaimed_work_fraction"])
            for arm in ARMS:
                r = runs[(load, s, arm)]
                harm[arm]["unmet"].append(r["production_unmet_cpu_core_seconds"])
                harm[arm]["slow"].append(r["production_interference_cpu_core_seconds"])
                harm[arm]["oom"].append(r["production_oom_kills"])
        out[str(load)] = {
            "seeds": seeds,
            "work_enabled_by_reclamation": interval(a, rng),
            "task_level": interval(b, rng),
            "per_node_upper_bound": interval(c, rng),
            **{
                key: {arm: interval(h[part], rng) for arm, h in harm.items()}
                for key, part in (
                    ("production_unmet_cpu_core_seconds", "unmet"),
                    ("production_interference_cpu_core_seconds", "slow"),
                )
            },
            "production_oom_kills": {arm: sum(h["oom"]) for arm, h in harm.items()},
        }
    return out


def _pct(x: dict[str, float]) -> str:
    return f"{100 * x['mean']:.1f} % [{100 * x['lo']:.1f}, {100 * x['hi']:.1f}]"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hours", type=float, default=6.0)
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--loads", default="0.5,1,2", help="batch loads: multiples of the fitted one, by commas")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--drop-empty-nodes", action="store_true")
    ap.add_argument("--json", dest="json_path")
    ap.add_argument(
        "--runs-log",
        help="append each run to this JSON-lines file as it ends, and reuse the runs it already holds "
        "for the same hours and cluster (a long sweep that stops keeps what it did)",
    )
    args = ap.parse_args()
    loads = [float(x) for x in args.loads.split(",")]
    drop = args.drop_empty_nodes
    runs: dict[tuple[float, int, str], dict[str, Any]] = {}
    if args.runs_log and os.path.exists(args.runs_log):
        with open(args.runs_log) as f:
            for line in f:
                r = json.loads(line)
                if r.pop("hours") == args.hours and r.pop("drop_empty_nodes") == drop:
                    runs[(r.pop("load"), r.pop("seed"), r.pop("arm"))] = r
    jobs = [
        (args.hours, s, load, arm, drop)
        for load in loads
        for s in range(args.seeds)
        for arm in ARMS
        if (load, s, arm) not in runs
    ]
    t0 = time.perf_counter()
    with Progress() as bar, ProcessPoolExecutor(args.workers) as pool:
        task = bar.add_task(f"{len(jobs)} runs of {args.hours:g} h", total=len(jobs))
        for fut in as_completed([pool.submit(_one, *j) for j in jobs]):
            load, seed, arm, report = fut.result()
            runs[(load, seed, arm)] = report
            if args.runs_log:
                with open(args.runs_log, "a") as f:
                    where = {"hours": args.hours, "drop_empty_nodes": drop}
                    f.write(json.dumps({**where, "load": load, "seed": seed, "arm": arm, **report}) + "\n")
            bar.advance(task)
    runs = {k: v for k, v in runs.items() if k[0] in loads and k[1] < args.seeds}
    summary = summarise(runs)
    where = "Irina without its empty nodes" if drop else "Irina"
    table = Table(title=f"{where}, {args.hours:g} h, seeds 0-{args.seeds - 1}: mean [95 % interval]")
    for col in ("batch load", "(a) enabled vs baseline", "(b) task-level", "(c) per-node bound",
                "unmet prod. cpu (M core-s): on / off / baseline",
                "prod. cpu lost to interference (M core-s)", "prod. OOM kills"):  # fmt: skip
        table.add_column(col)
    for load, s in summary.items():
        unmet = s["production_unmet_cpu_core_seconds"]
        slow = s["production_interference_cpu_core_seconds"]
        table.add_row(
            f"x{load}",
            _pct(s["work_enabled_by_reclamation"]),
            _pct(s["task_level"]),
            _pct(s["per_node_upper_bound"]),
            " / ".join(f"{unmet[arm]['mean'] / 1e6:.3f}" for arm in ARMS),
            " / ".join(f"{slow[arm]['mean'] / 1e6:.3f}" for arm in ARMS),
            " / ".join(str(s["production_oom_kills"][arm]) for arm in ARMS),
        )
    Console(width=200).print(table)
    wall = time.perf_counter() - t0
    print(f"{len(jobs)} runs in {wall:.0f} s with {args.workers} workers")
    if args.json_path:
        doc = {
            "machine": machine_info(),
            "args": vars(args),
            "wall_seconds": wall,
            "summary": summary,
            "runs": [{"load": k[0], "seed": k[1], "arm": k[2], **v} for k, v in sorted(runs.items())],
        }
        with open(args.json_path, "w") as f:
            json.dump(doc, f, indent=1)


if __name__ == "__main__":
    main()
