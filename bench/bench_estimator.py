"""Time one reservation update of W workloads x 8 dimensions for each estimator.

Reports the median, p90, max and mean over many repetitions after a warm-up, beside the time of one plain
NumPy pass over the same (W, 8) arrays (the memory-bandwidth floor: ``np.multiply(usage, m,
out=buf)``), and writes the same figures as JSON with ``--json PATH``.

Every row is past its startup grace and not opted out, so every cell is estimated; 1 % of the
samples are missing. The PeakWithMargin window and the histogram are warmed up to steady state
first (the window is filled with K samples directly, not by K timed updates). PeakWithMargin is
timed over at least two ring cycles (2K updates), so its max and mean include the flips that
recompute its suffix top-k once every K updates (its median does not show them).

    python bench/bench_estimator.py                      # 100,000 workloads
    python bench/bench_estimator.py --workloads 10000 --json /tmp/est.json

Decay and PeakWithMargin are also timed estimating cpu and ram only (``dims``, what the simulator
does where no pod requests another dimension): the update still takes and returns (W, 8).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable

import numpy as np

from kalena.core.estimators import (
    DecayEstimator,
    DecayingHistogram,
    HistogramParams,
    PeakParams,
    PeakState,
    PeakWithMargin,
)
from kalena.core.estimators.base import copy_state
from kalena.core.estimators.peak import full_sort, rebuild
from kalena.core.resources import CPU, NDIM, RAM
from machine import machine_info  # bench/ is on sys.path when a script runs

DT = 10.0  # seconds between samples, the node agent's default cadence


def timings_ms(step: Callable[[int], object], warmup: int, repeats: int) -> np.ndarray:
    for k in range(warmup):
        step(k)
    out = np.empty(repeats)
    for k in range(repeats):
        t0 = time.perf_counter_ns()
        step(warmup + k)
        out[k] = (time.perf_counter_ns() - t0) / 1e6
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description="Benchmark one reservation update per estimator.")
    ap.add_argument("--workloads", type=int, default=100_000, help="W (default 100000)")
    ap.add_argument("--repeats", type=int, default=50, help="timed updates per estimator (default 50)")
    ap.add_argument("--warmup", type=int, default=5, help="untimed updates first (default 5)")
    ap.add_argument("--window", type=int, default=PeakParams().window, help="PeakWithMargin window K")
    ap.add_argument("--buckets", type=int, default=HistogramParams().n_buckets, help="histogram buckets")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", metavar="PATH", help="also write the results as JSON here")
    args = ap.parse_args()

    w = args.workloads
    rng = np.random.default_rng(args.seed)
    requests = rng.uniform(0.1, 4.0, (w, NDIM))
    limits = requests * rng.uniform(1.0, 3.0, (w, NDIM))
    # column-major, as the estimator keeps its rows and the simulator its usage (a row-major
    # usage still works, a little slower: the arithmetic then meets two layouts)
    samples = [np.asfortranarray(requests * rng.uniform(0.0, 1.5, (w, NDIM))) for _ in range(4)]
    for u in samples:
        u[rng.random(u.shape) < 0.01] = np.nan
    started, grace = np.zeros(w), np.zeros(w)

    results: list[dict[str, object]] = []

    def record(name: str, ms: np.ndarray, note: str = "") -> None:
        med, p90 = float(np.median(ms)), float(np.percentile(ms, 90))
        results.append(
            {
                "name": name,
                "workloads": w,
                "median_ms": med,
                "p90_ms": p90,
                "max_ms": float(ms.max()),
                "mean_ms": float(ms.mean()),
                "repeats": len(ms),
                "note": note,
            }
        )

    buf = np.empty((w, NDIM), order="F")

    def floor_pass(k: int) -> object:
        return np.multiply(samples[k % 4], 1.15, out=buf)

    record("numpy floor", timings_ms(floor_pass, args.warmup, args.repeats), "np.multiply(usage, m, out=buf)")

    def stepper(est: object, state: object) -> Callable[[int], object]:
        return lambda k: est.update_in_place(state, samples[k % 4], DT * k, DT)  # type: ignore[attr-defined]

    decay = DecayEstimator()
    dstate = decay.init(requests, limits, started, grace=grace)
    record(
        "DecayEstimator", timings_ms(stepper(decay, dstate), args.warmup, args.repeats), "the spec's default"
    )

    peak = PeakWithMargin(PeakParams(window=args.window))

    def warm_peak(dims: tuple[int, ...] | None) -> PeakState:
        """Rows whose window is full (written directly, then its top-k rebuilt)."""
        cols = list(range(NDIM)) if dims is None else list(dims)
        state = peak.init(requests, limits, started, grace=grace, classes=rng.integers(0, 3, w), dims=dims)
        state.window[...] = requests[None, :, cols] * rng.uniform(0, 1.5, (args.window, w, len(cols)))
        state.n_valid[...] = args.window
        return state

    pstate = warm_peak(None)
    sorted_state = full_sort(copy_state(pstate))  # the same rows, sorted every update (the old path)
    rebuild(pstate)  # the suffix and prefix top-k of the window written above
    peak_repeats = max(args.repeats, 2 * args.window)  # two ring cycles: flips included
    record(
        "PeakWithMargin",
        timings_ms(stepper(peak, pstate), args.warmup, peak_repeats),
        f"full window, K = {args.window}, sliding top-{pstate.prefix.shape[0]} (flips included)",
    )
    record(
        "PeakWithMargin, full sort",
        timings_ms(stepper(peak, sorted_state), args.warmup, args.repeats),
        f"full window, K = {args.window}, the window sorted every update (before the top-k)",
    )

    # The simulator's case: only cpu and ram estimated (``dims``), the usage and the answer (W, 8).
    dims = (CPU, RAM)
    d2state = decay.init(requests, limits, started, grace=grace, dims=dims)
    record(
        "DecayEstimator, 2", timings_ms(stepper(decay, d2state), args.warmup, args.repeats), "dims = cpu, ram"
    )
    p2state = warm_peak(dims)
    rebuild(p2state)
    record(
        "PeakWithMargin, 2",
        timings_ms(stepper(peak, p2state), args.warmup, peak_repeats),
        f"dims = cpu, ram; K = {args.window}, flips included",
    )

    hist = DecayingHistogram(HistogramParams(n_buckets=args.buckets))
    hstate = hist.init(requests, limits, started, grace=grace)
    settle = 20  # untimed updates that fill the histogram and settle its percentile cache

    hist_step = stepper(hist, hstate)
    for k in range(settle):
        hist_step(k)
    ms = timings_ms(lambda k: hist_step(settle + k), args.warmup, args.repeats)
    record("DecayingHistogram", ms, f"{args.buckets} buckets, float32")

    floor = results[0]["median_ms"]
    print(f"one update of {w:,} workloads x {NDIM} dimensions; {os.cpu_count()} CPUs, numpy {np.__version__}")
    print(f"{'estimator':<20}{'median ms':>11}{'p90 ms':>10}{'max ms':>10}{'x floor':>9}{'ns/cell':>9}  note")
    for r in results:
        r["x_floor"] = r["median_ms"] / floor
        cell_ns = r["median_ms"] * 1e6 / (w * NDIM)
        times = f"{r['median_ms']:>11.3f}{r['p90_ms']:>10.3f}{r['max_ms']:>10.3f}"
        times += f"{r['x_floor']:>9.1f}{cell_ns:>9.2f}"
        print(f"{r['name']:<20}{times}  {r['note']}")
    if args.json:
        machine = machine_info()
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"machine": machine, "args": vars(args), "results": results}, f, indent=2)


if __name__ == "__main__":
    main()
