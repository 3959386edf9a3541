"""The Google 2019 reader against the samples in ``../shared/data/traces/google-clusterdata-2019``
and against raw tables written here in the official JSON Lines shape.

The expected figures are computed with the csv and json modules only, not with the reader's code.
Tests that read the shared samples are ``realdata`` (skipped with a reason when they are absent);
those on tables written here run everywhere.
"""

from __future__ import annotations

import csv
import gzip
import json
import math
import shutil
import tracemalloc
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from kalena.traces.google2019 import DEFAULT_SCALE, read
from kalena.traces.model import Scale, TraceError, keeps_unplaced, pick_machines

TRACES = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "traces"
G2019 = TRACES / "google-clusterdata-2019"
DERIVED = G2019 / "derived_lgdcloudsim"
USAGE_ROW = G2019 / "instance_usage-000000000000.cell_a.first_row.json"


def realdata(test):
    """Marks a test that reads the shared samples (skipped, with the reason, when they are absent)."""
    skip = pytest.mark.skipif(not G2019.is_dir(), reason=f"shared trace samples not found at {G2019}")
    return pytest.mark.realdata(skip(test))


START_US = 600_000_000  # the window's start on the trace clock
SCALE = Scale(cores=50.0, gib=200.0)  # not the default: the test sees the scale is applied

# The real instance_usage row's instance and machine (from the row itself).
CID, IDX, MACHINE = "330587238433", "111", "23624491139"


