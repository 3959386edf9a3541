"""Kalena's embedded store (``kalena.store``) on real SQLite files: the schema and its checks, the
queue's all-or-none submissions, cancel, WAL readers and writers across connections, and the
series and events tables."""

from __future__ import annotations

import contextlib
import sqlite3
import threading
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kalena.store import Store, StoreConflict, StoreError
from kalena.store.db import SCHEMA_VERSION, insert_event

SPEC = {"image": "x", "command": ["sleep", "5"], "requests": {"cpu": 0.5}, "priority": 2}


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "k.db"


@pytest.fixture
def store(path: Path):
    with Store(path) as s:
        yield s


def put_job(store: Store, name: str, state: str, submission: int | None = None) -> None:
    """A ``jobs`` row as an agent would have written it."""
    store.db.execute(
        "INSERT OR REPLACE INTO jobs(job, submission, node, state, run, priority, image, command,"
        " requests, submitted_at, updated_at, why_pending, exit_code)"
        " VALUES (?, ?, 'node-a', ?, 1, 0, 'x', '[\"true\"]', '{}', 1.0, 2.0, NULL, NULL)",
        (name, submission, state),
    )


def untaken_names(store: Store) -> list[str]:
    return [p.job for p in store.untaken()[0]]


def submission_count(path: Path) -> int:
    with contextlib.closing(sqlite3.connect(path)) as db:
        return int(db.execute("SELECT count(*) FROM submissions").fetchone()[0])


# -- the file ----------------------------------------------------------------------------------------


def test_a_new_store_is_in_wal_mode_with_schema_version_1(path):
    Store(path).close()
    assert path.is_file()
    with contextlib.closing(sqlite3.connect(path)) as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0].lower() == "wal"
        assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 3
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert {"submissions", "cancels", "agent_state", "jobs", "transitions", "events", "series"} <= tables


def test_a_store_is_made_with_its_folder_and_opened_again(tmp_path):
    path = tmp_path / "a" / "b" / "k.db"
    with Store(path) as s:
        s.submit([("a", SPEC)], 1.0)
    with Store(path, create=False) as s:  # opened again: the schema is not made twice
        assert untaken_names(s) == ["a"]


def test_a_file_that_is_not_sqlite_is_refused_naming_it(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("these are my notes, not a database\n" * 40)
    with pytest.raises(StoreError, match="not a Kalena store") as e:
        Store(path)
    assert str(path) in str(e.value)
    assert path.read_text().startswith("these are my notes")  # left as it was


def test_an_sqlite_database_of_someone_else_is_refused(tmp_path):
    path = tmp_path / "other.db"
    with contextlib.closing(sqlite3.connect(path)) as db:
        db.execute("CREATE TABLE customers(id INTEGER PRIMARY KEY, name TEXT)")
        db.execute("INSERT INTO customers(name) VALUES ('ada')")
        db.commit()
    with pytest.raises(StoreError, match="not a Kalena store") as e:
        Store(path)
    assert str(path) in str(e.value)
    with contextlib.closing(sqlite3.connect(path)) as db:  # no Kalena table was added
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        assert tables == {"customers"}
        assert db.execute("PRAGMA user_version").fetchone()[0] == 0


def test_a_refused_database_keeps_its_journal_mode(tmp_path):
    """The journal mode is kept in the file: a database the store refuses is not switched to WAL."""
    path = tmp_path / "other.db"
    with contextlib.closing(sqlite3.connect(path)) as db:
        db.execute("CREATE TABLE customers(id INTEGER PRIMARY KEY)")
        db.commit()
        assert db.execute("PRAGMA journal_mode").fetchone()[0].lower() == "delete"
    with pytest.raises(StoreError):
        Store(path)
    with contextlib.closing(sqlite3.connect(path)) as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0].lower() == "delete"


def test_a_store_of_a_newer_schema_is_refused(path):
    Store(path).close()
    with contextlib.closing(sqlite3.connect(path)) as db:
        db.execute("PRAGMA user_version=99")
    with pytest.raises(StoreError, match="newer") as e:
        Store(path)
    assert "99" in str(e.value) and str(path) in str(e.value)
    with contextlib.closing(sqlite3.connect(path)) as db:  # not migrated down
        assert db.execute("PRAGMA user_version").fetchone()[0] == 99


