"""Simulator speed: the default run (24 h on Irina) and the scaling run (5,000 nodes, 100,000 pods, 1 h).

    python bench/bench_simulate.py [--json PATH] [--skip-default] [--skip-scaling]
                                   [--nodes 5000] [--pods 100000] [--scaling-hours 1] [--tick-s 10]
                                   [--arm kalena|kalena-no-reclaim|baseline]
                                   [--estimator decay|peak|histogram] [--phases]
                                   [--repeat N] [--versus decay|peak|histogram] [--default-hours 24]
                                   [--against TREE]

Default run: exactly ``kalena simulate`` with no arguments minus the plots: load the bundled Irina
documents, build the simulation (batch population included), run 8,640 ticks of 10 s (plus the 2 h
production pre-warm), build the report. Timed: the whole of it (wall, and process cpu time) and the
run alone; simulated seconds per wall second = 86,400 / run wall time.

Scaling run: ``synthetic_cluster(5000, 100000)`` (Irina's node shapes, 100,000 production pods filling
73 % of cpu; building it is setup, timed separately), then one simulated hour with the default batch
model (a 48 h warm start plus the hour's arrivals: about 200,000 batch pods placed).

``--tick-s`` runs both at another tick than the simulator's 10 s (what a coarser tick would buy, and
what it changes: the outcome figures are reported beside the times). ``--arm`` and ``--estimator``
run both as ``kalena simulate``'s ``--no-reclaim`` / ``--baseline`` and ``--estimator`` do. Two
trees compare side by side with one core each: ``taskset -c 0 env PYTHONPATH=OLD/src python
bench/bench_simulate.py ...`` beside ``taskset -c 1 python bench/bench_simulate.py ...``.

``--repeat N`` runs each N times and prints the least and the median total beside each run's: this
machine's speed drifts by a fifth within the hour, so one run is one sample. ``--versus ESTIMATOR``
alternates the default day between ``--estimator`` and ESTIMATOR (A, B, A, B, ... N pairs) and prints
each pair's ratio of totals and their median, the figure issue 15 asks about (a pair runs within a
couple of minutes, so a drift moves both). ``--default-hours`` shortens the default day (for a smoke
run).

``--against TREE`` compares two trees on the default day: TREE is another checkout of Kalena (say
``git worktree add /tmp/before REV``). Each run is a process of its own that runs its tree's own
``bench/bench_simulate.py --skip-scaling`` against its tree's ``src``. The pairs alternate in ABBA
order (this tree first in odd pairs, TREE first in even ones), so that neither tree always runs
second on a machine that drifts. It prints each pair's ratio (this tree / TREE) and their median.
That is the "before and after from the same day" that issue 9 asks for, for any earlier tree that
has the benchmark. Only ``--repeat``, ``--default-hours`` (when given) and ``--json`` apply there.

``--phases`` also times each step of a tick (the engine's methods that ``Simulation.step`` calls,
wrapped with a timer: each figure includes what that step calls, the round its lifecycle and OOM
checks, placement its row starts) and the estimator's update alone, and prints them beside the
run's wall time; the timers add a little to it.

The machine's load is printed with the figures: other processes sharing the cores slow every figure.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from kalena.core.config import ESTIMATORS, PolicyConfig
from kalena.data import irina_paths
from kalena.ir import load_cluster
from kalena.sim import SimConfig, Simulation, build_report
from kalena.sim.arms import ARMS
from kalena.sim.synthetic import synthetic_cluster
from machine import print_load, write_json  # bench/ is on sys.path when a script runs


def _clock() -> tuple[float, float]:
    return time.perf_counter(), time.process_time()


def _since(start: tuple[float, float]) -> tuple[float, float]:
    wall, cpu = _clock()
    return wall - start[0], cpu - start[1]


#: The steps of a tick, as ``Simulation.step`` calls them (the baseline arm's ``_kernel_only`` too).
PHASES = (
    "_arrivals",
    "_evictions_done",
    "_usage_and_cpu",
    "_completions",
    "_kernel_first",
    "_estimate",
    "_round",
    "_kernel_only",
    "_place",
    "_check",
    "_account",
)


def timed(sim: Simulation) -> dict[str, float]:
    """Wrap ``sim``'s tick steps and its estimator's update with timers (on this object only)."""
    spent: dict[str, float] = {}

    def wrap(name: str, fn):  # type: ignore[no-untyped-def]
        def timer(*a, **k):  # type: ignore[no-untyped-def]
            t = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                spent[name] = spent.get(name, 0.0) + time.perf_counter() - t

        return timer

    for name in PHASES:
        setattr(sim, name, wrap(name.strip("_"), getattr(sim, name)))
    est = sim.estimator
    update = wrap("estimator update", est.update_in_place)

    class Timed:  # the estimator with its update timed (a frozen dataclass cannot be patched)
        def __getattr__(self, attr: str):  # type: ignore[no-untyped-def]
            return getattr(est, attr)

        update_in_place = staticmethod(update)

    sim.estimator = Timed()  # type: ignore[assignment]
    return spent


def run(cluster_factory, config: SimConfig, phases: bool = False) -> dict:  # type: ignore[no-untyped-def]
    t0 = _clock()
    cluster = cluster_factory()
    setup_wall, _ = _since(t0)
    t1 = _clock()
    sim = Simulation(cluster, config)
    init_wall, _ = _since(t1)
    spent = timed(sim) if phases else None
    t2 = _clock()
    sim.run()
    run_wall, run_cpu = _since(t2)
    report = build_report(sim)
    total_wall, total_cpu = _since(t0)
    return {
        "setup_s": round(setup_wall, 2),
        "init_s": round(init_wall, 2),
        "run_wall_s": round(run_wall, 2),
        "run_cpu_s": round(run_cpu, 2),
        "total_wall_s": round(total_wall, 2),
        "total_cpu_s": round(total_cpu, 2),
        "simulated_s_per_wall_s": round(report["simulated_seconds"] / run_wall, 1),
        "ticks": config.ticks,
        "ms_per_tick": round(run_wall / config.ticks * 1e3, 2),
        "nodes": report["cluster"]["nodes"],
        "production_workloads": report["cluster"]["production_workloads"],
        "batch_pods_placed": report["placement"]["placed"],
        "reclaimed_work_fraction": report["reclaimed_work_fraction"],
        "batch_cpu_core_hours": report["batch_cpu_core_hours"],
        "evictions_total": report["evictions_total"],
        "escalations": report["escalations"],
        "production_unmet_cpu_core_seconds": report["production_unmet_cpu_core_seconds"],
        "restoration_violations": report["restoration_violations"],
    } | ({"phases_s": {k: round(v, 2) for k, v in spent.items()}} if spent is not None else {})


def print_phases(r: dict) -> None:
    if "phases_s" in r:
        print(
            "  phases (s, each with what it calls):", ", ".join(f"{k} {v}" for k, v in r["phases_s"].items())
        )


def summarise(runs: list[dict], names: list[str]) -> dict:
    """Every run, the least and median total per estimator and, for two, each pair's ratio."""
    out: dict = {"runs": runs}
    for name in names:
        totals = [r["total_wall_s"] for r in runs if r.get("estimator", name) == name]
        least, median = min(totals), round(statistics.median(totals), 2)
        out[name] = {"total_wall_s_min": least, "total_wall_s_median": median}
        print(f"  {name}: {len(totals)} runs, total {least} s least, {median} s median")
    if len(names) == 2:
        a = [r["total_wall_s"] for r in runs[0::2]]
        b = [r["total_wall_s"] for r in runs[1::2]]
        ratios = [round(y / x, 3) for x, y in zip(a, b, strict=True)]
        out["ratios"] = ratios
        out["ratio_median"] = round(statistics.median(ratios), 3)
        print(f"  {names[1]} / {names[0]} per pair: {ratios}; median {out['ratio_median']}")
    return out


