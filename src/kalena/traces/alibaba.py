"""What the two Alibaba readers, :mod:`kalena.traces.alibaba2017` and :mod:`kalena.traces.alibaba2018`,
share.

Both releases have one shape: machines, online containers (production) with usage samples, batch
tasks of ``instance_num`` instances asking their task's plan, and optional batch_instance rows with
their own usage. Their columns, sentinels, memory normalisation (0-1 or 0-100) and what a
batch_instance row is differ; those stay in each reader, or come here as parameters.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import numpy as np

from kalena.traces.files import csv_rows, number
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

#: batch_task statuses whose end time is an end (the others are still running or never ran).
ENDED = frozenset(("Terminated", "Failed"))

#: A request (cores, GiB).
Plan = tuple[float, float]
#: The plan of a batch task whose plan_cpu or plan_mem is invalid (negative, or memory out of range).
INVALID: Plan = (math.nan, math.nan)

#: Usage samples as columns, appended a row at a time: slot (a row's position), t, span, cpu, ram.
Samples = tuple[list[int], list[float], list[float], list[float], list[float]]

T = TypeVar("T")


def optional(root: Path, pattern: str) -> list[Path]:
    """The files of a table that may be absent (sorted: part files in order)."""
    return sorted(p for p in root.glob(pattern) if p.is_file())


def natural(name: str) -> tuple[str, int, str]:
    """An id's sort key: m_2 before m_10 (v2018), 2 before 10 (v2017), where strings put 10 first."""
    m = re.fullmatch(r"(.*?)(\d+)", name)
    return (m.group(1), int(m.group(2)), "") if m else (name, -1, name)


def checked(root: Path, hours: float | None, machines: int | None, *, tables: str) -> Path:
    """``root`` as a folder, after checking the options (``tables``: the release's first files, for
    the error)."""
    root = Path(root)
    if not root.is_dir():
        raise TraceError(f"{root}: not a folder (the trace as released: {tables}, ...)")
    if hours is not None and not hours > 0:
        raise TraceError(f"hours must be positive, got {hours}")
    if machines is not None and machines < 0:
        raise TraceError(f"machines must be at least 0, got {machines}")
    return root


# ---------------------------------------------------------------------------------------- machines


@dataclass(frozen=True, eq=False)
class Picked:
    """The machines a replay keeps, of those the trace lists in the window."""

    kept: dict[str, bool]  # every listed machine: whether it is kept
    index: dict[str, int]  # a kept machine's position in ``machines``
    share: float  # of the listed machines, kept (unplaced batch tasks are kept in that share)
    biggest: tuple[float, float]  # the largest kept cores and GiB (0 without machines)
    machines: Machines  # the kept ones, in natural order


def pick(found: dict[str, Plan], machines: int | None, placed: str, notes: list[str]) -> Picked:
    """Keep at most ``machines`` of ``found`` (id -> cores, GiB) by stable hash; ``placed`` names
    the rows the trace places (for the note: they go with their machine)."""
    names = sorted(found, key=natural)
    keep = pick_machines(names, machines)
    kept = dict(zip(names, keep.tolist(), strict=True))
    kept_names = [n for n, k in zip(names, keep, strict=True) if k]
    share = len(kept_names) / max(len(names), 1)
    m_cpu = np.array([found[n][0] for n in kept_names], dtype=float)
    m_ram = np.array([found[n][1] for n in kept_names], dtype=float)
    biggest = (float(m_cpu.max()), float(m_ram.max())) if len(kept_names) else (0.0, 0.0)
    if machines is not None and len(kept_names) < len(names):
        notes.append(
            f"{len(kept_names)} of {len(names)} machines kept (stable hash): containers and {placed} where "
            f"the trace ran them, unplaced batch tasks by their job's hash ({share:.2%})"
        )
    index = {n: i for i, n in enumerate(kept_names)}
    return Picked(kept, index, share, biggest, Machines(tuple(kept_names), m_cpu, m_ram))


# ------------------------------------------------------------------------------------------- rows


@dataclass
class Row:
    """A kept task before the arrays are built (a batch_task row stands for ``count`` tasks)."""

    id: str
    job: str
    production: bool
    cpu: float
    ram: float
    submit: float
    duration: float
    machine: int
    count: int = 1  # tasks it stands for
    expand: bool = False  # ids <id>-<i>, i < count (a batch_task row); else ``id`` is the task's


