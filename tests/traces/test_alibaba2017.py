"""The Alibaba cluster-trace-v2017 reader: its figures against an independent count of the stored
sample (server_event and batch_task, both apparently complete), the machines/hours options, small
synthetic tables with known answers (also of the tables the sample lacks: batch_instance,
container_event, container_usage), malformed input, and bounded memory on a generated file."""

import csv
import gzip
import math
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from kalena.traces import alibaba2017
from kalena.traces.model import TraceError, keeps_unplaced

TRACES = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "traces"
ALIBABA = TRACES / "alibaba-cluster-trace-v2017"
needs_traces = pytest.mark.skipif(not ALIBABA.is_dir(), reason=f"shared trace samples not found at {ALIBABA}")

GIB = alibaba2017.DEFAULT_SCALE.gib
NAN = float("nan")


# ------------------------------------------------------------------ an independent count (csv only)


def _rows(path: Path) -> list[list[str]]:
    with open(path, newline="") as f:
        return [r for r in csv.reader(f) if r]


@pytest.fixture(scope="module")
def sample() -> tuple[dict[str, tuple[float, float]], list[list[str]]]:
    """The sample's machines in service at the start (id -> cpus, normalised memory), by the module
    docstring's rule, and its batch_task rows."""
    added: dict[str, tuple[float, float]] = {}
    hard: set[str] = set()
    for r in _rows(ALIBABA / "server_event.csv"):
        if float(r[0]) > 0:
            continue
        if r[2] == "add":
            added[r[1]] = (float(r[4]), float(r[5]))
        elif r[2] == "harderror":
            hard.add(r[1])
    machines = {m: c for m, c in added.items() if m not in hard}
    return machines, _rows(ALIBABA / "batch_task.csv")


@pytest.fixture(scope="module")
def six_hours() -> alibaba2017.Trace:
    """The sample's first 6 hours on every machine (two tests compare with it)."""
    return alibaba2017.read(ALIBABA, hours=6)


def expected_figures(
    machines: dict[str, tuple[float, float]], rows: list[list[str]], hours: float | None, share: float = 1.0
) -> dict[str, object]:
    """What ``Trace.figures()`` should say, and the requested totals, computed from the CSV rows by
    the module docstring's rules, without the reader."""
    end = math.inf if hours is None else hours * 3600.0
    big_cpu = max(c for c, _ in machines.values())
    big_mem = max(m for _, m in machines.values())
    tasks = ended = 0
    cpu = ram = 0.0
    classes: set[str] = set()
    jobs: set[str] = set()
    last = 0.0
    for r in rows:
        if r[6] == "" or r[7] == "" or float(r[0]) >= end or not keeps_unplaced(r[2], share):
            continue
        finished = r[5] in ("Terminated", "Failed")
        if finished and float(r[1]) <= 0:  # ended before the period
            continue
        if float(r[6]) / 100 > big_cpu or float(r[7]) > big_mem:
            continue
        n = int(r[4])
        tasks += n
        cpu += n * float(r[6]) / 100
        ram += n * float(r[7]) * GIB
        classes.add(f"{r[2]}-{r[3]}")
        jobs.add(r[2])
        submit = max(float(r[0]), 0.0)
        last = max(last, submit)
        if finished and submit <= float(r[1]) < end:
            ended += n
            last = max(last, float(r[1]))
    figures = {
        "source": "alibaba-2017",
        "horizon_s": end if hours is not None else last,
        "machines": len(machines),
        "machine_cores": sum(c for c, _ in machines.values()),
        "tasks": tasks,
        "production_tasks": 0,
        "batch_tasks": tasks,
        "jobs": len(classes),
        "usage_samples": 0,
        "tasks_with_usage": 0,
        "production_cpu_usage_over_request": NAN,
        "production_ram_usage_over_request": NAN,
        "batch_cpu_usage_over_request": NAN,
        "batch_ram_usage_over_request": NAN,
    }
    return {"figures": figures, "cpu": cpu, "ram": ram, "ended": ended, "job_ids": len(jobs)}


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


