"""Measure memory pressure and the kernel's OOM killer on this machine's real cgroups (issue 13, item 3).

    python scripts/measure_memory.py [--limit-mib 512] [--seconds 5] [--out FILE]

A "node" is a cgroup with a memory limit (``--limit-mib``, through the node agent's own
:class:`~kalena.agent.writer.CgroupWriter`: cgroup v1 ``memory.limit_in_bytes`` or v2
``memory.max``), standing for a machine's memory. Inside it, memory-bound processes:

* ``anon``: one process maps a working set of anonymous memory, touches every page (the first
  touch is timed: how fast memory can arrive), then rewrites it for the trial's window;
* ``file``: one process reads a file of the working set's size from disk, over and over (its page
  cache is charged to the node; the file is dropped from the cache before each trial);
* ``pair-*``: a production process, then a batch process, each anonymous, in cgroups of their own,
  with the ``oom_score_adj`` the kubelet gives a Burstable pod of their memory request
  (``1000 - 1000 * request / capacity``, kept within [3, 999]): who does the OOM killer take?
  And once with the scores Kalena's own runtimes give: batch 1000, production left at 0.

For every mix and working set from 50 % to 130 % of the limit, it records: which processes the
kernel killed (``SIGKILL``) and how long after they started, the node's ``oom_kill`` count, its
``some`` and ``full`` memory pressure over the trial (the ``total`` counters of
``memory.pressure``), its peak usage and the bytes each process moved a second, the kernel
version and the cgroup layout. Needs root and per-cgroup PSI (cgroup v2 or hybrid). The JSON it
writes is the raw data the simulator's memory model is held to (``src/kalena/sim/params/contention/``).
"""

from __future__ import annotations

import argparse
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from measure_contention import open_tree, spawn, write_record  # scripts/ is on sys.path when run

from kalena.agent.cgroupfs import FsCgroupReader
from kalena.agent.writer import CgroupWriter, Knob, KnobWrite
from kalena.core.enforcement import BATCH_OOM_SCORE_ADJ
from kalena.sim.memory import kubelet_oom_score_adj

ROOT = "/kalena-measure-memory"
MIB = 1 << 20

# Anonymous memory: map ``size`` bytes privately (MAP_SHARED would be shmem), touch every page
# a MiB at a time, say how long that took, then keep rewriting it until ``hold`` seconds passed.
ANON = """
import mmap, sys, time
size, hold = int(sys.argv[1]), float(sys.argv[2])
chunk = b"\\x01" * (1 << 20)
t0 = time.monotonic()
m = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
for off in range(0, size, 1 << 20):
    m[off:off + (1 << 20)] = chunk[: size - off]
print("ready", time.monotonic() - t0, flush=True)
t1, moved = time.monotonic(), 0
while time.monotonic() - t1 < hold:
    for off in range(0, size, 1 << 20):
        m[off:off + (1 << 20)] = chunk[: size - off]
    moved += size
print("done", moved / (time.monotonic() - t1), flush=True)
"""

# File-backed memory: read the file a MiB at a time into one buffer, from start to end, again and
# again; the first pass is the "ready" one.
FILE = """
import os, sys, time
path, hold = sys.argv[1], float(sys.argv[2])
fd = os.open(path, os.O_RDONLY)
size = os.fstat(fd).st_size
buf = bytearray(1 << 20)
def one_pass():
    off = 0
    while off < size:
        off += os.preadv(fd, [buf], off)
t0 = time.monotonic()
one_pass()
print("ready", time.monotonic() - t0, flush=True)
t1, moved = time.monotonic(), 0
while time.monotonic() - t1 < hold:
    one_pass()
    moved += size
print("done", moved / (time.monotonic() - t1), flush=True)
"""

