"""The Google cluster-usage trace v2.1 (clusterdata-2011-2): machine_events, task_events, task_usage.

Facts of the trace this reader relies on (Google's "Google cluster-usage traces: format + schema"
document, v2.1, and ``ClusterData2011_2.md`` in google/cluster-data; summarised here):

* Every table is CSV without a header; an empty field is a missing value.
* Times are microseconds; the data starts at 600 s (600,000,000 µs). A time of 0 means "before the
  trace window" (the state of the cell when tracing began: machines and tasks already present) and
  2^63 - 1 "after it". The replay's 0 is the window's start: trace time ``t`` becomes
  ``(t - 600 s)``, and a 0 stays 0.
* CPU and memory (capacities, requests, usage) are normalised: each divided by the largest
  capacity of that resource on any machine of the trace. :class:`~kalena.traces.model.Scale` says
  what 1.0 is in cores and GiB; Google did not publish it, so :data:`DEFAULT_SCALE` is an
  assumption (a two-socket server of 2011: 32 cores, 64 GiB) and ``--cores-per-unit`` /
  ``--gib-per-unit`` set it. Usage over request does not depend on it.
* CPU usage (task_usage column 6) is the mean over the sample window in (normalised) cores;
  memory (column 7) is the canonical memory usage (the resident set the kernel charges the task,
  without page cache).
* Event types: 0 SUBMIT, 1 SCHEDULE, 2 EVICT, 3 FAIL, 4 FINISH, 5 KILL, 6 LOST, 7 UPDATE_PENDING,
  8 UPDATE_RUNNING; machine events 0 ADD, 1 REMOVE, 2 UPDATE. Priorities 9-11 are "production".
* Part files of a table are time-ordered slices (part 0 is the start of the trace).

How the replay window is built:

* Machines: those present at the window's start (an ADD at or before it and no later REMOVE
  before it), with their last capacity before it. Machines added or removed inside the window are
  not replayed (a note counts them): Kalena's cluster is the blueprint's.
* Tasks (job id, task index): a task present at the start (a SCHEDULE at time 0 or before 600 s)
  runs from 0; a task submitted inside the window arrives at its first SUBMIT. Its request is the
  last one its SUBMIT and UPDATE events gave; a task that never states one is left out (noted).
  Its ``duration`` is the time it ran inside the window (every SCHEDULE to the next EVICT, FAIL,
  FINISH, KILL or LOST, summed: a task Borg evicted and rescheduled needed all of it), ``nan`` if it
  was still running or pending when the data (or the window) ends: censored. A task whose only
  events before the window are terminal ones was not there and is skipped.
* With ``machines=N``, production tasks are kept where the trace ran them (on a kept machine) and
  batch tasks by their job's stable hash, with the share of machines kept (Kalena schedules batch
  itself; where Borg put it does not matter, only how much of it there is).
* Usage: each task_usage row of a kept task is one sample (``t`` its start, ``span`` its length).
* Reading stops at the first row of a part file past the window: the files are time-ordered, so a
  short window of a 29-day trace reads only its beginning; only the kept tasks are held.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from kalena.traces.files import csv_rows, find, number
from kalena.traces.model import (
    Machines,
    Scale,
    Tasks,
    Trace,
    TraceError,
    Usage,
    keeps_unplaced,
    pick_machines,
)

SOURCE = "google-2011"
DEFAULT_SCALE = Scale(cores=32.0, gib=64.0)
WINDOW_START_US = 600_000_000
AFTER_WINDOW_US = 2**63 - 1
PRODUCTION_PRIORITY = 9

SUBMIT, SCHEDULE, EVICT, FAIL, FINISH, KILL, LOST, UPDATE_PENDING, UPDATE_RUNNING = range(9)
ENDS = frozenset((EVICT, FAIL, FINISH, KILL, LOST))
ADD, REMOVE, UPDATE = range(3)

MACHINE_COLUMNS, EVENT_COLUMNS, USAGE_COLUMNS = 6, 13, 7


def seconds(path: Path, line: int, text: str) -> float:
    """A trace time as seconds from the window's start (0 stays 0: before the window)."""
    us = number(path, line, "time", text)
    if us == 0:
        return 0.0
    if us >= AFTER_WINDOW_US:
        return math.inf
    return max(0.0, (us - WINDOW_START_US) / 1e6)


