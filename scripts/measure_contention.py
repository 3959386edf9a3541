"""Measure CPU contention and CPU pressure on this machine's real cgroups (issue 13, item 3).

    python scripts/measure_contention.py [--seconds 10] [--cpus 1 | --quota] [--out FILE]

A "node" is a cgroup whose processes all run on the CPUs ``--cpus`` (by their affinity): its
capacity is those CPUs, and what waits for them queues as on a real node. With ``--quota`` the node
is instead a CPU quota of one core (cgroup v1 ``cpu.cfs_quota_us`` or v2 ``cpu.max``, through the
node agent's own :class:`~kalena.agent.writer.CgroupWriter`) over all of the machine's CPUs. Inside it,
production and batch cgroups each run one CPU burner: a process that wants ``d`` cores, i.e.
spends ``d`` of every slot of wall time (5 to 15 ms, drawn per slot) on the CPU (counted in its own
CPU time, so under contention it still wants ``d``) and sleeps the rest. Production cgroups get the
``cpu.weight`` the kubelet gives their request; batch gets the core's ``batch_weight`` (1). For
every mix and total demand from 50 % to 120 % of the capacity, after a second to settle, it records over
``--seconds``: the CPU each cgroup got (``cpuacct.usage`` / ``cpu.stat``), the node's and each
cgroup's ``some`` and ``full`` CPU pressure (the ``total`` counters of ``cpu.pressure``: the
share of wall time stalled), the kernel version and the cgroup layout. Needs root and
per-cgroup PSI (cgroup v2 or hybrid). The JSON it writes is the raw data the simulator's
contention and pressure model is held to (``src/kalena/sim/params/contention/``).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import platform
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kalena.agent.build import cgroup_tree
from kalena.agent.cgroupfs import FsCgroupReader
from kalena.agent.layout import CgroupTree
from kalena.agent.writer import CgroupWriter, Knob, KnobWrite, ManagedScope
from kalena.core.enforcement import ThrottleConfig
from kalena.sim.rows import cpu_weight

ROOT = "/kalena-measure-contention"
SLOT_S = 0.01

# One burner: wants ``d`` cores (CPU time per slot of wall time), for ever; stopped by SIGKILL.
# Each slot's length is drawn around SLOT_S (uniform, +-50 %), so that the burners' bursts do not
# keep one phase against each other for a whole trial: their overlaps, which are what waits, are
# then sampled rather than fixed by the order the processes happened to start in.
BURNER = f"""
import random, sys, time
d = float(sys.argv[1]); mean = {SLOT_S}
cpu, wall = time.thread_time, time.monotonic
t = wall()
while True:
    slot = random.uniform(0.5 * mean, 1.5 * mean)
    c = cpu()
    while cpu() - c < d * slot:
        pass
    t += slot
    pause = t - wall()
    if pause > 0:
        time.sleep(pause)
    else:
        t = wall()  # behind: the next slot starts now (what was not got is not owed)
