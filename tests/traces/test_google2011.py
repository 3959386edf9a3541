"""The Google 2011 reader against the stored sample, counted again here with the csv module alone."""

from __future__ import annotations

import csv
import gzip
import math
import tracemalloc
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

from kalena.traces import google2011
from kalena.traces.model import Scale, TraceError

TRACES = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "traces"
G11 = TRACES / "google-clusterdata-2011-2"
needs_sample = pytest.mark.skipif(not G11.is_dir(), reason=f"trace samples not found at {G11}")
pytestmark = [pytest.mark.realdata, needs_sample]

START_US = 600_000_000
ENDS = {"2", "3", "4", "5", "6"}


def _rows(path: Path) -> list[list[str]]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", newline="") as f:
        return [r for r in csv.reader(f) if r]


@pytest.fixture(scope="module")
def independent() -> dict[str, float]:
    """The sample's figures computed without the reader: machines present at the start, the tasks
    of the whole part file and their tiers, and production's and batch's usage over request."""
    cap: dict[str, bool] = {}
    for r in _rows(G11 / "machine_events/part-00000-of-00001.csv.gz"):
        if int(r[0]) > START_US:
            break
        if r[2] == "1":
            cap.pop(r[1], None)
        elif r[4] and r[5]:
            cap[r[1]] = True
    first: dict[tuple[str, str], list[str]] = {}
    machine: dict[tuple[str, str], str] = {}  # of its first SCHEDULE
    request: dict[tuple[str, str], tuple[float, float]] = {}
    for r in _rows(G11 / "task_events/part-00000-of-00500.csv.gz"):
        key = (r[2], r[3])
        first.setdefault(key, r)
        if r[5] == "1":
            machine.setdefault(key, r[4])
        if r[9] and r[10]:
            request[key] = (float(r[9]), float(r[10]))
    present = {k: r for k, r in first.items() if r[5] not in ENDS and k in request}
    # production replays where the trace ran it: not on a machine added after the start
    present = {
        k: r for k, r in present.items() if int(r[8]) < 9 or machine.get(k, "") in cap or k not in machine
    }
    prod = {k for k, r in present.items() if int(r[8]) >= 9}
    used: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0])
    for r in _rows(G11 / "task_usage/part-00000-of-00500.first10000rows.csv"):
        key = (r[2], r[3])
        if key in present:
            span = (int(r[1]) - int(r[0])) / 1e6
            u = used[key]
            u[0] += span
            u[1] += float(r[5]) * span
            u[2] += float(r[6]) * span
    out: dict[str, float] = {"machines": len(cap), "tasks": len(present), "production_tasks": len(prod)}
    for tier, keys in (("production", prod), ("batch", set(present) - prod)):
        have = [k for k in keys if k in used]
        for d, name in ((1, "cpu"), (2, "ram")):
            mean = sum(used[k][d] / used[k][0] for k in have)
            out[f"{tier}_{name}"] = mean / sum(request[k][d - 1] for k in have)
    out["usage_samples"] = sum(1 for r in _rows(G11 / "task_usage/part-00000-of-00500.first10000rows.csv"))
    return out


@pytest.fixture(scope="module")
def trace() -> google2011.Trace:
    return google2011.read(G11, scale=Scale(1.0, 1.0))


def test_figures_match_an_independent_count(trace, independent) -> None:
    fig = trace.figures()
    assert fig["machines"] == independent["machines"] == 12477
    assert fig["tasks"] == independent["tasks"]
    assert fig["production_tasks"] == independent["production_tasks"]
    assert fig["batch_tasks"] == independent["tasks"] - independent["production_tasks"]
    assert fig["usage_samples"] == independent["usage_samples"] == 10_000
    for key in ("production_cpu", "production_ram", "batch_cpu", "batch_ram"):
        tier, dim = key.split("_")
        assert fig[f"{tier}_{dim}_usage_over_request"] == pytest.approx(independent[key], rel=1e-9)
    # the trace's own figure (the simulator's fit, FITTING.md: 0.3059 over the full 300 s windows)
    assert fig["production_cpu_usage_over_request"] == pytest.approx(0.305, abs=0.002)


def test_units_follow_the_scale_and_time_starts_at_the_window(trace) -> None:
    scaled = google2011.read(G11, scale=Scale(cores=32.0, gib=64.0), hours=0.5)
    assert scaled.horizon_s == 1800.0
    first = scaled.tasks.ids.index(trace.tasks.ids[0])
    assert scaled.tasks.cpu[first] == pytest.approx(32.0 * trace.tasks.cpu[0])
    assert scaled.machines.ram.max() == pytest.approx(64.0)  # the largest machine is 1.0
    assert trace.usage.t.min() == 0.0  # the first usage window starts at 600 s: the replay's 0
    assert np.all(trace.usage.span > 0) and trace.usage.span.max() == 300.0
    # tasks present at the start are submitted at 0; the rest inside the data's ~1.4 h
    assert (trace.tasks.submit == 0.0).sum() > 100_000
    assert 0 < trace.tasks.submit.max() <= trace.horizon_s <= 1.4 * 3600


def test_durations_are_running_time_or_censored(trace) -> None:
    d = trace.tasks.duration
    known = np.isfinite(d)
    assert known.any() and (~known).any()
    assert np.all(d[known] >= 0.0) and np.all(d[known] <= trace.horizon_s)


