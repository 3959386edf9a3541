"""Trace replay (issue 14): each stored sample read, and replayed by ``kalena replay``.

    python bench/bench_replay.py [--traces ../shared/data/traces] [--json PATH]

For each format, the reader alone on the sample (time, peak memory of the process, the figures),
then ``kalena replay`` as a user runs it (a real subprocess, ``--json --no-plots``): the whole
Google 2011 window (12,477 machines, about 1.4 h), Alibaba 2018 on 500 machines for the 26 h that
hold its first batch and container usage, Google 2019's cell a for an hour, Alibaba 2017 on 50
machines for 2 h (its batch alone: the sample has no container tables). The machine's load is
printed before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from kalena.traces import alibaba2017, alibaba2018, google2011, google2019
from machine import print_load, write_json  # bench/ is on sys.path when a script runs

DEFAULT_TRACES = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "traces"

#: format, folder, reader, its keyword arguments, the replay's options
RUNS = (
    ("google-2011", "google-clusterdata-2011-2", google2011.read, {}, []),
    (
        "alibaba-2018",
        "alibaba-cluster-trace-v2018",
        alibaba2018.read,
        {"hours": 26.0},
        ["--machines", "500", "--hours", "26"],
    ),
    ("google-2019", "google-clusterdata-2019", google2019.read, {"hours": 1.0}, ["--hours", "1"]),
    (
        "alibaba-2017",
        "alibaba-cluster-trace-v2017",
        alibaba2017.read,
        {"hours": 2.0},
        ["--machines", "50", "--hours", "2"],
    ),
)


def _replay(fmt: str, root: Path, options: list[str]) -> dict[str, object]:
    with tempfile.TemporaryDirectory() as out:
        cmd = [sys.executable, "-m", "kalena.cli.main", "replay", fmt, str(root), *options]
        cmd += ["--out", out, "--json", "--no-plots"]
        t0 = time.perf_counter()
        # os.wait4 gives this child's own peak memory (getrusage of the children is their maximum)
        with tempfile.TemporaryFile("w+") as err:
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True)
            stdout = proc.stdout.read()  # type: ignore[union-attr]
            _, status, usage = os.wait4(proc.pid, 0)
            wall = time.perf_counter() - t0
            if os.waitstatus_to_exitcode(status) != 0:
                err.seek(0)
                raise SystemExit(f"{' '.join(cmd)} failed:\n{err.read()}")
        report = json.loads(stdout)
        replayed = json.loads((Path(out) / "trace.json").read_text())["replayed"]
    return {
        "options": " ".join(options) or "(the whole sample)",
        "command_wall_s": round(wall, 1),
        "peak_rss_mib": round(usage.ru_maxrss / 1024),
        "simulation_wall_s": report["wall_seconds"],
        "replayed": replayed,
        "restoration_violations": report["restoration_violations"],
        "batch_tasks_completed": report["batch_tasks_completed"],
        "task_reclaimed_work_fraction": report["task_reclaimed_work_fraction"],
        "production_oom_kills": report["production_oom_kills"],
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--traces", type=Path, default=DEFAULT_TRACES)
    ap.add_argument("--json", dest="json_path", default=None)
    args = ap.parse_args(argv)
    load = print_load("before")
    results: dict[str, object] = {}
    for fmt, folder, read, kwargs, options in RUNS:
        root = args.traces / folder
        t0 = time.perf_counter()
        trace = read(root, **kwargs)
        read_s = time.perf_counter() - t0
        figures = {k: v for k, v in trace.figures().items() if not isinstance(v, float) or v == v}
        results[fmt] = {
            "read_s": round(read_s, 1),
            "read_kwargs": kwargs,
            "figures": figures,
            "replay": _replay(fmt, root, options),
        }
        print(fmt, json.dumps(results[fmt], indent=2))
    results["reader_process_peak_rss_mib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    load = print_load("after")
    write_json(args.json_path, "replay", {"traces": "shared/data/traces"}, results, load)
    return 0


if __name__ == "__main__":
    sys.exit(main())
