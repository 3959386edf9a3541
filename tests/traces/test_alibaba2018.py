"""The Alibaba cluster-trace-v2018 reader: its figures against an independent count of the released
samples, the machines/hours options, small synthetic tables with known answers, malformed input,
and bounded memory on a generated file."""

import csv
import gzip
import itertools
import math
import statistics
import tracemalloc
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

from kalena.traces import alibaba2018
from kalena.traces.model import TraceError, keeps_unplaced

TRACES = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "traces"
ALIBABA = TRACES / "alibaba-cluster-trace-v2018"
needs_traces = pytest.mark.skipif(not ALIBABA.is_dir(), reason=f"shared trace samples not found at {ALIBABA}")

GIB = alibaba2018.DEFAULT_SCALE.gib
CAP = 600.0  # the span cap the module documents (its MAX_SPAN_S)


# ------------------------------------------------------------------ an independent count (csv only)


def _rows(path: Path) -> list[list[str]]:
    with open(path, newline="") as f:
        return list(csv.reader(f))


def _one(root: Path, stem: str) -> Path | None:
    found = sorted(root.glob(f"{stem}*.csv"))
    return found[0] if found else None


def expected_figures(root: Path, hours: float | None) -> dict[str, object]:
    """What ``Trace.figures()`` should say, computed from the CSV files by the module docstring's
    rules, without the reader."""
    end = math.inf if hours is None else hours * 3600.0
    machines: dict[str, tuple[float, float]] = {}  # id -> (time of its last record, cores)
    for r in _rows(_one(root, "machine_meta")):
        t = float(r[1])
        if t < end and (r[0] not in machines or t >= machines[r[0]][0]):
            machines[r[0]] = (t, float(r[4]))

    records: dict[str, list[list[str]]] = defaultdict(list)
    for r in _rows(_one(root, "container_meta")):
        if r[0] and float(r[2]) < end:
            records[r[0]].append(r)
    containers: dict[str, dict[str, float | str]] = {}
    for cid, rs in records.items():
        rs = sorted(rs, key=lambda r: float(r[2]))  # stable: the last of equal times is the file's last
        runs = [float(r[2]) for r in rs if r[4] in ("started", "allocated")]
        if rs[-1][1] not in machines or not runs:
            continue
        stops = [float(r[2]) for r in rs if r[4] == "stopped" and float(r[2]) > max(runs)]
        submit = min(runs)
        containers[cid] = {
            "app": rs[-1][3],
            "cpu": float(rs[-1][5]) / 100.0,
            "ram": float(rs[-1][7]) / 100.0 * GIB,
            "end": min(stops) if stops else submit,
        }

    samples: dict[str, dict[float, tuple[float, float]]] = defaultdict(dict)
    usage_file = _one(root, "container_usage")
    for r in _rows(usage_file) if usage_file else []:
        if not r[0] or r[0] not in containers or r[3] == "" or r[4] == "":
            continue
        t, cpu, mem = float(r[2]), float(r[3]), float(r[4])
        if t == 0 or t >= end or not (0 <= cpu <= 100 and 0 <= mem <= 100):
            continue
        samples[r[0]][t] = (cpu, mem)  # a repeated time: the row read last
    series = {cid: sorted(s.items()) for cid, s in samples.items()}
    gaps = {cid: [b[0] - a[0] for a, b in itertools.pairwise(s)] for cid, s in series.items()}
    every = [min(g, CAP) for gs in gaps.values() for g in gs]
    lone = statistics.median(every) if every else CAP
    used_cpu = used_ram = req_cpu = req_ram = 0.0
    last = 0.0
    n_samples = 0
    for cid, s in series.items():
        g = gaps[cid]
        spans = [min(x, CAP) for x in g] + [min(statistics.median(g), CAP) if g else lone]
        spans = [min(sp, end - t) for sp, (t, _) in zip(spans, s, strict=True)]
        c = containers[cid]
        w = sum(spans)
        used_cpu += sum(sp * v[0] / 100.0 * c["cpu"] for sp, (_, v) in zip(spans, s, strict=True)) / w
        used_ram += sum(sp * v[1] / 100.0 * c["ram"] for sp, (_, v) in zip(spans, s, strict=True)) / w
        req_cpu += c["cpu"]
        req_ram += c["ram"]
        last = max(last, max(t + sp for sp, (t, _) in zip(spans, s, strict=True)))
        n_samples += len(s)

    instances = 0
    jobs = {c["app"] for c in containers.values()}
    batch_file = _one(root, "batch_task")
    for r in _rows(batch_file) if batch_file else []:
        if r[1] == "" or r[7] == "" or r[8] == "" or float(r[5]) >= end:
            continue
        if float(r[7]) / 100.0 > 96 or float(r[8]) > 100:
            continue
        instances += int(r[1])
        jobs.add(f"{r[2]}-{r[0]}")
        if r[4] in ("Terminated", "Failed") and float(r[5]) > 0 and 0 < float(r[6]) < end:
            last = max(last, float(r[6]))
        last = max(last, float(r[5]))
    last = max([last] + [float(c["end"]) for c in containers.values()])
    nan = float("nan")
    return {
        "source": "alibaba-2018",
        "horizon_s": end if hours is not None else last,
        "machines": len(machines),
        "machine_cores": sum(c for _, c in machines.values()),
        "tasks": len(containers) + instances,
        "production_tasks": len(containers),
        "batch_tasks": instances,
        "jobs": len(jobs),
        "usage_samples": n_samples,
        "tasks_with_usage": len(series),
        "production_cpu_usage_over_request": used_cpu / req_cpu if series else nan,
        "production_ram_usage_over_request": used_ram / req_ram if series else nan,
        "batch_cpu_usage_over_request": nan,
        "batch_ram_usage_over_request": nan,
    }


