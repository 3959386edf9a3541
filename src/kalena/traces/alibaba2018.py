"""The Alibaba cluster trace v2018: machine_meta, container_meta, container_usage, batch_task,
batch_instance.

Facts of the trace this reader relies on, with where each is stated (``trace_2018.md`` and
``schema.txt`` are in ``cluster-trace-v2018/`` of alibaba/clusterdata; issues are that repository's):

* Every table is CSV without a header. The column order is ``schema.txt``'s (``trace_2018.md`` lists
  some tables' columns in another order; the released rows follow ``schema.txt``).
* Times are seconds from the start of the sampled period (0 is its start); a time of 0 means
  "before or after the 8-day span" (``trace_2018.md``, common fields). The replay's clock is the
  trace's; a 0 is read as "before the window" (present at the start), never as "after".
* Machines: ``cpu_num`` is cores (``trace_2018.md``, machine_meta); ``mem_size`` is normalised to
  the largest machine's memory, 0-100 (same table). Every machine of the released trace has 96
  cores and mem_size 100.
* Requests: ``cpu_request`` (container_meta) and ``plan_cpu`` (batch_task) are in hundredths of a
  core, 100 = 1 core (``schema.txt``, ``trace_2018.md``); ``mem_size`` (container_meta) and
  ``plan_mem`` (batch_task) are normalised like a machine's memory, 0-100 of the largest machine.
* Container usage: ``cpu_util_percent`` is a percentage of the container's own cpu request, not of
  the machine (a maintainer's answer in alibaba/clusterdata issue #62). ``mem_util_percent`` is not
  documented either way; it is read as a percentage of the container's memory request too, as the
  rows say: containers asking for 1.56-3.13 % of a machine's memory report 55-100 % (as a share
  of the machine, each would use 30-60 times its request). Utilisations are 0-100; -1 and 101 mark
  invalid samples (``trace_2018.md``, common fields), left out with a note.
* Batch instance usage: ``cpu_avg`` is in hundredths of a core and ``mem_avg`` normalised 0-100 of
  the largest machine (``schema.txt``, batch_instance); each is the mean of the instance's samples
  over its run, and failed instances log none (a maintainer's answer in issue #64).
* container_usage starts with rows whose container_id is empty (a defect of the release, issue
  #84): they cannot be attributed and are skipped, counted in a note.
* There is no priority in v2018: online containers (Sigma) are production, batch tasks and
  instances (Fuxi) are batch (``trace_2018.md``, introduction); every priority is 0.

Units: cores are real cores (``Scale.cores`` multiplies them: 1.0 by default). Memory is only given
relative to the largest machine, whose size Alibaba did not publish; :data:`DEFAULT_SCALE` **assumes
512 GiB**. The assumption is inferred, not documented: container mem_size values are whole GiB over
512 rounded to two decimals (1.56 = 8/512, 3.13 = 16/512, 6.25 = 32/512, 9.38 = 48/512,
18.75 = 96/512), and so are batch plan_mem values (0.2 = 1/512, 0.39 = 2/512). Usage over request
does not depend on it.

How the replay window ``[0, hours)`` is built (without ``hours``: to the data's last time, the
latest arrival, end or end of a usage sample kept). The folder must hold machine_meta and at least
one of container_meta and batch_task (batch_instance needs batch_task: the plans are there); files
are found by table name (``batch_task.csv``, ``batch_task.csv.gz``, excerpts as
``batch_task.first50000rows.csv``; the release's tar.gz archives must be unpacked).

* Machines: every machine with a machine_meta record in the window, its capacity from its last
  one. machine_meta has no additions or removals, only status snapshots; a machine first recorded
  inside the window is replayed from 0 (a note counts them), and so is one never seen USING.
* Containers (production): one task per container_id, from its container_meta records in the
  window. Its last record decides its machine, app_du (its ``job``), and request (``cpu_request``;
  ``cpu_limit`` is not a request). It arrives at its first ``started``/``allocated`` record (0:
  present at the start); a container never started nor allocated in the window did not run in it
  and is left out. It ends at its first ``stopped`` record after its last running one (duration
  from arrival), else ``nan`` (censored). Containers never move (checked on the released sample),
  so a row on a machine that is not kept is skipped as it is read.
* Batch, without batch_instance: a batch_task row with ``instance_num`` k is k tasks
  ``<job>-<task>-<i>`` (i from 0), submitted at ``start_time`` (0: before the window, so 0), with
  duration ``end_time - start_time`` when both are known and it ended (Terminated or Failed; the
  model's duration is how long it ran, and a failed task did end), else ``nan``; the trace does not
  say where they ran (``machine`` -1). ``job`` is ``<job_name>-<task_name>``: a task's instances
  are one request shape. Rows with an empty instance_num (Waiting) or plan are left out.
* Batch, with batch_instance (its rows are used instead): one task ``<job>-<task>-<instance>`` per
  instance, folded over its attempts (``seq_no``): submitted at its first start, on the machine of
  its last attempt, ended with that attempt's end (Terminated or Failed) or ``nan``. Its request is
  its task's plan in batch_task (required with batch_instance; only the tasks of kept instances are
  held). Each attempt with ``cpu_avg``/``mem_avg`` and a known run is one usage sample spanning it.
* A task submitted at or after ``hours`` is dropped, and one still running at ``hours`` is
  censored (``nan``). With ``machines=N``, :func:`~kalena.traces.model.pick_machines` keeps N
  machines; containers and instances on the others are dropped, and unplaced batch tasks kept by
  their job's stable hash (``job_name``: a DAG stays whole) with the share of machines kept.
* Usage of a container: each container_usage row is a sample at ``time_stamp`` spanning the gap to
  the container's next sample, at most :data:`MAX_SPAN_S` (the sampling is irregular, median about
  450 s; a longer gap is missing data, not a held value); the last sample spans the container's
  median gap (capped too), and a container's only sample the median of every capped gap. Duplicate
  times keep the row read last. cpu is ``util / 100 * request`` cores, ram ``util / 100 * request``
  GiB (the container's final request, as in its task). Samples at 0 (the sentinel) or past the
  window are dropped; spans are cut at the window's end.
* Tasks asking for more than the largest kept machine and rows with invalid values (negative
  requests, memory or utilisation outside 0-100) are left out; notes count every row left out.
* machine_usage is not read: it is per machine, not per task. Reading is streamed (no table is
  held, only the kept rows); the tables are not time-ordered, so each is read to its end.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from kalena.traces.alibaba import (
    ENDED,
    Plan,
    Row,
    Samples,
    UsageTable,
    add_sample,
    assemble,
    batch_task_paths,
    checked,
    container_row,
    instance_rows,
    left_out,
    optional,
    pick,
    plan_request,
    ran,
    read_container_usage,
    read_plans,
)
from kalena.traces.files import csv_rows, find, number
from kalena.traces.model import Scale, Trace, TraceError, keeps_unplaced

SOURCE = "alibaba-2018"
#: 1 core per core (the trace's cores are real); 100 % of memory taken as 512 GiB (an assumption).
DEFAULT_SCALE = Scale(cores=1.0, gib=512.0)
#: The longest a container_usage sample is taken to hold (seconds).
MAX_SPAN_S = 600.0

MACHINE_META_COLUMNS = 7
CONTAINER_META_COLUMNS = 8
CONTAINER_USAGE_COLUMNS = 11
BATCH_TASK_COLUMNS = 9
BATCH_INSTANCE_COLUMNS = 14

RUNNING = frozenset(("started", "allocated"))
STOPPED = "stopped"


def _valid_share(x: float) -> bool:
    """A normalised value (memory, utilisation): 0-100; -1 and 101 mark invalid ones."""
    return 0.0 <= x <= 100.0


# ---------------------------------------------------------------------------------------- machines


@dataclass
class _Machine:
    t: float  # time of its last record in the window
    first: float
    cpu: float
    ram: float
    using: bool = False


def _read_machines(root: Path, scale: Scale, horizon: float, notes: list[str]) -> dict[str, _Machine]:
    out: dict[str, _Machine] = {}
    invalid = 0
    for path in find(root, "machine_meta*.csv*", "machine_meta"):
        for line, row in csv_rows(path, MACHINE_META_COLUMNS):
            t = number(path, line, "time_stamp", row[1])
            if t >= horizon:
                continue
            cpu = number(path, line, "cpu_num", row[4])
            mem = number(path, line, "mem_size", row[5])
            if not row[0] or cpu <= 0 or not 0.0 < mem <= 100.0:
                invalid += 1
                continue
            m = out.get(row[0])
            if m is None:
                m = out[row[0]] = _Machine(t, t, cpu * scale.cores, mem / 100.0 * scale.gib)
            elif t >= m.t:
                m.t, m.cpu, m.ram = t, cpu * scale.cores, mem / 100.0 * scale.gib
            m.first = min(m.first, t)
            m.using = m.using or row[6] == "USING"
    if invalid:
        notes.append(f"{invalid} machine_meta rows with an empty id or an invalid capacity were skipped")
    late = sum(1 for m in out.values() if m.first > 0)
    if late:
        notes.append(f"{late} machines first recorded inside the window are replayed from its start")
    idle = sum(1 for m in out.values() if not m.using)
    if idle:
        notes.append(f"{idle} machines never recorded USING in the window are replayed as usable")
    return out


# -------------------------------------------------------------------------------------- containers


@dataclass
class _Container:
    t: float  # time of its last record
    machine: str
    app: str
    cpu: float
    ram: float
    runs: list[float] = field(default_factory=list)  # times of started/allocated records
    stops: list[float] = field(default_factory=list)  # times of stopped records


def _read_containers(
    root: Path, scale: Scale, horizon: float, kept: dict[str, bool], notes: list[str]
) -> tuple[dict[str, _Container], set[str]]:
    """The kept containers' records, and the id of every container container_meta names."""
    paths = optional(root, "container_meta*.csv*")
    out: dict[str, _Container] = {}
    seen: set[str] = set()
    empty = invalid = unknown_status = 0
    elsewhere: set[str] = set()
    unknown_machine: set[str] = set()
    for path in paths:
        for line, row in csv_rows(path, CONTAINER_META_COLUMNS):
            cid = row[0]
            if not cid:
                empty += 1
                continue
            seen.add(cid)
            t = number(path, line, "time_stamp", row[2])
            if t >= horizon:
                continue
            machine = kept.get(row[1])
            if machine is None:
                unknown_machine.add(cid)
                continue
            if not machine:
                elsewhere.add(cid)
                continue
            cpu = number(path, line, "cpu_request", row[5])
            mem = number(path, line, "mem_size", row[7])
            if cpu < 0 or not _valid_share(mem):
                invalid += 1
                continue
            status = row[4]
            if status not in RUNNING and status != STOPPED:
                unknown_status += 1
                continue
            c = out.get(cid)
            cpu, ram = cpu / 100.0 * scale.cores, mem / 100.0 * scale.gib
            if c is None:
                c = out[cid] = _Container(t, row[1], row[3], cpu, ram)
            elif t >= c.t:  # the last record decides (a tie: the row read last)
                c.t, c.machine, c.app, c.cpu, c.ram = t, row[1], row[3], cpu, ram
            (c.runs if status in RUNNING else c.stops).append(t)
    if not paths:
        notes.append("no container_meta: no online containers (production) in the replay")
        return out, seen
    if empty:
        notes.append(f"{empty} container_meta rows with an empty container_id were skipped")
    if invalid:
        notes.append(
            f"{invalid} container_meta rows with a negative cpu_request or mem_size outside 0-100 "
            "were skipped"
        )
    if unknown_status:
        notes.append(
            f"{unknown_status} container_meta rows of a status other than started, allocated or "
            "stopped were skipped"
        )
    if unknown_machine:
        notes.append(
            f"{len(unknown_machine)} containers on machines machine_meta does not list (in the "
            "window) were left out"
        )
    if elsewhere - out.keys():
        notes.append(f"{len(elsewhere - out.keys())} containers on machines not kept were left out")
    return out, seen


