"""Kalena's embedded store: one SQLite database in WAL mode, every change one transaction.

What lives here (tables):

* ``submissions``: the queue's inbox. ``kalena submit`` adds rows (a job file's tasks in one
  transaction: all of them or none); the agent takes them (``taken_at``, ``outcome``) in the same
  transaction that saves the state holding them, so a submission is never lost or taken twice.
* ``cancels``: ``kalena job cancel`` requests, taken the same way.
* ``agent_state``: each node agent's state (the JSON of :class:`kalena.agent.state.AgentState`).
* ``jobs``: every job's current state, run and "why pending", written with the state (a
  projection for ``kalena jobs``: the agent's state stays the one it restarts from).
* ``transitions``: every lifecycle step of every job (state, time, reason, run), keyed by the
  submission and the step's index, written with the state that made it.
* ``events``: the agent's action log (evictions, throttles, admissions, pending reasons, ...),
  one row per record, with the job and workload it is about.
* ``series``: no longer written (schema versions up to 3 had the agent's usage series here; the
  usage archive, :mod:`kalena.archive`, keeps them now, in ``archive_*`` tables of the same file).
* ``work``: a cluster daemon's: what each host's agent is to be told next (jobs placed there,
  cancels), rewritten at every tick of the daemon (:mod:`kalena.docker.cluster`).
* ``nodes``: each node's latest slack view (capacity, sum of limits, sum of reservations, usage)
  and its batch tasks, written by its agent at every estimate (``kalena status``, ``/metrics``).

Durability: WAL with ``synchronous=FULL``: a transaction that returned survives a crash of the
process and of the machine. ``kalena submit`` answers only after its commit, so an acknowledged
submission is on disk. Readers (``kalena jobs``) never block the agent, nor it them.

The schema version is SQLite's ``user_version``; a database from a newer Kalena is refused, not
guessed at.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kalena.core.resources import DIMS

SCHEMA_VERSION = 3
#: A busy database (another writer's transaction) is waited for this long before an error.
BUSY_TIMEOUT_MS = 30_000
#: Column names of the dimensions in ``series`` (``disk.read`` -> ``disk_read``).
DIM_COLUMNS: tuple[str, ...] = tuple(d.replace(".", "_") for d in DIMS)

_SCHEMA = f"""
CREATE TABLE submissions (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    job TEXT NOT NULL,
    spec TEXT NOT NULL,
    submitted_at REAL NOT NULL,
    taken_at REAL,
    outcome TEXT
);
CREATE INDEX submissions_untaken ON submissions(seq) WHERE taken_at IS NULL;
CREATE TABLE cancels (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    job TEXT NOT NULL,
    requested_at REAL NOT NULL,
    taken_at REAL,
    outcome TEXT
);
CREATE TABLE agent_state (
    node TEXT PRIMARY KEY,
    state TEXT NOT NULL,
    saved_at REAL NOT NULL
);
CREATE TABLE jobs (
    job TEXT PRIMARY KEY,
    submission INTEGER,
    node TEXT NOT NULL,
    state TEXT NOT NULL,
    run INTEGER NOT NULL,
    priority INTEGER NOT NULL,
    image TEXT,
    command TEXT NOT NULL,
    requests TEXT NOT NULL,
    submitted_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    why_pending TEXT,
    exit_code INTEGER
);
CREATE TABLE transitions (
    submission INTEGER NOT NULL,
    job TEXT NOT NULL,
    seq INTEGER NOT NULL,
    state TEXT NOT NULL,
    at REAL NOT NULL,
    reason TEXT NOT NULL,
    run INTEGER NOT NULL,
    PRIMARY KEY (submission, job, seq)
);
CREATE INDEX transitions_job ON transitions(job, submission, seq);
CREATE TABLE events (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    at REAL NOT NULL,
    kind TEXT NOT NULL,
    node TEXT,
    job TEXT,
    workload TEXT,
    data TEXT NOT NULL
);
CREATE INDEX events_job ON events(job);
CREATE INDEX events_workload ON events(workload);
CREATE TABLE series (
    node TEXT NOT NULL,
    workload TEXT NOT NULL,
    at REAL NOT NULL,
    {", ".join(f"usage_{c} REAL" for c in DIM_COLUMNS)},
    {", ".join(f"reservation_{c} REAL" for c in DIM_COLUMNS)}
);
CREATE INDEX series_workload ON series(workload, at);
CREATE TABLE nodes (
    node TEXT PRIMARY KEY,
    at REAL NOT NULL,
    status TEXT NOT NULL
);
CREATE TABLE work (
    node TEXT NOT NULL,
    job TEXT NOT NULL,
    kind TEXT NOT NULL,
    spec TEXT NOT NULL,
    PRIMARY KEY (node, job, kind)
);
"""
#: What each older schema version lacks (applied in order by :meth:`Store._create`).
_MIGRATIONS = {
    1: "CREATE TABLE nodes (node TEXT PRIMARY KEY, at REAL NOT NULL, status TEXT NOT NULL)",
    2: "CREATE TABLE work (node TEXT NOT NULL, job TEXT NOT NULL, kind TEXT NOT NULL, spec TEXT NOT NULL,"
    " PRIMARY KEY (node, job, kind))",
}


class StoreError(Exception):
    """The store cannot be used (not a database, a newer schema, a folder that cannot hold it)."""


class StoreConflict(StoreError):
    """A request the store's contents refuse (a job of that name still live, an unknown job)."""