#: (process, kind, share of the node's memory, memory request as a share of the node) per mix; a
#: pair's production share is fixed and the batch process takes the rest of the working set.
MIXES: dict[str, list[tuple[str, str, float | None, float]]] = {
    "anon": [("w0", "anon", None, 0.0)],
    "file": [("w0", "file", None, 0.0)],
    "pair-production-within-request": [("p0", "production", 0.5, 0.5), ("b0", "batch", None, 0.1)],
    "pair-production-above-request": [("p0", "production", 0.7, 0.5), ("b0", "batch", None, 0.4)],
    # the same pair with the scores Kalena's own runtimes give (production at the default 0)
    "pair-kalena-scores": [("p0", "production", 0.7, 0.5), ("b0", "batch", None, 0.4)],
}
#: Mixes whose processes get Kalena's scores instead of the kubelet's.
KALENA_SCORED = {"pair-kalena-scores"}
FILLS = (0.5, 0.7, 0.9, 0.95, 1.05, 1.1, 1.3)


def memory_counters(reader: FsCgroupReader, name: str) -> tuple[int, int]:
    p = reader.pressure(name, "memory")
    if p is None or p.some is None:
        raise SystemExit(f"cgroup {name}: no memory.pressure to read (needs per-cgroup PSI)")
    return p.some.total_us, p.full.total_us if p.full is not None else 0


def oom_kills(reader: FsCgroupReader, name: str) -> int:
    events = reader.memory_events(name) or {}
    return int(events.get("oom_kill", 0))


