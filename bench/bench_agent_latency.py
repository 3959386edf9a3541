"""Latency from a PSI trigger firing to the batch CPU quota being written, on real cgroups (root).

Setup: Kalena's root cgroup (a unique name under this process's own cgroups), ``--prod``
production cgroups each running one Python busy loop, and one batch run spinning on a core. The
agent arms its own triggers (one per production cgroup, the shortest window the kernel accepts).
By default there is one production loop more than the machine has CPUs, so production stalls on
CPU by itself and its ``cpu.pressure`` triggers fire in every window: the agent gives the runs'
parent the minimal CPU weight, so a batch run alone no longer makes production wait.

One trial: the batch quota is put back to the whole node and the agent's allowance forgotten
(so the next decision must cut it); the agent's notifier waits; when a PSI trigger fires,
``poll`` returns (t0 = ``time.perf_counter()`` then, on the event), the agent runs one whole
round (sample, snapshot, plan_evictions, plan_anti_starvation, plan_throttle, the writer),
and the writer's record of the batch ``cpu.cfs_quota_us``/``cpu.max`` write carries t1.
Latency = t1 - t0. Trials whose round wrote no quota are not counted (reported).

    python bench/bench_agent_latency.py                    # 200 trials
    python bench/bench_agent_latency.py --trials 300 --json /tmp/latency.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import platform
import subprocess
import sys
import time
import uuid
from pathlib import Path
from tempfile import TemporaryDirectory

import numpy as np

from kalena.agent.build import build_agent
from kalena.agent.config import AgentConfig
from kalena.agent.declaration import parse_declaration
from kalena.agent.layout import CgroupTree, detect
from kalena.agent.runtime import Submission, submit
from kalena.agent.writer import CgroupWriter, Knob, KnobWrite, ManagedScope
from kalena.core.config import PolicyConfig
from kalena.core.enforcement import EscalationConfig

#: The synthetic load runs at nice 19, so that a shared machine's other work is barely disturbed;
#: the agent (this process) keeps its normal priority. Production still stalls (its cgroups'
#: cpu.pressure triggers fire): it competes with the batch run and with everything else.
SPIN = ("nice", "-n", "19", sys.executable, "-m", "kalena.agent.loadgen", "cpu")
QUOTA_FILES = ("cpu.cfs_quota_us", "cpu.max")


def main() -> None:
    ap = argparse.ArgumentParser(description="PSI-trigger-to-quota-write latency of the node agent.")
    ap.add_argument("--trials", type=int, default=200, help="counted trials (default 200)")
    ap.add_argument("--prod", type=int, help="production cgroups, one busy loop each (default: CPUs + 1)")
    ap.add_argument("--max-seconds", type=float, default=900.0, help="give up after this long")
    ap.add_argument("--json", metavar="PATH", help="also write the results as JSON here")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench_agent_latency needs root (euid 0) to create cgroups")

    layout = detect()
    root = f"kalena-bench-{uuid.uuid4().hex[:8]}"
    tree = CgroupTree(layout, root)
    ncpu = os.cpu_count() or 1
    n_prod = ncpu + 1 if args.prod is None else args.prod
    prod = [
        {"id": f"prod/p{i}", "cgroup": f"prod/p{i}", "priority": 100, "requests": {"cpu": 0.1, "ram": "32Mi"}}
        for i in range(n_prod)
    ]
    decl = parse_declaration(
        {
            "apiVersion": "kalena.naughtian.io/v1alpha1",
            "kind": "NodeDeclaration",
            "node": {"name": "bench", "capacity": {"cpu": ncpu, "ram": "4Gi"}},
            "workloads": prod,
        },
        "bench",
    )
    # escalation off: a benchmark of the fast path must not drain the batch it measures
    config = AgentConfig(policy=PolicyConfig(escalation=EscalationConfig(rounds=10**9, persist_s=1e12)))
    owner = CgroupWriter(tree, ManagedScope())
    latencies: list[float] = []
    rounds: list[float] = []
    skipped = 0
    quiet = False
    with TemporaryDirectory() as tmp:
        agent = build_agent(
            decl, Path(tmp), config=config, cgroup_root=root, layout=layout, audit_writes=False
        )
        procs = []
        try:
            for w in prod:
                owner.create(w["cgroup"], "bench: production")
            agent.start()  # arms one cpu.pressure trigger per production cgroup
            for w in prod:
                files = owner.procs_files(w["cgroup"])

                def enter(files=files) -> None:
                    for f in files:
                        with open(f, "w") as fh:
                            fh.write(str(os.getpid()))

                procs.append(subprocess.Popen(SPIN, stdout=subprocess.DEVNULL, preexec_fn=enter))
            submit(Path(tmp) / "inbox", Submission("spin", SPIN, {"cpu": 0.5, "ram": 0.05}, None, 1))
            agent.step()
            batch = "batch/spin.1"
            window = agent.sources.psi.window_s
            triggers = len(agent.sources.psi.triggers)
            start = time.monotonic()
            while len(latencies) < args.trials and time.monotonic() - start < args.max_seconds:
                # reset: batch back to the whole node, allowance forgotten: the next round must cut
                agent.round_state = dataclasses.replace(agent.round_state, allowance=np.full(1, np.nan))
                owner.forget(batch)
                owner.apply([KnobWrite(batch, Knob.CPU_QUOTA, float(ncpu), "bench reset")])
                agent.writer.forget(batch)
                events = []
                while (
                    not any(e.kind == "psi" for e in events)
                    and (left := args.max_seconds - (time.monotonic() - start)) > 0
                ):
                    events = agent.notifier.wait(min(5.0, left))  # (ends at --max-seconds, not past it)
                if not any(e.kind == "psi" for e in events):
                    quiet = True  # production never stalled long enough to fire a trigger
                    break
                t0 = min(e.mono for e in events if e.kind == "psi")
                r0 = time.perf_counter()
                report = agent.step(events)
                rounds.append(time.perf_counter() - r0)
                quota = [w for w in report.writes if w.cgroup == batch and Path(w.path).name in QUOTA_FILES]
                if not quota or not quota[0].ok:
                    skipped += 1
                    if os.environ.get("KALENA_BENCH_DEBUG"):
                        print(
                            "skip",
                            [(w.cgroup, w.path, w.outcome) for w in report.writes],
                            [(d.workload, d.quota) for d in report.throttle.decisions],
                            report.throttle.pressured,
                            [e.source for e in events],
                        )
                    continue
                latencies.append(quota[0].mono - t0)
            elapsed = time.monotonic() - start
        finally:
            for p in procs:
                p.kill()
                p.wait()
            agent.shutdown()
            agent.log.close()
            owner.purge("", "bench done")
    lat = np.array(latencies) * 1e3
    res = {
        "host": f"{platform.node()} {platform.machine()} {ncpu} CPUs, kernel {platform.release()}",
        "layout": layout.mode.value,
        "psi_window_s": window,
        "triggers": triggers,
        "trials": int(lat.size),
        "skipped_no_write": skipped,
        "production_processes": n_prod,
        "stopped_without_trigger": quiet,
        "elapsed_s": round(elapsed, 1),
        "latency_ms": {
            "p50": float(np.percentile(lat, 50)) if lat.size else math.nan,
            "p90": float(np.percentile(lat, 90)) if lat.size else math.nan,
            "p99": float(np.percentile(lat, 99)) if lat.size else math.nan,
            "max": float(lat.max()) if lat.size else math.nan,
        },
        "round_ms_p50": float(np.percentile(np.array(rounds) * 1e3, 50)) if rounds else math.nan,
    }
    print(f"host: {res['host']}, cgroups: {res['layout']}, PSI window {window} s, {triggers} triggers")
    print(f"trials: {res['trials']} (+{skipped} rounds without a quota write) in {res['elapsed_s']} s")
    if quiet:
        print(f"stopped: no PSI trigger fired before --max-seconds; {n_prod} production loops did not stall")
    ms = res["latency_ms"]
    print(
        f"PSI trigger -> quota written: p50 {ms['p50']:.2f} ms, p90 {ms['p90']:.2f} ms, "
        f"p99 {ms['p99']:.2f} ms, max {ms['max']:.2f} ms"
    )
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
