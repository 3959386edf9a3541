"""The usage archive: what each workload used and was reserved, over days, with events and causes.

Three levels, each rolled from the one below by :meth:`Archive.compact` and kept for its own time
(:class:`Retention`):

* ``archive_samples``: raw rows as the shells record them (usage and reservation on all eight
  dimensions, throttled seconds since the last sample), kept 6 hours by default;
* ``archive_buckets`` at 300 s: per workload and 5 minutes, the count, mean and quantile knots of usage
  and reservation (:mod:`kalena.core.distribution`), kept 14 days;
* ``archive_buckets`` at 3600 s: the 5-minute buckets of each hour merged exactly as mixtures, kept
  400 days.

``archive_events`` (evictions, throttles, OOM kills, limit breaches, each with its cause) are kept
400 days. A window read (:meth:`Archive.window`) uses each level where the finer one is gone.

Buckets do not keep the node. ``archive_placements`` does: where each workload ran, as intervals
``[first_at, last_at]`` of its samples on one node (a move to another node, or more than
:data:`PLACEMENT_GAP_S` without a sample, starts a new one), written from the samples each
rollup rolls, so it outlives the raw samples; kept as long as the hourly buckets.
:meth:`Archive.placements` reads it together with the raw samples not rolled yet.
The tables are prefixed, so an archive can share a file with the node agent's store.

Every write is one transaction: a record is either all there or absent, and :meth:`record`
returns only after its commit (durable: an acknowledged record survives a crash of the writer).
A rollup and the deletion it permits are one transaction with the watermark they move, so an
interrupted compaction leaves the archive as it was and the next one redoes it.
"""

from __future__ import annotations

import dataclasses
import json
import math
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from kalena.archive.backends import ArchiveError, Backend, connect
from kalena.core.distribution import KNOT_LEVELS, Buckets, merge, mixture_quantiles, summarise
from kalena.core.resources import DIMS, NDIM
from kalena.core.stationkeeper import Adjustment, AdjustmentBook, Knob, Outcome
from kalena.core.validate import check_number, fail

SCHEMA_VERSION = 1
LEVELS = (300.0, 3600.0)
#: The columns of a dimension (``disk.read`` -> ``disk_read``).
_COLS = tuple(d.replace(".", "_") for d in DIMS)
_USAGE = tuple(f"u_{c}" for c in _COLS)
_RES = tuple(f"r_{c}" for c in _COLS)
_K = len(KNOT_LEVELS)
#: Workloads a window reads at once (about 1 KiB a bucket: a week of hourly buckets for 256 of them
#: is some 50 MB).
CHUNK = 256
#: A bucket width that puts every start into one slot (a window read merges each workload whole).
_WHOLE = 1e18
#: A workload with no sample for longer than this starts a new placement interval even on the same
#: node (so an interval never claims a long stretch in which it ran nowhere).
PLACEMENT_GAP_S = LEVELS[1]

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS archive_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS archive_samples (workload TEXT NOT NULL, node TEXT NOT NULL,"
    " at DOUBLE PRECISION NOT NULL, throttled_s DOUBLE PRECISION, "
    + ", ".join(f"{c} DOUBLE PRECISION" for c in (*_USAGE, *_RES))
    + ")",
    "CREATE INDEX IF NOT EXISTS archive_samples_at ON archive_samples(at)",
    "CREATE INDEX IF NOT EXISTS archive_samples_workload ON archive_samples(workload, at)",
    "CREATE TABLE IF NOT EXISTS archive_buckets (level INTEGER NOT NULL, workload TEXT NOT NULL,"
    " start DOUBLE PRECISION NOT NULL, throttled_s DOUBLE PRECISION NOT NULL, stats {blob} NOT NULL,"
    " PRIMARY KEY (level, workload, start))",
    "CREATE INDEX IF NOT EXISTS archive_buckets_start ON archive_buckets(level, start)",
    "CREATE TABLE IF NOT EXISTS archive_events (seq {serial}, at DOUBLE PRECISION NOT NULL, node TEXT,"
    " workload TEXT, kind TEXT NOT NULL, cause TEXT, data TEXT NOT NULL)",
    "CREATE INDEX IF NOT EXISTS archive_events_at ON archive_events(at)",
    "CREATE INDEX IF NOT EXISTS archive_events_workload ON archive_events(workload, at)",
    # the Stationkeeper's accepted adjustments: a workload's epoch is how many it has had
    "CREATE TABLE IF NOT EXISTS archive_adjustments (workload TEXT NOT NULL, epoch INTEGER NOT NULL,"
    " knob TEXT NOT NULL, current_value DOUBLE PRECISION NOT NULL, proposed DOUBLE PRECISION NOT NULL,"
    " at DOUBLE PRECISION NOT NULL, evidence TEXT NOT NULL, PRIMARY KEY (workload, epoch))",
    # where each workload ran (buckets do not keep the node): intervals of its rolled samples
    "CREATE TABLE IF NOT EXISTS archive_placements (workload TEXT NOT NULL, node TEXT NOT NULL,"
    " first_at DOUBLE PRECISION NOT NULL, last_at DOUBLE PRECISION NOT NULL,"
    " PRIMARY KEY (workload, node, first_at))",
    "CREATE INDEX IF NOT EXISTS archive_placements_last ON archive_placements(last_at)",
)