def assert_matches(trace: alibaba2017.Trace, want: dict[str, object]) -> None:
    """The figures, and the arrays' totals in real units."""
    assert_figures(trace.figures(), want["figures"])
    tk = trace.tasks
    assert tk.cpu.sum() == pytest.approx(want["cpu"], rel=1e-9)
    assert tk.ram.sum() == pytest.approx(want["ram"], rel=1e-9)
    assert int(np.isfinite(tk.duration).sum()) == want["ended"]
    assert len({j.split("-")[0] for j in set(tk.job)}) == want["job_ids"]
    assert not tk.production.any() and (tk.priority == 0).all() and (tk.machine == -1).all()
    assert (tk.submit >= 0).all() and (tk.submit < trace.horizon_s).all()


@pytest.mark.realdata
@needs_traces
def test_whole_sample_matches_an_independent_count(sample):
    machines, rows = sample
    trace = alibaba2017.read(ALIBABA)
    want = expected_figures(machines, rows, None)
    assert_matches(trace, want)
    # the figures PROVENANCE.md states: 1,313 machines of 64 cpus; 80,553 rows of which 9,017 without
    # a plan, and 117 more that ended before the period
    fig = want["figures"]
    assert fig["machines"] == 1313 and fig["machine_cores"] == 1313 * 64
    assert fig["tasks"] == 10_991_149 and fig["jobs"] == 80_553 - 9_017 - 117
    assert trace.machines.ram.max() == pytest.approx(GIB) and trace.machines.cpu.max() == 64
    notes = "\n".join(trace.notes)
    for text in (
        "9017 batch_task rows (849617 instances) with an empty plan_cpu or plan_mem (8847 of them Waiting",
        "117 batch_task rows that ended at or before 0",
        "50 batch_task rows created at or before 0 (before the period) arrive at 0",
        "(39 softerror)",
        "no container_event",
    ):
        assert text in notes


@pytest.mark.realdata
@needs_traces
def test_hours_bounds_the_window(sample, six_hours):
    machines, rows = sample
    short = alibaba2017.read(ALIBABA, hours=3)
    longer = six_hours
    assert_matches(short, expected_figures(machines, rows, 3))
    assert_matches(longer, expected_figures(machines, rows, 6))
    assert short.horizon_s == 3 * 3600.0 and longer.horizon_s == 6 * 3600.0
    assert (short.tasks.submit < 3 * 3600).all() and longer.tasks.submit.max() >= 3 * 3600
    assert 0 < len(short.tasks) < len(longer.tasks)
    # a task ending past the window is censored: the same task ends in the longer one
    ended = np.isfinite(short.tasks.duration)
    assert (short.tasks.submit[ended] + short.tasks.duration[ended] < 3 * 3600).all()
    index = {tid: i for i, tid in enumerate(longer.tasks.ids)}
    cut = [index[tid] for tid, d in zip(short.tasks.ids, short.tasks.duration, strict=True) if math.isnan(d)]
    assert np.isfinite(longer.tasks.duration[cut]).sum() > 0
    assert len(set(short.tasks.ids)) == len(short.tasks)


@pytest.mark.realdata
@needs_traces
def test_machines_keeps_that_many_and_batch_by_its_job(sample, six_hours):
    machines, rows = sample
    full = six_hours
    part = alibaba2017.read(ALIBABA, hours=6, machines=100)
    assert len(part.machines) == 100 and len(full.machines) == 1313
    kept = set(part.machines.names)
    assert kept < set(full.machines.names)
    assert part.machines.names == alibaba2017.read(ALIBABA, hours=0.01, machines=100).machines.names
    want = expected_figures({m: machines[m] for m in kept}, rows, 6, share=100 / 1313)
    assert_matches(part, want)
    assert 0 < len(part.tasks) < len(full.tasks) / 5
    # a job is all in or all out
    whole = {j.split("-")[0] for j in set(full.tasks.job)}
    kept_jobs = {j.split("-")[0] for j in set(part.tasks.job)}
    assert kept_jobs < whole and all(keeps_unplaced(j, 100 / 1313) for j in kept_jobs)
    assert not any(keeps_unplaced(j, 100 / 1313) for j in whole - kept_jobs)