def build_tasks(rows: Iterable[Row]) -> Tasks:
    """The task table of ``rows``, a batch_task row expanded into its ``count`` instances."""
    rows = list(rows)
    count = np.array([r.count for r in rows], dtype=np.int64)

    def col(values: list[float] | list[int] | list[bool], dtype: type) -> np.ndarray:
        return np.repeat(np.array(values, dtype=dtype), count)

    ids: list[str] = []
    jobs: list[str] = []
    suffix = [f"-{i}" for i in range(max((r.count for r in rows if r.expand), default=0))]
    for r in rows:
        if r.expand:
            ids.extend([r.id + s for s in suffix[: r.count]])  # (millions: faster than formatting each)
            jobs.extend([r.job] * r.count)  # one str object, repeated
        else:
            ids.append(r.id)
            jobs.append(r.job)
    n = len(ids)
    return Tasks(
        ids=tuple(ids),
        job=tuple(jobs),
        production=col([r.production for r in rows], bool),
        priority=np.zeros(n, dtype=np.int64),
        cpu=col([r.cpu for r in rows], float),
        ram=col([r.ram for r in rows], float),
        submit=col([r.submit for r in rows], float),
        duration=col([r.duration for r in rows], float),
        machine=col([r.machine for r in rows], np.int64),
    )


def ran(ended: bool, submit: float, end: float, horizon: float) -> float:
    """How long it ran from ``submit`` when the trace saw it end inside the window, else ``nan``."""
    if ended and end > 0 and end >= submit and end < horizon:
        return end - submit
    return math.nan


# -------------------------------------------------------------------------------------- containers


def container_row(
    cid: str, job: str, machine: int, cpu: float, ram: float, starts: list[float], stops: list[float]
) -> Row:
    """A container as a task: arriving at its first start, ending at its first stop after its last
    start (duration from arrival), else ``nan`` (censored)."""
    submit, last = min(starts), max(starts)
    after = [s for s in stops if s > last]
    duration = min(after) - submit if after else math.nan
    return Row(cid, job, True, cpu, ram, submit, duration, machine)


def container_samples(
    task: list[int],
    ts: list[float],
    cpu: list[float],
    ram: list[float],
    span: Callable[[np.ndarray, np.ndarray], np.ndarray],
    horizon: float,
    windowed: bool,
    notes: list[str],
    *,
    time: str,
) -> tuple[np.ndarray, ...]:
    """container_usage samples as arrays task, t, span, cpu, ram sorted by (task, t): of equal times,
    the row read last; each spanning ``span(task, t)``, cut at the window's end (``time``: the
    column's name, for the note)."""
    k = np.array(task, dtype=np.int64)
    t = np.array(ts, dtype=float)
    order = np.lexsort((t, k))
    k, t, c, r = k[order], t[order], np.array(cpu)[order], np.array(ram)[order]
    dup = np.r_[(k[1:] == k[:-1]) & (t[1:] == t[:-1]), False]  # keep the last of equal times
    if dup.any():
        notes.append(f"{int(dup.sum())} container_usage rows repeating a container's {time} were skipped")
        keep = ~dup
        k, t, c, r = k[keep], t[keep], c[keep], r[keep]
    s = span(k, t)
    if windowed:
        s = np.minimum(s, horizon - t)
    return k, t, s, c, r


@dataclass(frozen=True)
class UsageTable:
    """Where a release's container_usage keeps what the replay reads, and what its notes say.

    ``id`` is a column's index, the others (index, name) pairs (the name for errors); a note's
    ``{n}`` is its count. The two releases differ in their columns, in which times lie outside
    the period (v2017: at or before 0; v2018: the sentinel 0), in how long a sample spans, and in
    their wording."""

    width: int
    id: int
    time: tuple[int, str]
    cpu: tuple[int, str]
    mem: tuple[int, str]
    outside_period: Callable[[float], bool]
    span: Callable[[np.ndarray, np.ndarray], np.ndarray]
    repeated: str  # the time's name in the note on repeated samples
    empty_note: str
    unnamed_note: str  # rows of containers the release's container table does not name
    outside_period_note: str
    invalid_note: str
    read_note: str  # what the samples mean, when there are some files
    absent_note: str | None = None  # when there are none