def read_machines(
    root: Path, scale: Scale, horizon: float, notes: list[str]
) -> tuple[list[str], list[float], list[float], list[float]]:
    """The machines present at the window's start, with their capacity then (cores, GiB), and
    the times of the additions and removals after it (not replayed: the caller counts them)."""
    end_us = WINDOW_START_US + horizon * 1e6
    later: list[float] = []
    cap: dict[str, tuple[float, float]] = {}
    missing = 0
    for path in find(root, "machine_events/*.csv*", "machine_events"):
        for line, row in csv_rows(path, MACHINE_COLUMNS):
            t = number(path, line, "time", row[0])
            kind = int(number(path, line, "event type", row[2]))
            if t > WINDOW_START_US:
                if t >= end_us:
                    break  # time-ordered, like every table of the trace
                if kind in (ADD, REMOVE):
                    later.append((t - WINDOW_START_US) / 1e6)
                continue
            if kind == REMOVE:
                cap.pop(row[1], None)
                continue
            if row[4] == "" or row[5] == "":
                missing += 1
                continue
            cpu = number(path, line, "CPUs", row[4]) * scale.cores
            ram = number(path, line, "Memory", row[5]) * scale.gib
            cap[row[1]] = (cpu, ram)
    names = sorted(cap, key=int) if all(n.isdigit() for n in cap) else sorted(cap)
    if missing:
        notes.append(f"{missing} machine events before the window without a capacity were skipped")
    return names, [cap[n][0] for n in names], [cap[n][1] for n in names], later


@dataclass
class _Task:
    job: str
    priority: int
    submit: float
    cpu: float = math.nan
    ram: float = math.nan
    machine: str = ""
    running_since: float = math.nan
    ran: float = 0.0
    ended: bool = False
    kept: bool | None = None  # decided at its first SCHEDULE (production) or SUBMIT (batch)


@dataclass
class _Events:
    """What task_events leave: the tasks of the window, in order of first appearance."""

    tasks: dict[tuple[str, str], _Task] = field(default_factory=dict)
    gone_before: int = 0
    no_request: int = 0
    elsewhere: int = 0  # production on a machine not present at the start (added inside the window)
    last: float = 0.0  # the last event's time read


def read_events(
    root: Path, horizon: float, scale: Scale, machine_kept: dict[str, bool], share: float
) -> _Events:
    out = _Events()
    tasks = out.tasks
    dropped: set[tuple[str, str]] = set()
    for path in find(root, "task_events/*.csv*", "task_events"):
        for line, row in csv_rows(path, EVENT_COLUMNS):
            t = seconds(path, line, row[0])
            if t >= horizon:
                break  # time-ordered: the rest of this part file is past the window
            out.last = max(out.last, t)
            key = (row[2], row[3])
            if key in dropped:
                continue
            kind = int(number(path, line, "event type", row[5]))
            task = tasks.get(key)
            if task is None:
                if kind in ENDS:
                    out.gone_before += 1  # ended before it was seen: not in the window
                    dropped.add(key)
                    continue
                priority = int(number(path, line, "priority", row[8]))
                task = tasks[key] = _Task(job=row[2], priority=priority, submit=t)
                if priority < PRODUCTION_PRIORITY:
                    task.kept = keeps_unplaced(row[2], share)
            if row[9] != "" and row[10] != "":  # any event may restate it (SCHEDULE rows do)
                task.cpu = number(path, line, "CPU request", row[9]) * scale.cores
                task.ram = number(path, line, "memory request", row[10]) * scale.gib
            if kind == SCHEDULE:
                task.machine = row[4]
                task.running_since = t
                task.ended = False  # rescheduled after an eviction or failure: running again
                if task.kept is None:
                    task.kept = machine_kept.get(row[4])
                    if task.kept is None:
                        out.elsewhere += 1
                        task.kept = False
            elif kind in ENDS and not math.isnan(task.running_since):
                task.ran += t - task.running_since
                task.running_since = math.nan
                task.ended = True
            elif kind in ENDS:
                task.ended = True
            if task.kept is False:
                del tasks[key]
                dropped.add(key)
    return out


