"""The agent on Kalena's store (:mod:`kalena.store`): its state, queue, history and action log in
one SQLite database, each save one transaction.

* :class:`DbStateStore` is the agent's state store: a save writes, in one transaction, the
  state (the JSON of the file store, so a restart reads exactly what it saved), every job's row
  in ``jobs``, the lifecycle steps made since the last save, the submissions and cancel requests
  the state now holds (taken), and the usage, reservation and throttled time of the last
  estimate as samples of the usage archive (:mod:`kalena.archive`, whose tables share the
  store's file; the agent rolls it up every 5 minutes). A crash at any instant leaves all of it
  or none: a step is never written without the state that made it, nor the state without its
  steps.
* :class:`DbSubmissions` is the agent's submission source over the store's queue (what
  ``kalena submit`` and ``kalena job cancel`` write).
* :class:`DbActionLog` writes the action log into ``events``, evictions, throttles and caps also
  into the archive's events, in the same transaction (a record appended with ``sync``
  durably, the others as the file log: surviving a crash of the process; one appended
  ``with_save`` in the state store's next save, with the state change it tells of).
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Mapping
from typing import Any

from kalena.agent.actionlog import ActionLog
from kalena.agent.archiving import Rollups, Series, archived_event, series_of, series_rows
from kalena.agent.runtime import Intake, SubmissionError, parse_submission
from kalena.agent.state import AgentState, JobRecord, state_bytes, state_of_bytes
from kalena.archive import Archive
from kalena.archive.store import EVENTS_SQL, SAMPLES_SQL, event_row
from kalena.core.lifecycle import TaskState
from kalena.store.db import Store, insert_event, json_text


def runs_of(job: JobRecord, states: list[TaskState]) -> list[int]:
    """The run each lifecycle entry belongs to: a run starts at its ``placed`` entry (admission
    increments ``job.run``); entries before the first admission are of the run before it."""
    placed = sum(s is TaskState.PLACED for s in states)
    run = job.run - placed
    out = []
    for s in states:
        if s is TaskState.PLACED:
            run += 1
        out.append(run)
    return out


class DbStateStore:
    """The agent's state store on ``store`` (module docstring); ``node`` names whose state to
    load (``None``: the only one saved)."""

    def __init__(self, store: Store, node: str | None = None, clock: Callable[[], float] = time.time):
        self.store, self.node, self.clock = store, node, clock
        self.path = store.path
        self.writes = 0
        self._last: str | None = None
        self._steps: dict[tuple[int, str], int] | None = None
        self._rows: dict[str, tuple[Any, ...]] = {}
        self._taken: list[tuple[str, int, str]] = []  # (table, seq, outcome) for the next save
        self._series: list[tuple[float, Series]] = []
        self._node: str | None = None
        self._events: list[tuple[str | None, dict[str, Any]]] = []  # (node, record)
        self.last_node: dict[str, Any] | None = None
        # the usage archive's tables in the store's own file: samples go in with each save
        self.rollups = Rollups(Archive(store.path))

    def load(self, now: float | None = None) -> AgentState | None:
        got = self.store.load_state(self.node)
        if got is None:
            return None
        state = state_of_bytes(got[1], now)
        self._last = got[1]
        return state

    def discard_temp_files(self) -> None:
        return None  # SQLite's own journal recovers a cut transaction

    def take(self, table: str, seq: int, outcome: str) -> None:
        """Mark a submission or cancel request taken, with the next save."""
        self._taken.append((table, seq, outcome))

    def record_series(
        self,
        now: float,
        usage: Mapping[str, Mapping[str, float]],
        reservations: Mapping[str, list[float]],
        throttled_s: Mapping[str, float] | None = None,
    ) -> None:
        """The estimate of ``now``: each workload's usage, reservation and throttled seconds since
        its previous sample (where known), written with the next save."""
        self._series.append((now, series_of(usage, reservations, throttled_s)))

    def record_event(self, node: str | None, rec: dict[str, Any]) -> None:
        """An action-log record of ``node`` written with the next save (in its transaction)."""
        self._events.append((node, rec))

    def record_node(self, now: float, status: Mapping[str, Any]) -> None:
        """The node's slack view of ``now``, written with the next save (and kept: ``last_node``)."""
        self._node = json_text(dict(status))
        self.last_node = dict(status)

    def save(self, state: AgentState) -> bool:
        text = state_bytes(state).decode()
        if (
            text == self._last
            and not self._taken
            and not self._series
            and not self._events
            and self._node is None
        ):
            return False
        if self._steps is None:
            self._steps = self.store.written_steps()
        now = self.clock()
        steps: dict[tuple[int, str], int] = {}
        rows: dict[str, tuple[Any, ...]] = {}
        with self.store.transaction() as db:
            db.execute(
                "INSERT INTO agent_state(node, state, saved_at) VALUES (?, ?, ?) ON CONFLICT(node)"
                " DO UPDATE SET state=excluded.state, saved_at=excluded.saved_at",
                (state.node, text, now),
            )
            for name, job in state.jobs.items():
                key = (job.submission or 0, name)
                hist = state.history(name)
                have = self._steps.get(key, 0)
                if len(hist) < have:  # a name submitted again from the inbox (no number): its new history
                    db.execute("DELETE FROM transitions WHERE submission=? AND job=?", key)
                    have = 0
                if len(hist) > have:
                    runs = runs_of(job, [t.state for t in hist])
                    db.executemany(
                        "INSERT INTO transitions(submission, job, seq, state, at, reason, run)"
                        " VALUES (?, ?, ?, ?, ?, ?, ?)",
                        [
                            (key[0], name, i, t.state.value, t.time, t.reason.value, runs[i])
                            for i, t in enumerate(hist)
                            if i >= have
                        ],
                    )
                    steps[key] = len(hist)
                row = _job_row(state, job)
                if self._rows.get(name) != (*row, job.host):
                    db.execute(
                        "INSERT OR REPLACE INTO jobs(job, submission, node, state, run, priority, image,"
                        " command, requests, submitted_at, updated_at, why_pending, exit_code)"
                        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        (name, job.submission, job.host or state.node, *row[:6], now, *row[6:]),
                    )
                    rows[name] = (*row, job.host)
            for table, seq, outcome in self._taken:
                db.execute(f"UPDATE {table} SET taken_at=?, outcome=? WHERE seq=?", (now, outcome, seq))
            for at, series in self._series:
                db.executemany(SAMPLES_SQL, series_rows(state.node, at, series))
            for node, rec in self._events:
                insert_event(db, node, rec)
                archive_event(db, node, rec)
            if self._node is not None:
                db.execute(
                    "INSERT OR REPLACE INTO nodes(node, at, status) VALUES (?, ?, ?)",
                    (state.node, now, self._node),
                )
        self._steps.update(steps)
        self._rows.update(rows)
        self._taken.clear()
        self._series.clear()
        self._events.clear()
        self._node = None
        self._last = text
        self.writes += 1
        self.rollups.due(now)  # its own transaction, after the save's
        return True


