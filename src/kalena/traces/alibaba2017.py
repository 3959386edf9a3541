"""The Alibaba cluster trace v2017 (ClusterData201708): server_event and batch_task, and when present
batch_instance, container_event and container_usage.

Facts of the trace this reader relies on, with where each is stated (``trace_201708.md`` and
``schema.csv`` are in ``cluster-trace-v2017/`` of alibaba/clusterdata; issues are that repository's):

* Every table is CSV without a header, its columns in ``schema.csv``'s order (``trace_201708.md``
  calls that file the definitive specification). A row with fewer fields than ``schema.csv`` lists
  is an error; errors name columns as ``trace_201708.md`` does (``plan_cpu``, ``start_timestamp``).
* Times are seconds from the start of the trace period; 0, and a few negative values, mean "before
  the period" (``trace_201708.md``, time and timestamps). The replay's clock is the trace's: a time
  at or before 0 is the window's start.
* Machines (server_event): cpu counts are not normalised (``trace_201708.md``, resource units);
  every machine has 64, logical cpus (the same document's cpuset paragraph: cpus 0 and 32 are the
  two threads of one core), and one is a Kalena core. Memory is normalised to the largest machine's:
  1.0 is the largest, most machines have 0.69.
* Machine events: ``add`` (every machine, at 0), ``softerror`` (a software failure: temporarily
  unavailable) and ``harderror`` (a hardware failure: unavailable); after an error no new work should
  be placed there, but work already running may go on (``trace_201708.md``, machine events). No
  event marks a recovery, and error rows carry no capacity (zeros).
* batch_task's second column is the task's end time in ``schema.csv`` and its "latest state
  modification time" in ``trace_201708.md``: an end only when the task ended (Terminated or Failed).
* Batch requests: ``plan_cpu`` is in **hundredths of a cpu** (100 = 1). ``schema.csv`` says only
  "number of cpus requested per instance"; the reading rests on the data and on issue #11 (titled
  "[Confirmed] Unit Problem about CPU in batch_task.csv"): every value is a whole number from 40
  to 800, 50 or 100 in 98 % of the rows with a plan, which as cpus would not fit a 64-cpu machine
  or the cluster (tasks of thousands of instances each asking 50), and the issue shows a task of
  plan_cpu 100 whose instances peak at about 1 cpu in batch_instance. v2018 documents the same
  unit (its ``schema.txt``). A plan_cpu that is not a whole number is an error: ``schema.csv``
  types it INTEGER, and a fraction would be another unit, which this reader will not guess (in
  issue #28, of March 2018, a maintainer reads a plan_cpu of 0.5 as half a cpu: a copy of
  batch_task in cpus may exist; the sample is not one).
* Containers (container_event, when present): ``plan_cpu`` is a number of cpus ("cpu number
  requested", ``trace_201708.md``, service instance event; the online scheduler gives each container
  a cpuset, whose size this reader checks against it, a mismatch counted in a note); events are
  Create and Remove, each recording when that finished, and a container created before the period
  has ts 0 (same section). ``plan_mem`` of containers
  and of batch tasks is normalised like a machine's memory (0-1).
* Usage: batch_instance ``real_cpu_avg`` is cpus and ``real_mem_avg`` normalised memory, each the
  mean over the try's run (``trace_201708.md``, instance table: "cpu numbers"; the instances quoted
  in issue #11 have real_cpu_max near 1). container_usage's cpu and memory are percentages of the
  container's request, at most 100 (same document, service instance usage), measured every 60 s
  (time and timestamps; each value averages 300 s, so consecutive ones overlap).
* batch_instance has **no instance id**: each row is one try of one instance (``seq_no`` of
  ``total_seq_no``), and nothing tells which instance two rows belong to. Some rows lack the job or
  task id (``trace_201708.md``, known issues; about 85 % of them start 60-89 ks into the period).
  Ready and Waiting rows have every time 0 (instance table): they did not run.
* There is no priority: online services (containers) are production, batch tasks are batch
  (``trace_201708.md``, introduction and data tables); every priority is 0.

Units: cpus are the trace's (``Scale.cores`` multiplies them: 1.0 by default). Memory is only
given relative to the largest machine, whose size Alibaba did not publish; :data:`DEFAULT_SCALE`
takes it as **193,165 MiB (188.64 GiB)**, inferred from the sample, not documented: every
normalised memory in it, machines' and batch plan_mem's (749 distinct values), times 193,165 is a
whole number to within 1e-4 (machines: 111,029, 133,278-133,285 and 193,157-193,165), and half
the plans are then a multiple of 512 plus 20 (1,044 = 1,024 + 20, 3,092 = 3,072 + 20,
2,580 = 2,560 + 20, 532 = 512 + 20), which fits MiB (round sizes, 20 MiB added to each request).
The typical machine is then 130.2 GiB. Usage over request does not depend on it.

How the replay window ``[0, hours)`` is built (without ``hours``: to the data's last time, the
latest arrival, end or end of a usage sample kept). The folder must hold server_event and at least
one of batch_task and container_event (batch_instance needs batch_task: the plans are there); files
are found by table name (``batch_task.csv``, ``batch_task.csv.gz``, excerpts as
``batch_task.first1000rows.csv``; the release's tar.gz must be unpacked).

* Machines: those with an ``add`` at or before the window's start, with the capacity of the last
  one. An ``add`` inside the window is not replayed (the cluster is the blueprint's, fixed; a note
  counts them). A machine with a ``harderror`` at or after that ``add`` (and at or before the
  start) is out of service (no recovery is ever recorded) and left out; one with a ``softerror``
  then is kept (temporary).
  Errors inside the window are not replayed: the machine stays as it was, since its running work
  may go on and the trace never says when it is usable again (a note counts them by type).
* Batch, without batch_instance: a batch_task row with instance_num k is k tasks
  ``<job>-<task>-<i>`` (i from 0), each asking the row's plan (per instance), submitted at the
  create time, a time at or before 0 arriving at 0 (noted). Their duration is the end time minus
  the submit (the time the task ran inside the window: ``end - create`` unless created before the
  period) when it ended (Terminated or Failed, as :mod:`kalena.traces.alibaba2018`; the model's
  duration is how long it ran, and a failed task did end), else ``nan``; every instance is given
  its task's span (the trace has no per-instance times without batch_instance). A task that ended
  at or before 0 was not in the window and is left out. ``job`` is ``<job>-<task>``: a task's
  instances are one request shape; the trace does not say where they ran (``machine`` -1). Rows
  with an empty plan (mostly Waiting: "not initialised yet", ``trace_201708.md``) are left out.
* Batch, with batch_instance (its rows are used instead of batch_task's instance counts): each row
  (one try) is one task ``<job>-<task>-<k>``, k its order among its task's rows in the file
  (counted over every row, so ids do not change with ``hours`` or ``machines``). Tries cannot be
  folded into instances (no instance id), so a retried instance is several tasks, each as long as
  its try occupied a machine. A try arrives at its start (at or before 0: at 0), on its machine,
  and ends with its end when Terminated, Failed or Interrupted (a stopped backup instance) with a
  known end, else ``nan``; its request is its task's plan in batch_task (only the kept tries'
  tasks are held). A try with ``real_cpu_avg``/``real_mem_avg``, a start inside the period and an
  end after it is one usage sample spanning the run.
* Containers (production): one task per instance id, from its container_event rows in the window:
  its last Create decides its machine and request; it arrives at its first Create (0: before the
  period) and ends at its first Remove after its last Create (duration from arrival), else
  ``nan``. A container with no Create in the window is left out. v2017 names no service, so each
  container is its own ``job``.
* Usage of a container: each container_usage row is a sample at ts spanning :data:`USAGE_SPAN_S`
  (the interval between measurements, so samples tile time), cut at the window's end; cpu is
  ``cpu_util / 100 * request`` cores, ram ``mem_util / 100 * request`` GiB. Rows at 0 or before,
  past the window, of containers not kept, with a utilisation outside 0-100 or repeating a
  container's ts (the row read last is kept) are skipped, counted in notes.
* A task submitted at or after ``hours`` is dropped, and one still running at ``hours`` is
  censored (``nan``). With ``machines=N``, :func:`~kalena.traces.model.pick_machines` keeps N
  machines; containers and tries on the others are dropped, and unplaced batch tasks kept by their
  job id's stable hash (a DAG stays whole) with the share of machines kept.
* Tasks asking for more than the largest kept machine and rows with invalid values (a negative
  request, a memory outside 0-1) are left out; notes count every row left out.
* server_usage is not read: it is per machine, not per task. Reading is streamed (no table is
  held, only the kept rows); the tables are not time-ordered, so each is read to its end.
"""

