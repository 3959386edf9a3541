"""The Google cluster-usage traces v3 (clusterdata-2019, Borg, May 2019, cells a-h): machine_events,
instance_events and instance_usage as Google publishes them, or two derived extracts in their stead.

Facts of the trace this reader relies on, with their source (summarised, not quoted):

* **Files** (the raw tables as exported from BigQuery, possibly gzipped): JSON Lines, one object per
  line; int64 fields are JSON strings (``"time": "1838400000000"``), floats are numbers, a
  ``Resources`` value is a nested object ``{"cpus": .., "memory": ..}``, repeated fields are arrays,
  and a field with no value is absent or ``null`` (both read alike here). Source: the one real
  ``instance_usage`` row kept in ``shared/data/traces`` (a ``head -1`` of
  ``gs://clusterdata_2019_a/instance_usage-000000000000.json``, see its PROVENANCE.md section 2).
  BigQuery exports are shards without an order, so nothing here assumes the rows are time-ordered:
  every per-instance figure is a minimum, a maximum or "the latest before", and the result does not
  depend on the rows' order (ties at one microsecond go by file order).
* **Times** are int64 microseconds since the start of the trace, whose window begins 600 s in;
  0 means "before the window" and 2^63 - 1 "after it" (the "Google cluster-usage traces v3"
  document, J. Wilkes, 2020, linked from ClusterData2019.md in google/cluster-data; the proto's
  ``time`` comments give the unit). Here trace time
  ``t`` becomes ``(t - 600 s)`` seconds; anything before 600 s (0, or the < 600 s times of the
  derived user_requests) becomes 0, "present at the start"; 2^63 - 1 rows are after the window and
  skipped. Usage windows are usually 300 s, shorter when an instance starts, stops or is updated
  (v3 document; the proto's InstanceUsage comment).
* **Units**: ``cpus`` are NCUs (Google Compute Units, normalised) and ``memory`` normalised bytes,
  both scaled so the largest machine is about 1.0 (``Resources`` in clusterdata_trace_format_v3.proto;
  v3 document: memory divided by the largest machine memory seen in the traces, GCUs scaled
  alike). Google does not say what 1.0 is; :data:`DEFAULT_SCALE` is an **assumption** (a
  large two-socket server of 2019: 96 cores, 384 GiB) that callers replace with their own
  :class:`~kalena.traces.model.Scale`. Usage over request does not depend on it.
* **Codes** (clusterdata_trace_format_v3.proto): instance event ``type`` 0 SUBMIT, 1 QUEUE,
  2 ENABLE, 3 SCHEDULE, 4 EVICT, 5 FAIL, 6 FINISH, 7 KILL, 8 LOST, 9 UPDATE_PENDING,
  10 UPDATE_RUNNING; machine event ``type`` 0 EVENT_TYPE_UNKNOWN, 1 ADD, 2 REMOVE, 3 UPDATE;
  ``collection_type`` 0 JOB (tasks), 1 ALLOC_SET (alloc instances: reservations tasks run inside);
  ``machine_id`` 0 NO_MACHINE, -1 DEDICATED_MACHINE; ``resource_request`` is what the instance
  asked for when submitted or last updated (so every event restates the request in force).
* **Tiers** by ``priority`` (v3 document): free tier <= 99, best-effort batch 100-115 (the
  "Borg: the Next Generation" paper says 110-115; batch here either way), mid-tier 116-119,
  production 120-359, monitoring >= 360. Here production is priority >= 120 (production and
  monitoring: the tiers with SLOs Borg evicts others for); the rest is batch. The priority is kept
  as the trace gives it.

What a read keeps (the same shape as :mod:`kalena.traces.google2011`):

* **Inputs**, found under ``root`` by pattern (``notes`` names what was used): machines from
  ``machine_events*.json*``, else from the derived histogram ``*<cell>_host_resource.csv``;
  instances from ``instance_events*.json*``, else from the derived ``*<cell>_user_requests.csv``;
  usage from ``instance_usage*.json*`` (optional). A raw file whose path names a cell
  (``cell_b``, ``clusterdata_2019_b``) is read only for that cell; one that names none is taken as
  the requested cell's (a bucket holds one cell).
* **Machines**: those present at the window's start (their last event at or before it is an ADD or
  UPDATE), with their last capacity then; machines added inside the window are not replayed (a note
  counts them and the removals). Named ``cell-<cell>-m<machine_id>``, sorted by id.
* **Instances** (collection_id, instance_index) of jobs only: alloc instances are reservations
  that the tasks inside them already ask for, so replaying both would count a request twice (their
  rows are skipped, counted). The request is the last SUBMIT / UPDATE_PENDING / UPDATE_RUNNING
  request at or before its first SCHEDULE (without one, the SCHEDULE's own; never scheduled: the
  latest), in cores (NCU x ``scale.cores``) and GiB (memory x ``scale.gib``). ``submit`` is its
  first SUBMIT (without one, its first event). ``duration`` is the time it ran in the window (every
  SCHEDULE to the next EVICT, FAIL, FINISH, KILL or LOST, summed; a run that began before the window
  counts from 0), ``nan`` if it never ran or was still running when the data (or the window) ends:
  censored. ``machine`` is its first SCHEDULE's machine if replayed, else -1. ``job`` is the
  collection (a job's instances with one request are one class); ids are ``<collection>-<index>``.
  An instance whose events all lie before the window and end with a terminal event had gone before
  it and is skipped.
* **Left out**, each counted in a note: instances without any request (nothing to place), with a
  zero request in both cpu and memory (it claims nothing, and usage over request is undefined; a
  zero in one dimension is kept: Borg tasks may ask for no cpu and run on slack), asking for more
  than every kept machine offers (no machine of the replay could hold them), machine events without
  a capacity, usage rows without ``average_usage``.
* **Sampling** ``machines=N``: :func:`~kalena.traces.model.pick_machines` keeps N; production is
  kept where the trace first ran it (on a kept machine; never placed: by its job's stable hash),
  batch by its job's stable hash with the share of machines kept (Kalena schedules batch itself).
* **Window** ``hours=H``: rows at or after H hours (and every 2^63 - 1 row) are skipped; the
  horizon is H hours, else the last time a kept task's event or usage sample reaches.
* **Usage**: each ``instance_usage`` row of a kept task that starts in the window is a sample:
  ``t`` its start (clipped to 0), ``span`` its length, ``cpu`` = average_usage.cpus x
  ``scale.cores``, ``ram`` = average_usage.memory x ``scale.gib``.

The derived fallbacks (real BigQuery outputs over cell data, kept by LGDCloudSim; PROVENANCE.md
section 2 gives their queries): ``2019_<cell>_host_resource.csv`` (``cpus,ram,machine_count``: how
many machines had each capacity; one that changed capacity counts under each) becomes
``machine_count`` machines per row named ``cell-<cell>-shape<row>-<n>``, in file order;
``2019_<cell>_user_requests.csv`` (per instance: its first event time and mean request, no priority,
no machine, no end) becomes one task each, all of tier ``derived_tier`` (priority 0), unplaced,
duration unknown.

Streaming: files are read a line at a time (``json.loads`` per line, :func:`csv_rows` for CSV);
with ``machines=N`` a first pass over instance_events notes only the instances scheduled on a kept
machine, and the second holds full state only for the kept share, so memory follows the kept part
of the trace, not the file. Usage rows are filtered as they are read. A malformed line (not JSON, a
mandatory key missing, a value that is not a number) is a :class:`TraceError` naming file, line,
key and value.
"""