def read(
    root: Path,
    *,
    scale: Scale = DEFAULT_SCALE,
    machines: int | None = None,
    hours: float | None = None,
) -> Trace:
    """Read the trace folder ``root`` (``machine_events/``, ``task_events/``, optional
    ``task_usage/``, as released) for the window ``[0, hours)`` (default: the data's end)."""
    root = Path(root)
    if not root.is_dir():
        raise TraceError(f"{root}: not a folder (the trace as released: machine_events/, task_events/, ...)")
    notes: list[str] = [
        f"cpu and memory normalised to the largest machine: 1.0 taken as {scale.cores:g} cores "
        f"and {scale.gib:g} GiB",
        "time 0 is the trace window's start (600 s into the trace clock)",
    ]
    horizon = math.inf if hours is None else hours * 3600.0
    names, cpu, ram, changes = read_machines(root, scale, horizon, notes)
    keep = pick_machines(names, machines)
    kept_names = [n for n, k in zip(names, keep, strict=True) if k]
    machine_kept = dict(zip(names, keep.tolist(), strict=True))
    share = len(kept_names) / max(len(names), 1)
    events = read_events(root, horizon, scale, machine_kept, share)
    index = {n: i for i, n in enumerate(kept_names)}
    kept_cpu = np.array([c for c, k in zip(cpu, keep, strict=True) if k])
    kept_ram = np.array([r for r, k in zip(ram, keep, strict=True) if k])
    last = 0.0
    rows: list[tuple[str, _Task]] = []
    too_big = 0
    biggest = (
        float(kept_cpu.max()) if len(kept_cpu) else 0.0,
        float(kept_ram.max()) if len(kept_ram) else 0.0,
    )
    for (job, idx), task in events.tasks.items():
        if task.kept is None and not keeps_unplaced(job, share):  # production the trace never placed
            continue
        if math.isnan(task.cpu) or math.isnan(task.ram):
            events.no_request += 1
            continue
        if task.cpu > biggest[0] or task.ram > biggest[1]:
            too_big += 1
            continue
        last = max(last, task.submit)
        rows.append((f"{job}-{idx}", task))
    if hours is None:
        horizon = max(last, events.last)
    changed = sum(1 for t in changes if t < horizon)
    if changed:
        notes.append(f"{changed} machine additions and removals inside the window are not replayed")
    if events.gone_before:
        notes.append(f"{events.gone_before} tasks whose first event was their end were not in the window")
    if events.elsewhere:
        notes.append(f"{events.elsewhere} production tasks on machines added inside the window were left out")
    if events.no_request:
        notes.append(f"{events.no_request} tasks that never stated a request were left out")
    if too_big:
        notes.append(f"{too_big} tasks asking for more than the largest kept machine were left out")
    if machines is not None and len(kept_names) < len(names):
        notes.append(
            f"{len(kept_names)} of {len(names)} machines kept (stable hash); production where the trace "
            f"ran it, batch by its job's hash ({share:.2%} of jobs)"
        )
    ids = tuple(r[0] for r in rows)
    tasks = Tasks(
        ids=ids,
        job=tuple(t.job for _, t in rows),
        production=np.array([t.priority >= PRODUCTION_PRIORITY for _, t in rows], dtype=bool),
        priority=np.array([t.priority for _, t in rows], dtype=np.int64),
        cpu=np.array([t.cpu for _, t in rows]),
        ram=np.array([t.ram for _, t in rows]),
        submit=np.array([t.submit for _, t in rows]),
        duration=np.array([t.ran if t.ended else math.nan for _, t in rows]),
        machine=np.array([index.get(t.machine, -1) for _, t in rows], dtype=np.int64),
    )
    usage = read_usage(root, horizon, scale, {i: n for n, i in enumerate(ids)}, notes)
    if len(usage):
        horizon = max(horizon, float((usage.t + usage.span).max())) if hours is None else horizon
    return Trace(
        source=SOURCE,
        horizon_s=horizon,
        machines=Machines(tuple(kept_names), kept_cpu, kept_ram),
        tasks=tasks,
        usage=usage,
        notes=tuple(notes),
    )


def read_usage(root: Path, horizon: float, scale: Scale, task_of: dict[str, int], notes: list[str]) -> Usage:
    """The task_usage samples of the kept tasks inside the window (none without task_usage/)."""
    paths = sorted(p for p in root.glob("task_usage/*.csv*") if p.is_file())
    cols: tuple[list[int], list[float], list[float], list[float], list[float]] = ([], [], [], [], [])
    unknown = 0
    for path in paths:
        for line, row in csv_rows(path, USAGE_COLUMNS):
            t = seconds(path, line, row[0])
            if t >= horizon:
                break
            task = task_of.get(f"{row[2]}-{row[3]}")
            if task is None:
                unknown += 1
                continue
            end = seconds(path, line, row[1])
            cols[0].append(task)
            cols[1].append(t)
            cols[2].append(end - t)
            cols[3].append(number(path, line, "CPU rate", row[5], empty=0.0) * scale.cores)
            cols[4].append(number(path, line, "canonical memory usage", row[6], empty=0.0) * scale.gib)
    if not paths:
        notes.append("no task_usage: every task's usage is its tier's assumption in the replay")
        return Usage.empty()
    if unknown:
        notes.append(f"{unknown} task_usage rows of tasks outside the replay were skipped")
    task = np.array(cols[0], dtype=np.int64)
    t = np.array(cols[1])
    order = np.lexsort((t, task))
    return Usage(
        task=task[order],
        t=t[order],
        span=np.array(cols[2])[order],
        cpu=np.array(cols[3])[order],
        ram=np.array(cols[4])[order],
    )
