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

The runs are ``kalena.sim.arms`` (what ``kalena sweep seeds`` runs), in ``--workers`` processes
(a progress bar counts them). One 6 h run takes 15-40 s here.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from typing import Any

from rich.console import Console

from kalena.cli.fanout import run_all, worker_cluster
from kalena.cli.sweep import seeds_table
from kalena.data import irina_paths
from kalena.sim.arms import ARMS, run, summarise
from machine import machine_info  # bench/ is on sys.path when a script runs


def _one(hours: float, seed: int, load: float, arm: str, drop: bool) -> dict[str, Any]:
    cluster = worker_cluster(*(str(p) for p in irina_paths()))
    return run(cluster.without_empty_nodes() if drop else cluster, hours, seed, load, arm)


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

    def keep(i: int, report: dict[str, Any]) -> None:
        _, seed, load, arm, _ = jobs[i]
        runs[(load, seed, arm)] = report
        if args.runs_log:
            with open(args.runs_log, "a") as f:
                where = {"hours": args.hours, "drop_empty_nodes": drop}
                f.write(json.dumps({**where, "load": load, "seed": seed, "arm": arm, **report}) + "\n")

    run_all(_one, jobs, workers=args.workers, label=f"{len(jobs)} runs of {args.hours:g} h", done=keep)
    runs = {k: v for k, v in runs.items() if k[0] in loads and k[1] < args.seeds}
    summary = summarise(runs)
    where = "Irina without its empty nodes" if drop else "Irina"
    table = seeds_table(summary, f"{where}, {args.hours:g} h, seeds 0-{args.seeds - 1}: mean [95 % interval]")
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
