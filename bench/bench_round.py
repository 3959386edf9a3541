"""The core's node round alone, on the inputs an Irina day gives it: best of many passes, so that a
change worth a few percent of the round shows above this machine's run-to-run drift.

    python bench/bench_round.py [--hours 6] [--samples 100] [--repeat 15] [--estimator decay|peak]
                                [--against TREE] [--json PATH]

Runs Irina for ``--hours`` and keeps ``--samples`` of its rounds' inputs, evenly spaced (each
view copied, since a view holds the simulator's live arrays, with the round state, the policy
and the time). Then calls ``node_round`` on all of them ``--repeat`` times and reports the least
mean time per round (the least: other processes only ever add to a pass). The inputs include the
rounds where nodes are screened and plans made, as they come in the day.

``--against TREE`` times another checkout of Kalena the same way (its ``src`` on the path, this
script), alternating the two trees three times, each a process of its own; both record their
own day, which is the same day where their reports hash the same.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import kalena.sim.engine as engine
from kalena.core.config import ESTIMATORS, PolicyConfig
from kalena.data import irina_paths
from kalena.ir.build import load_cluster
from kalena.sim import SimConfig, Simulation
from machine import print_load, write_json  # bench/ is on sys.path when a script runs


def record(hours: float, samples: int, estimator: str) -> list[tuple]:  # type: ignore[type-arg]
    """``samples`` rounds' inputs (view, state, policy, now), evenly spaced over the run."""
    cfg = SimConfig(hours=hours, policy=PolicyConfig(estimator=estimator))
    every = max(1, cfg.ticks // samples)
    kept: list[tuple] = []  # type: ignore[type-arg]
    calls = [0]
    real = engine.node_round

    def keeping(view, state, policy, now):  # type: ignore[no-untyped-def]
        calls[0] += 1
        if calls[0] % every == 0 and len(kept) < samples:
            kept.append((copy.deepcopy(view), state, policy, now))
        return real(view, state, policy, now)

    engine.node_round = keeping  # type: ignore[assignment]
    try:
        Simulation(load_cluster(*irina_paths()), cfg).run()
    finally:
        engine.node_round = real
    return kept


def best_per_round(kept: list[tuple], repeat: int) -> float:  # type: ignore[type-arg]
    """The least mean seconds per round over ``repeat`` passes (each view afresh: a view keeps
    what it worked out once, which a round in the simulator does not find)."""
    best = float("inf")
    for _ in range(repeat):
        views = [dataclasses.replace(v) for v, *_ in kept]
        t = time.perf_counter()
        for v, (_, state, policy, now) in zip(views, kept, strict=True):
            engine.node_round(v, state, policy, now)
        best = min(best, (time.perf_counter() - t) / len(kept))
    return best


def against(tree: str, argv: list[str]) -> list[tuple[float, float]]:
    """(this tree, TREE) microseconds per round, three alternated pairs."""
    here = Path(__file__).resolve()
    pairs = []
    for i in range(3):
        got = {}
        for side in ("this", "other") if i % 2 == 0 else ("other", "this"):
            src = str(here.parents[1] / "src") if side == "this" else str(Path(tree).resolve() / "src")
            env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, str(here.parent)])}
            out = subprocess.run(
                [sys.executable, str(here), *argv, "--quiet"],
                env=env,
                capture_output=True,
                text=True,
                check=True,
            )
            got[side] = float(out.stdout.strip().splitlines()[-1])
            print(f"pair {i + 1}: {side} tree {got[side]:.1f} us per round", flush=True)
        pairs.append((got["this"], got["other"]))
    return pairs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hours", type=float, default=6.0, help="simulated hours recorded (default 6)")
    ap.add_argument("--samples", type=int, default=100, help="rounds kept (default 100)")
    ap.add_argument("--repeat", type=int, default=15, help="passes over them (default 15)")
    ap.add_argument("--estimator", choices=ESTIMATORS, default="decay")
    ap.add_argument("--against", metavar="TREE", help="another checkout of Kalena to time alike")
    ap.add_argument("--json", metavar="PATH")
    ap.add_argument("--quiet", action="store_true", help=argparse.SUPPRESS)  # (--against's children)
    args = ap.parse_args()
    for name in ("samples", "repeat"):
        if getattr(args, name) < 1:
            ap.error(f"--{name} must be at least 1, got {getattr(args, name)}")
    if args.against and not (Path(args.against) / "src" / "kalena").is_dir():
        ap.error(f"--against {args.against}: not a checkout of Kalena (it needs src/kalena)")
    if args.against:
        load = print_load("before")
        argv = ["--hours", str(args.hours), "--samples", str(args.samples), "--repeat", str(args.repeat)]
        pairs = against(args.against, [*argv, "--estimator", args.estimator])
        ratios = [a / b for a, b in pairs]
        per = [round(r, 3) for r in ratios]
        print(f"this / other per pair: {per}; median {statistics.median(ratios):.3f}")
        load = print_load("after")
        write_json(args.json, "round", vars(args), {"pairs_us": pairs, "ratios": ratios}, load)
        return
    load = None if args.quiet else print_load("before")
    kept = record(args.hours, args.samples, args.estimator)
    us = best_per_round(kept, args.repeat) * 1e6
    if args.quiet:
        print(f"{us:.3f}")
        return
    load = print_load("after")
    rows = len(kept[0][0]) if kept else 0
    print(f"{len(kept)} rounds of Irina ({rows} rows at the first): {us:.1f} us per round", end="")
    print(f" (least of {args.repeat} passes)")
    write_json(args.json, "round", vars(args), {"rounds": len(kept), "us_per_round": round(us, 1)}, load)


if __name__ == "__main__":
    main()