from __future__ import annotations

import functools
import gzip
import json
import math
import re
from array import array
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from kalena.traces.files import csv_rows, number, open_text
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

SOURCE = "google-2019"
#: What 1.0 NCU and 1.0 normalised memory are taken to be: an assumption (module docstring).
DEFAULT_SCALE = Scale(cores=96.0, gib=384.0)
WINDOW_START_US = 600_000_000
AFTER_WINDOW_US = 2**63 - 1
PRODUCTION_PRIORITY = 120  # v3 document: production 120-359, monitoring >= 360
TIERS = ("production", "batch")

# Instance event types (clusterdata_trace_format_v3.proto, EventType).
SUBMIT, QUEUE, ENABLE, SCHEDULE, EVICT, FAIL, FINISH, KILL, LOST, UPDATE_PENDING, UPDATE_RUNNING = range(11)
ENDS = frozenset((EVICT, FAIL, FINISH, KILL, LOST))
REQUESTS = frozenset((SUBMIT, UPDATE_PENDING, UPDATE_RUNNING))
# Machine event types (MachineEvent.EventType) and collection types.
M_UNKNOWN, ADD, REMOVE, UPDATE = range(4)
JOB, ALLOC_SET = 0, 1

HOST_COLUMNS = ("cpus", "ram", "machine_count")
REQUEST_COLUMNS = ("time", "user", "collection_id", "instance_index", "cpus", "ram", "collection_type")
# A line that can be a SCHEDULE event (``"type":"3"``, as a string or a number, any spacing): the
# first pass of a sampled read parses only these (the second parses, and checks, every line).
_SCHEDULE_LINE = re.compile(r'"type"\s*:\s*(?:"3"|3)\s*[,}]')
_CELL_TAG = re.compile(r"(?<![a-z0-9])(?:cell|clusterdata[_-]2019)[_-]([a-z])(?![a-z0-9])", re.IGNORECASE)


# ----------------------------------------------------------------------------------------------
# Lines and fields


