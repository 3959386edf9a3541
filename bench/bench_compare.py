"""``kalena simulate --compare``: the other two arms in worker processes, against one after the other.

    python bench/bench_compare.py [--hours 24] [--workers 0] [--skip-serial] [--json PATH]

Runs the command as a user does (a real subprocess, ``--json --no-plots``), whose other two arms
run in ``--workers`` processes beside the first; then, in this process, the same three arms one
after the other (``kalena.sim.arms.compare_arm`` on each, what the command did before it used
workers). Reports both wall times, their ratio, each arm's own run time, and whether the two give
the same report (every field but the wall times and the command line). The machine's load is
printed before and after.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from typing import Any

from kalena.data import irina_paths
from kalena.ir import load_cluster
from kalena.sim import SimConfig, compare_reports
from kalena.sim.arms import compare_arm, compare_configs
from kalena.sim.report import timeless
from machine import print_load, write_json  # bench/ is on sys.path when a script runs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hours", type=float, default=24.0)
    ap.add_argument("--workers", type=int, default=0)
    ap.add_argument("--skip-serial", action="store_true", help="only the command")
    ap.add_argument("--json", dest="json_path", default=None)
    args = ap.parse_args(argv)
    load = print_load("before")

    with tempfile.TemporaryDirectory(prefix="kalena-bench-") as out:
        cmd = [sys.executable, "-m", "kalena.cli.main", "simulate", "--compare", "--json", "--no-plots"]
        cmd += ["--hours", f"{args.hours:g}", "--workers", str(args.workers), "--out", out]
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, check=True)
        command_s = time.perf_counter() - t0
    report = json.loads(proc.stdout)
    results: dict[str, Any] = {
        "command_wall_s": round(command_s, 1),
        "arm_wall_s": {
            "reclaim_on": report["wall_seconds"],
            "reclaim_off": report["no_reclaim"]["wall_seconds"],
            "baseline": report["baseline"]["wall_seconds"],
        },
    }
    if not args.skip_serial:
        base = SimConfig(hours=args.hours)
        t0 = time.perf_counter()
        cluster = load_cluster(*irina_paths())
        reports = [compare_arm(cluster, cfg)[0] for cfg in (base, *compare_configs(base))]
        serial = compare_reports(*reports)
        serial_s = time.perf_counter() - t0
        results["one_after_the_other_wall_s"] = round(serial_s, 1)
        results["speedup"] = round(serial_s / command_s, 2)
        results["same_report"] = timeless(json.loads(json.dumps(serial))) == timeless(report)
    print(json.dumps(results, indent=2))
    load = print_load("after")
    write_json(args.json_path, "bench_compare", vars(args), results, load)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