@dataclass(frozen=True, slots=True)
class Retention:
    """How long each level is kept (seconds) and how late a sample may come and still count.

    The raw samples must outlive a 5-minute bucket plus ``grace_s`` and the 5-minute buckets an
    hour, or a rollup would find its inputs gone."""

    raw_s: float = 6 * 3600.0
    five_min_s: float = 14 * 86400.0
    hour_s: float = 400 * 86400.0
    events_s: float = 400 * 86400.0
    grace_s: float = 60.0

    def __post_init__(self) -> None:
        check_number(self, "grace_s", lo=0.0)
        for key, floor in (("raw_s", LEVELS[0] + self.grace_s), ("five_min_s", LEVELS[1] + self.grace_s),
                           ("hour_s", LEVELS[1]), ("events_s", 0.0)):  # fmt: skip
            check_number(self, key, lo=0.0, allow_inf=True)
            if getattr(self, key) < floor:
                raise fail(self, key, getattr(self, key), f">= {floor:g} s (what the next level rolls from)")


@dataclass(frozen=True, slots=True)
class ArchiveEvent:
    """Something that happened to a workload on a node: ``kind`` (eviction, throttle, oom-kill,
    limit-breach, ...) and its ``cause`` (the core's reason code), with free ``data``."""

    at: float
    kind: str
    node: str | None = None
    workload: str | None = None
    cause: str | None = None
    data: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Window:
    """What the archive holds of W workloads over ``[since, until)``.

    ``usage``/``reservation``: per workload (W,) the count, mean and knots (W, K, D) of the whole
    window; ``throttled_s`` (W,); ``levels``: which levels the window was read from."""

    workloads: tuple[str, ...]
    since: float
    until: float
    usage: Buckets
    reservation: Buckets
    throttled_s: np.ndarray
    levels: tuple[str, ...]

    def quantiles(self, levels: Sequence[float], *, of: str = "usage") -> np.ndarray:
        """(W, len(levels), D): the window's quantiles of usage or reservation per workload."""
        b = self.usage if of == "usage" else self.reservation
        w = len(self.workloads)
        out = np.full((w, len(levels), NDIM), np.nan)
        if len(b):
            groups, q = mixture_quantiles(b.group, b.count, b.knots, np.asarray(levels))
            out[groups] = q
        return out


#: The insert of one sample row (``?`` placeholders; a backend rewrites them).
SAMPLES_SQL = (
    f"INSERT INTO archive_samples({', '.join(('workload', 'node', 'at', 'throttled_s', *_USAGE, *_RES))})"
    f" VALUES ({', '.join('?' * (4 + 2 * NDIM))})"
)
EVENTS_SQL = "INSERT INTO archive_events(at, node, workload, kind, cause, data) VALUES (?, ?, ?, ?, ?, ?)"