def test_a_missing_store_is_not_made_without_create(path):
    with pytest.raises(StoreError, match="no such store") as e:
        Store(path, create=False)
    assert str(path) in str(e.value)
    assert not path.exists()


def test_a_folder_is_not_a_store(tmp_path):
    folder = tmp_path / "dir.db"
    folder.mkdir()
    for create in (True, False):
        with pytest.raises(StoreError, match="folder") as e:
            Store(folder, create=create)
        assert str(folder) in str(e.value)
    assert list(folder.iterdir()) == []


# -- submit -------------------------------------------------------------------------------------------


def test_submit_queues_every_spec_in_order_and_returns_their_numbers(store):
    seqs = store.submit([("a", SPEC), ("b", dict(SPEC, priority=7))], 10.0)
    assert len(seqs) == 2 and seqs[0] < seqs[1]
    subs, cancels = store.untaken()
    assert [(p.seq, p.job, p.at) for p in subs] == [(seqs[0], "a", 10.0), (seqs[1], "b", 10.0)]
    assert subs[1].spec == dict(SPEC, priority=7)
    assert cancels == []


def test_submit_of_a_name_already_queued_queues_none_of_the_batch(store):
    store.submit([("a", SPEC)], 1.0)
    with pytest.raises(StoreConflict, match="'a'"):
        store.submit([("b", SPEC), ("a", SPEC), ("c", SPEC)], 2.0)
    assert untaken_names(store) == ["a"]
    assert submission_count(store.path) == 1


def test_submit_of_a_name_given_twice_queues_none(store):
    with pytest.raises(StoreConflict, match="more than once"):
        store.submit([("a", SPEC), ("b", SPEC), ("a", SPEC)], 1.0)
    assert untaken_names(store) == []
    assert submission_count(store.path) == 0


def test_a_name_whose_job_ended_may_be_submitted_again(store):
    for state in ("succeeded", "failed", "cancelled"):
        put_job(store, f"j-{state}", state)
        assert len(store.submit([(f"j-{state}", SPEC)], 5.0)) == 1
    assert untaken_names(store) == ["j-succeeded", "j-failed", "j-cancelled"]


@pytest.mark.parametrize("state", ["running", "pending", "evicting"])
def test_a_name_whose_job_is_live_may_not_be_submitted(store, state):
    put_job(store, "j", state)
    with pytest.raises(StoreConflict, match=f"already {state}"):
        store.submit([("other", SPEC), ("j", SPEC)], 5.0)
    assert untaken_names(store) == []


# -- cancel -------------------------------------------------------------------------------------------


def test_cancel_of_an_untaken_submission_withdraws_it(store):
    (seq,) = store.submit([("a", SPEC)], 10.0)
    assert store.cancel("a", 12.5) == "withdrawn"
    assert store.untaken() == ([], [])
    steps = store.transitions("a")
    assert [(t.submission, t.seq, t.state, t.reason, t.at) for t in steps] == [
        (seq, 0, "pending", "submitted", 10.0),
        (seq, 1, "cancelled", "cancelled", 12.5),
    ]
    assert store.written_steps() == {(seq, "a"): 2}
    (row,) = store.jobs()
    assert (row.job, row.submission, row.state, row.run) == ("a", seq, "cancelled", 0)
    assert (row.priority, row.image, row.command, row.requests) == (2, "x", ["sleep", "5"], {"cpu": 0.5})
    assert (row.submitted_at, row.updated_at) == (10.0, 12.5)
    outcome = store.db.execute("SELECT taken_at, outcome FROM submissions WHERE seq=?", (seq,)).fetchone()
    assert outcome == (12.5, "withdrawn")


def test_a_withdrawn_name_submitted_again_shows_only_the_new_submission(store):
    store.submit([("a", SPEC)], 1.0)
    store.cancel("a", 2.0)
    (new,) = store.submit([("a", dict(SPEC, image="y"))], 3.0)
    rows = store.jobs()
    assert [(r.job, r.state, r.submission, r.image) for r in rows] == [("a", "submitted", new, "y")]
    assert store.job("a") == rows[0]
    assert store.transitions("a", submission=new) == []  # the new submission has no step yet
    assert [t.state for t in store.transitions("a", submission=new - 1)] == ["pending", "cancelled"]