def assert_figures(got: dict[str, object], want: dict[str, object]) -> None:
    assert got.keys() == want.keys()
    for key, w in want.items():
        g = got[key]
        if isinstance(w, float) and math.isnan(w):
            assert isinstance(g, float) and math.isnan(g), key
        elif isinstance(w, float):
            assert g == pytest.approx(w, rel=1e-9), key
        else:
            assert g == w, key


def containers_only(tmp_path: Path) -> Path:
    """The real container tables without batch_task (whose 5.5 million instances are another test's)."""
    root = tmp_path / "containers"
    root.mkdir()
    for name in (
        "machine_meta.csv",
        "container_meta.first20000rows.csv",
        "container_usage.first10000rows.csv",
    ):
        (root / name).symlink_to(ALIBABA / name)
    return root


@pytest.mark.realdata
@needs_traces
def test_whole_sample_containers_match_an_independent_count(tmp_path):
    root = containers_only(tmp_path)
    trace = alibaba2018.read(root)
    want = expected_figures(root, None)
    assert_figures(trace.figures(), want)
    # the figures the provenance states: 4,034 machines of 96 cores; 3,861 containers less 35 never run
    assert want["machines"] == 4034 and want["production_tasks"] == 3826
    assert any("3503 container_usage rows with an empty container_id" in n for n in trace.notes)


@pytest.mark.realdata
@needs_traces
def test_window_with_batch_matches_an_independent_count():
    trace = alibaba2018.read(ALIBABA, hours=28)
    want = expected_figures(ALIBABA, 28)
    assert_figures(trace.figures(), want)
    assert want["batch_tasks"] > 50_000 and want["usage_samples"] > 30  # both tiers are exercised
    assert want["tasks_with_usage"] == 3 and want["horizon_s"] == 28 * 3600.0
    tk = trace.tasks
    assert len(set(tk.ids)) == len(tk)
    assert (tk.machine[~tk.production] == -1).all() and (tk.machine[tk.production] >= 0).all()
    assert (tk.priority == 0).all()