"""

#: (name, kind, share of the total demand, cpu request in cores): the mixes measured.
MIXES: dict[str, list[tuple[str, str, float, float]]] = {
    "production-and-batch": [
        ("p0", "production", 0.35, 0.5),
        ("p1", "production", 0.25, 0.25),
        ("b0", "batch", 0.25, 0.25),
        ("b1", "batch", 0.15, 0.1),
    ],
    "production-only": [
        ("p0", "production", 0.5, 0.5),
        ("p1", "production", 0.3, 0.25),
        ("p2", "production", 0.2, 0.25),
    ],
    "batch-heavy": [
        ("p0", "production", 0.3, 0.5),
        ("b0", "batch", 0.4, 0.25),
        ("b1", "batch", 0.3, 0.25),
    ],
}
LOADS = (0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.1, 1.2)


@dataclass
class Counters:
    usage_ns: int
    some_us: int
    full_us: int


def counters(reader: FsCgroupReader, name: str) -> Counters:
    usage = reader.cpu_usage_ns(name)
    p = reader.pressure(name, "cpu")
    if usage is None or p is None or p.some is None:
        raise SystemExit(f"cgroup {name}: no cpu usage or cpu.pressure to read (needs per-cgroup PSI)")
    return Counters(usage, p.some.total_us, p.full.total_us if p.full is not None else 0)


def spawn(
    writer: CgroupWriter,
    name: str,
    argv: list[str],
    *,
    cpus: set[int] | None = None,
    oom_score_adj: int | None = None,
    **popen: Any,
) -> subprocess.Popen[bytes]:
    """Start ``argv`` inside cgroup ``name`` (every hierarchy), before it runs a line of its own.

    The child dies with this script (``PR_SET_PDEATHSIG``), so an interrupted measurement leaves no
    burner behind; ``cpus`` pins it, ``oom_score_adj`` sets what the kernel's OOM killer weighs it by.
    """
    files = writer.procs_files(name)
    parent = os.getpid()

    def enter() -> None:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # die with this script
        if os.getppid() != parent:
            os.kill(os.getpid(), signal.SIGKILL)
        for f in files:
            f.write_text(str(os.getpid()))
        if cpus is not None:
            os.sched_setaffinity(0, cpus)
        if oom_score_adj is not None:
            Path("/proc/self/oom_score_adj").write_text(str(oom_score_adj))

    return subprocess.Popen(argv, preexec_fn=enter, **popen)


def run_trial(
    writer: CgroupWriter, reader: FsCgroupReader, mix: str, load: float, cpus: set[int] | None, seconds: float
) -> dict[str, Any]:
    """One mix at one load; ``cpus`` pins the node to those CPUs, ``None`` gives it a one-core quota."""
    members = MIXES[mix]
    names = [f"node/{m[0]}" for m in members]
    capacity = 1.0 if cpus is None else float(len(cpus))
    batch_weight = float(ThrottleConfig().batch_weight)
    weights = [float(cpu_weight(m[3])) if m[1] == "production" else batch_weight for m in members]
    wants = [m[2] * load * capacity for m in members]
    writer.create("node", "measure")
    quota = capacity if cpus is None else float("inf")
    writer.apply([KnobWrite("node", Knob.CPU_QUOTA, quota, "measure: the node's capacity")])
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for name, weight, want in zip(names, weights, wants, strict=True):
            writer.create(name, "measure")
            writer.apply([KnobWrite(name, Knob.CPU_WEIGHT, weight, "measure")])
            procs.append(spawn(writer, name, [sys.executable, "-c", BURNER, str(want)], cpus=cpus))
        time.sleep(1.0)  # settle
        t0 = time.monotonic()
        before = {n: counters(reader, n) for n in ["node", *names]}
        time.sleep(seconds)
        after = {n: counters(reader, n) for n in ["node", *names]}
        wall = time.monotonic() - t0
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait()
    rows = []
    for (cg, kind, _, request), name, weight, want in zip(members, names, weights, wants, strict=True):
        a, b = after[name], before[name]
        rows.append({
            "cgroup": cg, "kind": kind, "request_cores": request, "weight": weight, "want_cores": want,
            "got_cores": (a.usage_ns - b.usage_ns) / 1e9 / wall,
            "some": (a.some_us - b.some_us) / 1e6 / wall,
            "full": (a.full_us - b.full_us) / 1e6 / wall,
        })  # fmt: skip
    node_a, node_b = after["node"], before["node"]
    for name in reversed(names):
        writer.remove(name, "measure")
    return {
        "mix": mix,
        "load": load,
        "capacity_cores": capacity,
        "node": f"pinned to cpus {sorted(cpus)}" if cpus is not None else "a one-core quota over every cpu",
        "seconds": wall,
        "node_got_cores": (node_a.usage_ns - node_b.usage_ns) / 1e9 / wall,
        "node_some": (node_a.some_us - node_b.some_us) / 1e6 / wall,
        "node_full": (node_a.full_us - node_b.full_us) / 1e6 / wall,
        "loadavg_1m": os.getloadavg()[0],
        "cgroups": rows,
    }


def open_tree(root: str) -> tuple[CgroupTree, CgroupWriter, FsCgroupReader] | None:
    """The measurement's cgroup tree, its writer and reader; ``None`` (said on stderr) without
    per-cgroup PSI. A SIGTERM then ends the script through its cleanup."""
    tree = cgroup_tree(root)
    if not tree.layout.has_psi:
        print(f"this host's cgroups ({tree.layout.describe()}) have no per-cgroup PSI", file=sys.stderr)
        return None
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # the cleanup runs on a kill too
    return tree, CgroupWriter(tree, ManagedScope()), FsCgroupReader(tree)


def write_record(
    script: str, argv: list[str] | None, tree: CgroupTree, out: Path | None, **fields: Any
) -> None:
    """The measurement's JSON: its command, date, kernel and cgroup layout, then ``fields``."""
    record = {
        "command": f"python scripts/{script} " + " ".join(argv if argv is not None else sys.argv[1:]),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "kernel": platform.release(),
        "cgroups": tree.layout.describe(),
        "cpus": os.cpu_count(),
        **fields,
    }
    text = json.dumps(record, indent=1)
    if out:
        out.write_text(text + "\n")
    else:
        print(text)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=10.0, help="each trial's measured window")
    ap.add_argument("--cpus", default="1", help="the CPUs the node's processes run on (comma-separated)")
    ap.add_argument("--quota", action="store_true", help="a one-core CPU quota over every CPU instead")
    ap.add_argument("--out", type=Path, default=None, help="write the JSON here (else print it)")
    args = ap.parse_args(argv)
    opened = open_tree(ROOT)
    if opened is None:
        return 2
    tree, writer, reader = opened
    cpus = None if args.quota else {int(c) for c in args.cpus.split(",")}
    trials = []
    try:
        for mix in MIXES:
            for load in LOADS:
                t = run_trial(writer, reader, mix, load, cpus, args.seconds)
                trials.append(t)
                print(
                    f"{mix:22s} load {load:4.2f}: node got {t['node_got_cores']:.3f} cores, "
                    f"some {t['node_some']:.3f}, full {t['node_full']:.3f} "
                    f"(load average {t['loadavg_1m']:.2f})",
                    file=sys.stderr,
                )
    finally:
        writer.remove("node", "measure")
        writer.remove("", "measure")
    write_record("measure_contention.py", argv, tree, args.out, slot_s=SLOT_S, trials=trials)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