def watch(
    procs: list[subprocess.Popen[bytes]],
    rows: list[dict[str, Any]],
    t0: float,
    timeout: float,
    ready: subprocess.Popen[bytes] | None = None,
) -> str | None:
    """Note each process's end (``ended_s``) as it happens, every 2 ms, until every one ended or, with
    ``ready``, that process printed a line (returned; ``None`` when it ended first)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for p, row in zip(procs, rows, strict=True):
            if "ended_s" not in row and p.poll() is not None:
                row["ended_s"] = time.monotonic() - t0
        if ready is None:
            if all("ended_s" in r for r in rows):
                return None
            time.sleep(0.002)
        elif ready.stdout is not None and select.select([ready.stdout], [], [], 0.002)[0]:
            return ready.stdout.readline().decode().strip() or None
    return None


def file_of(size: int, folder: Path) -> Path:
    """A file of ``size`` bytes on disk, written from outside the node and dropped from the page cache."""
    path = folder / f"working-set-{size}"
    if not path.exists() or path.stat().st_size != size:
        with path.open("wb") as f:
            block = os.urandom(MIB)
            for off in range(0, size, MIB):
                f.write(block[: size - off])
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)  # the node's reads fault it in, charged to it
    finally:
        os.close(fd)
    return path


def run_trial(
    writer: CgroupWriter,
    reader: FsCgroupReader,
    mix: str,
    fill: float,
    limit: int,
    seconds: float,
    folder: Path,
) -> dict[str, Any]:
    members = MIXES[mix]
    fixed = sum(m[2] or 0.0 for m in members)
    writer.create("node", "measure")
    writer.apply([KnobWrite("node", Knob.MEMORY_MAX, float(limit), "measure: the node's memory")])
    some0, full0 = memory_counters(reader, "node")
    t0 = time.monotonic()
    rows: list[dict[str, Any]] = []
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for proc_name, kind, share, request in members:
            size = int((share if share is not None else fill - fixed) * limit)
            name = f"node/{proc_name}"
            writer.create(name, "measure")
            hold = str(seconds)
            if kind == "file":
                argv = [sys.executable, "-c", FILE, str(file_of(size, folder)), hold]
            else:
                argv = [sys.executable, "-c", ANON, str(size), hold]
            if kind in ("anon", "file"):
                adj = None
            elif mix in KALENA_SCORED:
                adj = BATCH_OOM_SCORE_ADJ if kind == "batch" else 0
            else:
                adj = int(kubelet_oom_score_adj(request))
            row: dict[str, Any] = {
                "process": proc_name, "kind": kind, "bytes": size, "request_share": request,
                "oom_score_adj": adj, "started_s": time.monotonic() - t0,
            }  # fmt: skip
            procs.append(spawn(writer, name, argv, oom_score_adj=adj, stdout=subprocess.PIPE))
            rows.append(row)
            line = watch(procs, rows, t0, 60.0, ready=procs[-1])
            row["ready_s"] = float(line.split()[1]) if line and line.startswith("ready") else None
        watch(procs, rows, t0, seconds + 60.0)
        for p, row in zip(procs, rows, strict=True):
            rc = p.wait(timeout=60.0)
            line = p.stdout.read().decode().strip() if p.stdout is not None else ""
            row["killed"] = rc == -signal.SIGKILL
            row["bytes_per_s"] = float(line.split()[1]) if line.startswith("done") else None
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait()
    wall = time.monotonic() - t0
    some1, full1 = memory_counters(reader, "node")
    # cgroup v1 counts a kill in the victim's own cgroup, v2 in every ancestor too: read both levels
    for row in rows:
        row["oom_kills"] = oom_kills(reader, f"node/{row['process']}")
    kills = max(oom_kills(reader, "node"), sum(r["oom_kills"] for r in rows))
    peak = max_usage(reader, "node")
    for proc_name, *_ in reversed(members):
        writer.remove(f"node/{proc_name}", "measure")
    writer.remove("node", "measure")
    return {
        "mix": mix,
        "fill": fill,
        "limit_bytes": limit,
        "seconds": wall,
        "node_some": (some1 - some0) / 1e6 / wall,
        "node_full": (full1 - full0) / 1e6 / wall,
        "node_oom_kills": kills,
        "node_peak_bytes": peak,
        "loadavg_1m": os.getloadavg()[0],
        "processes": rows,
    }


def max_usage(reader: FsCgroupReader, name: str) -> int | None:
    """The node's peak memory usage (v1 ``memory.max_usage_in_bytes``, v2 ``memory.peak``)."""
    h = reader.tree.layout.home("memory")
    if h is None:
        return None
    path = reader.tree.dir(h, name) / ("memory.max_usage_in_bytes" if h.version == 1 else "memory.peak")
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def interpreter_bytes(writer: CgroupWriter, reader: FsCgroupReader) -> int:
    """What an idle process of the kind above charges before its working set (in a node of its own)."""
    writer.create("node", "measure")
    writer.create("node/idle", "measure")
    p = spawn(writer, "node/idle", [sys.executable, "-c", ANON, str(MIB), "2"], stdout=subprocess.PIPE)
    try:
        watch([p], [{}], 0.0, 60.0, ready=p)
        usage, _, _ = reader.memory("node/idle", with_limit=False)
    finally:
        p.kill()
        p.wait()
        writer.remove("node/idle", "measure")
        writer.remove("node", "measure")
    return max(0, (usage or 0) - MIB)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--limit-mib", type=int, default=512, help="the node's memory limit")
    ap.add_argument("--seconds", type=float, default=5.0, help="how long each working set is held")
    ap.add_argument("--out", type=Path, default=None, help="write the JSON here (else print it)")
    args = ap.parse_args(argv)
    opened = open_tree(ROOT)
    if opened is None:
        return 2
    tree, writer, reader = opened
    limit = args.limit_mib * MIB
    trials = []
    with tempfile.TemporaryDirectory(dir="/var/tmp") as folder:
        try:
            overhead = interpreter_bytes(writer, reader)
            for mix in MIXES:
                for fill in FILLS:
                    if fill - sum(m[2] or 0.0 for m in MIXES[mix]) < 0.1:
                        continue  # a pair's batch process needs a working set of its own
                    t = run_trial(writer, reader, mix, fill, limit, args.seconds, Path(folder))
                    trials.append(t)
                    killed = [r["process"] for r in t["processes"] if r["killed"]]
                    print(
                        f"{mix:32s} fill {fill:4.2f}: killed {killed or '-'}, "
                        f"oom_kill {t['node_oom_kills']}, "
                        f"some {t['node_some']:.4f}, full {t['node_full']:.4f} "
                        f"(load average {t['loadavg_1m']:.2f})",
                        file=sys.stderr,
                    )
        finally:
            for leftover in ("node/idle", "node/w0", "node/p0", "node/b0", "node"):
                writer.remove(leftover, "measure")
            writer.remove("", "measure")
    write_record(
        "measure_memory.py",
        argv,
        tree,
        args.out,
        swap_bytes=swap_bytes(),
        interpreter_bytes=overhead,
        trials=trials,
    )
    return 0


def swap_bytes() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("SwapTotal:"):
            return int(line.split()[1]) * 1024
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