def read_container_usage(
    root: Path,
    table: UsageTable,
    horizon: float,
    windowed: bool,
    task_of: dict[str, tuple[int, float, float]],
    seen: set[str],
    notes: list[str],
) -> tuple[np.ndarray, ...]:
    """The kept containers' samples: task, t, span, cpu (cores), ram (GiB), sorted by (task, t).

    ``task_of`` maps a kept container to (its task, its cpu and ram request), ``seen`` holds every
    container the container table names. cpu and memory utilisations are percentages of the
    request; rows outside 0-100, outside the period, past the window or with a field empty are
    skipped and counted in ``notes``."""
    paths = optional(root, "container_usage*.csv*")
    task: list[int] = []
    ts: list[float] = []
    cpu: list[float] = []
    ram: list[float] = []
    i_id, (i_t, n_t), (i_c, n_c), (i_m, n_m) = table.id, table.time, table.cpu, table.mem
    empty = outside_period = later = missing = invalid = 0
    outside: dict[bool, int] = {True: 0, False: 0}  # by whether the container table names it
    for path in paths:
        for line, row in csv_rows(path, table.width):
            cid = row[i_id]
            if not cid:
                empty += 1
                continue
            known = task_of.get(cid)
            if known is None:
                outside[cid in seen] += 1
                continue
            t = number(path, line, n_t, row[i_t])
            if table.outside_period(t):
                outside_period += 1
                continue
            if t >= horizon:
                later += 1
                continue
            c = number(path, line, n_c, row[i_c], empty=math.nan)
            m = number(path, line, n_m, row[i_m], empty=math.nan)
            if math.isnan(c) or math.isnan(m):
                missing += 1
                continue
            if not (0.0 <= c <= 100.0 and 0.0 <= m <= 100.0):
                invalid += 1
                continue
            i, req_cpu, req_ram = known
            task.append(i)
            ts.append(t)
            cpu.append(c / 100.0 * req_cpu)
            ram.append(m / 100.0 * req_ram)
    if not paths and table.absent_note:
        notes.append(table.absent_note)
    counted = (
        (empty, table.empty_note),
        (outside[False], table.unnamed_note),
        (outside[True], "{n} container_usage rows of containers outside the replay were skipped"),
        (outside_period, table.outside_period_note),
        (later, "{n} container_usage rows past the window were skipped"),
        (missing, "{n} container_usage rows with an empty cpu or memory utilisation were skipped"),
        (invalid, table.invalid_note),
    )
    notes.extend(note.format(n=n) for n, note in counted if n)
    samples = container_samples(task, ts, cpu, ram, table.span, horizon, windowed, notes, time=table.repeated)
    if paths:
        notes.append(table.read_note)
    return samples


# ------------------------------------------------------------------------------------------- batch


def plan_request(cpu: float, mem: float, scale: Scale, *, full: float) -> Plan:
    """A batch plan in cores and GiB from ``plan_cpu`` (hundredths of a cpu, in both releases) and
    ``plan_mem`` (``full`` is the largest machine's memory): :data:`INVALID` when cpu is negative or
    mem outside 0-``full``."""
    if cpu < 0 or not 0.0 <= mem <= full:
        return INVALID
    return cpu / 100.0 * scale.cores, mem / full * scale.gib


def batch_task_paths(root: Path) -> list[Path]:
    """batch_task's files, which batch_instance needs (its rows carry no request)."""
    paths = optional(root, "batch_task*.csv*")
    if not paths:
        raise TraceError(f"{root}: batch_instance needs batch_task (the requests are there), found none")
    return paths


def read_plans(
    paths: list[Path],
    width: int,
    key: tuple[int, int],
    wanted: set[tuple[str, str]],
    plan: Callable[[Path, int, list[str]], Plan | None],
) -> dict[tuple[str, str], Plan | None]:
    """The plans of the ``wanted`` (job, task)s in batch_task (``width`` columns, the job and task
    names in columns ``key``): only those are held."""
    plans: dict[tuple[str, str], Plan | None] = {}
    for path in paths:
        for line, row in csv_rows(path, width):
            k = (row[key[0]], row[key[1]])
            if k in wanted:
                plans[k] = plan(path, line, row)
    return plans


def left_out(machine: str, job: str, kept: dict[str, bool], share: float) -> str:
    """Why a batch_instance row on ``machine`` (empty: not placed) of ``job`` is not replayed:
    "unknown" (a machine the trace does not list in the window), "elsewhere" (one not kept), "hash"
    (not placed, and its job not kept); "" when it is."""
    if machine:
        where = kept.get(machine)
        if where is None:
            return "unknown"
        return "" if where else "elsewhere"
    return "" if keeps_unplaced(job, share) else "hash"


