"""Cluster compaction on Irina (issue 14): the figures and how long each part takes.

    python bench/bench_compact.py [--trials 11] [--batch-hours 24] [--workers 2] [--validate] [--parts]
        [--json PATH]

Runs ``kalena compact`` as a user does (a real subprocess, ``--json``); the command's own record
splits its time into the checkpoint run and the trials. With ``--parts`` it also times, in this
process, one pack of production, one pack of production with the checkpoint's batch in each arm,
and the simulated run the checkpoint comes from (which simulates the day a second time). With
``--validate`` the command also simulates the day on the compacted cluster (its own time is then
part of the command's). The machine's load is printed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from typing import Any

import numpy as np

from kalena.core.compaction import arm
from kalena.core.packing import pack
from kalena.data import irina_paths
from kalena.ir import load_cluster
from kalena.sim import SimConfig, Simulation
from kalena.sim.checkpoint import run_with_checkpoints, worst
from machine import print_load, write_json  # bench/ is on sys.path when a script runs

#: the command's figures the record keeps beside the arms
KEPT = ("checkpoint", "extra_nodes_without_reclamation", "validation")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=11)
    ap.add_argument("--batch-hours", type=float, default=24.0)
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--validate", action="store_true")
    ap.add_argument("--parts", action="store_true", help="also time one pack of each arm and the run")
    ap.add_argument("--json", dest="json_path", default=None)
    args = ap.parse_args(argv)
    load = print_load("before")

    cmd = [sys.executable, "-m", "kalena.cli.main", "compact", "--json", "--trials", str(args.trials)]
    cmd += ["--batch-hours", f"{args.batch_hours:g}", "--workers", str(args.workers)]
    cmd += ["--validate"] if args.validate else []
    t0 = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True)
    command_s = time.perf_counter() - t0
    if out.returncode != 0:  # the command's own message (bad arguments name the option), not a traceback
        sys.exit(f"kalena compact exited {out.returncode}: {out.stderr.strip()}")
    figures = json.loads(out.stdout)

    parts: dict[str, object] = {}
    if args.parts:
        infra, workloads, blueprint = irina_paths()
        cluster = load_cluster(infra, workloads)
        t0 = time.perf_counter()
        pack(cluster)
        pack_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        sim = Simulation(load_cluster(infra, workloads, blueprint), SimConfig(hours=args.batch_hours))
        cp = worst(run_with_checkpoints(sim, cluster), cluster)
        parts["simulation_s"] = round(time.perf_counter() - t0, 1)
        arm_s = {}
        for name, reclaim in (("reclaim_on", True), ("reclaim_off", False)):
            extra, ledgers = arm(cluster, cp.load, reclaim)
            t0 = time.perf_counter()
            pack(cluster, np.ones(len(cluster.nodes), dtype=bool), extra=extra, ledgers=ledgers)
            arm_s[name] = round(time.perf_counter() - t0, 2)
        parts["one_pack_s"] = {"production": round(pack_s, 2), **arm_s}
    results: dict[str, Any] = {
        "command_wall_s": round(command_s, 1),
        "command_parts_s": figures.get("wall_seconds", {}),
        **parts,
        "figures": {k: figures[k] for k in KEPT if k in figures},
    }
    for name in ("production", "reclaim_on", "reclaim_off"):
        if name in figures:
            f = figures[name]
            results["figures"][name] = {
                "p90": f["p90"],
                "min": f["min"],
                "max": f["max"],
                "per_trial": [t["nodes"] for t in f["trials"]],
                # nodes above each trial's capacity bound: what guides the later trials' search
                "gap_per_trial": [t["nodes"] - t["capacity_bound"] for t in f["trials"]],
                "packs_per_trial": float(np.mean([t["packs"] for t in f["trials"]])),
            }
    print(json.dumps(results, indent=2))
    load = print_load("after")
    write_json(args.json_path, "bench_compact", vars(args), results, load)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