def _json_rows(path: Path, only: re.Pattern[str] | None = None) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(line number, object)`` of every non-blank line of a JSON Lines file, one at a time; with
    ``only``, of the lines that pattern finds (the others are not parsed)."""
    with open_text(path) as f:
        line = 0
        try:
            for text in f:
                line += 1
                if text.isspace() or (only is not None and only.search(text) is None):
                    continue
                try:
                    row = json.loads(text)
                except json.JSONDecodeError as e:
                    raise TraceError(
                        f"{path}:{line}: not JSON ({e.msg} at column {e.colno}; line starts {text[:60]!r})"
                    ) from None
                if not isinstance(row, dict):
                    raise TraceError(f"{path}:{line}: not a JSON object (value: {text[:60]!r})")
                yield line, row
        except (OSError, EOFError, UnicodeDecodeError, gzip.BadGzipFile) as e:
            raise TraceError(f"{path}:{line + 1}: unreadable: {e}") from None


def _int(path: Path, line: int, row: dict[str, Any], key: str, *, optional: bool = False) -> int | None:
    """An int64 field (BigQuery writes them as strings); absent or null is an error unless optional."""
    value = row.get(key)
    kind = type(value)  # exact types: this runs a few times per line of a huge file (and bool is no int here)
    if kind is str:
        try:
            return int(value)
        except ValueError:
            pass
    elif kind is int:
        return value
    elif value is None:
        if optional:
            return None
        raise TraceError(f"{path}:{line}: {key}: missing (a mandatory field)")
    elif kind is float and value.is_integer():
        return int(value)
    raise TraceError(f"{path}:{line}: {key}: not an integer (value: {value!r})")


def _float(path: Path, line: int, key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise TraceError(f"{path}:{line}: {key}: not a number (value: {value!r})")
    try:
        out = float(value)
    except ValueError:
        raise TraceError(f"{path}:{line}: {key}: not a number (value: {value!r})") from None
    if not math.isfinite(out):
        raise TraceError(f"{path}:{line}: {key}: not a finite number (value: {value!r})")
    return out


def _resources(path: Path, line: int, row: dict[str, Any], key: str) -> tuple[float, float] | None:
    """A ``Resources`` field as (cpus, memory), ``None`` when absent; an unset member reads 0 (proto2's
    default for an optional float)."""
    value = row.get(key)
    if value is None:
        return None
    if not isinstance(value, dict):
        raise TraceError(f"{path}:{line}: {key}: not a Resources object (value: {value!r})")
    cpus, mem = value.get("cpus"), value.get("memory")
    return (
        0.0 if cpus is None else _float(path, line, f"{key}.cpus", cpus),
        0.0 if mem is None else _float(path, line, f"{key}.memory", mem),
    )


def _seconds(us: int) -> float:
    """A trace time (finite, not after the window) as seconds from the window's start; before it: 0."""
    return max(us - WINDOW_START_US, 0) / 1e6


def _instance_key(path: Path, line: int, cid: int, idx: int) -> int:
    """(collection_id, instance_index) as one int: a dict key smaller than a tuple."""
    if not 0 <= idx < 2**32:
        raise TraceError(f"{path}:{line}: instance_index: out of range (value: {idx})")
    return cid * 2**32 + idx


# ----------------------------------------------------------------------------------------------
# Finding the inputs


def _cell_of(path: Path) -> str | None:
    found = _CELL_TAG.findall(str(path))
    return found[-1].lower() if found else None


def _raw(root: Path, table: str, cell: str) -> list[Path]:
    """The shards of a raw table under ``root`` (sorted), those naming another cell left out."""
    found = sorted(p for p in root.glob(f"**/{table}*.json*") if p.is_file())
    return [p for p in found if _cell_of(p.relative_to(root)) in (None, cell)]


def _derived(root: Path, what: str, cell: str) -> Path | None:
    """The one derived extract ``*<cell>_<what>.csv`` (LGDCloudSim's ``2019_<cell>_<what>.csv``)."""
    name = re.compile(rf"(?:^|[^a-z0-9]){re.escape(cell)}_{what}\.csv(?:\.gz)?$", re.IGNORECASE)
    found = sorted(p for p in root.glob(f"**/*{cell}_{what}.csv*") if p.is_file() and name.search(p.name))
    if len(found) > 1:
        raise TraceError(f"{root}: several {what} extracts for cell {cell}: {', '.join(map(str, found))}")
    return found[0] if found else None


def _named(files: list[Path]) -> str:
    """The files a note names: all of a few, else the first and last of the shards."""
    names = [p.name for p in files]
    return ", ".join(names) if len(names) <= 3 else f"{names[0]} ... {names[-1]}, {len(names)} files"


def _check_header(path: Path, expected: tuple[str, ...]) -> None:
    with open_text(path) as f:
        first = f.readline().strip().split(",")
    if tuple(c.strip() for c in first[: len(expected)]) != expected:
        raise TraceError(f"{path}:1: header {first!r}, expected {','.join(expected)}")


# ----------------------------------------------------------------------------------------------
# Machines