# --------------------------------------------------------------------------- small known answers


SERVERS = (
    "0,1,add,,64,0.69,1\n"
    "0,2,add,,64,1,1\n"
    "-10,3,add,,64,0.69,1\n"
    "0,3,harderror,disk,0,0,0\n"  # out of service at the start
    "0,4,add,,64,0.69,1\n"
    "0,4,softerror,agent_check,0,0,0\n"  # temporary: replayed
    "100,5,add,,64,0.69,1\n"  # added inside the window: not replayed
    "0,6,add,,,,\n"  # no capacity
    "0,10,add,,32,0.5,1\n"
    "500,1,softerror,machine_fail,0,0,0\n"
    "600,2,harderror,disk,0,0,0\n"
    "0,7,update,,64,1,1\n"
)
TASKS = (
    "100,200,1,1,2,Terminated,50,0.01\n"
    "300,350,1,2,1,Failed,100,0.02\n"
    "400,450,2,1,1,Running,100,0.02\n"  # a modification time, not an end
    "-60,110,3,1,1,Terminated,50,0.01\n"  # created before the period
    "-100,-50,3,2,1,Terminated,50,0.01\n"  # and ended before it: not in the window
    "10,20,4,1,3,Waiting,,\n"
    "10,20,4,2,1,Terminated,6500,0.01\n"  # 65 cpus: more than any machine
    "5000,5100,5,1,1,Terminated,100,0.01\n"
)


def write(root: Path, files: dict[str, str | None]) -> Path:
    root.mkdir(exist_ok=True)
    for name, text in files.items():
        if text is None and name.endswith(".gz"):
            (root / name).write_bytes(b"this is not gzip at all\n")
        elif name.endswith(".gz"):
            (root / name).write_bytes(gzip.compress(text.encode()))
        elif text is not None:
            (root / name).write_text(text)
    return root


def test_machines_in_service_at_the_start(tmp_path):
    trace = alibaba2017.read(write(tmp_path / "t", {"server_event.csv": SERVERS, "batch_task.csv": TASKS}))
    assert trace.machines.names == ("1", "2", "4", "10")
    np.testing.assert_array_equal(trace.machines.cpu, [64, 64, 64, 32])
    np.testing.assert_allclose(trace.machines.ram, [0.69 * GIB, GIB, 0.69 * GIB, 0.5 * GIB])
    notes = "\n".join(trace.notes)
    for text in (
        "1 server_event rows of an event type other than add",
        "1 server_event add rows without a valid capacity",
        "1 machine additions inside the window are not replayed",
        "1 machines with a harderror before the window (out of service) were left out",
        "1 machines with a softerror before the window (temporary) are replayed",
        "(1 harderror, 1 softerror)",
        "188.638 GiB",
    ):
        assert text in notes


def test_batch_task_rows_expand_into_instances(tmp_path):
    root = write(tmp_path / "t", {"server_event.csv": SERVERS, "batch_task.csv.gz": TASKS})
    trace = alibaba2017.read(root)
    tk = trace.tasks
    assert tk.ids == ("1-1-0", "1-1-1", "1-2-0", "2-1-0", "3-1-0", "5-1-0")
    assert tk.job == ("1-1", "1-1", "1-2", "2-1", "3-1", "5-1")
    assert not tk.production.any() and (tk.machine == -1).all() and (tk.priority == 0).all()
    np.testing.assert_allclose(tk.cpu, [0.5, 0.5, 1.0, 1.0, 0.5, 1.0])  # hundredths of a cpu
    np.testing.assert_allclose(tk.ram, np.array([0.01, 0.01, 0.02, 0.02, 0.01, 0.01]) * GIB)
    np.testing.assert_array_equal(tk.submit, [100, 100, 300, 400, 0, 5000])
    np.testing.assert_array_equal(tk.duration, [100, 100, 50, np.nan, 110, 100])
    assert len(trace.usage) == 0 and trace.horizon_s == 5100.0
    notes = "\n".join(trace.notes)
    for text in (
        "1 batch_task rows (3 instances) with an empty plan_cpu or plan_mem (1 of them Waiting",
        "1 batch_task rows that ended at or before 0",
        "1 batch_task rows created at or before 0 (before the period) arrive at 0",
        "1 tasks asking for more than the largest kept machine",
    ):
        assert text in notes
    short = alibaba2017.read(root, hours=0.09)  # 324 s
    assert short.tasks.ids == ("1-1-0", "1-1-1", "1-2-0", "3-1-0")
    np.testing.assert_array_equal(short.tasks.duration, [100, 100, np.nan, 110])  # 1-2 ends at 350
    assert short.horizon_s == 324.0
    assert "2 batch_task rows created past the window" in "\n".join(short.notes)