def test_cancel_of_a_live_job_requests_once(store):
    put_job(store, "j", "running", submission=1)
    assert store.cancel("j", 5.0) == "requested"
    assert store.cancel("j", 6.0) == "requested"
    subs, cancels = store.untaken()
    assert subs == []
    assert [(c.job, c.at, c.spec) for c in cancels] == [("j", 5.0, None)]
    assert store.job("j").state == "running"  # the agent ends it, not the store


def test_cancel_again_once_the_first_request_was_taken(store):
    put_job(store, "j", "running")
    store.cancel("j", 5.0)
    store.db.execute("UPDATE cancels SET taken_at=6.0, outcome='done'")
    assert store.cancel("j", 7.0) == "requested"
    assert [c.at for c in store.untaken()[1]] == [7.0]


def test_cancel_of_an_unknown_or_ended_job_is_a_conflict(store):
    with pytest.raises(StoreConflict, match="no job 'nope'"):
        store.cancel("nope", 1.0)
    put_job(store, "done", "succeeded")
    with pytest.raises(StoreConflict, match="already ended"):
        store.cancel("done", 1.0)
    store.submit([("w", SPEC)], 1.0)
    store.cancel("w", 2.0)
    with pytest.raises(StoreConflict, match=r"already ended \(cancelled\)"):
        store.cancel("w", 3.0)
    assert store.untaken() == ([], [])


# -- connections --------------------------------------------------------------------------------------


def test_readers_do_not_wait_for_a_writer_and_a_second_writer_waits(path):
    with Store(path) as s:
        (before,) = s.submit([("before", SPEC)], 1.0)
    reader, writer2 = Store(path), Store(path)
    holding, release = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def first_writer() -> None:
        try:
            with Store(path) as w, w.transaction() as db:
                db.execute("INSERT INTO submissions(job, spec, submitted_at) VALUES ('inflight', '{}', 2.0)")
                holding.set()
                release.wait(30)
                time.sleep(0.5)  # the second writer is waiting meanwhile
        except BaseException as e:  # reported by the test below
            errors.append(e)
            holding.set()

    t = threading.Thread(target=first_writer)
    t.start()
    try:
        assert holding.wait(30)
        # the write transaction is open: a reader sees what was committed, not what is in flight
        assert untaken_names(reader) == ["before"]
        assert [r.job for r in reader.jobs()] == ["before"]
        release.set()
        (second,) = writer2.submit([("second", SPEC)], 3.0)  # waits for the first (busy timeout)
    finally:
        release.set()
        t.join(60)
    assert not errors
    assert not t.is_alive()
    seqs = dict((p.job, p.seq) for p in reader.untaken()[0])
    assert seqs == {"before": before, "inflight": seqs["inflight"], "second": second}
    assert before < seqs["inflight"] < second  # the second writer's row came after the first's commit
    reader.close()
    writer2.close()


def test_a_failed_transaction_leaves_nothing(store):
    with pytest.raises(RuntimeError), store.transaction() as db:
        db.execute("INSERT INTO submissions(job, spec, submitted_at) VALUES ('ghost', '{}', 1.0)")
        raise RuntimeError("boom")
    assert store.untaken() == ([], [])
    store.submit([("a", SPEC)], 2.0)  # the connection is usable after the rollback
    assert untaken_names(store) == ["a"]


# -- events --------------------------------------------------------------------------------


