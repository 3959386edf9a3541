"""Synthetic workloads for the agent's tests and benchmarks, in pure Python (no stress tools).

``python -m kalena.agent.loadgen cpu``   spin one core until killed;
``python -m kalena.agent.loadgen mem --mib N``   hold N MiB of touched memory; then read commands
on stdin: ``grow M`` (hold M MiB, answer ``at M``), ``exit``; at the end of stdin it keeps
holding (a batch run started with no stdin is a steady memory user);
``python -m kalena.agent.loadgen sleep``   do nothing until killed.

Each prints ``ready`` (``ready N`` for mem) once it is in its steady state, so a test waits on
the line instead of on time. ``--ignore-term`` makes it ignore SIGTERM, so that an eviction
has to escalate to SIGKILL after the grace period.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time

MIB = 2**20


def _hold(chunks: list[bytes], mib: int, step_mib: int) -> None:
    """Grow or shrink ``chunks`` to ``mib`` MiB of touched pages (``bytes * n`` writes every page)."""
    while len(chunks) * step_mib < mib:
        chunks.append(b"\x01" * (step_mib * MIB))
    while len(chunks) * step_mib > mib and chunks:
        chunks.pop()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="kalena.agent.loadgen")
    ap.add_argument("kind", choices=("cpu", "mem", "sleep"))
    ap.add_argument("--mib", type=int, default=0)
    ap.add_argument("--step-mib", type=int, default=4, help="allocation granularity (MiB)")
    ap.add_argument("--ignore-term", action="store_true")
    args = ap.parse_args(argv)
    if args.ignore_term:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if args.kind == "cpu":
        print("ready", flush=True)
        while True:
            pass
    if args.kind == "sleep":
        print("ready", flush=True)
        while True:
            time.sleep(3600)
    chunks: list[bytes] = []
    _hold(chunks, args.mib, args.step_mib)
    print(f"ready {args.mib}", flush=True)
    for line in sys.stdin:
        cmd = line.split()
        if cmd and cmd[0] == "exit":
            return 0
        if cmd and cmd[0] == "grow":
            _hold(chunks, int(cmd[1]), args.step_mib)
            print(f"at {cmd[1]}", flush=True)
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    sys.exit(main())