def sample_rows(
    at: float,
    node: str | Sequence[str],
    workloads: Sequence[str],
    usage: np.ndarray,
    reservation: np.ndarray | None = None,
    throttled_s: np.ndarray | None = None,
) -> list[tuple[Any, ...]]:
    """The rows of :data:`SAMPLES_SQL` for one observation (:meth:`Archive.record`), checked. A
    shell that keeps its own SQLite transaction (the node agent's store) inserts them in it."""
    n = len(workloads)
    nodes = [node] * n if isinstance(node, str) else [str(x) for x in node]
    if len(nodes) != n:
        raise ValueError(f"node must be one name or {n} names, got {len(nodes)}")
    usage = np.asarray(usage, dtype=np.float64).reshape(n, NDIM)
    res = np.full((n, NDIM), np.nan) if reservation is None else np.asarray(reservation, np.float64)
    thr = np.full(n, np.nan) if throttled_s is None else np.asarray(throttled_s, np.float64)
    if res.shape != (n, NDIM) or thr.shape != (n,):
        raise ValueError(f"reservation must be ({n}, {NDIM}) and throttled_s ({n},)")
    if not math.isfinite(at):
        raise ValueError(f"at must be a finite time, got {at!r}")
    vals = np.concatenate([thr[:, None], usage, res], axis=1)
    cells = vals.astype(object)
    cells[~np.isfinite(vals)] = None  # not measured: SQL NULL
    return [(str(w), nd, float(at), *r) for w, nd, r in zip(workloads, nodes, cells.tolist(), strict=True)]


def event_row(e: ArchiveEvent) -> tuple[Any, ...]:
    """The row of :data:`EVENTS_SQL` for one event."""
    return (
        float(e.at),
        e.node,
        e.workload,
        e.kind,
        e.cause,
        json.dumps(dict(e.data), sort_keys=True, default=str),
    )


@dataclass(frozen=True, slots=True)
class Compacted:
    """What one :meth:`Archive.compact` did."""

    buckets_5m: int
    buckets_1h: int
    deleted_samples: int
    deleted_buckets: int
    deleted_events: int


def _pack(usage: Buckets, reservation: Buckets, i: int) -> bytes:
    """Bucket ``i``'s stats (its usage and reservation rows) as compressed float64 bytes."""
    out = np.empty((2, 2 + _K, NDIM))
    for s, b in enumerate((usage, reservation)):
        out[s, 0], out[s, 1], out[s, 2:] = b.count[i], b.mean[i], b.knots[i]
    return zlib.compress(out.astype("<f8").tobytes(), 1)  # dimensions never measured are NaN runs


def _unpack(blobs: Sequence[bytes]) -> np.ndarray:
    """(B, 2, 2 + K, D) from the stats column."""
    if not blobs:
        return np.zeros((0, 2, 2 + _K, NDIM))
    raw = b"".join(zlib.decompress(bytes(b)) for b in blobs)
    return np.frombuffer(raw, dtype="<f8").reshape(-1, 2, 2 + _K, NDIM)


def _of(stats: np.ndarray, s: int, group: np.ndarray, start: np.ndarray) -> Buckets:
    count = np.nan_to_num(stats[:, s, 0]).astype(np.int64)
    return Buckets(group, start, count, stats[:, s, 1], stats[:, s, 2:])


def _floor(x: float, width: float) -> float:
    """``x`` down to a multiple of ``width`` (an infinite retention's cut stays infinite)."""
    return math.floor(x / width) * width if math.isfinite(x) else x