@pytest.mark.realdata
@needs_traces
def test_machines_keeps_that_many_and_only_their_containers():
    full = alibaba2018.read(ALIBABA, hours=28)
    part = alibaba2018.read(ALIBABA, hours=28, machines=100)
    assert len(part.machines) == 100 and len(full.machines) > 3900
    kept = set(part.machines.names)
    assert kept < set(full.machines.names)
    # containers: exactly those whose machine is kept (by the full read's placement)
    placed = {full.tasks.ids[i]: full.machines.names[m] for i, m in enumerate(full.tasks.machine) if m >= 0}
    want = {cid for cid, m in placed.items() if m in kept}
    got = {part.tasks.ids[i] for i in np.flatnonzero(part.tasks.production)}
    assert got == want and 0 < len(got) < len(placed)
    assert all(
        part.machines.names[m] == placed[part.tasks.ids[i]]
        for i, m in enumerate(part.tasks.machine)
        if m >= 0
    )
    # unplaced batch tasks: kept by their job's hash with the share of machines kept
    share = 100 / len(full.machines)
    batch = ~full.tasks.production
    want_batch = sum(
        1 for i in np.flatnonzero(batch) if keeps_unplaced(full.tasks.job[i].split("-")[0], share)
    )
    assert (~part.tasks.production).sum() == want_batch < batch.sum()
    # usage only for kept containers
    assert np.isin(part.usage.task, np.flatnonzero(part.tasks.production)).all()


@pytest.mark.realdata
@needs_traces
def test_hours_bounds_the_window():
    short = alibaba2018.read(ALIBABA, hours=25)
    longer = alibaba2018.read(ALIBABA, hours=28)
    assert short.horizon_s == 25 * 3600.0
    assert (short.tasks.submit < 25 * 3600).all()
    assert len(short.usage) and (short.usage.t + short.usage.span <= 25 * 3600 + 1e-9).all()
    assert len(short.tasks) < len(longer.tasks) and len(short.usage) < len(longer.usage)
    # a duration ending past the window is censored
    ended = np.isfinite(short.tasks.duration)
    assert (short.tasks.submit[ended] + short.tasks.duration[ended] < 25 * 3600).all()
    assert_figures(short.figures(), expected_figures(ALIBABA, 25))


# --------------------------------------------------------------------------- small known answers


MACHINES = "m_1,0,1,1,96,100,USING\nm_2,0,1,1,96,100,USING\nm_3,5000,1,1,96,100,USING\n"
CONTAINERS = (
    "c_1,m_1,0,app_a,started,400,400,1.56\n"
    "c_1,m_1,1000,app_a,started,400,400,1.56\n"
    "c_1,m_1,3000,app_a,stopped,400,400,1.56\n"
    "c_1,m_1,4000,app_a,stopped,400,400,1.56\n"
    "c_2,m_2,0,app_b,stopped,800,800,3.13\n"
    "c_3,m_2,2000,app_b,allocated,800,800,3.13\n"
    "c_4,m_9,0,app_c,started,100,100,0.5\n"
    "c_5,m_1,0,app_d,started,9700,9700,1\n"
    ",m_1,0,x,started,1,1,1\n"
    "c_6,m_2,0,app_e,started,200,200,0.78\n"
)
USAGE = (
    ",m_1,100,5,5,,,,0,0,1\n"
    "c_1,m_1,0,30,30,,,,0,0,1\n"
    "c_1,m_1,100,50,80,,,,0,0,1\n"
    "c_1,m_1,300,-1,80,,,,0,0,1\n"
    "c_1,m_1,300,20,60,1.2,0,1,0,0,1\n"
    "c_1,m_1,700,99,99,,,,0,0,1\n"
    "c_1,m_1,700,10,40,,,,0,0,1\n"
    "c_3,m_2,3000,50,50,,,,0,0,1\n"
    "c_3,m_2,2100,40,40,,,,0,0,1\n"
    "c_3,m_2,3100,101,50,,,,0,0,1\n"
    "c_3,m_2,3100,60,50,,,,0,0,1\n"
    "c_9,m_2,100,10,10,,,,0,0,1\n"
    "c_6,m_2,50,50,100,,,,0,0,1\n"
)
TASKS = (
    "M1,2,j_1,1,Terminated,100,200,50,0.2\n"
    "R2_1,1,j_1,1,Failed,300,350,100,0.39\n"
    "M1,1,j_2,1,Running,400,0,100,0.39\n"
    "task_eA==,,j_3,6,Waiting,0,0,,\n"
    "M1,1,j_4,1,Waiting,0,0,,\n"
    "M1,1,j_5,1,Terminated,10,20,10000,1\n"
)