def add_sample(
    samples: Samples,
    slot: int,
    start: float,
    end: float,
    cpu: float,
    mem: float,
    horizon: float,
    scale: Scale,
    *,
    per_cpu: float,
    full: float,
) -> str:
    """Add a batch_instance row's usage, its mean ``cpu`` (``per_cpu`` to a cpu) and ``mem`` (``full``:
    the largest machine's memory) over ``[start, end)`` cut at the window's end, as one sample of
    ``slot``. Returns why it was not added: "no usage" (no means, or no known run), "invalid" (a
    negative cpu or mem outside 0-``full``), or "" when it was."""
    if math.isnan(cpu) or math.isnan(mem) or start <= 0 or end <= start:
        return "no usage"
    if cpu < 0 or not 0.0 <= mem <= full:
        return "invalid"
    u_slot, u_t, u_span, u_cpu, u_ram = samples
    u_slot.append(slot)
    u_t.append(start)
    u_span.append(min(end, horizon) - start)
    u_cpu.append(cpu / per_cpu * scale.cores)
    u_ram.append(mem / full * scale.gib)
    return ""


def instance_rows(
    items: Collection[T],
    key: Callable[[T], tuple[str, str]],
    row: Callable[[T, Plan], Row],
    plans: dict[tuple[str, str], Plan | None],
    biggest: tuple[float, float],
    samples: Samples,
    what: str,
    notes: list[str],
) -> tuple[list[Row], int, tuple[np.ndarray, ...]]:
    """The kept batch ``items`` (by slot: instances or tries, ``what`` for the notes) as rows, each
    asking its task's plan (``key``: its (job, task)); those without a valid plan that fits are left
    out, with their samples. Returns the rows, how many did not fit, and the samples (slots:
    positions in the rows)."""
    rows: list[Row] = []
    row_of = np.full(len(items), -1, dtype=np.int64)
    no_plan = invalid = too_big = 0
    for n, item in enumerate(items):
        plan = plans.get(key(item))
        if plan is None:
            no_plan += 1
            continue
        if math.isnan(plan[0]):
            invalid += 1
            continue
        if plan[0] > biggest[0] or plan[1] > biggest[1]:
            too_big += 1
            continue
        row_of[n] = len(rows)
        rows.append(row(item, plan))
    if no_plan:
        notes.append(f"{no_plan} batch {what} whose task has no plan in batch_task were left out")
    if invalid:
        notes.append(f"{invalid} batch {what} whose task's plan is invalid were left out")
    k = row_of[np.array(samples[0], dtype=np.int64)]
    keep = k >= 0
    usage = (k[keep], *(np.array(c, dtype=float)[keep] for c in samples[1:]))
    return rows, too_big, usage


# -------------------------------------------------------------------------------------------- read


def assemble(
    source: str,
    horizon: float,
    windowed: bool,
    machines: Machines,
    rows: list[Row],
    batch: list[Row],
    too_big: int,
    c_usage: tuple[np.ndarray, ...],
    b_usage: tuple[np.ndarray, ...] | None,
    notes: list[str],
) -> Trace:
    """The trace of the container ``rows`` (their samples ``c_usage``) and the ``batch`` rows after
    them (``b_usage``, slots counted from the first batch row; ``None``: no samples). Without a
    window, the horizon is the data's last time. Both lists are emptied (the rows are freed before
    the usage is built)."""
    if too_big:
        notes.append(f"{too_big} tasks asking for more than the largest kept machine were left out")
    if b_usage is None:
        b_usage = (np.zeros(0, dtype=np.int64), *(np.zeros(0) for _ in range(4)))
    else:
        b_usage = (b_usage[0] + len(rows), *b_usage[1:])
    rows.extend(batch)
    batch.clear()
    tasks = build_tasks(rows)
    rows.clear()

    task, t, span, cpu, ram = (np.concatenate([a, b]) for a, b in zip(c_usage, b_usage, strict=True))
    order = np.lexsort((t, task))
    usage = Usage(
        task=task[order].astype(np.int64), t=t[order], span=span[order], cpu=cpu[order], ram=ram[order]
    )
    if not windowed:
        ends = tasks.submit + np.nan_to_num(tasks.duration, nan=0.0)
        horizon = max(
            float(ends.max()) if len(tasks) else 0.0,
            float((usage.t + usage.span).max()) if len(usage) else 0.0,
        )
    return Trace(
        source=source, horizon_s=horizon, machines=machines, tasks=tasks, usage=usage, notes=tuple(notes)
    )