#: This checkout: the folder that holds bench/ and src/.
HERE = Path(__file__).resolve().parent.parent


def tree_day(tree: Path, hours: float | None) -> dict:
    """The default day by ``tree``'s own benchmark, in a process of its own on ``tree``'s source."""
    with tempfile.TemporaryDirectory(prefix="kalena-against-") as tmp:
        out = Path(tmp) / "day.json"
        script = tree / "bench" / "bench_simulate.py"
        cmd = [sys.executable, str(script), "--skip-scaling", "--json", str(out)]
        if hours is not None:
            cmd += ["--default-hours", f"{hours:g}"]
        env = {**os.environ, "PYTHONPATH": str(tree / "src")}
        done = subprocess.run(cmd, env=env, cwd=tree, capture_output=True, text=True, check=False)
        if done.returncode != 0 or not out.exists():
            tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
            raise SystemExit(f"{tree}: its bench_simulate.py failed ({done.returncode}): " + " | ".join(tail))
        return json.loads(out.read_text(encoding="utf-8"))["results"]["default"]


def against(other: Path, repeat: int, hours: float | None) -> dict:
    """This tree and ``other`` alternated ABBA over ``repeat`` pairs (module docstring)."""
    pairs = []
    for i in range(repeat):
        order = [("this", HERE), ("other", other)]
        if i % 2:  # even pairs: the other tree first
            order.reverse()
        got = {name: tree_day(tree, hours) for name, tree in order}
        ratio = round(got["this"]["total_wall_s"] / got["other"]["total_wall_s"], 3)
        pairs.append({"first": order[0][0], "this": got["this"], "other": got["other"], "ratio": ratio})
        print(
            f"pair {i + 1} ({order[0][0]} tree first): this {got['this']['total_wall_s']} s "
            f"({got['this']['batch_pods_placed']} pods placed), other {got['other']['total_wall_s']} s "
            f"({got['other']['batch_pods_placed']} pods placed); this / other {ratio}"
        )
    median = round(statistics.median(p["ratio"] for p in pairs), 3)
    print(f"  this / other per pair: {[p['ratio'] for p in pairs]}; median {median}")
    return {"other_tree": str(other), "pairs": pairs, "ratio_median": median}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--skip-default", action="store_true")
    ap.add_argument("--skip-scaling", action="store_true")
    ap.add_argument("--nodes", type=int, default=5000)
    ap.add_argument("--pods", type=int, default=100_000)
    ap.add_argument("--scaling-hours", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tick-s", type=float, default=SimConfig().tick_s)
    ap.add_argument("--arm", choices=sorted(ARMS), default="kalena")
    ap.add_argument("--estimator", choices=ESTIMATORS, default="decay")
    ap.add_argument("--phases", action="store_true", help="also time each step of a tick")
    ap.add_argument("--repeat", type=int, default=1, help="runs of each (default 1)")
    ap.add_argument("--versus", choices=ESTIMATORS, default=None, help="alternate the day with it")
    ap.add_argument("--default-hours", type=float, default=None)
    ap.add_argument("--against", type=Path, default=None, help="another checkout: the day, tree against tree")
    ap.add_argument("--json", dest="json_path", default=None)
    args = ap.parse_args(argv)
    if args.repeat < 1:
        ap.error(f"--repeat must be at least 1, got {args.repeat}")
    if args.against is not None:
        other = args.against.resolve()
        if not (other / "bench" / "bench_simulate.py").is_file() or not (other / "src" / "kalena").is_dir():
            ap.error(
                f"--against {args.against}: not a checkout of Kalena "
                "(it needs bench/bench_simulate.py and src/kalena)"
            )
        print_load("before")
        compared = {"against": against(other, args.repeat, args.default_hours)}
        params = vars(args) | {"against": str(other)}
        write_json(args.json_path, "bench_simulate", params, compared, print_load("after"))
        return 0
    hours = SimConfig().hours if args.default_hours is None else args.default_hours
    load = print_load("before")
    results: dict = {}
    arm = ARMS[args.arm]
    if not args.skip_default:
        names = [args.estimator] if args.versus is None else [args.estimator, args.versus]
        runs = []
        for _ in range(args.repeat):
            for name in names:  # A, B, A, B, ...: a pair shares the machine's speed of the moment
                cfg = SimConfig(
                    hours=hours,
                    seed=args.seed,
                    tick_s=args.tick_s,
                    policy=PolicyConfig(estimator=name),
                    **arm,
                )
                r = run(lambda: load_cluster(*irina_paths()), cfg, args.phases) | {"estimator": name}
                runs.append(r)
                print(
                    f"default ({hours:g} h, Irina, {name}): total {r['total_wall_s']} s "
                    f"wall ({r['total_cpu_s']} s cpu); run {r['run_wall_s']} s = "
                    f"{r['simulated_s_per_wall_s']} simulated s per wall s, {r['ms_per_tick']} ms/tick; "
                    f"{r['batch_pods_placed']} batch pods placed; reclaimed work "
                    f"{r['reclaimed_work_fraction']}; evictions {r['evictions_total']}, escalations "
                    f"{r['escalations']}; violations {r['restoration_violations']}"
                )
                print_phases(r)
        results["default"] = runs[0] if len(runs) == 1 else summarise(runs, names)
    if not args.skip_scaling:
        policy = PolicyConfig(estimator=args.estimator)
        cfg = SimConfig(hours=args.scaling_hours, seed=args.seed, tick_s=args.tick_s, policy=policy, **arm)
        runs = []
        for _ in range(args.repeat):
            r = run(lambda: synthetic_cluster(args.nodes, args.pods, seed=args.seed), cfg, args.phases)
            runs.append(r)
            print(
                f"scaling ({r['nodes']} nodes, {r['production_workloads']} production pods, "
                f"{args.scaling_hours:g} h): "
                f"cluster build {r['setup_s']} s, init {r['init_s']} s, run {r['run_wall_s']} s wall "
                f"({r['run_cpu_s']} s cpu), {r['simulated_s_per_wall_s']} simulated s per wall s; "
                f"{r['batch_pods_placed']} batch pods placed; violations {r['restoration_violations']}"
            )
            print_phases(r)
        results["scaling"] = runs[0] if len(runs) == 1 else summarise(runs, [args.estimator])
    load = print_load("after")
    write_json(args.json_path, "bench_simulate", vars(args) | {"default_hours": hours}, results, load)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