def write(root: Path, files: dict[str, str]) -> Path:
    root.mkdir(exist_ok=True)
    for name, text in files.items():
        if name.endswith(".gz"):
            (root / name).write_bytes(gzip.compress(text.encode()))
        else:
            (root / name).write_text(text)
    return root


def test_containers_their_lifecycle_and_usage_spans(tmp_path):
    root = write(
        tmp_path / "t",
        {"machine_meta.csv": MACHINES, "container_meta.csv": CONTAINERS, "container_usage.csv.gz": USAGE},
    )
    trace = alibaba2018.read(root)
    assert trace.machines.names == ("m_1", "m_2", "m_3")
    tk = trace.tasks
    assert tk.ids == ("c_1", "c_3", "c_6")  # c_2 never ran, c_4 on an unknown machine, c_5 too big
    assert tk.job == ("app_a", "app_b", "app_e")
    assert tk.production.all() and (tk.priority == 0).all()
    np.testing.assert_allclose(tk.cpu, [4.0, 8.0, 2.0])
    np.testing.assert_allclose(tk.ram, [1.56 / 100 * 512, 3.13 / 100 * 512, 0.78 / 100 * 512])
    np.testing.assert_array_equal(tk.submit, [0.0, 2000.0, 0.0])
    np.testing.assert_array_equal(tk.duration, [3000.0, np.nan, np.nan])
    np.testing.assert_array_equal(tk.machine, [0, 1, 1])
    us = trace.usage
    np.testing.assert_array_equal(us.task, [0, 0, 0, 1, 1, 1, 2])
    np.testing.assert_array_equal(us.t, [100, 300, 700, 2100, 3000, 3100, 50])
    # gaps capped at 600 s; a last sample spans its container's median gap; a lone one the median of
    # every capped gap (200, 400, 600, 100)
    np.testing.assert_array_equal(us.span, [200, 400, 300, 600, 100, 500, 300])
    np.testing.assert_allclose(us.cpu, [2.0, 0.8, 0.4, 3.2, 4.0, 4.8, 1.0])
    r1, r3, r6 = tk.ram
    np.testing.assert_allclose(us.ram, [0.8 * r1, 0.6 * r1, 0.4 * r1, 0.4 * r3, 0.5 * r3, 0.5 * r3, r6])
    assert trace.horizon_s == 3600.0  # c_3's last sample ends at 3100 + 500
    notes = "\n".join(trace.notes)
    for text in (
        "1 container_usage rows with an empty container_id",
        "1 container_usage rows at time 0",
        "2 container_usage rows with a utilisation outside 0-100",
        "1 container_usage rows repeating a container's time",
        "1 container_usage rows of containers container_meta does not name",
        "1 containers never started nor allocated",
        "1 containers on machines machine_meta does not list",
        "1 tasks asking for more than the largest kept machine",
        "1 machines first recorded inside the window",
        "512 GiB (an assumption",
    ):
        assert text in notes


def test_hours_cuts_containers_stops_and_spans(tmp_path):
    root = write(
        tmp_path / "t",
        {"machine_meta.csv": MACHINES, "container_meta.csv": CONTAINERS, "container_usage.csv": USAGE},
    )
    trace = alibaba2018.read(root, hours=450 / 3600)
    assert trace.machines.names == ("m_1", "m_2")  # m_3 is first recorded at 5000 s
    assert trace.tasks.ids == ("c_1", "c_6")  # c_3 arrives at 2000 s
    assert math.isnan(trace.tasks.duration[0])  # its stop at 3000 s is past the window
    np.testing.assert_array_equal(trace.usage.t, [100, 300, 50])
    np.testing.assert_array_equal(trace.usage.span, [200, 150, 200])  # 300 + 200 cut at 450 s
    assert trace.horizon_s == 450.0