INSTANCES = (
    "100,150,1,1,1,Failed,1,2,1,0.5,0.02,0.01\n"
    "160,200,1,1,2,Terminated,2,2,1,0.8,0.03,0.02\n"
    "0,0,1,1,,Waiting,1,1,,,,\n"  # never ran (still counted for the ids)
    "100,180,1,1,,Terminated,1,1,,,,\n"  # not placed; no usage
    "300,0,1,2,1,Running,1,1,,,,\n"
    "100,200,9,9,1,Terminated,1,1,1,0.1,0.01,0.01\n"  # its task has no plan
    "100,200,2,1,77,Terminated,1,1,1,0.1,0.01,0.01\n"  # a machine not in service
    "100,200,,1,1,Terminated,1,1,1,0.1,0.01,0.01\n"  # no job id (a known issue)
    "-5,50,3,1,4,Terminated,1,1,1,0.2,0.01,0.01\n"  # started before the period: no sample
)


def test_batch_instance_rows_are_tries_with_their_usage(tmp_path):
    files = {"server_event.csv": SERVERS, "batch_task.csv": TASKS, "batch_instance.csv": INSTANCES}
    trace = alibaba2017.read(write(tmp_path / "t", files))
    tk = trace.tasks
    assert tk.ids == ("1-1-0", "1-1-1", "1-1-3", "1-2-0", "3-1-0")
    assert tk.job == ("1-1", "1-1", "1-1", "1-2", "3-1")
    np.testing.assert_array_equal(tk.machine, [0, 1, -1, 0, 2])
    np.testing.assert_array_equal(tk.submit, [100, 160, 100, 300, 0])
    np.testing.assert_array_equal(tk.duration, [50, 40, 80, np.nan, 50])
    np.testing.assert_allclose(tk.cpu, [0.5, 0.5, 0.5, 1.0, 0.5])
    us = trace.usage
    np.testing.assert_array_equal(us.task, [0, 1])
    np.testing.assert_array_equal(us.t, [100, 160])
    np.testing.assert_array_equal(us.span, [50, 40])
    np.testing.assert_allclose(us.cpu, [0.5, 0.8])
    np.testing.assert_allclose(us.ram, [0.01 * GIB, 0.02 * GIB])
    notes = "\n".join(trace.notes)
    for text in (
        "1 batch_instance rows with an empty job or task id",
        "1 batch_instance rows Ready or Waiting",
        "1 batch_instance rows on machines not in service",
        "1 batch tries whose task has no plan",
    ):
        assert text in notes
    (tmp_path / "t" / "batch_task.csv").unlink()
    (tmp_path / "t" / "container_event.csv").write_text("0,Create,11,1,4,0.02,0.01,0|1|32|33\n")
    with pytest.raises(TraceError, match="batch_instance needs batch_task"):
        alibaba2017.read(tmp_path / "t")