class Archive:
    """The archive at ``where`` (an SQLite file path, or a ``postgresql://`` URL), made when
    missing. One writer per process; several processes may write (the database serialises them)."""

    def __init__(self, where: str | Path, retention: Retention | None = None) -> None:
        self.retention = retention or Retention()
        self.db: Backend = connect(where)
        try:
            self._schema()
        except BaseException:
            self.db.close()
            raise

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> Archive:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _schema(self) -> None:
        db = self.db
        try:
            with db.transaction(lock=False):
                for stmt in _SCHEMA:
                    db.execute(db.ddl(stmt))
                row = db.execute("SELECT value FROM archive_meta WHERE key='schema'")
                if not row:
                    db.execute(
                        "INSERT INTO archive_meta(key, value) VALUES ('schema', ?)", (str(SCHEMA_VERSION),)
                    )
                elif int(row[0][0]) > SCHEMA_VERSION:
                    raise ArchiveError(
                        f"{db.where}: archive schema {row[0][0]} is newer than this Kalena's {SCHEMA_VERSION}"
                    )
        except ArchiveError:
            raise
        except Exception as e:  # a database that is not an archive (other tables, other columns)
            raise ArchiveError(f"{db.where}: not a Kalena archive ({e})") from None

    # -- writing ----------------------------------------------------------------------------------
    def record(
        self,
        at: float,
        node: str | Sequence[str],
        workloads: Sequence[str],
        usage: np.ndarray,
        reservation: np.ndarray | None = None,
        throttled_s: np.ndarray | None = None,
    ) -> int:
        """One observation of ``workloads`` on ``node`` (one name, or one per workload) at ``at``:
        usage (n, 8), reservation (n, 8) (NaN: not measured), throttled seconds since the last one
        (n,). Durable when it returns."""
        return self.record_rows(sample_rows(at, node, workloads, usage, reservation, throttled_s))

    def record_rows(self, rows: Sequence[tuple[Any, ...]]) -> int:
        """Rows built by :func:`sample_rows`, in one transaction. Durable when it returns."""
        with self.db.transaction():
            self.db.executemany(SAMPLES_SQL, rows)
        return len(rows)

    def record_events(self, events: Sequence[ArchiveEvent]) -> int:
        """Events, all in one transaction. Durable when it returns."""
        with self.db.transaction():
            self.db.executemany(EVENTS_SQL, [event_row(e) for e in events])
        return len(events)

    # -- the Stationkeeper's adjustments (seed 002's airlock) --------------------------------------
    def book(self, workloads: Sequence[str]) -> AdjustmentBook:
        """The adjustment book of ``workloads``: each one's epoch (the adjustments it has had) and
        the latest accepted setting of each knob."""
        book = AdjustmentBook(epochs=dict.fromkeys(workloads, 0))
        if not workloads:
            return book
        marks = ", ".join("?" * len(workloads))
        rows = self.db.execute(
            f"SELECT workload, epoch, knob, proposed FROM archive_adjustments WHERE workload IN ({marks})"
            " ORDER BY workload, epoch",
            list(workloads),
        )
        for w, epoch, knob, proposed in rows:
            book.epochs[str(w)] = int(epoch) + 1
            book.settings[(str(w), Knob(knob))] = float(proposed)
        return book

    def accept(self, adjustments: Sequence[Adjustment], at: float) -> list[Outcome]:
        """Accept each adjustment only at the epoch it was computed against (the core's
        :class:`AdjustmentBook` rule), in order, in one transaction: of two loops racing on one
        workload, the second finds the epoch moved and is refused as stale."""
        with self.db.transaction():
            book = self.book(list(dict.fromkeys(a.workload for a in adjustments)))
            outcomes = [book.apply(a) for a in adjustments]
            self.db.executemany(
                "INSERT INTO archive_adjustments(workload, epoch, knob, current_value, proposed, at,"
                " evidence) VALUES (?, ?, ?, ?, ?, ?, ?)",
                [
                    (a.workload, a.epoch, a.knob.value, a.current, a.proposed, float(at),
                     json.dumps(dataclasses.asdict(a.evidence), sort_keys=True))
                    for a, o in zip(adjustments, outcomes, strict=True)
                    if o is Outcome.ACCEPTED
                ],
            )  # fmt: skip
        return outcomes

    # -- rollups and retention ----------------------------------------------------------------------
    def _mark(self, key: str) -> float | None:
        row = self.db.execute("SELECT value FROM archive_meta WHERE key=?", (key,))
        return float(row[0][0]) if row else None

    def _set_mark(self, key: str, value: float) -> None:
        self.db.execute("DELETE FROM archive_meta WHERE key=?", (key,))
        self.db.execute("INSERT INTO archive_meta(key, value) VALUES (?, ?)", (key, repr(float(value))))

    def compact(self, now: float) -> Compacted:
        """Roll every closed 5-minute slot and hour into buckets, then drop what retention allows
        (never a sample or bucket not rolled up yet). One transaction; safe to interrupt or repeat."""
        r = self.retention
        db = self.db
        with db.transaction():
            n5 = self._roll_samples(now - r.grace_s)
            n1 = self._roll_buckets()
            done5 = self._mark("rolled_300") or -math.inf
            done1 = self._mark("rolled_3600") or -math.inf
            raw_cut = min(done5, _floor(now - r.raw_s, LEVELS[0]))
            b5_cut = min(done1, _floor(now - r.five_min_s, LEVELS[1]))
            b1_cut = now - r.hour_s
            ds = self._count("archive_samples", "at < ?", raw_cut)
            db.execute("DELETE FROM archive_samples WHERE at < ?", (raw_cut,))
            db5 = self._count("archive_buckets", "level = 300 AND start < ?", b5_cut)
            db.execute("DELETE FROM archive_buckets WHERE level = 300 AND start < ?", (b5_cut,))
            db1 = self._count("archive_buckets", "level = 3600 AND start < ?", b1_cut)
            db.execute("DELETE FROM archive_buckets WHERE level = 3600 AND start < ?", (b1_cut,))
            de = self._count("archive_events", "at < ?", now - r.events_s)
            db.execute("DELETE FROM archive_events WHERE at < ?", (now - r.events_s,))
            db.execute("DELETE FROM archive_placements WHERE last_at < ?", (b1_cut,))
        return Compacted(n5, n1, ds, db5 + db1, de)

    def _count(self, table: str, where: str, value: float) -> int:
        if not math.isfinite(value):
            return 0
        return int(self.db.execute(f"SELECT count(*) FROM {table} WHERE {where}", (value,))[0][0])

    def _unrolled(
        self, mark: str, first_sql: str, closed_at: float, width: float
    ) -> tuple[float, float] | None:
        """``[since, upto)``: from the level's watermark ``mark`` (or, before its first rollup,
        the slot of the oldest input ``first_sql`` finds) to the last slot closed by
        ``closed_at``; None when nothing is left to roll."""
        upto = math.floor(closed_at / width) * width
        since = self._mark(mark)
        if since is None:
            first = self.db.execute(first_sql)[0][0]
            if first is None:
                return None
            since = math.floor(float(first) / width) * width
        return (since, upto) if upto > since else None

    def _roll_samples(self, closed_at: float) -> int:
        """Raw samples of the 5-minute slots that closed before ``closed_at`` into buckets."""
        width = LEVELS[0]
        span = self._unrolled("rolled_300", "SELECT min(at) FROM archive_samples", closed_at, width)
        if span is None:
            return 0
        since, upto = span
        names, t, thr, use, res = self._samples("at >= ? AND at < ?", (since, upto))
        n = self._write_buckets(width, names, t, thr, use, res)
        self._place(since, upto)
        self._set_mark("rolled_300", upto)
        return n

    def _place(self, since: float, upto: float) -> None:
        """The placements of the samples in ``[since, upto)`` (being rolled): each workload's runs of
        samples on one node, the first one continuing its latest stored interval where that is
        on the same node and no more than :data:`PLACEMENT_GAP_S` before it."""
        rows = self.db.execute(
            "SELECT workload, node, at FROM archive_samples WHERE at >= ? AND at < ?", (since, upto)
        )
        if not rows:
            return
        wids, w = np.unique(np.array([r[0] for r in rows], dtype=object), return_inverse=True)
        nodes, n = np.unique(np.array([r[1] for r in rows], dtype=object), return_inverse=True)
        t = np.array([r[2] for r in rows], dtype=np.float64)
        order = np.lexsort((n, t, w))  # by workload, then time (then node: ties in one order)
        w, n, t = w[order], n[order], t[order]
        new = np.ones(len(t), dtype=bool)
        new[1:] = (w[1:] != w[:-1]) | (n[1:] != n[:-1]) | (t[1:] - t[:-1] > PLACEMENT_GAP_S)
        starts = np.flatnonzero(new)
        ends = np.append(starts[1:], len(t)) - 1
        latest: dict[str, tuple[str, float, float]] = {}  # workload -> its latest stored interval
        for wid, node, first, last in self.db.execute(
            "SELECT workload, node, first_at, last_at FROM archive_placements WHERE last_at >= ?",
            (since - PLACEMENT_GAP_S,),
        ):
            if str(wid) not in latest or float(last) > latest[str(wid)][2]:
                latest[str(wid)] = (str(node), float(first), float(last))
        extend, insert = [], []
        for k, (i, j) in enumerate(zip(starts.tolist(), ends.tolist(), strict=True)):
            wid, node = str(wids[w[i]]), str(nodes[n[i]])
            prev = latest.get(wid) if k == 0 or w[i] != w[starts[k - 1]] else None
            if prev is not None and prev[0] == node and t[i] - prev[2] <= PLACEMENT_GAP_S:
                extend.append((float(t[j]), wid, node, prev[1]))
            else:
                insert.append((wid, node, float(t[i]), float(t[j])))
        if extend:
            self.db.executemany(
                "UPDATE archive_placements SET last_at = ? WHERE workload = ? AND node = ? AND first_at = ?",
                extend,
            )
        if insert:
            self.db.executemany(
                "INSERT INTO archive_placements(workload, node, first_at, last_at) VALUES (?, ?, ?, ?)",
                insert,
            )

    def _samples(
        self, where: str, args: Sequence[Any], workloads: Sequence[str] = ()
    ) -> tuple[list[str], np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        cols = ", ".join(("workload", "at", "throttled_s", *_USAGE, *_RES))
        if workloads:
            where += f" AND workload IN ({', '.join('?' * len(workloads))})"
            args = (*args, *workloads)
        rows = self.db.execute(f"SELECT {cols} FROM archive_samples WHERE {where}", args)
        names = [str(r[0]) for r in rows]
        data = np.array([r[1:] for r in rows], dtype=np.float64).reshape(len(rows), 2 + 2 * NDIM)
        return names, data[:, 0], data[:, 1], data[:, 2 : 2 + NDIM], data[:, 2 + NDIM :]

    def _write_buckets(
        self, width: float, names: list[str], t: np.ndarray, thr: np.ndarray, use: np.ndarray, res: np.ndarray
    ) -> int:
        """Raw samples summarised into buckets of ``width``."""
        if not names:
            return 0
        ids, group = np.unique(np.asarray(names, dtype=object), return_inverse=True)
        u, v = summarise(group, t, use, width), summarise(group, t, res, width)  # same keys, same order
        return self._insert(width, ids, group, t, thr, u, v)

    def _insert(
        self, width: float, ids: np.ndarray, group: np.ndarray, t: np.ndarray, thr: np.ndarray,
        u: Buckets, v: Buckets,
    ) -> int:  # fmt: skip
        """Buckets ``u``/``v`` (usage, reservation) of ``width`` for workloads ``ids``, with the
        throttled seconds of the inputs (``group``, time ``t``, seconds ``thr``) each one covers."""
        slot = np.floor(t / width).astype(np.int64)
        throttled: dict[tuple[int, int], float] = {}
        for g, s, x in zip(group.tolist(), slot.tolist(), np.nan_to_num(thr).tolist(), strict=True):
            throttled[(g, s)] = throttled.get((g, s), 0.0) + x
        rows = [
            (int(width), str(ids[g]), float(st), throttled[(int(g), round(st / width))], _pack(u, v, i))
            for i, (g, st) in enumerate(zip(u.group, u.start, strict=True))
        ]
        self.db.executemany(
            "INSERT INTO archive_buckets(level, workload, start, throttled_s, stats) VALUES (?, ?, ?, ?, ?)",
            rows,
        )
        return len(rows)

    def _buckets(
        self, level: float, where: str, args: Sequence[Any], workloads: Sequence[str] = ()
    ) -> tuple[list[str], np.ndarray, np.ndarray, np.ndarray]:
        if workloads:
            where += f" AND workload IN ({', '.join('?' * len(workloads))})"
            args = (*args, *workloads)
        rows = self.db.execute(
            f"SELECT workload, start, throttled_s, stats FROM archive_buckets WHERE level = ? AND {where}",
            (int(level), *args),
        )
        names = [str(r[0]) for r in rows]
        start = np.array([r[1] for r in rows], dtype=np.float64)
        thr = np.array([r[2] for r in rows], dtype=np.float64)
        return names, start, thr, _unpack([r[3] for r in rows])

    def _roll_buckets(self) -> int:
        """The 5-minute buckets of every hour they complete into one hourly bucket each."""
        width = LEVELS[1]
        done5 = self._mark("rolled_300")
        if done5 is None:
            return 0
        first5 = "SELECT min(start) FROM archive_buckets WHERE level = 300"
        span = self._unrolled("rolled_3600", first5, done5, width)
        if span is None:
            return 0
        since, upto = span
        names, start, thr, stats = self._buckets(LEVELS[0], "start >= ? AND start < ?", (since, upto))
        n = 0
        if names:
            ids, group = np.unique(np.asarray(names, dtype=object), return_inverse=True)
            u = merge(_of(stats, 0, group, start), width)
            v = merge(_of(stats, 1, group, start), width)
            n = self._insert(width, ids, group, start, thr, u, v)
        self._set_mark("rolled_3600", upto)
        return n

    # -- reading ----------------------------------------------------------------------------------
    def workloads(self) -> list[str]:
        """Every workload the archive holds anything of, sorted."""
        rows = self.db.execute(
            "SELECT DISTINCT workload FROM archive_samples"
            " UNION SELECT DISTINCT workload FROM archive_buckets"
        )
        return sorted(str(r[0]) for r in rows)

    def span(self) -> tuple[float, float] | None:
        """The first and last time the archive holds anything of (None: empty): the last sample's
        time, or where no raw sample is left, the end of the newest bucket."""
        lo, hi = self.db.execute("SELECT min(at), max(at) FROM archive_samples")[0]
        b = self.db.execute("SELECT min(start), max(start + level) FROM archive_buckets")[0]
        los = [float(x) for x in (lo, b[0]) if x is not None]
        if not los:
            return None
        return min(los), float(hi) if hi is not None else float(b[1])

    def placements(self, workloads: Sequence[str], since: float, until: float) -> dict[str, tuple[str, ...]]:
        """The nodes each of ``workloads`` ran on in ``[since, until)`` (sorted; a workload seen
        nowhere is absent): the placement intervals of the rolled samples that overlap the window
        (exact to the gaps between a workload's samples, at most :data:`PLACEMENT_GAP_S`) and the
        nodes of the raw samples still kept. :data:`CHUNK` workloads at a time."""
        names = list(dict.fromkeys(str(w) for w in workloads))
        found: dict[str, set[str]] = {}
        for k in range(0, len(names), CHUNK):
            chunk = names[k : k + CHUNK]
            marks = ", ".join("?" * len(chunk))
            rows = self.db.execute(
                "SELECT DISTINCT workload, node FROM archive_placements"
                f" WHERE first_at < ? AND last_at >= ? AND workload IN ({marks})"
                " UNION SELECT DISTINCT workload, node FROM archive_samples"
                f" WHERE at >= ? AND at < ? AND workload IN ({marks})",
                (until, since, *chunk, since, until, *chunk),
            )
            for w, node in rows:
                found.setdefault(str(w), set()).add(str(node))
        return {w: tuple(sorted(found[w])) for w in names if w in found}

    def events(
        self, since: float = -math.inf, until: float = math.inf, workloads: Sequence[str] = ()
    ) -> list[ArchiveEvent]:
        """Events in ``[since, until)`` (of ``workloads``, if given), oldest first."""
        where, args = "at >= ? AND at < ?", [since, until]
        if workloads:
            where += f" AND workload IN ({', '.join('?' * len(workloads))})"
            args += list(workloads)
        rows = self.db.execute(
            f"SELECT at, kind, node, workload, cause, data FROM archive_events WHERE {where}"
            " ORDER BY at, seq",
            args,
        )
        return [ArchiveEvent(float(a), k, n, w, c, json.loads(d)) for a, k, n, w, c, d in rows]

    def window(self, workloads: Sequence[str], since: float, until: float) -> Window:
        """The distribution of each workload over ``[since, until)``, from the coarsest level that
        covers each part: hourly buckets for the whole hours the hourly rollup has reached,
        5-minute ones around them (where still kept), raw samples past the 5-minute rollup. A
        bucket counts whole where its start falls. Read :data:`CHUNK` workloads at a time, so a
        long window over many workloads stays within memory."""
        if not until > since:
            raise ValueError(f"the window must not be empty: since {since!r}, until {until!r}")
        names = tuple(dict.fromkeys(str(w) for w in workloads))
        done5 = self._mark("rolled_300") or -math.inf
        done1 = self._mark("rolled_3600") or -math.inf
        hour = LEVELS[1]
        h_lo = math.ceil(since / hour) * hour
        h_hi = min(math.floor(until / hour) * hour, done1)
        if h_hi > h_lo:
            plan = [(LEVELS[1], h_lo, h_hi), (LEVELS[0], since, h_lo), (LEVELS[0], h_hi, min(until, done5))]
        else:
            plan = [(LEVELS[0], since, min(until, done5))]
        raw = (max(since, done5), until)
        usage, reservation, throttled, levels = [], [], [], set()
        for k in range(0, max(len(names), 1), CHUNK):
            chunk = names[k : k + CHUNK]
            u, v, thr, used = self._window_part(chunk, plan, raw)
            usage.append(dataclasses.replace(u, group=u.group + k))
            reservation.append(dataclasses.replace(v, group=v.group + k))
            throttled.append(thr)
            levels |= used
        order = ("raw", "300s", "3600s")
        return Window(
            names, since, until, _concat(usage), _concat(reservation),
            np.concatenate(throttled)[: len(names)], tuple(x for x in order if x in levels),
        )  # fmt: skip

    def _window_part(
        self, names: tuple[str, ...], plan: list[tuple[float, float, float]], raw: tuple[float, float]
    ) -> tuple[Buckets, Buckets, np.ndarray, set[str]]:
        """One chunk of :meth:`window`: each workload's usage and reservation merged whole."""
        index = {w: i for i, w in enumerate(names)}
        parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []  # group, throttled, stats
        levels: set[str] = set()
        lo, hi = raw
        if hi > lo and names:  # the raw samples the rollup has not reached, summarised together
            n, _, thr, use, res = self._samples("at >= ? AND at < ?", (lo, hi), names)
            if n:
                g = np.array([index[w] for w in n], dtype=np.int64)
                u = summarise(g, np.zeros(len(g)), use, 1.0)
                v = summarise(g, np.zeros(len(g)), res, 1.0)
                thr_g = np.bincount(u.group.searchsorted(g), weights=np.nan_to_num(thr), minlength=len(u))
                parts.append((u.group, thr_g, np.stack([_stack(u), _stack(v)], axis=1)))
                levels.add("raw")
        for level, lo, hi in plan:
            if hi > lo and names:
                n, _, thr, stats = self._buckets(level, "start >= ? AND start < ?", (lo, hi), names)
                if n:
                    parts.append((np.array([index[w] for w in n], dtype=np.int64), thr, stats))
                    levels.add(f"{int(level)}s")
        if parts:
            group = np.concatenate([p[0] for p in parts])
            thr = np.concatenate([p[1] for p in parts])
            stats = np.concatenate([p[2] for p in parts])
        else:
            group, thr, stats = np.zeros(0, np.int64), np.zeros(0), np.zeros((0, 2, 2 + _K, NDIM))
        order = np.argsort(group, kind="stable")
        group, thr, stats = group[order], thr[order], stats[order]
        throttled = np.bincount(group, weights=np.nan_to_num(thr), minlength=len(names))
        u, v = (merge(_of(stats, s, group, np.zeros(len(group))), _WHOLE) for s in (0, 1))
        return u, v, throttled, levels


def _concat(parts: list[Buckets]) -> Buckets:
    return Buckets(
        *(
            np.concatenate([getattr(b, f) for b in parts])
            for f in ("group", "start", "count", "mean", "knots")
        )
    )


def _stack(b: Buckets) -> np.ndarray:
    """(B, 2 + K, D): one side of a bucket's stats as stored."""
    return np.concatenate([b.count[:, None, :].astype(np.float64), b.mean[:, None, :], b.knots], axis=1)