from __future__ import annotations

import math
from collections import Counter
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

SOURCE = "alibaba-2017"
#: The largest machine's memory in MiB (inferred from the sample: module docstring).
LARGEST_MACHINE_MIB = 193_165
#: 1 core per cpu (the trace's cpus are real); 1.0 of memory taken as 193,165 MiB (an inference).
DEFAULT_SCALE = Scale(cores=1.0, gib=LARGEST_MACHINE_MIB / 1024)
#: What a container_usage sample spans (seconds): the trace measures every 60 s.
USAGE_SPAN_S = 60.0

# the columns schema.csv lists for each table
SERVER_EVENT_COLUMNS = 7
BATCH_TASK_COLUMNS = 8
BATCH_INSTANCE_COLUMNS = 12
CONTAINER_EVENT_COLUMNS = 8
CONTAINER_USAGE_COLUMNS = 12

ADD, SOFTERROR, HARDERROR = "add", "softerror", "harderror"
CREATE, REMOVE = "Create", "Remove"
#: batch_instance statuses of a try that ended (Interrupted: a backup instance that stopped).
TRY_ENDED = frozenset(("Terminated", "Failed", "Interrupted"))
#: batch_instance statuses of a try that never ran (every time 0).
NOT_RUN = frozenset(("Ready", "Waiting"))