def test_machines_keep_a_stable_sample_and_its_production(trace) -> None:
    small = google2011.read(G11, scale=Scale(1.0, 1.0), machines=50, hours=0.5)
    again = google2011.read(G11, scale=Scale(1.0, 1.0), machines=50, hours=0.5)
    assert len(small.machines) == 50 and small.machines.names == again.machines.names
    assert set(small.machines.names) <= set(trace.machines.names)
    placed = small.tasks.production & (small.tasks.machine >= 0)
    assert placed.sum() > 0
    assert np.all(small.tasks.machine[small.tasks.production] >= 0)
    # batch is kept by job: a job is all in or all out
    whole = {j for j, p in zip(trace.tasks.job, trace.tasks.production, strict=True) if not p}
    kept_jobs = {j for j, p in zip(small.tasks.job, small.tasks.production, strict=True) if not p}
    assert kept_jobs <= whole
    assert len(small.tasks) < len(trace.tasks) / 20


def test_hours_bound_the_window() -> None:
    short = google2011.read(G11, scale=Scale(1.0, 1.0), hours=0.25)
    assert short.horizon_s == 900.0
    assert short.tasks.submit.max() < 900.0
    assert len(short.usage) == 10_000  # every sample starts at 0


def _write(path: Path, rows: list[str], gz: bool = False) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = "".join(r + "\n" for r in rows).encode()
    path.write_bytes(gzip.compress(data) if gz else data)


def _tiny(root: Path, events: list[str]) -> None:
    _write(root / "machine_events/part-00000-of-00001.csv", ["0,1,0,p,0.5,0.5", "0,2,0,p,1,1"])
    _write(root / "task_events/part-00000-of-00001.csv", events)


def test_malformed_rows_name_file_line_and_column(tmp_path: Path) -> None:
    _tiny(tmp_path / "a", ["0,,7,0,1,0,u,0,9,0.1,0.1,0,0", "0,,7,1,1,0,u,0"])
    with pytest.raises(TraceError, match=r"task_events/part-00000-of-00001.csv:2: 8 fields, expected 13"):
        google2011.read(tmp_path / "a")
    _tiny(tmp_path / "b", ["0,,7,0,1,0,u,0,9,0.1,0.1,0,0", "0,,7,1,1,0,u,0,nine,0.1,0.1,0,0"])
    with pytest.raises(TraceError, match=r"csv:2: priority: not a number \(value: 'nine'\)"):
        google2011.read(tmp_path / "b")
    root = tmp_path / "c"
    _tiny(root, [])
    (root / "task_events/part-00000-of-00001.csv").unlink()
    (root / "task_events/part-00000-of-00001.csv.gz").write_bytes(b"\x1f\x8b\x08\x00garbage")
    with pytest.raises(TraceError, match=r"part-00000-of-00001.csv.gz:1: unreadable"):
        google2011.read(root)
    (root / "task_events/part-00000-of-00001.csv.gz").unlink()
    with pytest.raises(TraceError, match="no task_events file"):
        google2011.read(root)
    with pytest.raises(TraceError, match="not a folder"):
        google2011.read(tmp_path / "nothing-here")


def test_a_long_trace_is_read_only_up_to_the_window(tmp_path: Path) -> None:
    """Time-ordered part files: the reader stops at the window's end, so a malformed row after it
    is never parsed, and a full-size file costs only what the window holds."""
    rows = [f"0,,{j},0,1,0,u,0,0,0.01,0.01,0,0" for j in range(100)]
    rows += [f"{START_US + k * 1_000_000},,{1000 + k},0,,0,u,0,0,0.01,0.01,0,0" for k in range(1, 200_000)]
    rows.append(f"{START_US + 300_000 * 1_000_000},broken")
    _tiny(tmp_path, rows)
    tracemalloc.start()
    try:
        t = google2011.read(tmp_path, hours=0.5)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(t.tasks) == 100 + 1799  # present at the start, then one a second for 30 min
    assert peak < 64 * 2**20
    with pytest.raises(TraceError, match="2 fields, expected 13"):
        google2011.read(tmp_path)  # the whole file: the broken row is reached


def test_tasks_bigger_than_every_machine_and_without_request_are_noted(tmp_path: Path) -> None:
    _tiny(
        tmp_path,
        [
            "0,,7,0,1,0,u,0,9,0.1,0.1,0,0",
            "0,,7,0,1,1,u,0,9,0.1,0.1,0,0",
            "0,,8,0,,0,u,0,0,2.0,0.1,0,0",  # twice the largest machine
            "0,,9,0,,0,u,0,0,,,,",  # never states a request
            "0,,10,0,2,4,u,0,0,0.1,0.1,0,0",  # ended before the window: never there
        ],
    )
    t = google2011.read(tmp_path, hours=1)
    assert t.tasks.ids == ("7-0",)
    notes = " ".join(t.notes)
    assert "1 tasks asking for more than the largest kept machine" in notes
    assert "1 tasks that never stated a request" in notes
    assert "1 tasks whose first event was their end" in notes
    assert math.isnan(t.tasks.duration[0])  # still running at the end: censored