EVENTS = (
    "0,Create,11,1,4,0.02,0.01,0|1|32|33\n"
    "3000,Remove,11,1,4,0.02,0.01,0|1|32|33\n"
    "1000,Create,12,2,2,0.01,0.01,4|5\n"
    "0,Create,13,77,2,0.01,0.01,1|2\n"  # a machine not in service
    "0,Create,14,1,80,0.01,0.01,\n"  # more than any machine
    "0,Create,15,2,2,0.01,0.01,1|2|3\n"  # a cpuset of 3: plan_cpu is used
    "500,Remove,16,1,1,0.01,0.01,1\n"  # never created
)
USAGE = (
    "60,11,50,40,,1,1,1,,,,\n"
    "120,11,25,40,,1,1,1,,,,\n"
    "120,11,30,40,,1,1,1,,,,\n"  # the same ts: the row read last
    "0,11,10,10,,1,1,1,,,,\n"
    "1060,12,100,100,,1,1,1,,,,\n"
    "1120,12,101,50,,1,1,1,,,,\n"
    "60,99,10,10,,1,1,1,,,,\n"
    "60,13,10,10,,1,1,1,,,,\n"
)


def test_containers_are_production_with_their_usage(tmp_path):
    files = {"server_event.csv": SERVERS, "container_event.csv": EVENTS, "container_usage.csv": USAGE}
    root = write(tmp_path / "t", files)
    trace = alibaba2017.read(root)
    tk = trace.tasks
    assert tk.ids == ("11", "12", "15") and tk.job == tk.ids
    assert tk.production.all()
    np.testing.assert_allclose(tk.cpu, [4, 2, 2])
    np.testing.assert_allclose(tk.ram, np.array([0.02, 0.01, 0.01]) * GIB)
    np.testing.assert_array_equal(tk.submit, [0, 1000, 0])
    np.testing.assert_array_equal(tk.duration, [3000, np.nan, np.nan])
    np.testing.assert_array_equal(tk.machine, [0, 1, 1])
    us = trace.usage
    np.testing.assert_array_equal(us.task, [0, 0, 1])
    np.testing.assert_array_equal(us.t, [60, 120, 1060])
    np.testing.assert_array_equal(us.span, [60, 60, 60])
    np.testing.assert_allclose(us.cpu, [2.0, 1.2, 2.0])
    np.testing.assert_allclose(us.ram, [0.4 * 0.02 * GIB, 0.4 * 0.02 * GIB, 0.01 * GIB])
    assert trace.horizon_s == 3000.0
    fig = trace.figures()
    assert fig["production_cpu_usage_over_request"] == pytest.approx((1.6 + 2.0) / 6.0)
    notes = "\n".join(trace.notes)
    for text in (
        "1 container_event rows whose cpuset is not plan_cpu cpus long",
        "1 containers on machines not in service at the start",
        "1 containers removed without a Create",
        "1 tasks asking for more than the largest kept machine",
        "1 container_usage rows repeating a container's ts",
        "1 container_usage rows at or before 0",
        "1 container_usage rows with a utilisation outside 0-100",
        "1 container_usage rows of containers container_event does not name",
        "1 container_usage rows of containers outside the replay",
    ):
        assert text in notes
    short = alibaba2017.read(root, hours=1100 / 3600)
    np.testing.assert_array_equal(short.usage.span, [60, 60, 40])  # cut at the window's end
    assert math.isnan(short.tasks.duration[0])  # its Remove at 3000 s is past the window


# ------------------------------------------------------------------------------------- malformed