def _normalised(x: float) -> bool:
    """A normalised memory: 0-1 of the largest machine's."""
    return 0.0 <= x <= 1.0


def _whole(path: Path, line: int, column: str, text: str) -> int:
    x = number(path, line, column, text)
    if not x.is_integer():
        raise TraceError(f"{path}:{line}: {column}: not a whole number (value: {text!r})")
    return int(x)


# ---------------------------------------------------------------------------------------- machines


def _read_machines(
    root: Path, scale: Scale, horizon: float, notes: list[str]
) -> dict[str, tuple[float, float]]:
    """The machines in service at the window's start: id -> (cores, GiB)."""
    added: dict[str, tuple[float, float, float]] = {}  # id -> (t, cores, GiB) of its last add by 0
    hard: dict[str, float] = {}  # id -> its last harderror by 0
    soft: set[str] = set()
    later = empty = no_capacity = invalid = unknown = 0
    inside: Counter[str] = Counter()
    for path in find(root, "server_event*.csv*", "server_event"):
        for line, row in csv_rows(path, SERVER_EVENT_COLUMNS):
            t = number(path, line, "timestamp", row[0])
            if t >= horizon:
                continue
            machine, kind = row[1], row[2]
            if not machine:
                empty += 1
                continue
            if kind not in (ADD, SOFTERROR, HARDERROR):
                unknown += 1
                continue
            if t > 0:
                if kind == ADD:
                    later += 1
                else:
                    inside[kind] += 1
                continue
            if kind == HARDERROR:
                hard[machine] = max(t, hard.get(machine, -math.inf))
            elif kind == SOFTERROR:
                soft.add(machine)
            elif row[4] == "" or row[5] == "":
                no_capacity += 1
            else:
                cpu = number(path, line, "capacity:CPU", row[4])
                mem = number(path, line, "capacity:memory", row[5])
                if cpu <= 0 or not 0.0 < mem <= 1.0:
                    invalid += 1
                elif machine not in added or t >= added[machine][0]:
                    added[machine] = (t, cpu * scale.cores, mem * scale.gib)
    broken = {m for m, t in hard.items() if m in added and t >= added[m][0]}
    if empty:
        notes.append(f"{empty} server_event rows with an empty machine id were skipped")
    if unknown:
        notes.append(
            f"{unknown} server_event rows of an event type other than add, softerror, harderror were skipped"
        )
    if no_capacity or invalid:
        notes.append(f"{no_capacity + invalid} server_event add rows without a valid capacity were skipped")
    if later:
        notes.append(f"{later} machine additions inside the window are not replayed (the cluster is fixed)")
    if broken:
        notes.append(
            f"{len(broken)} machines with a harderror before the window (out of service) were left out"
        )
    if soft & added.keys():
        notes.append(
            f"{len(soft & added.keys())} machines with a softerror before the window (temporary) are replayed"
        )
    if inside:
        counts = ", ".join(f"{n} {kind}" for kind, n in sorted(inside.items()))
        notes.append(
            f"machine errors inside the window are not replayed ({counts}): running work may go on and "
            "the trace never says when a machine is usable again"
        )
    return {m: (cpu, ram) for m, (_t, cpu, ram) in added.items() if m not in broken}