@dataclass
class _Machines:
    names: list[str]
    cpu: np.ndarray  # cores
    ram: np.ndarray  # GiB
    ids: list[int] | None  # trace machine ids (raw machine_events only)


def _raw_machines(files: list[Path], cell: str, scale: Scale, limit_us: float, notes: list[str]) -> _Machines:
    """Machines present at the window's start, from machine_events."""
    state: dict[int, tuple[int, int, int]] = {}  # id -> (time, seq, type) of its last event up to the start
    capacity: dict[int, tuple[int, int, float, float]] = {}  # id -> (time, seq, cpus, memory)
    later_added: set[int] = set()
    later_removed: set[int] = set()
    no_capacity = unknown = later_updates = seq = 0
    for path in files:
        for line, row in _json_rows(path):
            seq += 1
            t = _int(path, line, row, "time")
            mid = _int(path, line, row, "machine_id")
            kind = _int(path, line, row, "type")
            if t == AFTER_WINDOW_US or t >= limit_us:
                continue
            if kind not in (M_UNKNOWN, ADD, REMOVE, UPDATE):
                raise TraceError(
                    f"{path}:{line}: type: not a machine event type (value: {row.get('type')!r})"
                )
            if kind == M_UNKNOWN:
                unknown += 1
                continue
            cap = _resources(path, line, row, "capacity")
            if t > WINDOW_START_US:  # inside the window: not replayed (the cluster is fixed), counted
                if kind == ADD:
                    later_added.add(mid)
                elif kind == REMOVE:
                    later_removed.add(mid)
                else:
                    later_updates += 1
                continue
            old = state.get(mid)
            if old is None or (t, seq) > old[:2]:
                state[mid] = (t, seq, kind)
            if kind in (ADD, UPDATE):
                if cap is None:
                    no_capacity += 1
                    continue
                old_cap = capacity.get(mid)
                if old_cap is None or (t, seq) > old_cap[:2]:
                    capacity[mid] = (t, seq, *cap)
    present = sorted(m for m, (_, _, kind) in state.items() if kind != REMOVE)
    lacking = [m for m in present if m not in capacity]
    present = [m for m in present if m in capacity]
    if not present:
        raise TraceError(f"{files[0].parent}: machine_events: no machine present at the window's start")
    if no_capacity or lacking:
        notes.append(
            f"{no_capacity} machine events without a capacity were skipped; "
            f"{len(lacking)} machines present at the start without any capacity were left out"
        )
    if unknown:
        notes.append(f"{unknown} machine events of type EVENT_TYPE_UNKNOWN were skipped")
    added = len(later_added - set(present))
    removed = len(later_removed & set(present))
    if added or removed or later_updates:
        notes.append(
            f"{added} machines added, {removed} removed and {later_updates} capacity updates inside the "
            "window are not replayed (the replay's machines are those present at its start)"
        )
    return _Machines(
        names=[f"cell-{cell}-m{m}" for m in present],
        cpu=np.array([capacity[m][2] for m in present]) * scale.cores,
        ram=np.array([capacity[m][3] for m in present]) * scale.gib,
        ids=present,
    )


def _derived_machines(path: Path, cell: str, scale: Scale, notes: list[str]) -> _Machines:
    """Machines synthesised from a host_resource histogram: ``machine_count`` of each shape."""
    _check_header(path, HOST_COLUMNS)
    names: list[str] = []
    cpu: list[float] = []
    ram: list[float] = []
    empty = 0
    for shape, (line, row) in enumerate(csv_rows(path, len(HOST_COLUMNS), header=True)):
        cpus = number(path, line, "cpus", row[0])
        mem = number(path, line, "ram", row[1])
        count = number(path, line, "machine_count", row[2])
        if not count.is_integer() or count < 0:
            raise TraceError(f"{path}:{line}: machine_count: not a count (value: {row[2]!r})")
        if count == 0 or (cpus <= 0 and mem <= 0):
            empty += 1
            continue
        for n in range(int(count)):
            names.append(f"cell-{cell}-shape{shape:02d}-{n:04d}")
            cpu.append(cpus * scale.cores)
            ram.append(mem * scale.gib)
    if not names:
        raise TraceError(f"{path}: no machines in the histogram")
    notes.append(
        f"machines from the derived histogram {path.name} (no machine_events): {len(names)} machines "
        "named by shape in file order; a machine whose capacity changed counts once per shape"
    )
    if empty:
        notes.append(f"{empty} histogram rows without machines or capacity were skipped")
    return _Machines(names=names, cpu=np.array(cpu), ram=np.array(ram), ids=None)


# ----------------------------------------------------------------------------------------------
# Instances