BAD = [
    (
        "truncated-batch-task-row",
        {"batch_task.csv": "100,200,1,1,2,Terminated,50,0.01\n100,200,1,2,2,Terminated,50\n"},
        r"batch_task\.csv:2: 7 fields, expected 8",
    ),
    (
        "non-number-plan-mem",
        {"batch_task.csv": "100,200,1,1,2,Terminated,50,0.01\n100,200,1,2,2,Terminated,50,x\n"},
        r"batch_task\.csv:2: plan_mem: not a number \(value: 'x'\)",
    ),
    (
        "fractional-plan-cpu",
        {"batch_task.csv": "100,200,1,1,2,Terminated,0.5,0.01\n"},
        r"batch_task\.csv:1: plan_cpu: not a whole number \(value: '0.5'\)",
    ),
    (
        "fractional-instance-num",
        {"batch_task.csv": "100,200,1,1,2.5,Terminated,50,0.01\n"},
        r"batch_task\.csv:1: instance_num: not a whole number \(value: '2.5'\)",
    ),
    (
        "empty-create-time",
        {"batch_task.csv": ",200,1,1,2,Terminated,50,0.01\n"},
        r"batch_task\.csv:1: create_timestamp: missing value",
    ),
    (
        "non-number-machine-cpus",
        {"server_event.csv": "0,1,add,,64,0.69,1\n0,2,add,,sixty,0.69,1\n", "batch_task.csv": TASKS},
        r"server_event\.csv:2: capacity:CPU: not a number \(value: 'sixty'\)",
    ),
    (
        "non-number-cpu-util",
        {
            "container_event.csv": "0,Create,11,1,4,0.02,0.01,0|1|32|33\n",
            "container_usage.csv": "60,11,50,40,,1,1,1,,,,\n120,11,high,40,,1,1,1,,,,\n",
        },
        r"container_usage\.csv:2: cpu_util: not a number \(value: 'high'\)",
    ),
    (
        "truncated-batch-instance-row",
        {"batch_task.csv": TASKS, "batch_instance.csv": "100,150,1,1,1,Failed,1,2,1,0.5\n"},
        r"batch_instance\.csv:1: 10 fields, expected 12",
    ),
    ("bad-gzip", {"batch_task.csv.gz": None}, r"batch_task\.csv\.gz:1: unreadable"),
    ("no-server-event", {"server_event.csv": None, "batch_task.csv": TASKS}, r"no server_event file"),
    ("no-task-table", {}, r"neither a batch_task nor a container_event"),
]


@pytest.mark.parametrize(("files", "message"), [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_malformed_input_names_file_line_and_column(tmp_path, files, message):
    root = write(tmp_path / "t", {"server_event.csv": SERVERS, **files})
    with pytest.raises(TraceError, match=message) as err:
        alibaba2017.read(root)
    if "csv" in message:
        assert str(root) in str(err.value)  # the file's full path


def test_bad_options_and_folder(tmp_path):
    with pytest.raises(TraceError, match="not a folder"):
        alibaba2017.read(tmp_path / "nothing-here")
    root = write(tmp_path / "t", {"server_event.csv": SERVERS, "batch_task.csv": TASKS})
    with pytest.raises(TraceError, match="hours must be positive"):
        alibaba2017.read(root, hours=0)
    with pytest.raises(TraceError, match="machines must be at least 0"):
        alibaba2017.read(root, machines=-1)


# --------------------------------------------------------------------------------- bounded memory


def generated(root: Path, n_rows: int, n_machines: int = 1000) -> Path:
    """``n_rows`` batch_task rows, each its own job, over ``n_machines`` machines."""
    root.mkdir()
    (root / "server_event.csv").write_text("".join(f"0,{i},add,,64,0.69,1\n" for i in range(n_machines)))
    with open(root / "batch_task.csv", "w") as f:
        f.writelines(f"{i % 3600},{i % 3600 + 60},{i},1,1,Terminated,50,0.005404706\n" for i in range(n_rows))
    return root


def peak_reading(root: Path, machines: int | None) -> tuple[int, int]:
    """The peak of traced memory while reading, and the tasks read."""
    tracemalloc.start()
    try:
        trace = alibaba2017.read(root, machines=machines)
        return tracemalloc.get_traced_memory()[1], len(trace.tasks)
    finally:
        tracemalloc.stop()


def test_a_large_file_is_streamed_in_bounded_memory(tmp_path):
    """100,000 batch_task rows (5 MB; about 100 MB as a list of rows) read for 5 of 1,000 machines
    hold only the kept jobs' rows: less memory at its peak than reading a file ten times smaller
    whole."""
    big = generated(tmp_path / "big", 100_000)
    small, kept = peak_reading(big, machines=5)
    assert kept == sum(1 for i in range(100_000) if keeps_unplaced(str(i), 5 / 1000))
    assert 0 < kept < 1000
    assert small < 4 * 2**20, f"peak {small / 2**20:.1f} MiB"
    whole, held = peak_reading(generated(tmp_path / "small", 10_000), machines=None)
    assert held == 10_000
    assert small < whole  # what is held grows with what is kept, not with the file