# -------------------------------------------------------------------------------------- containers


@dataclass
class _Container:
    t: float  # time of its last Create
    machine: str
    cpu: float
    ram: float
    creates: list[float] = field(default_factory=list)
    removes: list[float] = field(default_factory=list)


def _read_containers(
    root: Path, scale: Scale, horizon: float, kept: dict[str, bool], notes: list[str]
) -> tuple[dict[str, _Container], set[str]]:
    """The kept containers' events, and the id of every container container_event names."""
    paths = optional(root, "container_event*.csv*")
    out: dict[str, _Container] = {}
    seen: set[str] = set()
    removes: dict[str, list[float]] = {}  # of kept containers, whenever their Create comes
    empty = invalid = unknown_event = mismatch = 0
    elsewhere: set[str] = set()
    unknown_machine: set[str] = set()
    for path in paths:
        for line, row in csv_rows(path, CONTAINER_EVENT_COLUMNS):
            cid = row[2]
            if not cid:
                empty += 1
                continue
            seen.add(cid)
            t = number(path, line, "ts", row[0])
            if t >= horizon:
                continue
            where = kept.get(row[3])
            if where is None:
                unknown_machine.add(cid)
                continue
            if not where:
                elsewhere.add(cid)
                continue
            t = max(t, 0.0)
            if row[1] == REMOVE:
                removes.setdefault(cid, []).append(t)
                continue
            if row[1] != CREATE:
                unknown_event += 1
                continue
            cpu = number(path, line, "plan_cpu", row[4])
            mem = number(path, line, "plan_mem", row[5])
            if cpu < 0 or not _normalised(mem):
                invalid += 1
                continue
            if row[7] and len(row[7].split("|")) != cpu:
                mismatch += 1
            c = out.get(cid)
            cpu, ram = cpu * scale.cores, mem * scale.gib
            if c is None:
                c = out[cid] = _Container(t, row[3], cpu, ram)
            elif t >= c.t:  # the last Create decides (a tie: the row read last)
                c.t, c.machine, c.cpu, c.ram = t, row[3], cpu, ram
            c.creates.append(t)
    if not paths:
        notes.append("no container_event: no online containers (production) in the replay")
        return out, seen
    for cid, ts in removes.items():
        if cid in out:
            out[cid].removes.extend(ts)
    never = len(removes.keys() - out.keys())
    if empty:
        notes.append(f"{empty} container_event rows with an empty instance id were skipped")
    if invalid:
        notes.append(
            f"{invalid} container_event rows with a negative plan_cpu or plan_mem outside 0-1 were skipped"
        )
    if unknown_event:
        notes.append(
            f"{unknown_event} container_event rows of an event other than Create or Remove were skipped"
        )
    if mismatch:
        notes.append(
            f"{mismatch} container_event rows whose cpuset is not plan_cpu cpus long (plan_cpu used)"
        )
    if unknown_machine:
        notes.append(
            f"{len(unknown_machine)} containers on machines not in service at the start (server_event) "
            "were left out"
        )
    if elsewhere - out.keys():
        notes.append(f"{len(elsewhere - out.keys())} containers on machines not kept were left out")
    if never:
        notes.append(f"{never} containers removed without a Create in the window were left out")
    notes.append(
        "containers: request plan_cpu cpus and plan_mem of the largest machine's memory (the last Create), "
        "arrival the first Create (0: before the period), end the first Remove after the last Create "
        "(else censored); each container its own job (v2017 names no service)"
    )
    return out, seen