class _Inst:
    """What the events of one instance leave (min / max / latest-before: order-independent)."""

    __slots__ = (
        "cid",
        "first",
        "idx",
        "last",
        "prio",
        "reqs",
        "runs",
        "sched",
        "sched_prio",
        "sched_req",
        "submit",
    )

    def __init__(self, cid: int, idx: int) -> None:
        self.cid, self.idx = cid, idx
        self.submit: int | None = None  # first SUBMIT (µs)
        self.first: int | None = None  # first event of any kind
        self.last: tuple[int, int, int] = (-1, -1, -1)  # (time, seq, type) of the latest event
        self.sched: tuple[int, int, int] | None = None  # (time, seq, machine_id) of the first SCHEDULE
        self.sched_req: tuple[float, float] | None = None
        self.sched_prio: int | None = None
        self.prio: tuple[int, int, int] | None = None  # (time, seq, priority) of the latest event with one
        self.reqs: list[tuple[int, int, float, float, int | None]] = []  # SUBMIT/UPDATE requests
        self.runs: list[tuple[int, int, bool]] = []  # (time, seq, is a SCHEDULE) of starts and ends


@dataclass
class _Row:
    """One task, decided: what the Tasks arrays are built from."""

    cid: int
    idx: int
    priority: int
    production: bool
    cpus: float  # normalised request
    mem: float
    submit: float  # s
    duration: float
    machine_id: int | None  # the trace's machine (raw) or None
    last: float  # s: the latest time of its events
    no_submit: bool = False  # no SUBMIT in the window: it arrives at its first event


@dataclass
class _Counts:
    alloc_rows: int = 0
    after_rows: int = 0
    gone: int = 0
    no_request: int = 0
    no_priority: int = 0
    off_machines: int = 0  # production first run on a machine not replayed
    unsampled: int = 0  # left out by the job hash
    unsampled_rows: int = 0  # rows skipped in the second pass of a sampled read
    duplicates: int = 0


def _event_head(path: Path, line: int, row: dict[str, Any], limit_us: float) -> tuple[int, int, int] | None:
    """(time, type, collection_type) of an instance event, ``None`` when it is outside the window."""
    t = _int(path, line, row, "time")
    kind = _int(path, line, row, "type")
    if not 0 <= kind <= UPDATE_RUNNING:
        raise TraceError(f"{path}:{line}: type: not an instance event type (value: {row.get('type')!r})")
    ctype = _int(path, line, row, "collection_type", optional=True)
    if t == AFTER_WINDOW_US or t >= limit_us:
        return None
    return t, kind, JOB if ctype is None else ctype


def _raw_instances(
    files: list[Path],
    *,
    limit_us: float,
    kept_ids: set[int] | None,
    share: float,
    counts: _Counts,
) -> dict[int, _Inst]:
    """The instances of the window from instance_events; with ``kept_ids`` (sampling), only those a
    replay may keep: of a job the hash keeps, or scheduled on a kept machine at least once."""
    # A job's hash, remembered for the jobs met lately (a job's rows come close together; bounded).
    job_kept = functools.lru_cache(maxsize=2**16)(lambda cid: keeps_unplaced(str(cid), share))
    candidates: set[int] | None = None
    if kept_ids is not None:  # first pass: the instances of unsampled jobs that ran on a kept machine
        candidates = set()
        for path in files:
            for line, row in _json_rows(path, _SCHEDULE_LINE):
                head = _event_head(path, line, row, limit_us)
                if head is None or head[1] != SCHEDULE or head[2] == ALLOC_SET:
                    continue
                cid = _int(path, line, row, "collection_id")
                idx = _int(path, line, row, "instance_index")
                if _int(path, line, row, "machine_id", optional=True) in kept_ids and not job_kept(cid):
                    candidates.add(_instance_key(path, line, cid, idx))
    insts: dict[int, _Inst] = {}
    seq = 0
    for path in files:
        for line, row in _json_rows(path):
            seq += 1
            head = _event_head(path, line, row, limit_us)
            if head is None:
                counts.after_rows += 1
                continue
            t, kind, ctype = head
            if ctype == ALLOC_SET:
                counts.alloc_rows += 1
                continue
            cid = _int(path, line, row, "collection_id")
            idx = _int(path, line, row, "instance_index")
            key = _instance_key(path, line, cid, idx)
            if candidates is not None and key not in candidates and not job_kept(cid):
                counts.unsampled_rows += 1
                continue
            prio = _int(path, line, row, "priority", optional=True)
            req = _resources(path, line, row, "resource_request")
            inst = insts.get(key)
            if inst is None:
                inst = insts[key] = _Inst(cid, idx)
            inst.first = t if inst.first is None else min(inst.first, t)
            if (t, seq) > inst.last[:2]:
                inst.last = (t, seq, kind)
            if prio is not None and (inst.prio is None or (t, seq) > inst.prio[:2]):
                inst.prio = (t, seq, prio)
            if kind == SUBMIT:
                inst.submit = t if inst.submit is None else min(inst.submit, t)
            if kind in REQUESTS and req is not None:
                inst.reqs.append((t, seq, req[0], req[1], prio))
            if kind == SCHEDULE:
                mid = _int(path, line, row, "machine_id", optional=True)
                first = (t, seq, 0 if mid is None else mid)
                if inst.sched is None or first[:2] < inst.sched[:2]:
                    inst.sched, inst.sched_req, inst.sched_prio = first, req, prio
            if kind == SCHEDULE or kind in ENDS:
                inst.runs.append((t, seq, kind == SCHEDULE))
    return insts