def test_events_pull_out_job_and_workload_and_filter(store):
    recs = [
        {"time": 1.0, "kind": "evict", "job": "j1", "why": {"workload": "batch/j1.1", "cause": "ram"}},
        {"time": 2.0, "kind": "throttle", "why": {"workload": "batch/j2.1", "quota_cores": 0.5}},
        {"time": 3.0, "kind": "pending", "job": "j2", "why": "no room"},
        {"time": 4.0, "kind": "admit", "job": "j1", "workload": "batch/j1.2", "pid": 42},
        {"time": 5.0, "kind": "admit", "job": 7, "workload": ["not", "a", "name"]},
    ]
    with store.transaction() as db:
        for r in recs:
            insert_event(db, "node-a", r)
    every = store.events()
    assert [(e.kind, e.job, e.workload, e.node) for e in every] == [
        ("evict", "j1", "batch/j1.1", "node-a"),
        ("throttle", None, "batch/j2.1", "node-a"),
        ("pending", "j2", None, "node-a"),
        ("admit", "j1", "batch/j1.2", "node-a"),
        ("admit", None, None, "node-a"),
    ]
    assert [e.at for e in every] == [1.0, 2.0, 3.0, 4.0, 5.0]
    assert every[0].data == {"job": "j1", "why": {"workload": "batch/j1.1", "cause": "ram"}}
    assert every[3].data == {"job": "j1", "workload": "batch/j1.2", "pid": 42}

    def kinds_at(**kw):
        return [e.at for e in store.events(**kw)]

    assert kinds_at(job="j1") == [1.0, 4.0]
    assert kinds_at(workloads=["batch/j2.1"]) == [2.0]
    assert kinds_at(job="j2", workloads=["batch/j1.1"]) == [1.0, 3.0]  # either one
    assert kinds_at(job="j1", workloads=["batch/j2.1"], kinds=["evict", "throttle"]) == [1.0, 2.0]
    assert kinds_at(job="j1", kinds=["admit"]) == [4.0]
    assert kinds_at(kinds=["admit"]) == [4.0, 5.0]
    assert kinds_at(job="nobody", workloads=["batch/none.1"]) == []


# -- a property of the queue --------------------------------------------------------------------------

OPS = st.lists(st.tuples(st.sampled_from(["submit", "cancel"]), st.sampled_from("abc")), max_size=15)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=OPS)
def test_acknowledged_submissions_are_kept_and_a_name_is_queued_once(tmp_path_factory, ops):
    path = tmp_path_factory.mktemp("queue") / "k.db"
    acked: dict[int, str] = {}
    queued: set[str] = set()  # the model: names with a submission not taken
    with Store(path) as s:
        for i, (op, name) in enumerate(ops):
            now = float(i)
            if op == "submit":
                try:
                    (seq,) = s.submit([(name, dict(SPEC, n=i))], now)
                except StoreConflict:
                    assert name in queued
                else:
                    assert name not in queued
                    assert seq not in acked
                    acked[seq] = name
                    queued.add(name)
            else:
                try:
                    assert s.cancel(name, now) == "withdrawn"
                except StoreConflict:
                    assert name not in queued
                else:
                    assert name in queued
                    queued.discard(name)
            names = untaken_names(s)
            assert len(names) == len(set(names)), names
            assert set(names) == queued
    with contextlib.closing(sqlite3.connect(path)) as db:
        rows = dict(db.execute("SELECT seq, job FROM submissions"))
        per_name = db.execute(
            "SELECT job, count(*) FROM submissions WHERE taken_at IS NULL GROUP BY job HAVING count(*) > 1"
        ).fetchall()
    assert {seq: rows.get(seq) for seq in acked} == acked
    assert per_name == []


def test_an_empty_file_is_no_store_for_a_reader(tmp_path):
    """``kalena jobs`` (create=False) never turns an empty file into a store."""
    path = tmp_path / "k.db"
    path.touch()
    with pytest.raises(StoreError, match="empty file"):
        Store(path, create=False)
    assert path.stat().st_size == 0


def test_a_version_1_store_gains_the_nodes_table_and_keeps_its_rows(tmp_path):
    path = tmp_path / "k.db"
    with Store(path) as store:
        store.submit([("a", SPEC)], 1.0)
    with contextlib.closing(sqlite3.connect(path)) as db:  # as a store of schema version 1 was
        db.execute("DROP TABLE nodes")
        db.execute("DROP TABLE work")
        db.execute("PRAGMA user_version=1")
        db.commit()
    with Store(path) as store:
        assert [p.job for p in store.untaken()[0]] == ["a"]
        assert store.nodes() == {}
        assert store.db.execute("PRAGMA user_version").fetchone()[0] == 3


def test_a_file_that_holds_only_a_usage_archive_becomes_a_store_too(tmp_path):
    from kalena.archive import Archive

    path = tmp_path / "kalena.db"
    Archive(path).close()  # e.g. kalena simulate --archive wrote it first
    with Store(path) as s:
        assert s.jobs() == []
    with Archive(path) as a:
        assert a.span() is None
