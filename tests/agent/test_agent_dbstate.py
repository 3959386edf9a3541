"""The agent on Kalena's store (SQLite): jobs from the store's queue, cancel, and every lifecycle
step in the store with the state that made it, across crashes at any side effect.

The host is the fake cgroup folder of ``test_agent_loop`` (batch runs are real ``sleep``
processes); the store is a real SQLite database. A "crash" is an exception raised from a side
effect (a process start, a kill, a cgroup write): the agent object is dropped there, as a
SIGKILL would leave it, and a new one is made from the same store.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import shutil
import signal

import pytest
import yaml
from agent_testlib import make_fake_host
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_agent_loop import Harness, LiveReader, Telemetry

from kalena.agent.archiving import ThrottledSince, series_rows
from kalena.agent.dbstate import DbActionLog, DbStateStore, DbSubmissions
from kalena.agent.declaration import parse_declaration
from kalena.agent.loop import Agent
from kalena.agent.notify import Notifier
from kalena.agent.runtime import ProcessRuntime
from kalena.agent.writer import CgroupWriter, ManagedScope
from kalena.archive import Archive
from kalena.core.lifecycle import TaskState
from kalena.core.resources import CPU, DIMS
from kalena.store import Store, StoreConflict

SLEEP = ["sleep", "60"]


class Crash(BaseException):
    """The agent process dies here (not an Exception: nothing in the agent catches it)."""


class DbHarness(Harness):
    """The loop tests' harness with the agent's state, queue and log in a store."""

    def make(self) -> Agent:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.db = Store(self.state_dir / "kalena.db")
        reader = LiveReader(self.tree, proc_pressure=self.state_dir / "no-psi")
        writer = CgroupWriter(self.tree, ManagedScope(), clock=self.clock)
        create = writer.create

        def create_like_the_kernel(name, reason):  # the kernel makes the CPU counter with the cgroup
            out = create(name, reason)
            home = self.tree.layout.home("cpuacct")
            counter = self.tree.dir(home, name) / "cpuacct.usage"
            if not counter.exists():
                counter.write_text("0\n")
            return out

        writer.create = create_like_the_kernel
        decl = parse_declaration(yaml.safe_load(self.decl_path.read_text()), str(self.decl_path))
        saver = DbStateStore(self.db, decl.node.name, self.clock)
        self.agent = Agent(
            decl,
            self.config,
            tree=self.tree,
            reader=reader,
            writer=writer,
            telemetry=self.telemetry,
            notifier=Notifier(self.clock),
            store=saver,
            log=DbActionLog(self.db, decl.node.name, saver),
            runtime=ProcessRuntime(writer, reader),
            submissions=DbSubmissions(saver),
            clock=self.clock,
            declaration_path=self.decl_path,
        )
        return self.agent

    def queue(self, name: str, ram_mib: float = 128, priority: int = 1, command: list[str] = SLEEP) -> int:
        spec = {"name": name, "command": command, "requests": {"cpu": 0.2, "ram": ram_mib / 1024}}
        return self.db.submit([(name, {**spec, "priority": priority})], self.clock.t)[0]

    def saved_steps(self, name: str) -> list[tuple[str, float, str]]:
        return [(t.state, t.at, t.reason) for t in self.db.transitions(name)]

    def steps(self, name: str) -> list[tuple[str, float, str]]:
        return [(t.state.value, t.time, t.reason.value) for t in self.agent.state.history(name)]


@pytest.fixture
def dbharness(tmp_path, fake_host):
    made: list[DbHarness] = []

    def build(**kw) -> DbHarness:
        h = DbHarness(tmp_path, fake_host("hybrid"), **kw)
        made.append(h)
        return h

    yield build
    for h in made:
        h.kill_all()
        h.db.close()


def alive(pid: int | None) -> bool:
    if pid is None:
        return False
    try:
        os.kill(pid, 0)
        with open(f"/proc/{pid}/stat") as f:
            return not f.read().split(") ", 1)[1].startswith("Z")
    except (ProcessLookupError, FileNotFoundError):
        return False


def test_jobs_come_from_the_store_and_every_step_is_saved_with_the_state(dbharness):
    h = dbharness()
    h.agent.start()
    a, b = h.queue("a"), h.queue("b", ram_mib=900)  # b does not fit beside production
    report = h.step()
    assert report.admitted == ("batch/a.1",)
    assert h.saved_steps("a") == h.steps("a") and h.steps("a")[-1][0] == "running"
    assert h.saved_steps("b") == h.steps("b") == [("pending", h.clock.t, "submitted")]
    rows = {r.job: r for r in h.db.jobs()}
    assert rows["a"].state == "running" and rows["a"].submission == a and rows["a"].run == 1
    assert rows["b"].state == "pending" and "Insufficient ram" in (rows["b"].why_pending or "")
    taken = h.db.db.execute("SELECT seq, outcome FROM submissions ORDER BY seq").fetchall()
    assert taken == [(a, "accepted"), (b, "accepted")]
    kinds = [e.kind for e in h.db.events(job="a")] + [e.kind for e in h.db.events(workloads=["batch/a.1"])]
    assert "submit" in kinds and "admit" in kinds
    h.step(10.0)  # an estimate: the residents' usage and reservations, into the usage archive
    with Archive(h.db.path) as a:
        w = a.window(["prod/web", "batch/a.1"], 0.0, h.clock.t + 1.0)
        assert (w.reservation.count[:, CPU] > 0).all()  # this fake host measures no usage: only them


def test_cancel_ends_a_pending_and_a_running_job_and_kills_the_run(dbharness):
    h = dbharness()
    h.agent.start()
    h.queue("run")
    h.queue("wait", ram_mib=900)
    h.step()
    pid = h.agent.state.jobs["run"].pid
    assert alive(pid)
    assert h.db.cancel("run", h.clock.t) == "requested" and h.db.cancel("wait", h.clock.t) == "requested"
    h.step()
    for name in ("run", "wait"):
        assert h.agent.state.task(name) is TaskState.CANCELLED
        assert h.saved_steps(name)[-1][::2] == ("cancelled", "cancelled")
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)  # the agent's own child: reaped here so it is not a zombie
    assert not alive(pid)
    assert "batch/run.1" not in h.agent.ledger.batch_ids()
    assert h.agent.state.jobs["run"].workload_id is None
    outcomes = [r[0] for r in h.db.db.execute("SELECT outcome FROM cancels ORDER BY seq")]
    assert outcomes == ["cancelled", "cancelled"]
    with pytest.raises(StoreConflict, match="already ended"):
        h.db.cancel("run", h.clock.t)


def test_a_cancel_a_crash_cut_short_kills_the_run_at_restart(dbharness):
    h = dbharness()
    h.agent.start()
    h.queue("a")
    h.step()
    pid = h.agent.state.jobs["a"].pid
    h.db.cancel("a", h.clock.t)

    def crash(job, reason):
        raise Crash

    h.agent.runtime.kill = crash  # CANCELLED is saved; the kill never happens
    with pytest.raises(Crash):
        h.step()
    assert alive(pid)
    h.make()
    h.agent.start()
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)
    assert not alive(pid) and h.agent.state.jobs["a"].workload_id is None
    assert [s for s, _, _ in h.saved_steps("a")].count("cancelled") == 1


def test_a_run_that_ends_as_the_agent_dies_keeps_its_finish_line(dbharness):
    """The run's end and its ``finish`` line are one save: a crash right after it (before the
    run's leftovers are cleaned up) leaves both, and the restart, having no run to reap, writes
    no second line."""
    h = dbharness()
    h.agent.start()
    h.queue("quick", command=["true"])
    h.step()
    pid = h.agent.state.jobs["quick"].pid
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)  # the run has ended (the agent's own child, reaped here)

    def crash(*a, **kw):
        raise Crash

    h.agent.runtime.cleanup = crash  # the end is saved; the clean-up never happens
    with pytest.raises(Crash):
        h.step()
    rows = {r.job: r for r in h.db.jobs()}
    assert rows["quick"].state == "succeeded"
    assert [e.kind for e in h.db.events(workloads=["batch/quick.1"])].count("finish") == 1
    h.make()
    h.agent.start()
    h.step()
    assert [e.kind for e in h.db.events(workloads=["batch/quick.1"])].count("finish") == 1


def test_a_save_that_fails_half_way_leaves_the_previous_state_and_no_step(dbharness, monkeypatch):
    h = dbharness()
    h.agent.start()
    h.queue("a")
    h.step()
    before = (h.db.load_state("n1"), h.saved_steps("a"))

    def broken(*a, **kw):
        raise Crash

    monkeypatch.setattr("kalena.agent.dbstate.series_rows", broken)  # the last write of a save
    h.agent.state.jobs["a"].priority = 7  # a change to save
    h.agent.store.record_series(h.clock.t, {"batch/a.1": {"cpu": 0.1}}, {})
    with pytest.raises(Crash):
        h.agent.store.save(h.agent.state)
    assert (h.db.load_state("n1"), h.saved_steps("a")) == before  # rolled back whole
    monkeypatch.undo()
    h.agent.store.save(h.agent.state)
    assert '"priority":7' in h.db.load_state("n1")[1]


def test_an_estimate_becomes_archive_samples_with_what_was_not_finite_left_null(tmp_path):
    res = [1.0, 2.0, math.nan, 4.0, None, 6.0, math.inf, 8.0]
    assert len(res) == len(DIMS)
    rows = series_rows(
        "node-a",
        20.0,
        {
            "batch/j.1": ({"cpu": 0.25, "ram": 3.0, "disk.read": math.inf}, res, 1.5),
            "prod/web": ({"cpu": 9.0}, None, None),
        },
    )
    by = {r[0]: r for r in rows}
    assert by["batch/j.1"][:4] == ("batch/j.1", "node-a", 20.0, 1.5)  # throttled seconds since the last
    usage, reservation = by["batch/j.1"][4:12], by["batch/j.1"][12:]
    assert usage == (0.25, 3.0, None, None, None, None, None, None)
    assert reservation == (1.0, 2.0, None, 4.0, None, 6.0, None, 8.0)
    assert by["prod/web"][3:] == (None, 9.0, *[None] * 15)  # throttled time unknown: NULL, not 0


def test_throttled_since_counts_from_the_previous_sample_and_never_makes_up_a_zero():
    t = ThrottledSince()
    assert t.take({"a": 5_000_000_000, "b": None}) == {}  # first samples: nothing to count from
    assert t.take({"a": 7_500_000_000, "b": 1_000}) == {"a": 2.5}  # b's first counter
    assert t.take({"a": 7_500_000_000, "b": 2_000}) == {"a": 0.0, "b": 1e-6}  # 0 measured is 0
    assert t.take({"a": 1_000_000_000, "b": None}) == {}  # a restarted (a new cgroup); b not read
    assert t.take({"a": 3_000_000_000, "b": 9_000}) == {"a": 2.0}  # b starts afresh
    assert t.take({"b": 10_000}) == {"b": 1e-6}
    assert t.take({"a": 4_000_000_000}) == {}  # a was not sampled last time: its baseline is gone


class ThrottledTelemetry(Telemetry):
    """The loop tests' counters, with a throttled-time counter growing at ``rate[wid]`` seconds a
    second, given only where the agent asks for it (as the cgroup reader does)."""

    def __init__(self, clock) -> None:
        super().__init__(clock)
        self.rate: dict[str, float] = {}
        self.asked: list[set[str]] = []

    def counters(self, cgroups, now, throttling=()):
        self.asked.append(set(throttling))
        out = super().counters(cgroups, now, throttling)
        return {
            w: dataclasses.replace(
                c,
                throttled_ns=int(self.rate.get(w, 0.0) * (now - 10_000.0) * 1e9) if w in throttling else None,
            )
            for w, c in out.items()
        }


def test_estimates_carry_each_residents_throttled_seconds_since_the_last_into_the_stores_archive(dbharness):
    h = dbharness()
    h.telemetry = h.agent.telemetry = ThrottledTelemetry(h.clock)
    h.telemetry.usage = {"prod/web": {"cpu": 0.5, "ram": 0.25}}
    h.telemetry.rate = {"prod/web": 0.25, "batch/a.1": 0.5}
    h.agent.start()
    h.queue("a")
    h.step()  # the first estimate (t = 10 001): admits a
    h.telemetry.usage["batch/a.1"] = {"cpu": 0.1}
    for _ in range(25):  # estimates every 10 s
        h.step()
    with Archive(h.db.path) as a:
        rows = a.db.execute("SELECT workload, at, throttled_s FROM archive_samples ORDER BY workload, at")
    by: dict[str, list[tuple[float, float | None]]] = {}
    for w, at, thr in rows:
        by.setdefault(w, []).append((at, thr))
    assert [at for at, _ in by["prod/web"]] == [10_001.0, 10_011.0, 10_021.0]
    assert [thr for _, thr in by["prod/web"]] == [None, pytest.approx(2.5), pytest.approx(2.5)]
    assert by["batch/a.1"] == [(10_011.0, None), (10_021.0, pytest.approx(5.0))]  # admitted after 10 001
    # every round asks batch's throttled time (anti-starvation), an estimate's every resident's
    assert h.telemetry.asked[-1] == {"batch/a.1"} and h.telemetry.asked[-6] == {"prod/web", "batch/a.1"}
    assert set(h.agent.meter.throttled_s()) == {"batch/a.1"}  # the starvation window stays batch's


def test_evictions_throttles_and_caps_of_the_action_log_reach_the_archive(tmp_path):
    db = Store(tmp_path / "kalena.db")
    saver = DbStateStore(db, "n1")
    log = DbActionLog(db, "n1", saver)
    log.append("evict", 5.0, sync=True, id="e1", workload="batch/a.1", cause="memory-pressure")
    log.append("throttle", 6.0, why={"workload": "batch/b.1", "cause": "cpu-pressure", "quota_cores": 0.5})
    log.append("admit", 7.0, job="c", workload="batch/c.1")  # not an archive event
    with Archive(db.path) as a:
        got = [(e.at, e.kind, e.node, e.workload, e.cause) for e in a.events()]
    assert got == [
        (5.0, "eviction", "n1", "batch/a.1", "memory-pressure"),
        (6.0, "throttle", "n1", "batch/b.1", "cpu-pressure"),
    ]


# -- the property: no acknowledged record is lost, no step is lost or written twice -----------------
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("submit"), st.sampled_from("abcd"), st.sampled_from([128, 600])),
        st.tuples(st.just("cancel"), st.sampled_from("abcd"), st.just(0)),
        st.tuples(st.just("step"), st.just(""), st.sampled_from([1, 11])),
        st.tuples(st.just("crash"), st.sampled_from(["start", "kill", "apply", "create"]), st.just(0)),
    ),
    min_size=1,
    max_size=14,
)


def _arm(h: DbHarness, where: str):
    """The next call of ``where`` (a process start, a kill, a knob write, a cgroup made) crashes;
    returns the disarm (the step made no such call)."""
    target = h.agent.runtime if where in ("start", "kill") else h.agent.writer
    original = getattr(target, where)

    def crash(*a, **kw):
        setattr(target, where, original)
        raise Crash

    setattr(target, where, crash)
    return lambda: setattr(target, where, original)


EXAMPLES = int(os.environ.get("KALENA_CRASH_EXAMPLES", "60"))


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=OPS)
def test_no_acknowledged_submission_or_step_is_lost_across_crashes(tmp_path_factory, ops):
    root = tmp_path_factory.mktemp("example")  # one host and one store per example
    h = DbHarness(root, make_fake_host(root / "cg", "hybrid"))
    h.agent.start()
    acked: dict[int, str] = {}
    try:
        for op, name, arg in ops:
            if op == "submit":
                with contextlib.suppress(StoreConflict):
                    acked[h.queue(name, ram_mib=arg)] = name
            elif op == "cancel":
                with contextlib.suppress(StoreConflict):
                    h.db.cancel(name, h.clock.t)
            elif op == "crash":
                disarm = _arm(h, name)
                try:
                    h.step()
                    disarm()
                except Crash:
                    h.make()  # a new agent process on the same store
                    h.agent.start()
            else:
                h.step(float(arg))
        h.step()
        h.step()
        # every acknowledged submission was taken: it is a job (with its history) or was withdrawn
        outcome = dict(h.db.db.execute("SELECT seq, outcome FROM submissions"))
        for seq, name in acked.items():
            assert outcome[seq] in ("accepted", "withdrawn"), (seq, name, outcome[seq])
            assert h.db.transitions(name, seq), (seq, name)
        # the store's history of each job is the agent's: no step lost, none twice
        for name, job in h.agent.state.jobs.items():
            assert job.submission is not None
            saved = [(t.state, t.at, t.reason) for t in h.db.transitions(name, job.submission)]
            assert saved == h.steps(name)
        # one process at most per job, and only for a job whose run is live
        live = {j.name for j in h.agent.batch.running().values()}
        for name, job in h.agent.state.jobs.items():
            if name not in live:
                assert job.pid is None or not alive(job.pid), (name, h.agent.state.task(name))
    finally:
        h.kill_all()
        for pid in _sleepers(h):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        h.db.close()
        shutil.rmtree(root, ignore_errors=True)


def _sleepers(h: DbHarness) -> list[int]:
    """Every pid written into a batch cgroup of the fake host (the runs a crash orphaned too)."""
    out = []
    for hier in h.tree.layout.hierarchies:
        base = h.tree.dir(hier, "batch")
        if base.is_dir():
            for procs in base.rglob("cgroup.procs"):
                out += [int(x) for x in procs.read_text().split() if x.strip().isdigit()]
    return out