def test_batch_task_rows_expand_into_instances(tmp_path):
    root = write(tmp_path / "t", {"machine_meta.csv": MACHINES, "batch_task.csv": TASKS})
    trace = alibaba2018.read(root)
    tk = trace.tasks
    assert tk.ids == ("j_1-M1-0", "j_1-M1-1", "j_1-R2_1-0", "j_2-M1-0")
    assert tk.job == ("j_1-M1", "j_1-M1", "j_1-R2_1", "j_2-M1")
    assert not tk.production.any() and (tk.machine == -1).all()
    np.testing.assert_allclose(tk.cpu, [0.5, 0.5, 1.0, 1.0])
    np.testing.assert_allclose(tk.ram, [1.024, 1.024, 0.39 / 100 * 512, 0.39 / 100 * 512])
    np.testing.assert_array_equal(tk.submit, [100, 100, 300, 400])
    np.testing.assert_array_equal(tk.duration, [100, 100, 50, np.nan])
    assert len(trace.usage) == 0 and trace.horizon_s == 400.0
    notes = "\n".join(trace.notes)
    assert "1 batch_task rows with an empty instance_num" in notes
    assert "1 batch_task rows (1 instances) with an empty plan_cpu or plan_mem" in notes
    assert "1 tasks asking for more than the largest kept machine" in notes
    assert "no container_meta" in notes


def test_batch_instance_is_used_when_present(tmp_path):
    instances = (
        "ins_1,M1,j_1,1,Failed,100,150,m_1,1,2,50,60,0.5,0.6\n"
        "ins_1,M1,j_1,1,Terminated,160,200,m_2,2,2,80,90,1.0,1.2\n"
        "ins_2,M1,j_1,1,Terminated,100,180,,1,1,,,,\n"
        "ins_3,R2_1,j_1,1,Running,300,0,m_1,1,1,,,,\n"
        "ins_4,M1,j_9,1,Terminated,100,200,m_1,1,1,10,10,0.1,0.1\n"
        "ins_5,M1,j_2,1,Terminated,400,500,m_9,1,1,10,10,0.1,0.1\n"
    )
    files = {"machine_meta.csv": MACHINES, "batch_task.csv": TASKS, "batch_instance.csv": instances}
    trace = alibaba2018.read(write(tmp_path / "t", files))
    tk = trace.tasks
    assert tk.ids == ("j_1-M1-ins_1", "j_1-M1-ins_2", "j_1-R2_1-ins_3")  # ins_4: no plan; ins_5: no machine
    np.testing.assert_array_equal(tk.machine, [1, -1, 0])  # the last attempt's machine
    np.testing.assert_array_equal(tk.submit, [100, 100, 300])
    np.testing.assert_array_equal(tk.duration, [100, 80, np.nan])
    us = trace.usage
    np.testing.assert_array_equal(us.task, [0, 0])
    np.testing.assert_array_equal(us.t, [100, 160])
    np.testing.assert_array_equal(us.span, [50, 40])
    np.testing.assert_allclose(us.cpu, [0.5, 0.8])
    np.testing.assert_allclose(us.ram, [0.5 / 100 * 512, 1.0 / 100 * 512])
    notes = "\n".join(trace.notes)
    assert "1 batch instances whose task has no plan" in notes
    assert "1 batch_instance rows on machines machine_meta does not list" in notes
    (tmp_path / "t" / "batch_task.csv").unlink()
    (tmp_path / "t" / "container_meta.csv").write_text("c_1,m_1,0,a,started,100,100,1\n")
    with pytest.raises(TraceError, match="batch_instance needs batch_task"):
        alibaba2018.read(tmp_path / "t")


# ------------------------------------------------------------------------------------- malformed