def _container_rows(
    containers: dict[str, _Container], index: dict[str, int], biggest: tuple[float, float]
) -> tuple[list[Row], int]:
    rows: list[Row] = []
    too_big = 0
    for cid, c in containers.items():
        if c.cpu > biggest[0] or c.ram > biggest[1]:
            too_big += 1
            continue
        rows.append(container_row(cid, cid, index[c.machine], c.cpu, c.ram, c.creates, c.removes))
    return rows, too_big


def _span(task: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Each sample's span: the measuring interval (samples tile time; v2018 spans the gaps instead,
    its sampling being irregular)."""
    return np.full(len(t), USAGE_SPAN_S)


#: container_usage: a time at or before 0 is before the period (v2018: 0 is the sentinel).
USAGE = UsageTable(
    width=CONTAINER_USAGE_COLUMNS,
    id=1,
    time=(0, "ts"),
    cpu=(2, "cpu_util"),
    mem=(3, "mem_util"),
    outside_period=lambda t: t <= 0,
    span=_span,
    repeated="ts",
    empty_note="{n} container_usage rows with an empty instance id were skipped",
    unnamed_note=(
        "{n} container_usage rows of containers container_event does not name (a known issue of the "
        "release) were skipped"
    ),
    outside_period_note="{n} container_usage rows at or before 0 (before the period) were skipped",
    invalid_note="{n} container_usage rows with a utilisation outside 0-100 were skipped",
    read_note=(
        "container usage: cpu_util and mem_util are percentages of the container's request; a sample "
        f"spans {USAGE_SPAN_S:g} s (the trace measures every 60 s)"
    ),
)


# ------------------------------------------------------------------------------------------- batch


# The parsing stays here (the conversion is shared): other columns than v2018's, and a plan_cpu that is
# not whole is refused (module docstring).
def _plan(path: Path, line: int, row: list[str], scale: Scale) -> Plan | None:
    """A batch_task row's request per instance (cores, GiB): ``None`` when its plan is empty,
    :data:`~kalena.traces.alibaba.INVALID` (nan) when it is negative or its memory outside 0-1."""
    if row[6] == "" or row[7] == "":
        return None
    cpu = number(path, line, "plan_cpu", row[6])
    if not cpu.is_integer():
        raise TraceError(
            f"{path}:{line}: plan_cpu: not a whole number (value: {row[6]!r}); this reader reads the "
            "release's unit, 1/100 of a cpu, and a fraction would be another (a copy in cpus?)"
        )
    mem = number(path, line, "plan_mem", row[7])
    return plan_request(cpu, mem, scale, full=1.0)


# Not shared with v2018: a create time at or before 0 arrives at 0 and runs from there (v2018: a
# start of 0 is unknown, so is the duration), a task that ended by 0 is gone, and the columns differ.
def _read_batch_tasks(
    paths: list[Path],
    scale: Scale,
    horizon: float,
    share: float,
    biggest: tuple[float, float],
    notes: list[str],
) -> tuple[list[Row], int]:
    """batch_task rows as tasks (each row one :class:`~kalena.traces.alibaba.Row` of ``count``
    instances)."""
    rows: list[Row] = []
    no_ids = no_instances = later = gone = early = 0
    no_plan = waiting = no_plan_n = invalid = invalid_n = too_big_n = 0
    for path in paths:
        for line, row in csv_rows(path, BATCH_TASK_COLUMNS):
            job, task = row[2], row[3]
            if not job or not task:
                no_ids += 1
                continue
            count = _whole(path, line, "instance_num", row[4])
            if count <= 0:
                no_instances += 1
                continue
            create = number(path, line, "create_timestamp", row[0])
            if create >= horizon:
                later += 1
                continue
            end = number(path, line, "modify_timestamp", row[1])
            plan = _plan(path, line, row, scale)
            if not keeps_unplaced(job, share):
                continue
            if plan is None:
                no_plan += 1
                no_plan_n += count
                waiting += row[5] == "Waiting"
                continue
            if math.isnan(plan[0]):
                invalid += 1
                invalid_n += count
                continue
            ended = row[5] in ENDED
            if ended and end <= 0:
                gone += 1  # created and ended before the period: not in the window
                continue
            if plan[0] > biggest[0] or plan[1] > biggest[1]:
                too_big_n += count
                continue
            early += create <= 0
            submit = max(create, 0.0)
            name = f"{job}-{task}"
            duration = ran(ended, submit, end, horizon)
            rows.append(Row(name, name, False, plan[0], plan[1], submit, duration, -1, count, expand=True))
    if no_ids:
        notes.append(f"{no_ids} batch_task rows with an empty job or task id were left out")
    if no_instances:
        notes.append(f"{no_instances} batch_task rows with no instances were left out")
    if later:
        notes.append(f"{later} batch_task rows created past the window were left out")
    if no_plan:
        notes.append(
            f"{no_plan} batch_task rows ({no_plan_n} instances) with an empty plan_cpu or plan_mem "
            f"({waiting} of them Waiting: not initialised yet) were left out"
        )
    if invalid:
        notes.append(
            f"{invalid} batch_task rows ({invalid_n} instances) with a negative plan_cpu or plan_mem "
            "outside 0-1 were left out"
        )
    if gone:
        notes.append(f"{gone} batch_task rows that ended at or before 0 (before the period) were left out")
    if early:
        notes.append(f"{early} batch_task rows created at or before 0 (before the period) arrive at 0")
    notes.append(
        "batch_task: a row of instance_num k is k tasks <job>-<task>-<i>, request plan_cpu/100 cpus and "
        "plan_mem of the largest machine's memory, arriving at the create time; duration the end time "
        "minus the arrival when Terminated or Failed, else censored; not placed by the trace"
    )
    return rows, too_big_n


@dataclass
class _Tries:
    """The kept batch_instance rows (one try each), as columns."""

    key: list[tuple[str, str]] = field(default_factory=list)  # (job, task)
    k: list[int] = field(default_factory=list)  # its order among its task's rows
    submit: list[float] = field(default_factory=list)
    duration: list[float] = field(default_factory=list)
    machine: list[str] = field(default_factory=list)
    # usage samples: try slot, t, span, cpu, ram
    usage: Samples = field(default_factory=lambda: ([], [], [], [], []))


# Not shared with v2018: a row is one try with no instance id (v2018 folds attempts into instances).
def _read_batch_instances(
    paths: list[Path],
    scale: Scale,
    horizon: float,
    share: float,
    kept: dict[str, bool],
    notes: list[str],
) -> _Tries:
    out = _Tries()
    order: Counter[tuple[str, str]] = Counter()  # rows seen of each task: bounded by the tasks
    no_ids = not_run = later = unknown = elsewhere = no_usage = invalid = 0
    for path in paths:
        for line, row in csv_rows(path, BATCH_INSTANCE_COLUMNS):
            job, task = row[2], row[3]
            if not job or not task:
                no_ids += 1
                continue
            key = (job, task)
            k = order[key]
            order[key] += 1
            status = row[5]
            if status in NOT_RUN:
                not_run += 1
                continue
            start = number(path, line, "start_timestamp", row[0])
            if start >= horizon:
                later += 1
                continue
            machine = row[4]
            why = left_out(machine, job, kept, share)
            if why:
                unknown += why == "unknown"
                elsewhere += why == "elsewhere"
                continue
            end = number(path, line, "end_timestamp", row[1], empty=0.0)
            submit = max(start, 0.0)
            slot = len(out.key)
            out.key.append(key)
            out.k.append(k)
            out.submit.append(submit)
            out.duration.append(ran(status in TRY_ENDED, submit, end, horizon))
            out.machine.append(machine)
            cpu = number(path, line, "real_cpu_avg", row[9], empty=math.nan)
            mem = number(path, line, "real_mem_avg", row[11], empty=math.nan)
            why = add_sample(out.usage, slot, start, end, cpu, mem, horizon, scale, per_cpu=1.0, full=1.0)
            no_usage += why == "no usage"
            invalid += why == "invalid"
    if no_ids:
        notes.append(
            f"{no_ids} batch_instance rows with an empty job or task id (a known issue of the release) "
            "were skipped"
        )
    if not_run:
        notes.append(f"{not_run} batch_instance rows Ready or Waiting (never run) were skipped")
    if later:
        notes.append(f"{later} batch_instance rows starting past the window were skipped")
    if unknown:
        notes.append(f"{unknown} batch_instance rows on machines not in service at the start were skipped")
    if elsewhere:
        notes.append(f"{elsewhere} batch_instance rows on machines not kept were skipped")
    if no_usage:
        notes.append(
            f"{no_usage} batch_instance tries without real_cpu_avg/real_mem_avg or a known run have no "
            "usage sample"
        )
    if invalid:
        notes.append(
            f"{invalid} batch_instance tries with a negative real_cpu_avg or real_mem_avg outside 0-1 have "
            "no usage sample"
        )
    notes.append(
        "batch_instance: one task <job>-<task>-<k> per row (a try: v2017 has no instance id, so a retried "
        "instance is several), arriving at its start, on its machine, ending with it (Terminated, Failed or "
        "Interrupted, else censored); request from batch_task; usage real_cpu_avg cpus and real_mem_avg of "
        "the largest machine's memory over the try"
    )
    return out


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
    tries = _read_batch_instances(paths, scale, horizon, share, kept, notes)
    plans = read_plans(
        task_paths, BATCH_TASK_COLUMNS, (2, 3), set(tries.key), lambda p, n, r: _plan(p, n, r, scale)
    )

    def row(n: int, plan: Plan) -> Row:
        job = f"{tries.key[n][0]}-{tries.key[n][1]}"
        machine = index[tries.machine[n]] if tries.machine[n] else -1
        return Row(f"{job}-{tries.k[n]}", job, False, *plan, tries.submit[n], tries.duration[n], machine)

    slots = range(len(tries.key))
    return instance_rows(slots, tries.key.__getitem__, row, plans, biggest, tries.usage, "tries", notes)


# -------------------------------------------------------------------------------------------- read


def read(
    root: Path,
    *,
    scale: Scale = DEFAULT_SCALE,
    machines: int | None = None,
    hours: float | None = None,
) -> Trace:
    """Read the trace folder ``root`` (server_event plus batch_task and/or container_event;
    optional batch_instance, container_usage; plain or .gz, as released or excerpted) for
    ``[0, hours)`` (default: to the data's end), on at most ``machines`` machines (default: all)."""
    root = checked(root, hours, machines, tables="server_event.csv, batch_task.csv")
    task_paths = optional(root, "batch_task*.csv*")
    if not task_paths and not optional(root, "container_event*.csv*"):
        raise TraceError(f"{root}: neither a batch_task nor a container_event file: no tasks to replay")
    windowed = hours is not None
    horizon = hours * 3600.0 if hours is not None else math.inf
    notes: list[str] = [
        f"cpus are the trace's (x{scale.cores:g}); memory is normalised to the largest machine, whose 1.0 "
        f"is taken as {scale.gib:g} GiB (inferred from the normalised values: Alibaba did not publish it)",
        "times are the trace's seconds; a time at or before 0 (before the period) is read as the "
        "window's start",
        "online containers are production, batch tasks batch; the trace has no priority (all 0)",
        "server_usage is not read (per machine, not per task)",
    ]
    found = _read_machines(root, scale, horizon, notes)
    picked = pick(found, machines, "tries", notes)
    kept, index, share, biggest = picked.kept, picked.index, picked.share, picked.biggest

    containers, seen = _read_containers(root, scale, horizon, kept, notes)
    rows, too_big = _container_rows(containers, index, biggest)
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
        batch, big = _read_batch_tasks(task_paths, scale, horizon, share, biggest, notes)
    return assemble(
        SOURCE, horizon, windowed, picked.machines, rows, batch, too_big + big, c_usage, b_usage, notes
    )
