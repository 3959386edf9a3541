"""The node agent's own cost: CPU time and peak RSS while it monitors N cgroups every second (root).

Setup: ``--cgroups`` production cgroups (default 100) under a unique Kalena root, each with one
sleeping process, adopted through a declaration (each with a memory limit, so on cgroup v1 each
also gets a usage-threshold eventfd, and on hosts with a v2 tree a ``cpu.pressure`` trigger).
The agent runs as its own process (``python -m kalena.cli.agent run``) with the default
cadence: a mitigation round every 1 s (every cgroup sampled), an estimate every 10 s.

CPU time and peak RSS come from ``os.wait4`` (the kernel's rusage of the agent process). To
separate the steady state from start-up (imports, cgroup creation, arming), the agent is run
twice, for ``--short`` and ``--long`` seconds; the steady cost is

    cpu_fraction = (cpu(long) - cpu(short)) / (long - short)     (fraction of one core)

    python bench/bench_agent_overhead.py                        # 100 cgroups, 10 s and 70 s
    python bench/bench_agent_overhead.py --cgroups 100 --json /tmp/overhead.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
import uuid
from pathlib import Path
from tempfile import TemporaryDirectory

import yaml

from kalena.agent.actionlog import read_log
from kalena.agent.layout import CgroupTree, detect
from kalena.agent.writer import CgroupWriter, ManagedScope


def run_agent(cmd: list[str]) -> tuple[float, int, float]:
    """(CPU seconds user+system, peak RSS in KiB, wall seconds) of one agent run."""
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, ru = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode != 0:
        sys.exit(f"the agent exited with {p.returncode}: {' '.join(cmd)}")
    return ru.ru_utime + ru.ru_stime, ru.ru_maxrss, time.monotonic() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description="CPU time and peak RSS of the node agent.")
    ap.add_argument("--cgroups", type=int, default=100, help="monitored cgroups (default 100)")
    ap.add_argument("--short", type=float, default=10.0, help="seconds of the short run (default 10)")
    ap.add_argument("--long", type=float, default=70.0, help="seconds of the long run (default 70)")
    ap.add_argument("--json", metavar="PATH", help="also write the results as JSON here")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench_agent_overhead needs root (euid 0) to create cgroups")
    layout = detect()
    root = f"kalena-bench-{uuid.uuid4().hex[:8]}"
    tree = CgroupTree(layout, root)
    owner = CgroupWriter(tree, ManagedScope())
    workloads = [
        {
            "id": f"prod/w{i:03d}",
            "cgroup": f"prod/w{i:03d}",
            "priority": 100,
            "requests": {"cpu": 0.01, "ram": "8Mi"},
            "limits": {"ram": "64Mi"},
        }
        for i in range(args.cgroups)
    ]
    doc = {
        "apiVersion": "kalena.naughtian.io/v1alpha1",
        "kind": "NodeDeclaration",
        "node": {"name": "bench", "capacity": {"cpu": os.cpu_count() or 1, "ram": "4Gi"}},
        "workloads": workloads,
    }
    procs: list[subprocess.Popen[bytes]] = []
    results: dict[str, dict[str, float]] = {}
    try:
        for w in workloads:
            owner.create(w["cgroup"], "bench: a monitored workload")
            files = owner.procs_files(w["cgroup"])

            def enter(files=files) -> None:
                for f in files:
                    with open(f, "w") as fh:
                        fh.write(str(os.getpid()))

            procs.append(subprocess.Popen(["sleep", "infinity"], preexec_fn=enter))
        with TemporaryDirectory() as tmp:
            decl = Path(tmp) / "node.yaml"
            decl.write_text(yaml.safe_dump(doc))
            for label, seconds in (("short", args.short), ("long", args.long)):
                state = Path(tmp) / label
                cmd = [
                    sys.executable, "-m", "kalena.cli.agent", "run", "--declaration", str(decl),
                    "--state-dir", str(state), "--cgroup-root", root, "--duration", str(seconds),
                ]  # fmt: skip
                cpu, rss, wall = run_agent(cmd)
                start = next(r for r in read_log(state / "actions.jsonl") if r["kind"] == "start")
                results[label] = {
                    "seconds": seconds,
                    "cpu_s": cpu,
                    "peak_rss_mib": rss / 1024,
                    "wall_s": wall,
                }
                results[label]["psi_triggers"] = len(start["psi"])
                results[label]["memory_events"] = len(start["memory_events"])
    finally:
        for p in procs:
            p.kill()
            p.wait()
        owner.purge("", "bench done")
    s, lg = results["short"], results["long"]
    steady = (lg["cpu_s"] - s["cpu_s"]) / (lg["seconds"] - s["seconds"])
    out = {
        "host": f"{platform.node()} {platform.machine()} {os.cpu_count()} CPUs, kernel {platform.release()}",
        "layout": layout.mode.value,
        "cgroups": args.cgroups,
        "runs": results,
        "steady_cpu_fraction_of_one_core": steady,
        "peak_rss_mib": max(s["peak_rss_mib"], lg["peak_rss_mib"]),
    }
    print(f"host: {out['host']}, cgroups: {out['layout']}, {args.cgroups} monitored cgroups")
    for label, r in results.items():
        print(
            f"{label:5s} run: {r['seconds']:g} s, CPU {r['cpu_s']:.2f} s, "
            f"peak RSS {r['peak_rss_mib']:.1f} MiB, {r['psi_triggers']} PSI triggers, "
            f"{r['memory_events']} memory event sources"
        )
    print(f"steady state: {100 * steady:.2f}% of one core; peak RSS {out['peak_rss_mib']:.1f} MiB")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