BAD = [
    (
        "truncated-container-meta-row",
        {"container_meta.csv": "c_1,m_1,0,a,started,400,400,1.56\nc_2,m_1,0,a,started,400\n"},
        r"container_meta\.csv:2: 6 fields, expected 8",
    ),
    (
        "non-number-cpu-util",
        {
            "container_meta.csv": "c_1,m_1,0,a,started,400,400,1.56\n",
            "container_usage.csv": "c_1,m_1,10,5,5,,,,0,0,1\nc_1,m_1,20,abc,5,,,,0,0,1\n",
        },
        r"container_usage\.csv:2: cpu_util_percent: not a number \(value: 'abc'\)",
    ),
    (
        "non-number-plan-cpu",
        {"batch_task.csv": "M1,1,j_1,1,Terminated,1,2,x1,0.2\n"},
        r"batch_task\.csv:1: plan_cpu: not a number \(value: 'x1'\)",
    ),
    (
        "empty-time",
        {"container_meta.csv": "c_1,m_1,,a,started,400,400,1.56\n"},
        r"container_meta\.csv:1: time_stamp: missing value",
    ),
    (
        "bad-gzip",
        {"container_meta.csv": "c_1,m_1,0,a,started,400,400,1.56\n", "container_usage.csv.gz": None},
        r"container_usage\.csv\.gz:1: unreadable",
    ),
    ("no-machine-meta", {"machine_meta.csv": None, "batch_task.csv": TASKS}, r"no machine_meta file"),
    ("no-task-table", {}, r"neither a container_meta nor a batch_task"),
]


@pytest.mark.parametrize(("files", "message"), [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_malformed_input_names_file_line_and_column(tmp_path, files, message):
    root = tmp_path / "t"
    root.mkdir()
    files = {"machine_meta.csv": MACHINES, **files}
    for name, text in files.items():
        if text is None and name.endswith(".gz"):
            (root / name).write_bytes(b"this is not gzip at all\n")
        elif text is not None:
            (root / name).write_text(text)
    with pytest.raises(TraceError, match=message) as err:
        alibaba2018.read(root)
    if "csv" in message:
        assert str(root) in str(err.value)  # the file's full path


# --------------------------------------------------------------------------------- bounded memory


def generated(root: Path, per: int, n_machines: int = 1000, n_containers: int = 3000) -> Path:
    """``n_containers`` containers spread over ``n_machines`` machines, ``per`` samples each."""
    root.mkdir()
    (root / "machine_meta.csv").write_text("".join(f"m_{i},0,1,1,96,100,USING\n" for i in range(n_machines)))
    (root / "container_meta.csv").write_text(
        "".join(f"c_{i},m_{i % n_machines},0,app_{i},started,400,400,1.56\n" for i in range(n_containers))
    )
    with open(root / "container_usage.csv", "w") as f:
        for k in range(per):
            f.writelines(
                f"c_{i},m_{i % n_machines},{10 * k + 10},{i % 90},50,,,,0,0,1\n" for i in range(n_containers)
            )
    return root


def peak_reading(root: Path, machines: int | None) -> tuple[int, int]:
    """The peak of traced memory while reading, and the usage samples read."""
    tracemalloc.start()
    try:
        trace = alibaba2018.read(root, machines=machines)
        return tracemalloc.get_traced_memory()[1], len(trace.usage)
    finally:
        tracemalloc.stop()


def test_a_large_file_is_streamed_in_bounded_memory(tmp_path):
    """300,000 container_usage rows (12 MB; several hundred MB as a list of rows) read for 5 of
    1,000 machines hold only the kept containers' samples: less memory at its peak than reading a
    file ten times smaller whole."""
    big = generated(tmp_path / "big", per=100)
    small, kept = peak_reading(big, machines=5)
    assert kept == 5 * 3 * 100  # 3 containers a machine
    assert small < 4 * 2**20, f"peak {small / 2**20:.1f} MiB"
    whole, held = peak_reading(generated(tmp_path / "small", per=10), machines=None)
    assert held == 3000 * 10
    assert small < whole  # what is held grows with what is kept, not with the file