def approx(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


# ---------------------------------------------------------------------------------------------
# Writing raw tables the way BigQuery exports them (int64 as strings, nested Resources)


def event(t: int, kind: int, cid: str, idx: str, *, prio: int | None = None, req=None, machine=None) -> dict:
    row = {"time": str(t), "type": str(kind), "collection_id": cid, "scheduling_class": "1"}
    row |= {"missing_type": None, "collection_type": "0", "alloc_collection_id": "0", "instance_index": idx}
    if prio is not None:
        row["priority"] = str(prio)
    if machine is not None:
        row["machine_id"] = str(machine)
    if req is not None:
        row["resource_request"] = {"cpus": req[0], "memory": req[1]}
    return row


def machine_add(t: int, machine: str, cpus: float, memory: float) -> dict:
    return {
        "time": str(t),
        "machine_id": machine,
        "type": "1",
        "switch_id": "c3dW",
        "capacity": {"cpus": cpus, "memory": memory},
        "platform_id": "cGxhdGZvcm0=",
    }


def write_lines(path: Path, rows: list[dict]) -> Path:
    text = "".join(json.dumps(r, separators=(",", ":")) + "\n" for r in rows)
    if path.suffix == ".gz":
        path.write_bytes(gzip.compress(text.encode(), compresslevel=1))
    else:
        path.write_text(text)
    return path


def s(us: int) -> float:
    """Trace µs as seconds from the window's start, computed here."""
    return (us - START_US) / 1e6


REQ = (0.02, 0.015)  # the real row's instance asks for this (normalised); its machine has (0.5, 0.25)
T_SUBMIT, T_SCHED, T_FINISH = 1_837_000_000_000, 1_838_000_000_000, 1_839_000_000_000


def raw_cell(root: Path, *, usage: Path | None = None) -> Path:
    """A raw cell: the real usage row's instance submitted, scheduled and finished on its machine, and a
    batch task present at the start on another machine, killed 100 s into the window."""
    write_lines(
        root / "machine_events-000000000000.json",
        [machine_add(0, MACHINE, 0.5, 0.25), machine_add(0, "1000", 1.0, 1.0)],
    )
    write_lines(
        root / "instance_events-000000000000.json.gz",
        [
            event(T_SUBMIT, 0, CID, IDX, prio=200, req=REQ),
            event(T_SCHED, 3, CID, IDX, prio=200, req=REQ, machine=MACHINE),
            event(T_FINISH, 6, CID, IDX, prio=200, req=REQ, machine=MACHINE),
            event(0, 0, "999", "0", prio=110, req=(0.1, 0.1)),
            event(0, 3, "999", "0", prio=110, req=(0.1, 0.1), machine="1000"),
            event(START_US + 100_000_000, 7, "999", "0", prio=110, req=(0.1, 0.1), machine="1000"),
        ],
    )
    if usage is not None:
        shutil.copy(usage, root / usage.name)
    return root


# ---------------------------------------------------------------------------------------------
# 1. The derived sample of cell a, counted independently


def counted(cell: str) -> dict[str, object]:
    """Cell ``cell``'s machines and requests counted with the csv module, with the reader's
    documented drops: a zero cpu and memory request, a request larger than every machine shape."""
    with open(DERIVED / f"2019_{cell}_host_resource.csv", newline="") as f:
        shapes = [(float(r["cpus"]), float(r["ram"]), int(r["machine_count"])) for r in csv.DictReader(f)]
    with open(DERIVED / "2019_a_user_requests.csv", newline="") as f:
        requests = list(csv.DictReader(f))
    kept = [
        r
        for r in requests
        if not (float(r["cpus"]) <= 0 and float(r["ram"]) <= 0)
        and any(c >= float(r["cpus"]) and m >= float(r["ram"]) for c, m, _ in shapes)
    ]
    return {
        "machines": sum(n for _, _, n in shapes),
        "machine_ncu": sum(c * n for c, _, n in shapes),
        "tasks": kept,
        "jobs": Counter(r["collection_id"] for r in kept),
        "cpus": sum(float(r["cpus"]) for r in kept),
        "ram": sum(float(r["ram"]) for r in kept),
    }


@pytest.mark.parametrize("scale", [DEFAULT_SCALE, SCALE], ids=["default-scale", "scale-50-200"])
@realdata
def test_the_derived_cell_a_sample_matches_an_independent_count(scale: Scale) -> None:
    want = counted("a")
    tasks = want["tasks"]
    assert len(tasks) == 10_000  # the documented rule drops none of this sample (32 ask for cpu 0 only)
    assert sum(1 for r in tasks if float(r["cpus"]) == 0) == 32

    trace = read(G2019, cell="a") if scale is DEFAULT_SCALE else read(G2019, cell="a", scale=scale)
    fig = trace.figures()
    assert fig["source"] == "google-2019"
    assert fig["machines"] == want["machines"] == 10_002
    assert approx(fig["machine_cores"], want["machine_ncu"] * scale.cores)
    assert fig["tasks"] == len(tasks)
    assert fig["jobs"] == len(want["jobs"]) == 742
    assert fig["production_tasks"] == len(tasks) and fig["batch_tasks"] == 0  # derived_tier="production"
    # The one real usage row is of another collection: no sample matches a task of the extract.
    assert fig["usage_samples"] == 0 and fig["tasks_with_usage"] == 0
    assert math.isnan(fig["production_cpu_usage_over_request"])
    assert fig["horizon_s"] == 0.0  # every time of the extract is before the window

    tk = trace.tasks
    assert approx(float(tk.cpu.sum()), want["cpus"] * scale.cores)
    assert approx(float(tk.ram.sum()), want["ram"] * scale.gib)
    assert set(tk.ids) == {f"{r['collection_id']}-{r['instance_index']}" for r in tasks}
    assert Counter(tk.job) == want["jobs"]
    assert (tk.submit == 0.0).all() and np.isnan(tk.duration).all() and (tk.machine == -1).all()
    assert (tk.priority == 0).all()
    by_id = {f"{r['collection_id']}-{r['instance_index']}": r for r in tasks}
    i = len(tk) // 2
    assert approx(tk.cpu[i], float(by_id[tk.ids[i]]["cpus"]) * scale.cores)
    assert approx(tk.ram[i], float(by_id[tk.ids[i]]["ram"]) * scale.gib)
    assert any("2019_a_host_resource.csv" in n for n in trace.notes)
    assert any("2019_a_user_requests.csv" in n for n in trace.notes)


@realdata
def test_derived_tier_batch_makes_every_derived_task_batch() -> None:
    fig = read(G2019, cell="a", derived_tier="batch").figures()
    assert fig["batch_tasks"] == 10_000 and fig["production_tasks"] == 0
    with pytest.raises(ValueError, match="derived_tier"):
        read(G2019, derived_tier="mid")


# ---------------------------------------------------------------------------------------------
# 2. The real instance_usage row, read through the raw path


@realdata
def test_the_real_usage_row_parses_to_its_numbers(tmp_path: Path) -> None:
    row = json.loads(USAGE_ROW.read_text())
    assert (row["collection_id"], row["instance_index"], row["machine_id"]) == (CID, IDX, MACHINE)
    trace = read(raw_cell(tmp_path, usage=USAGE_ROW), cell="a", scale=SCALE)

    start, end = int(row["start_time"]), int(row["end_time"])
    us = trace.usage
    assert len(us) == 1
    assert trace.tasks.ids[us.task[0]] == f"{CID}-{IDX}"
    assert us.t[0] == (start - START_US) / 1e6 == 1_837_800.0
    assert us.span[0] == (end - start) / 1e6 == 300.0
    assert us.cpu[0] == row["average_usage"]["cpus"] * SCALE.cores
    assert us.ram[0] == row["average_usage"]["memory"] * SCALE.gib

    tk = trace.tasks
    i = tk.ids.index(f"{CID}-{IDX}")
    assert tk.production[i] and tk.priority[i] == 200
    assert approx(tk.cpu[i], REQ[0] * SCALE.cores) and approx(tk.ram[i], REQ[1] * SCALE.gib)
    assert tk.submit[i] == s(T_SUBMIT) and tk.duration[i] == (T_FINISH - T_SCHED) / 1e6
    assert trace.machines.names[tk.machine[i]] == f"cell-a-m{MACHINE}"
    b = tk.ids.index("999-0")  # present at the start (events at 0): runs from 0, killed at 100 s
    assert not tk.production[b] and tk.submit[b] == 0.0 and tk.duration[b] == 100.0
    assert trace.machines.names[tk.machine[b]] == "cell-a-m1000"
    assert approx(trace.machines.cpu[tk.machine[i]], 0.5 * SCALE.cores)

    fig = trace.figures()
    assert fig["machines"] == 2 and fig["tasks"] == 2 and fig["jobs"] == 2
    assert fig["usage_samples"] == 1 and fig["tasks_with_usage"] == 1
    assert approx(fig["production_cpu_usage_over_request"], row["average_usage"]["cpus"] / REQ[0])
    assert approx(fig["production_ram_usage_over_request"], row["average_usage"]["memory"] / REQ[1])
    assert math.isnan(fig["batch_cpu_usage_over_request"])
    assert fig["horizon_s"] == s(T_FINISH)  # the last kept event (after the sample's end)
    assert any("instance_events-000000000000.json.gz" in n for n in trace.notes)


def test_row_order_does_not_matter(tmp_path: Path) -> None:
    """BigQuery shards have no order: the same rows reversed read to the same trace."""
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    raw_cell(a)
    raw_cell(b)
    name = "instance_events-000000000000.json.gz"
    lines = gzip.decompress((b / name).read_bytes()).decode().splitlines(keepends=True)
    (b / name).write_bytes(gzip.compress("".join(reversed(lines)).encode()))
    ta, tb = read(a, scale=SCALE), read(b, scale=SCALE)
    assert ta.tasks.ids == tb.tasks.ids
    for col in ("cpu", "ram", "submit", "duration", "machine", "priority"):
        np.testing.assert_array_equal(getattr(ta.tasks, col), getattr(tb.tasks, col))


# ---------------------------------------------------------------------------------------------
# 3. machines=, hours= and cell=


@realdata
def test_machines_keeps_that_many_and_whole_jobs() -> None:
    full = read(G2019, cell="a")
    part = read(G2019, cell="a", machines=500)
    assert len(part.machines) == 500
    assert set(part.machines.names) <= set(full.machines.names)
    # Never placed: a job's tasks stay or go together, about the share of machines kept.
    per_job = counted("a")["jobs"]
    kept = Counter(part.tasks.job)
    assert 0 < len(kept) < len(per_job) / 5
    assert all(kept[j] == per_job[j] for j in kept)
    assert len(part.tasks) == sum(kept.values()) < len(full.tasks)
    assert any("500 of 10002 machines kept" in n for n in part.notes)


def test_machines_keeps_production_where_it_ran(tmp_path: Path) -> None:
    """With one of two machines kept, the production task stays only if its machine is the kept one."""
    root = raw_cell(tmp_path)
    trace = read(root, machines=1)
    kept = trace.machines.names[0]
    assert len(trace.machines) == 1
    assert (f"{CID}-{IDX}" in trace.tasks.ids) == (kept == f"cell-a-m{MACHINE}")
    assert ("999-0" in trace.tasks.ids) == keeps_unplaced("999", 0.5)  # batch: by its job's hash


@realdata
def test_hours_sets_the_window(tmp_path: Path) -> None:
    assert read(G2019, cell="a", hours=2).horizon_s == 7200.0
    root = raw_cell(tmp_path, usage=USAGE_ROW)
    whole = read(root)
    assert len(whole.tasks) == 2 and len(whole.usage) == 1
    hour = read(root, hours=1)  # the production task is submitted 510 h in: outside the first hour
    assert hour.horizon_s == 3600.0
    assert hour.tasks.ids == ("999-0",) and hour.tasks.duration[0] == 100.0
    assert len(hour.usage) == 0
    # 510.3 h in: the task is submitted and scheduled, its FINISH and the sample are after the window
    late = read(root, hours=s(T_SCHED + 1) / 3600)
    i = late.tasks.ids.index(f"{CID}-{IDX}")
    assert math.isnan(late.tasks.duration[i]) and len(late.usage) == 0


@realdata
def test_cell_picks_that_cells_files(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="user_requests"):
        read(G2019, cell="b")  # cell b has a machine histogram but no requests
    shutil.copy(DERIVED / "2019_b_host_resource.csv", tmp_path)
    shutil.copy(DERIVED / "2019_a_host_resource.csv", tmp_path)
    shutil.copy(DERIVED / "2019_a_user_requests.csv", tmp_path)
    shutil.copy(DERIVED / "2019_a_user_requests.csv", tmp_path / "2019_b_user_requests.csv")
    shutil.copy(USAGE_ROW, tmp_path)  # names cell a: not read for cell b
    b = read(tmp_path, cell="b")
    assert len(b.machines) == counted("b")["machines"] == 10_047
    assert b.machines.names[0].startswith("cell-b-shape00-")
    assert any("no instance_usage" in n for n in b.notes)
    a = read(tmp_path, cell="a")
    assert len(a.machines) == 10_002
    assert any("1 instance_usage rows of instances not replayed" in n for n in a.notes)


# ---------------------------------------------------------------------------------------------
# 4. Malformed input


def break_line(path: Path, line: int, text: str) -> None:
    lines = gzip.decompress(path.read_bytes()).decode().splitlines(keepends=True)
    lines[line - 1] = text + "\n"
    path.write_bytes(gzip.compress("".join(lines).encode()))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"time": "1837000000000", "type": ', r"instance_events-000000000000\.json\.gz:2: not JSON"),
        (
            json.dumps({k: v for k, v in event(T_SCHED, 3, CID, IDX).items() if k != "collection_id"}),
            r"instance_events-000000000000\.json\.gz:2: collection_id: missing",
        ),
        (
            json.dumps(event(T_SCHED, 3, CID, IDX) | {"time": "18380OO"}),
            r"instance_events-000000000000\.json\.gz:2: time: not an integer \(value: '18380OO'\)",
        ),
        (
            json.dumps(event(T_SCHED, 3, CID, IDX, req=("lots", 0.1))),
            r"json\.gz:2: resource_request\.cpus: not a number \(value: 'lots'\)",
        ),
        ("[1, 2, 3]", r"instance_events-000000000000\.json\.gz:2: not a JSON object"),
    ],
    ids=["not-json", "missing-key", "non-number", "non-number-nested", "not-an-object"],
)
def test_a_malformed_line_names_file_line_and_key(tmp_path: Path, text: str, message: str) -> None:
    root = raw_cell(tmp_path)
    break_line(root / "instance_events-000000000000.json.gz", 2, text)
    with pytest.raises(TraceError, match=message):
        read(root)