@dataclass(frozen=True, slots=True)
class JobRow:
    job: str
    submission: int | None
    node: str
    state: str
    run: int
    priority: int
    image: str | None
    command: list[str]
    requests: dict[str, float]
    submitted_at: float
    updated_at: float
    why_pending: str | None
    exit_code: int | None

    def to_json(self) -> dict[str, Any]:
        return {f: getattr(self, f) for f in self.__dataclass_fields__}


@dataclass(frozen=True, slots=True)
class TransitionRow:
    submission: int
    job: str
    seq: int
    state: str
    at: float
    reason: str
    run: int


@dataclass(frozen=True, slots=True)
class EventRow:
    seq: int
    at: float
    kind: str
    node: str | None
    job: str | None
    workload: str | None
    data: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Pending:
    """A submission or cancel request not taken yet."""

    seq: int
    job: str
    spec: dict[str, Any] | None  # a submission's spec; None for a cancel
    at: float


#: The states after which a job's name may be submitted again (the core's TERMINAL, by value).
ENDED = ("succeeded", "failed", "cancelled")


def json_text(obj: Any) -> str:
    """Compact JSON (an infinity is Python's ``Infinity``, read back as such)."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)


class Store:
    """One connection to the database at ``path`` (made, with its folder, when missing unless
    ``create`` is false). Not shared between threads: each process or thread opens its own."""

    def __init__(self, path: Path, *, create: bool = True) -> None:
        self.path = Path(path)
        if not self.path.exists():
            if not create:
                raise StoreError(f"{self.path}: no such store (the agent makes it when it starts)")
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as e:
                where = self.path.parent
                raise StoreError(f"{where}: cannot make the store's folder: {e.strerror}") from None
        elif self.path.is_dir():
            raise StoreError(f"{self.path}: is a folder, not a store")
        elif not create and self.path.stat().st_size == 0:
            raise StoreError(f"{self.path}: an empty file, no store (the agent makes it when it starts)")
        try:
            self.db = sqlite3.connect(self.path, isolation_level=None, timeout=BUSY_TIMEOUT_MS / 1000)
        except sqlite3.Error as e:
            raise StoreError(f"{self.path}: cannot open ({e})") from None
        try:
            self.db.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
            version = self._check()  # before anything is written: a refused file is left as it was
            mode = self.db.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            if mode.lower() != "wal":
                raise StoreError(f"{self.path}: cannot use write-ahead logging (journal mode {mode})")
            self.db.execute("PRAGMA synchronous=FULL")
            self._sync = "FULL"
            if version != SCHEMA_VERSION:
                self._create()
        except BaseException as e:
            with contextlib.suppress(Exception):
                self.db.close()
            if isinstance(e, sqlite3.DatabaseError):
                raise StoreError(f"{self.path}: not a Kalena store ({e})") from None
            raise

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _check(self) -> int:
        """The schema version; raises for a newer one or an SQLite database that is not a store."""
        version = int(self.db.execute("PRAGMA user_version").fetchone()[0])
        if version > SCHEMA_VERSION:
            raise StoreError(
                f"{self.path}: schema version {version} is newer than this Kalena's {SCHEMA_VERSION}"
            )
        tables = self.db.execute(  # the usage archive's tables may come first (kalena.archive)
            "SELECT count(*) FROM sqlite_master WHERE type='table'"
            " AND name NOT LIKE 'archive~_%' ESCAPE '~' AND name NOT LIKE 'sqlite~_%' ESCAPE '~'"
        ).fetchone()[0]
        if version == 0 and tables:
            raise StoreError(f"{self.path}: an SQLite database, but not a Kalena store")
        return version

    def _create(self) -> None:
        """The schema (version 0: an empty file) or what an older version lacks, in one transaction."""
        with self.transaction() as db:
            version = int(db.execute("PRAGMA user_version").fetchone()[0])
            if version == 0:
                for stmt in _SCHEMA.split(";"):
                    if stmt.strip():
                        db.execute(stmt)
            else:
                for v in range(version, SCHEMA_VERSION):
                    db.execute(_MIGRATIONS[v])
            db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")

    @contextlib.contextmanager
    def transaction(self, durable: bool = True) -> Iterator[sqlite3.Connection]:
        """``BEGIN IMMEDIATE`` (the write lock at once: no upgrade deadlock) ... ``COMMIT``; an
        exception rolls everything back. ``durable``: the commit is fsynced (survives a machine
        crash); otherwise it is in the WAL file when this returns (survives the process's crash)."""
        want = "FULL" if durable else "NORMAL"
        if want != self._sync:
            self.db.execute(f"PRAGMA synchronous={want}")
            self._sync = want
        self.db.execute("BEGIN IMMEDIATE")
        try:
            yield self.db
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        self.db.execute("COMMIT")

    # -- the queue ------------------------------------------------------------------------------
    def submit(self, specs: Sequence[tuple[str, Mapping[str, Any]]], now: float) -> list[int]:
        """Queue ``(job name, spec)`` pairs in one transaction: all or none. A name that is still
        live (its job not ended, or a submission of it not taken yet) or given twice raises
        :class:`StoreConflict` naming it, and nothing is queued. Returns the submissions' numbers."""
        names = [n for n, _ in specs]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise StoreConflict(f"job {twice[0]!r} is given more than once")
        with self.transaction() as db:
            for name in names:
                live = self._live(db, name)
                if live is not None:
                    why = f"job {name!r} is already {live} (a name is free again once it ended)"
                    raise StoreConflict(why)
            out = []
            for name, spec in specs:
                cur = db.execute(
                    "INSERT INTO submissions(job, spec, submitted_at) VALUES (?, ?, ?)",
                    (name, json_text(dict(spec)), now),
                )
                out.append(int(cur.lastrowid or 0))
            return out

    @staticmethod
    def _live(db: sqlite3.Connection, name: str) -> str | None:
        """What keeps ``name`` from being submitted: "queued" (a submission not taken), its state
        (a job not ended), or ``None``."""
        if db.execute("SELECT 1 FROM submissions WHERE job=? AND taken_at IS NULL", (name,)).fetchone():
            return "queued"
        row = db.execute("SELECT state FROM jobs WHERE job=?", (name,)).fetchone()
        if row is not None and row[0] not in ENDED:
            return str(row[0])
        return None

    def cancel(self, name: str, now: float) -> str:
        """Ask for ``name`` to be cancelled. A submission not taken yet is withdrawn at once
        (returns "withdrawn"); a live job gets a request the agent takes ("requested"). An unknown
        or ended job raises :class:`StoreConflict`."""
        with self.transaction() as db:
            row = db.execute(
                "SELECT seq, spec, submitted_at FROM submissions WHERE job=? AND taken_at IS NULL", (name,)
            ).fetchone()
            if row is not None:  # no agent has it: it ends here, with the two steps it had
                seq, spec, at = row[0], json.loads(row[1]), row[2]
                db.execute("UPDATE submissions SET taken_at=?, outcome='withdrawn' WHERE seq=?", (now, seq))
                db.executemany(
                    "INSERT INTO transitions(submission, job, seq, state, at, reason, run)"
                    " VALUES (?, ?, ?, ?, ?, ?, 0)",
                    [
                        (seq, name, 0, "pending", at, "submitted"),
                        (seq, name, 1, "cancelled", now, "cancelled"),
                    ],
                )
                db.execute(
                    "INSERT OR REPLACE INTO jobs(job, submission, node, state, run, priority, image, command,"
                    " requests, submitted_at, updated_at, why_pending, exit_code)"
                    " VALUES (?, ?, '', 'cancelled', 0, ?, ?, ?, ?, ?, ?, NULL, NULL)",
                    (
                        name, seq, int(spec.get("priority", 0)), spec.get("image"),
                        json_text(spec.get("command", [])), json_text(spec.get("requests", {})), at, now,
                    ),
                )  # fmt: skip
                return "withdrawn"
            row = db.execute("SELECT state FROM jobs WHERE job=?", (name,)).fetchone()
            if row is None:
                raise StoreConflict(f"no job {name!r} in {self.path}")
            if row[0] in ENDED:
                raise StoreConflict(f"job {name!r} already ended ({row[0]})")
            if db.execute("SELECT 1 FROM cancels WHERE job=? AND taken_at IS NULL", (name,)).fetchone():
                return "requested"
            db.execute("INSERT INTO cancels(job, requested_at) VALUES (?, ?)", (name, now))
            return "requested"

    def untaken(self) -> tuple[list[Pending], list[Pending]]:
        """The submissions and the cancel requests waiting, oldest first."""
        subs = [
            Pending(seq, job, json.loads(spec), at)
            for seq, job, spec, at in self.db.execute(
                "SELECT seq, job, spec, submitted_at FROM submissions WHERE taken_at IS NULL ORDER BY seq"
            )
        ]
        cancels = [
            Pending(seq, job, None, at)
            for seq, job, at in self.db.execute(
                "SELECT seq, job, requested_at FROM cancels WHERE taken_at IS NULL ORDER BY seq"
            )
        ]
        return subs, cancels

    # -- the agent's state ----------------------------------------------------------------------
    def load_state(self, node: str | None = None) -> tuple[str, str] | None:
        """(node, state JSON) of ``node``'s agent, or of the only agent saved (``node`` None)."""
        if node is None:
            rows = self.db.execute("SELECT node, state FROM agent_state").fetchall()
            if len(rows) > 1:
                raise StoreError(f"{self.path}: holds the state of {len(rows)} nodes; name one")
        else:
            rows = self.db.execute("SELECT node, state FROM agent_state WHERE node=?", (node,)).fetchall()
        return None if not rows else (str(rows[0][0]), str(rows[0][1]))

    def written_steps(self) -> dict[tuple[int, str], int]:
        """How many lifecycle steps each (submission, job) has in ``transitions``."""
        return {
            (int(s), str(j)): int(n)
            for s, j, n in self.db.execute("SELECT submission, job, count(*) FROM transitions GROUP BY 1, 2")
        }

    def nodes(self) -> dict[str, dict[str, Any]]:
        """Each node's latest status (its agent's slack view and batch tasks), by node name."""
        return {n: json.loads(t) for n, t in self.db.execute("SELECT node, status FROM nodes ORDER BY node")}

    # -- reads ----------------------------------------------------------------------------------
    def jobs(self) -> list[JobRow]:
        rows = self.db.execute(
            "SELECT job, submission, node, state, run, priority, image, command, requests, submitted_at,"
            " updated_at, why_pending, exit_code FROM jobs ORDER BY submitted_at, job"
        ).fetchall()
        queued = self.untaken()[0]
        again = {p.job for p in queued}  # an ended job's name submitted anew: the new one is shown
        out = [_job_row(r) for r in rows if r[0] not in again]
        for p in queued:  # not yet taken by an agent
            spec = p.spec or {}
            out.append(
                JobRow(
                    p.job, p.seq, "", "submitted", 0, int(spec.get("priority", 0)), spec.get("image"),
                    list(spec.get("command", [])), dict(spec.get("requests", {})), p.at, p.at,
                    "not yet taken by an agent", None,
                )
            )  # fmt: skip
        return out

    def job(self, name: str) -> JobRow | None:
        return next((j for j in self.jobs() if j.job == name), None)

    def transitions(self, name: str, submission: int | None = None) -> list[TransitionRow]:
        """Every step of ``name`` (of its latest submission unless ``submission`` is given)."""
        if submission is None:
            row = self.db.execute("SELECT max(submission) FROM transitions WHERE job=?", (name,)).fetchone()
            if row is None or row[0] is None:
                return []
            submission = int(row[0])
        return [
            TransitionRow(*r)
            for r in self.db.execute(
                "SELECT submission, job, seq, state, at, reason, run FROM transitions"
                " WHERE job=? AND submission=? ORDER BY seq",
                (name, submission),
            )
        ]

    def events(
        self, *, job: str | None = None, workloads: Sequence[str] = (), kinds: Sequence[str] = ()
    ) -> list[EventRow]:
        """Events about ``job`` or any of ``workloads`` (neither: all), of ``kinds`` (none: all)."""
        where, args = [], []
        who = []
        if job is not None:
            who.append("job=?")
            args.append(job)
        if workloads:
            who.append(f"workload IN ({','.join('?' * len(workloads))})")
            args.extend(workloads)
        if who:
            where.append("(" + " OR ".join(who) + ")")
        if kinds:
            where.append(f"kind IN ({','.join('?' * len(kinds))})")
            args.extend(kinds)
        sql = "SELECT seq, at, kind, node, job, workload, data FROM events"
        if where:
            sql += " WHERE " + " AND ".join(where)
        return [
            EventRow(s, a, k, n, j, w, json.loads(d))
            for s, a, k, n, j, w, d in self.db.execute(sql + " ORDER BY seq", args)
        ]


def _job_row(r: Sequence[Any]) -> JobRow:
    r = list(r)
    r[7], r[8] = json.loads(r[7]), json.loads(r[8])
    return JobRow(*r)


def insert_event(db: sqlite3.Connection, node: str | None, rec: Mapping[str, Any]) -> None:
    """One action-log record as an ``events`` row (its job and workload pulled out for lookups)."""
    why = rec.get("why") if isinstance(rec.get("why"), Mapping) else {}
    workload = rec.get("workload") or why.get("workload")  # type: ignore[union-attr]
    db.execute(
        "INSERT INTO events(at, kind, node, job, workload, data) VALUES (?, ?, ?, ?, ?, ?)",
        (
            float(rec["time"]),
            str(rec["kind"]),
            node,
            rec.get("job") if isinstance(rec.get("job"), str) else None,
            workload if isinstance(workload, str) else None,
            json_text({k: v for k, v in rec.items() if k not in ("time", "kind")}),
        ),
    )