def archive_event(db: sqlite3.Connection, node: str | None, rec: Mapping[str, Any]) -> None:
    """An action-log record the usage archive keeps, as its event, in ``db``'s transaction."""
    event = archived_event(node, rec)
    if event is not None:
        db.execute(EVENTS_SQL, event_row(event))


def _job_row(state: AgentState, job: JobRecord) -> tuple[Any, ...]:
    return (
        state.task(job.name).value,
        job.run,
        job.priority,
        job.image,
        json_text(job.command),
        json_text(job.requests),
        job.submitted_at,
        job.why_pending,
        job.exit_code,
    )


class DbSubmissions:
    """:class:`~kalena.agent.ports.SubmissionSource` over the store's queue. A submission the
    agent cannot parse (written by something other than ``kalena submit``) is marked rejected with
    its problems at once; it changes no state."""

    def __init__(self, saver: DbStateStore) -> None:
        self.saver = saver
        self.store = saver.store

    def new(self) -> Intake:
        subs, cancels = self.store.untaken()
        ok, problems = [], []
        for p in subs:
            where = f"{self.store.path}: submission {p.seq}"
            try:
                sub = parse_submission(p.spec, where)
            except SubmissionError as e:
                problems.extend(e.problems)
                with self.store.transaction() as db:
                    outcome = "rejected: " + "; ".join(x.render() for x in e.problems)
                    db.execute(
                        "UPDATE submissions SET taken_at=?, outcome=? WHERE seq=?",
                        (self.saver.clock(), outcome, p.seq),
                    )
                continue
            ok.append((p.seq, where, sub))
        return Intake(ok, [(("cancels", c.seq), c.job) for c in cancels], problems)

    def commit(self, outcomes: dict[object, str], save: Callable[[], object]) -> None:
        for token, outcome in outcomes.items():
            if isinstance(token, int):
                self.saver.take("submissions", token, outcome)
            else:
                table, seq = token  # type: ignore[misc]
                self.saver.take(table, seq, outcome)
        save()


class DbActionLog(ActionLog):
    """The action log in the store's ``events`` (also kept in memory, as the file log is); records
    appended ``with_save`` go with ``saver``'s next save (without a saver: at once)."""

    def __init__(self, store: Store, node: str | None = None, saver: DbStateStore | None = None) -> None:
        super().__init__(None)
        self.store, self.node, self.saver = store, node, saver

    def append(
        self, kind: str, time: float, *, sync: bool = False, with_save: bool = False, **fields: Any
    ) -> dict[str, Any]:
        rec = super().append(kind, time, sync=sync, **fields)
        if with_save and self.saver is not None:
            self.saver.record_event(self.node, rec)
            return rec
        with self.store.transaction(durable=sync) as db:
            insert_event(db, self.node, rec)
            archive_event(db, self.node, rec)
        return rec

    def has_eviction(self, eviction_id: str) -> bool:
        return any(e.data.get("id") == eviction_id for e in self.store.events(kinds=("evict",)))