def _container_rows(
    containers: dict[str, _Container], index: dict[str, int], biggest: tuple[float, float], notes: list[str]
) -> tuple[list[Row], int]:
    rows: list[Row] = []
    never = too_big = 0
    for cid, c in containers.items():
        if not c.runs:
            never += 1  # only stopped records: it did not run in the window
            continue
        if c.cpu > biggest[0] or c.ram > biggest[1]:
            too_big += 1
            continue
        rows.append(container_row(cid, c.app, index[c.machine], c.cpu, c.ram, c.runs, c.stops))
    if never:
        notes.append(f"{never} containers never started nor allocated in the window were left out")
    notes.append(
        "containers: request = cpu_request and mem_size of the last record in the window (cpu_limit "
        "unused), arrival = the first started/allocated record (0: present at the start), end = the "
        "first stopped record after the last running one (else censored)"
    )
    return rows, too_big


def _spans(task: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Each sample's span: the gap to its task's next sample, capped; a task's last sample its
    median gap, capped; a task's only sample the median of every capped gap (``task``, ``t`` sorted)."""
    n = len(t)
    span = np.empty(n)
    if not n:
        return span
    same = task[1:] == task[:-1]
    gap = np.diff(t)
    inner = np.flatnonzero(same)
    span[inner] = np.minimum(gap[inner], MAX_SPAN_S)
    capped = np.minimum(gap[same], MAX_SPAN_S)
    everyone = float(np.median(capped)) if len(capped) else MAX_SPAN_S
    starts = np.flatnonzero(np.r_[True, ~same])
    ends = np.r_[starts[1:], n]
    for a, b in zip(starts.tolist(), ends.tolist(), strict=True):
        span[b - 1] = min(float(np.median(gap[a : b - 1])), MAX_SPAN_S) if b - a > 1 else everyone
    return span


#: container_usage: 0 is the sentinel (v2017: a time at or before 0 is before the period), and a
#: sample spans the gap to the next (v2017 measures at a fixed interval).
USAGE = UsageTable(
    width=CONTAINER_USAGE_COLUMNS,
    id=0,
    time=(2, "time_stamp"),
    cpu=(3, "cpu_util_percent"),
    mem=(4, "mem_util_percent"),
    outside_period=lambda t: t == 0,
    span=_spans,
    repeated="time",
    empty_note=(
        "{n} container_usage rows with an empty container_id (a defect of the release, "
        "alibaba/clusterdata issue #84) were skipped"
    ),
    unnamed_note="{n} container_usage rows of containers container_meta does not name were skipped",
    outside_period_note="{n} container_usage rows at time 0 (outside the 8 days) were skipped",
    invalid_note="{n} container_usage rows with a utilisation outside 0-100 (-1/101: invalid) were skipped",
    read_note=(
        "container usage: cpu_util_percent and mem_util_percent are percentages of the container's "
        f"request; a sample spans the gap to the next (at most {MAX_SPAN_S:g} s), the last the "
        "container's median gap"
    ),
    absent_note="no container_usage: containers have no usage samples",
)


# ------------------------------------------------------------------------------------------- batch


def _plan(path: Path, line: int, row: list[str], scale: Scale) -> Plan | None:
    """A batch_task row's request (cores, GiB): ``None`` when its plan is empty,
    :data:`~kalena.traces.alibaba.INVALID` (nan) when it is negative or its memory outside 0-100."""
    if row[7] == "" or row[8] == "":
        return None
    cpu = number(path, line, "plan_cpu", row[7])
    mem = number(path, line, "plan_mem", row[8])
    return plan_request(cpu, mem, scale, full=100.0)


def _ended(status: str, start: float, end: float, horizon: float) -> float:
    """The run's length when the trace saw it end inside the window, else ``nan`` (censored); a
    start of 0 is the sentinel (before the 8 days), so the length is not known."""
    return ran(status in ENDED and start > 0, start, end, horizon)


# Not shared with v2017: a start of 0 is unknown here (v2017: created before the period, so it arrives
# at 0 and runs from there), and the columns differ.
def _read_batch_tasks(
    root: Path,
    scale: Scale,
    horizon: float,
    share: float,
    biggest: tuple[float, float],
    notes: list[str],
) -> tuple[list[Row], int]:
    """batch_task rows as tasks (each row one :class:`~kalena.traces.alibaba.Row` of ``count``
    instances)."""
    paths = optional(root, "batch_task*.csv*")
    rows: list[Row] = []
    no_count = no_plan = invalid = later = sentinel = 0
    no_plan_n = invalid_n = too_big_n = 0
    for path in paths:
        for line, row in csv_rows(path, BATCH_TASK_COLUMNS):
            if not row[0] or not row[2]:
                invalid += 1
                continue
            if row[1] == "":
                no_count += 1  # a Waiting task: its instances are not known yet
                continue
            count = int(number(path, line, "instance_num", row[1]))
            if count <= 0:
                continue
            start = number(path, line, "start_time", row[5])
            if start >= horizon:
                later += 1
                continue
            end = number(path, line, "end_time", row[6])
            plan = _plan(path, line, row, scale)
            if not keeps_unplaced(row[2], share):
                continue
            if plan is None:
                no_plan += 1
                no_plan_n += count
                continue
            if math.isnan(plan[0]):
                invalid += 1
                invalid_n += count
                continue
            if plan[0] > biggest[0] or plan[1] > biggest[1]:
                too_big_n += count
                continue
            sentinel += start == 0
            job = f"{row[2]}-{row[0]}"
            duration = _ended(row[4], start, end, horizon)
            rows.append(Row(job, job, False, plan[0], plan[1], start, duration, -1, count, expand=True))
    if no_count:
        notes.append(f"{no_count} batch_task rows with an empty instance_num (Waiting) were left out")
    if no_plan:
        notes.append(
            f"{no_plan} batch_task rows ({no_plan_n} instances) with an empty plan_cpu or "
            "plan_mem were left out"
        )
    if invalid:
        notes.append(
            f"{invalid} batch_task rows ({invalid_n} instances) with an empty name or an invalid "
            "plan were left out"
        )
    if later:
        notes.append(f"{later} batch_task rows starting past the window were left out")
    if sentinel:
        notes.append(f"{sentinel} batch_task rows with start_time 0 (before the 8 days) arrive at 0")
    if paths:
        notes.append(
            "batch_task: a row of instance_num k is k tasks <job>-<task>-<i>, request plan_cpu/100 cores "
            "and plan_mem % of the largest machine, arriving at start_time; duration end_time - "
            "start_time when Terminated or Failed, else censored; not placed by the trace"
        )
    return rows, too_big_n


@dataclass
class _Instance:
    job: str
    job_name: str
    machine: str
    seq: float  # of its last attempt
    status: str  # of its last attempt
    submit: float  # its first attempt's start
    end: float  # its last attempt's end


# Not shared with v2017: its rows have no instance id, so they cannot be folded into instances.
def _read_batch_instances(
    root: Path,
    paths: list[Path],
    scale: Scale,
    horizon: float,
    share: float,
    kept: dict[str, bool],
    notes: list[str],
) -> tuple[dict[tuple[str, str, str], _Instance], Samples]:
    """The kept instances (folded over attempts) and their samples (instance slot, t, span, cpu, ram)."""
    out: dict[tuple[str, str, str], _Instance] = {}
    slot: dict[tuple[str, str, str], int] = {}
    samples: Samples = ([], [], [], [], [])
    empty = later = elsewhere = unknown = no_usage = invalid = 0
    for path in paths:
        for line, row in csv_rows(path, BATCH_INSTANCE_COLUMNS):
            if not row[0] or not row[1] or not row[2]:
                empty += 1
                continue
            start = number(path, line, "start_time", row[5])
            if start >= horizon:
                later += 1
                continue
            machine = row[7]
            why = left_out(machine, row[2], kept, share)
            if why:
                unknown += why == "unknown"
                elsewhere += why == "elsewhere"
                continue
            end = number(path, line, "end_time", row[6])
            seq = number(path, line, "seq_no", row[8], empty=0.0)
            key = (row[2], row[1], row[0])
            inst = out.get(key)
            if inst is None:
                inst = out[key] = _Instance(f"{row[2]}-{row[1]}", row[2], machine, seq, row[4], start, end)
                slot[key] = len(slot)
            else:
                inst.submit = min(inst.submit, start)
                if seq >= inst.seq:
                    inst.machine, inst.seq, inst.status, inst.end = machine, seq, row[4], end
            cpu = number(path, line, "cpu_avg", row[10], empty=math.nan)
            mem = number(path, line, "mem_avg", row[12], empty=math.nan)
            why = add_sample(
                samples, slot[key], start, end, cpu, mem, horizon, scale, per_cpu=100.0, full=100.0
            )
            no_usage += why == "no usage"
            invalid += why == "invalid"
    if empty:
        notes.append(f"{empty} batch_instance rows with an empty instance, task or job name were skipped")
    if later:
        notes.append(f"{later} batch_instance rows starting past the window were skipped")
    if unknown:
        notes.append(f"{unknown} batch_instance rows on machines machine_meta does not list were skipped")
    if elsewhere:
        notes.append(f"{elsewhere} batch_instance rows on machines not kept were skipped")
    if no_usage:
        notes.append(
            f"{no_usage} batch_instance attempts without cpu_avg/mem_avg or a known run have no usage sample"
        )
    if invalid:
        notes.append(
            f"{invalid} batch_instance attempts with a negative cpu_avg or mem_avg outside 0-100 have "
            "no usage sample"
        )
    notes.append(
        "batch_instance: one task <job>-<task>-<instance> per instance, arriving at its first start, on "
        "its last attempt's machine, ending with it (Terminated or Failed, else censored); request from "
        "batch_task; usage cpu_avg/100 cores and mem_avg % of the largest machine over each attempt"
    )
    return out, samples


def _instance_rows(
    root: Path,
    paths: list[Path],
    scale: Scale,
    horizon: float,
    share: float,
    kept: dict[str, bool],
    index: dict[str, int],
    biggest: tuple[float, float],
    notes: list[str],
) -> tuple[list[Row], int, tuple[np.ndarray, ...]]:
    """batch_instance rows as tasks, with their usage (slots: position in the returned rows)."""
    task_paths = batch_task_paths(root)
    instances, samples = _read_batch_instances(root, paths, scale, horizon, share, kept, notes)
    wanted = {(i.job_name, key[1]) for key, i in instances.items()}
    plans = read_plans(task_paths, BATCH_TASK_COLUMNS, (2, 0), wanted, lambda p, n, r: _plan(p, n, r, scale))

    def row(item: tuple[tuple[str, str, str], _Instance], plan: Plan) -> Row:
        (_job, _task, instance), inst = item
        duration = _ended(inst.status, inst.submit, inst.end, horizon)
        machine = index[inst.machine] if inst.machine else -1
        return Row(
            f"{inst.job}-{instance}", inst.job, False, plan[0], plan[1], inst.submit, duration, machine
        )

    items = instances.items()
    return instance_rows(
        items, lambda i: (i[0][0], i[0][1]), row, plans, biggest, samples, "instances", notes
    )


# -------------------------------------------------------------------------------------------- read


def read(
    root: Path,
    *,
    scale: Scale = DEFAULT_SCALE,
    machines: int | None = None,
    hours: float | None = None,
) -> Trace:
    """Read the trace folder ``root`` (machine_meta plus container_meta and/or batch_task; optional
    container_usage, batch_instance; plain or .gz, as released or excerpted) for ``[0, hours)``
    (default: to the data's end), on at most ``machines`` machines (default: all)."""
    root = checked(root, hours, machines, tables="machine_meta.csv, container_meta.csv")
    if not optional(root, "container_meta*.csv*") and not optional(root, "batch_task*.csv*"):
        raise TraceError(f"{root}: neither a container_meta nor a batch_task file: no tasks to replay")
    windowed = hours is not None
    horizon = hours * 3600.0 if hours is not None else math.inf
    notes: list[str] = [
        f"cores are the trace's (x{scale.cores:g}); memory is normalised to the largest machine, whose "
        f"100 % is taken as {scale.gib:g} GiB (an assumption: Alibaba did not publish it)",
        "times are the trace's seconds; a time of 0 (outside the 8 days) is read as before the window",
        "online containers are production, batch tasks and instances batch; the trace has no priority "
        "(all 0)",
        "machine_usage is not read (per machine, not per task)",
    ]
    found = _read_machines(root, scale, horizon, notes)
    picked = pick({n: (m.cpu, m.ram) for n, m in found.items()}, machines, "instances", notes)
    kept, index, share, biggest = picked.kept, picked.index, picked.share, picked.biggest

    containers, seen = _read_containers(root, scale, horizon, kept, notes)
    rows, too_big = _container_rows(containers, index, biggest, notes)
    del containers
    task_of = {r.id: (i, r.cpu, r.ram) for i, r in enumerate(rows)}
    c_usage = read_container_usage(root, USAGE, horizon, windowed, task_of, seen, notes)
    del task_of, seen

    instance_paths = optional(root, "batch_instance*.csv*")
    b_usage: tuple[np.ndarray, ...] | None = None
    if instance_paths:
        batch, big, b_usage = _instance_rows(
            root, instance_paths, scale, horizon, share, kept, index, biggest, notes
        )
    else:
        batch, big = _read_batch_tasks(root, scale, horizon, share, biggest, notes)
    return assemble(
        SOURCE, horizon, windowed, picked.machines, rows, batch, too_big + big, c_usage, b_usage, notes
    )