def _decide(inst: _Inst, counts: _Counts) -> _Row | None:
    """An instance's task row (request, tier, submit, duration), ``None`` if it has none."""
    if inst.last[0] <= WINDOW_START_US and inst.last[2] in ENDS:
        counts.gone += 1  # all its events are before the window and the last is its end
        return None
    start = inst.sched[:2] if inst.sched is not None else None
    reqs = [r for r in inst.reqs if start is None or r[:2] <= start]
    if reqs:
        _, _, cpus, mem, prio = max(reqs, key=lambda r: r[:2])
    elif inst.sched_req is not None:
        (cpus, mem), prio = inst.sched_req, inst.sched_prio
    else:
        counts.no_request += 1
        return None
    if prio is None:
        prio = inst.sched_prio if inst.sched_prio is not None else (inst.prio[2] if inst.prio else None)
    if prio is None:
        counts.no_priority += 1
        return None
    ran, since, started = 0.0, None, False
    for t, _, is_start in sorted(inst.runs):
        if is_start and since is None:
            since, started = _seconds(t), True
        elif not is_start and since is not None:
            ran += _seconds(t) - since
            since = None
    submit = _seconds(inst.submit if inst.submit is not None else inst.first or 0)
    return _Row(
        cid=inst.cid,
        idx=inst.idx,
        priority=prio,
        production=prio >= PRODUCTION_PRIORITY,
        cpus=cpus,
        mem=mem,
        submit=submit,
        duration=ran if started and since is None else math.nan,
        machine_id=inst.sched[2] if inst.sched is not None else None,
        last=_seconds(inst.last[0]),
        no_submit=inst.submit is None,
    )


def _derived_requests(
    path: Path, *, tier: str, limit_us: float, share: float, counts: _Counts
) -> Iterator[_Row]:
    """Tasks of a user_requests extract (LGDCloudSim's BigQuery output): one per instance."""
    _check_header(path, REQUEST_COLUMNS)
    seen: set[int] = set()
    production = tier == "production"
    for line, row in csv_rows(path, len(REQUEST_COLUMNS), header=True):
        t = _int(path, line, {"time": row[0]}, "time")
        if t == AFTER_WINDOW_US or t >= limit_us:
            counts.after_rows += 1
            continue
        if _int(path, line, {"collection_type": row[6]}, "collection_type", optional=True) == ALLOC_SET:
            counts.alloc_rows += 1
            continue
        cid = _int(path, line, {"collection_id": row[2]}, "collection_id")
        idx = _int(path, line, {"instance_index": row[3]}, "instance_index")
        key = _instance_key(path, line, cid, idx)
        if key in seen:
            counts.duplicates += 1
            continue
        seen.add(key)
        if not keeps_unplaced(str(cid), share):  # never placed: sampled by its job's hash
            counts.unsampled += 1
            continue
        if row[4] == "" or row[5] == "":
            counts.no_request += 1
            continue
        s = _seconds(t)
        yield _Row(
            cid=cid,
            idx=idx,
            priority=0,
            production=production,
            cpus=number(path, line, "cpus", row[4]),
            mem=number(path, line, "ram", row[5]),
            submit=s,
            duration=math.nan,
            machine_id=None,
            last=s,
        )


# ----------------------------------------------------------------------------------------------
# Usage


def _usage(
    files: list[Path], *, scale: Scale, limit_us: float, task_of: dict[int, int], notes: list[str]
) -> Usage:
    """instance_usage samples of the kept tasks that start in the window, sorted by (task, t)."""
    task, t0 = array("q"), array("d")
    span, cpu, ram = array("d"), array("d"), array("d")
    other = outside = no_average = bad = alloc = 0
    for path in files:
        for line, row in _json_rows(path):
            start = _int(path, line, row, "start_time")
            end = _int(path, line, row, "end_time")
            cid = _int(path, line, row, "collection_id")
            idx = _int(path, line, row, "instance_index")
            if _int(path, line, row, "collection_type", optional=True) == ALLOC_SET:
                alloc += 1
                continue
            if start == AFTER_WINDOW_US or start >= limit_us:
                outside += 1
                continue
            i = task_of.get(_instance_key(path, line, cid, idx))
            if i is None:  # the bulk of a sampled read: dropped before the rest is parsed
                other += 1
                continue
            avg = _resources(path, line, row, "average_usage")
            if avg is None:
                no_average += 1
                continue
            t = _seconds(start)
            if end == AFTER_WINDOW_US or _seconds(end) <= t:
                bad += 1  # no length inside the window
                continue
            task.append(i)
            t0.append(t)
            span.append(_seconds(end) - t)
            cpu.append(avg[0] * scale.cores)
            ram.append(avg[1] * scale.gib)
    notes.append(
        f"usage from instance_usage ({_named(files)}): {len(task)} samples of kept tasks "
        "(t: start of the window clipped to 0, cpu: average_usage.cpus, ram: average_usage.memory)"
    )
    for n, what in (
        (other, "of instances not replayed"),
        (outside, "starting after the window"),
        (alloc, "of alloc instances"),
        (no_average, "without average_usage"),
        (bad, "with no length inside the window"),
    ):
        if n:
            notes.append(f"{n} instance_usage rows {what} were skipped")
    tk = np.frombuffer(task, dtype=np.int64) if len(task) else np.zeros(0, dtype=np.int64)
    tt = np.array(t0)
    order = np.lexsort((tt, tk))
    return Usage(
        task=tk[order],
        t=tt[order],
        span=np.array(span)[order],
        cpu=np.array(cpu)[order],
        ram=np.array(ram)[order],
    )