def test_malformed_machine_and_usage_lines(tmp_path: Path) -> None:
    root = raw_cell(tmp_path)
    bad = machine_add(0, "7", 0.5, 0.5) | {"capacity": {"cpus": 0.5, "memory": "half"}}
    write_lines(root / "machine_events-000000000001.json", [machine_add(0, "6", 1, 1), bad])
    with pytest.raises(TraceError, match=r"events-000000000001\.json:2: capacity\.memory: not a number"):
        read(root)
    (root / "machine_events-000000000001.json").unlink()
    usage = {"start_time": str(T_SCHED), "end_time": str(T_SCHED + 300_000_000), "collection_id": CID}
    usage |= {"instance_index": IDX, "average_usage": {"cpus": "x", "memory": 0.1}}
    path = write_lines(root / "instance_usage-000000000000.json", [usage | {"average_usage": None}, usage])
    with pytest.raises(TraceError, match=rf"{path.name}:2: average_usage\.cpus: not a number \(value: 'x'\)"):
        read(root)
    write_lines(path, [{k: v for k, v in usage.items() if k != "end_time"}])
    with pytest.raises(TraceError, match=rf"{path.name}:1: end_time: missing"):
        read(root)


# ---------------------------------------------------------------------------------------------
# 5. Streaming: a 100,000-line instance_events read with few machines holds only the kept share

