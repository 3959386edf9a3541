"""What a deep window costs to read from the usage archive (issue 15): time and memory.

An SQLite archive is filled as node agents fill it, through its own writer and compaction: every
workload sampled every ``--every`` seconds (on all eight dimensions, usage and reservation) for
``--days`` days, the archive compacted after each simulated hour, so it ends as an agent's would:
hourly buckets for the days, 5-minute buckets for the last 14 days, raw samples for the last 6
hours. Then ``Archive.window`` reads all the workloads over the whole span (what ``kalena
recommend`` and ``kalena archive export`` do first), and the pooled p99 per workload is taken
from it, timed, with the peak of Python's allocations during the read (``tracemalloc``, which
sees NumPy's arrays) and the process's peak resident memory.

Defaults: Irina's 2,714 production pods, a week, 5-minute samples (the hourly buckets a week's
read takes do not depend on the sample spacing).

    python bench/bench_archive.py                      # 2,714 workloads, 7 days
    python bench/bench_archive.py --workloads 500 --days 2 --json /tmp/archive.json
    python bench/bench_archive.py --dims 3             # only cpu, ram and storage used, as Irina's
"""

from __future__ import annotations

import argparse
import json
import resource
import tempfile
import time
import tracemalloc
from pathlib import Path

import numpy as np
from rich.progress import Progress

from kalena.archive import Archive
from kalena.core.resources import NDIM
from machine import machine_info  # bench/ is on sys.path when a script runs

HOUR = 3600.0
DAY = 86400.0


def fill(where: str, n: int, days: float, every: float, seed: int, dims: int = NDIM) -> dict[str, float]:
    """The archive at ``where`` with ``n`` workloads sampled every ``every`` s for ``days``, using
    the first ``dims`` dimensions (the others stay 0)."""
    rng = np.random.default_rng(seed)
    ids = [f"ns/pod-{i:05d}" for i in range(n)]
    base = rng.lognormal(-1.0, 1.0, size=(n, NDIM))
    base[:, dims:] = 0.0
    per_hour = round(HOUR / every)
    hours = round(days * 24)
    t_record = t_compact = 0.0
    with Archive(where) as a, Progress() as bar:
        task = bar.add_task(f"filling {n:,} workloads x {hours:,} h", total=hours)
        for h in range(hours):
            t0 = time.perf_counter()
            for k in range(per_hour):
                at = h * HOUR + k * every
                use = base * rng.lognormal(0.0, 0.3, size=(n, NDIM))
                a.record(at, "n1", ids, use, use * 1.3, np.zeros(n))
            t1 = time.perf_counter()
            a.compact((h + 1) * HOUR)
            t_compact += time.perf_counter() - t1
            t_record += t1 - t0
            bar.advance(task)
    return {"record_s": t_record, "compact_s": t_compact, "samples": float(n * hours * per_hour)}


def read(where: str, n: int, days: float) -> dict[str, float]:
    ids = [f"ns/pod-{i:05d}" for i in range(n)]
    with Archive(where) as a:
        span = a.span()
        assert span is not None
        tracemalloc.start()
        t0 = time.perf_counter()
        w = a.window(ids, span[1] + 1.0 - days * DAY, span[1] + 1.0)
        t1 = time.perf_counter()
        p99 = w.quantiles([0.99])
        t2 = time.perf_counter()
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    return {
        "window_s": t1 - t0,
        "p99_s": t2 - t1,
        "peak_alloc_mib": peak / 2**20,
        "summaries": float(len(w.usage.group)),  # one merged summary per workload seen
        "levels": ",".join(str(x) for x in w.levels),  # type: ignore[dict-item]
        "workloads_seen": float(np.isfinite(p99[:, 0, 0]).sum()),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workloads", type=int, default=2714)
    ap.add_argument("--days", type=float, default=7.0)
    ap.add_argument("--every", type=float, default=300.0, help="sample spacing, seconds")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--dims", type=int, default=NDIM, choices=range(1, NDIM + 1), metavar=f"1..{NDIM}",
        help="dimensions the workloads use, from cpu on (Irina's use 3: cpu, ram, storage; the rest stay 0)",
    )  # fmt: skip
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="kalena-bench-archive-") as tmp:
        where = str(Path(tmp) / "archive.db")
        filled = fill(where, args.workloads, args.days, args.every, args.seed, args.dims)
        size_mib = Path(where).stat().st_size / 2**20
        got = read(where, args.workloads, args.days)
    rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    out = {
        "workloads": args.workloads, "days": args.days, "every_s": args.every, "dims": args.dims, **filled,
        "file_mib": size_mib, **got, "peak_rss_mib": rss_mib,
        "machine": machine_info(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }  # fmt: skip
    print(
        f"{args.workloads:,} workloads x {args.days:g} days ({filled['samples']:,.0f} samples; "
        f"filled in {filled['record_s']:.0f} s + {filled['compact_s']:.0f} s compaction; "
        f"{size_mib:,.0f} MiB): window read {got['window_s']:.2f} s ({got['summaries']:,.0f} workloads, "
        f"from levels {got['levels']}), p99 {got['p99_s']:.2f} s, "
        f"peak allocation {got['peak_alloc_mib']:,.0f} MiB, "
        f"peak RSS {rss_mib:,.0f} MiB"
    )
    if args.json:
        args.json.write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