# ----------------------------------------------------------------------------------------------
# The reader


def read(
    root: Path,
    *,
    scale: Scale = DEFAULT_SCALE,
    machines: int | None = None,
    hours: float | None = None,
    cell: str = "a",
    derived_tier: str = "production",
) -> Trace:
    """Read cell ``cell`` of the 2019 trace under ``root`` for the window ``[0, hours)`` (default:
    the data's end), keeping at most ``machines`` machines (module docstring for every rule)."""
    root = Path(root)
    if not root.is_dir():
        raise TraceError(f"{root}: not a folder (the 2019 trace's tables or its derived extracts)")
    if not re.fullmatch(r"[a-z]", cell):
        raise ValueError(f"cell must be one lower-case letter (the 2019 cells are a-h), not {cell!r}")
    if derived_tier not in TIERS:
        raise ValueError(f"derived_tier must be one of {TIERS}, not {derived_tier!r}")
    if hours is not None and not hours > 0:
        raise ValueError(f"hours must be positive, not {hours!r}")
    if machines is not None and machines < 0:
        raise ValueError(f"machines must be at least 0, not {machines!r}")
    limit_us = math.inf if hours is None else WINDOW_START_US + hours * 3600e6
    notes: list[str] = [
        f"cpu (NCU) and memory normalised to the largest machine: 1.0 taken as {scale.cores:g} cores "
        f"and {scale.gib:g} GiB (an assumption)",
        "time 0 is the trace window's start (600 s into the trace clock); times before it "
        "(0 and < 600 s) read as 0, 2^63-1 (after the window) rows are skipped",
        f"production is priority >= {PRODUCTION_PRIORITY} (production and monitoring tiers), "
        "the rest (free, best-effort batch, mid-tier) is batch",
    ]

    # Machines: raw machine_events, else the derived histogram.
    raw_machine_files = _raw(root, "machine_events", cell)
    if raw_machine_files:
        notes.append(f"machines from machine_events ({_named(raw_machine_files)}), present at the start")
        ms = _raw_machines(raw_machine_files, cell, scale, limit_us, notes)
    else:
        hist = _derived(root, "host_resource", cell)
        if hist is None:
            raise TraceError(
                f"{root}: no machines for cell {cell} (looked for machine_events*.json* and "
                f"*{cell}_host_resource.csv)"
            )
        ms = _derived_machines(hist, cell, scale, notes)
    keep = pick_machines(ms.names, machines)
    share = int(keep.sum()) / len(ms.names)
    kept_cpu, kept_ram = ms.cpu[keep], ms.ram[keep]
    index: dict[int, int] = {}
    if ms.ids is not None:
        kept_ids = [m for m, k in zip(ms.ids, keep.tolist(), strict=True) if k]
        index = {m: i for i, m in enumerate(kept_ids)}
    if machines is not None and share < 1.0:
        notes.append(
            f"{int(keep.sum())} of {len(ms.names)} machines kept (stable hash); production where the "
            f"trace ran it, batch and never-placed production by their job's hash ({share:.2%} of jobs)"
        )

    # Instances: raw instance_events, else the derived requests.
    counts = _Counts()
    event_files = _raw(root, "instance_events", cell)
    rows: list[_Row] = []
    if event_files:
        notes.append(f"instances from instance_events ({_named(event_files)})")
        if ms.ids is None:
            notes.append(
                "instance_events' machine ids cannot name the histogram's synthesised machines: "
                "every task is read as never placed"
            )
        sampled = set(index) if share < 1.0 and ms.ids is not None else None
        insts = _raw_instances(event_files, limit_us=limit_us, kept_ids=sampled, share=share, counts=counts)
        for inst in insts.values():
            row = _decide(inst, counts)
            if row is None:
                continue
            if ms.ids is None:
                row.machine_id = None
            placed = row.machine_id is not None and row.machine_id in index
            if row.production and row.machine_id is not None and ms.ids is not None:
                if not placed:
                    counts.off_machines += 1  # it ran on a machine the replay does not have
                    continue
            elif not keeps_unplaced(str(row.cid), share):
                counts.unsampled += 1
                continue
            if not placed:
                row.machine_id = None
            rows.append(row)
        del insts
    else:
        requests = _derived(root, "user_requests", cell)
        if requests is None:
            raise TraceError(
                f"{root}: no instances for cell {cell} (looked for instance_events*.json* and "
                f"*{cell}_user_requests.csv)"
            )
        notes.append(
            f"instances from the derived extract {requests.name} (no instance_events): first event "
            f"time and mean request per instance, no priority: every task is {derived_tier} "
            "(priority 0), never placed, duration unknown"
        )
        rows = list(
            _derived_requests(requests, tier=derived_tier, limit_us=limit_us, share=share, counts=counts)
        )

    # Requests: none at all, or more than any kept machine offers.
    zero = [r for r in rows if r.cpus <= 0 and r.mem <= 0]
    rows = [r for r in rows if not (r.cpus <= 0 and r.mem <= 0)]
    shapes = np.unique(np.stack([kept_cpu, kept_ram], axis=1), axis=0) if len(kept_cpu) else np.zeros((0, 2))
    req = np.array([(r.cpus * scale.cores, r.mem * scale.gib) for r in rows]).reshape(-1, 2)
    fits = np.zeros(len(rows), dtype=bool)
    for c, m in shapes:  # a handful of shapes, not one test per machine
        fits |= (req[:, 0] <= c) & (req[:, 1] <= m)
    too_big = int((~fits).sum())
    rows = [r for r, f in zip(rows, fits.tolist(), strict=True) if f]
    rows.sort(key=lambda r: (r.submit, r.cid, r.idx))

    for n, what in (
        (counts.after_rows, "rows after the window were skipped"),
        (counts.alloc_rows, "rows of alloc instances (collection_type 1, reservations) were skipped"),
        (counts.duplicates, "repeated instances of the extract were skipped (the first kept)"),
        (counts.gone, "instances whose events all precede the window and end it had gone: skipped"),
        (counts.no_request, "instances that never stated a request were left out"),
        (counts.no_priority, "instances without a priority were left out"),
        (len(zero), "instances with a zero cpu and memory request were left out"),
        (too_big, "instances asking for more than every kept machine offers were left out"),
        (counts.off_machines, "production instances first run on a machine not replayed were left out"),
        (counts.unsampled, "instances of jobs outside the sample were left out"),
        (counts.unsampled_rows, "instance_events rows of instances outside the sample were skipped"),
        (
            sum(r.no_submit for r in rows),
            "kept instances without a SUBMIT in the window arrive at their first event",
        ),
    ):
        if n:
            notes.append(f"{n} {what}")

    ids = tuple(f"{r.cid}-{r.idx}" for r in rows)
    tasks = Tasks(
        ids=ids,
        job=tuple(str(r.cid) for r in rows),
        production=np.array([r.production for r in rows], dtype=bool),
        priority=np.array([r.priority for r in rows], dtype=np.int64),
        cpu=np.array([r.cpus for r in rows], dtype=float) * scale.cores,
        ram=np.array([r.mem for r in rows], dtype=float) * scale.gib,
        submit=np.array([r.submit for r in rows], dtype=float),
        duration=np.array([r.duration for r in rows], dtype=float),
        machine=np.array([-1 if r.machine_id is None else index[r.machine_id] for r in rows], dtype=np.int64),
    )
    n_prod = int(tasks.production.sum())
    notes.append(f"{len(rows)} tasks kept ({n_prod} production, {len(rows) - n_prod} batch)")

    usage_files = _raw(root, "instance_usage", cell)
    if usage_files:
        task_of = {r.cid * 2**32 + r.idx: i for i, r in enumerate(rows)}
        usage = _usage(usage_files, scale=scale, limit_us=limit_us, task_of=task_of, notes=notes)
    else:
        notes.append("no instance_usage: no usage samples (the replay uses its tiers' assumptions)")
        usage = Usage.empty()

    if hours is not None:
        horizon = hours * 3600.0
    else:
        ends = [r.last for r in rows] + [r.submit + r.duration for r in rows if math.isfinite(r.duration)]
        horizon = max(ends, default=0.0)
        if len(usage):
            horizon = max(horizon, float((usage.t + usage.span).max()))
        notes.append(f"horizon: the last time a kept task's event or sample reaches ({horizon:g} s)")
    return Trace(
        source=SOURCE,
        horizon_s=float(horizon),
        machines=Machines(
            tuple(n for n, k in zip(ms.names, keep.tolist(), strict=True) if k), kept_cpu, kept_ram
        ),
        tasks=tasks,
        usage=usage,
        notes=tuple(notes),
    )