MACHINES, INSTANCES = 400, 20_000  # 5 events each: 100,000 lines


def big_cell(root: Path) -> None:
    write_lines(
        root / "machine_events-000000000000.json",
        [machine_add(0, str(10_000 + m), 0.5, 0.5) for m in range(MACHINES)],
    )
    # The official shape, written from a template (json.dumps per line would be the test's slow part).
    line = (
        '{{"time":"{t}","type":"{kind}","collection_id":"{cid}","scheduling_class":"1","missing_type":null,'
        '"collection_type":"0","priority":"{prio}","alloc_collection_id":"0","instance_index":"{idx}",'
        '"machine_id":{machine},"alloc_instance_index":"-1","resource_request":{{"cpus":{cpus},'
        '"memory":{mem}}},"constraint":[]}}\n'
    )
    out = []
    for n in range(INSTANCES):
        cid, idx = 400_000_000 + n // 20, n % 20  # 20 instances a job
        prio = 200 if (n // 20) % 2 else 105
        t = START_US + n * 10_000_000
        machine = f'"{10_000 + (n * 7919) % MACHINES}"'
        cpus = 0.01 + (n % 13) / 1000
        for dt, kind, mem, on in ((0, 0, 0.02, "null"), (1, 9, 0.03, "null"), (2, 3, 0.03, machine)):
            out.append(
                line.format(
                    t=t + dt * 1_000_000,
                    kind=kind,
                    cid=cid,
                    prio=prio,
                    idx=idx,
                    machine=on,
                    cpus=cpus,
                    mem=mem,
                )
            )
        for dt, kind in ((3, 4), (5, 3)):  # EVICT, SCHEDULE again: still running at the end
            out.append(
                line.format(
                    t=t + dt * 1_000_000,
                    kind=kind,
                    cid=cid,
                    prio=prio,
                    idx=idx,
                    machine=machine,
                    cpus=cpus,
                    mem=0.03,
                )
            )
    (root / "instance_events-000000000000.json.gz").write_bytes(
        gzip.compress("".join(out).encode(), compresslevel=1)
    )


def test_a_sampled_read_streams_in_bounded_memory(tmp_path: Path) -> None:
    big_cell(tmp_path)
    names = [f"cell-a-m{10_000 + m}" for m in range(MACHINES)]
    keep = set(np.asarray(names)[pick_machines(names, 4)])
    share = 4 / MACHINES
    tracemalloc.start()
    try:
        trace = read(tmp_path, machines=4)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # Expected, from the rows as written: production where it ran (a kept machine), batch by its
    # job's hash; every request is the UPDATE_PENDING's; both runs are censored (still running).
    want = set()
    for n in range(INSTANCES):
        job = str(400_000_000 + n // 20)
        on = f"cell-a-m{10_000 + (n * 7919) % MACHINES}"
        if (on in keep) if (n // 20) % 2 else keeps_unplaced(job, share):
            want.add(f"{job}-{n % 20}")
    assert set(trace.tasks.ids) == want and 0 < len(want) < INSTANCES / 20
    assert (trace.tasks.ram == 0.03 * DEFAULT_SCALE.gib).all() and np.isnan(trace.tasks.duration).all()
    assert any("rows of instances outside the sample were skipped" in n for n in trace.notes)
    # The file is 29 MiB of JSON; a read holding every instance (machines=None) peaks at ~32 MiB
    # here, the sampled read at ~1.5 MiB: its state is the kept share's, whatever the file's size.
    assert peak < 6 * 2**20, f"peak {peak / 2**20:.1f} MiB"
