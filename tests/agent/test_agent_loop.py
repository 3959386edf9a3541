"""The agent loop on a fake cgroup host (a temporary folder) with a fake clock and fake telemetry.

The decisions are the core's; these tests check the shell's part: what is sampled, what is held
on missing data, that each eviction happens once, escalation and admission, the run loop's
cadence, and that a bad declaration reload changes nothing. Batch runs are real ``sleep``
processes (their cgroup.procs is a plain file here).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import yaml

from kalena.agent.actionlog import ActionLog
from kalena.agent.cgroupfs import FsCgroupReader
from kalena.agent.config import AgentConfig
from kalena.agent.declaration import DeclarationError, parse_declaration
from kalena.agent.layout import CgroupTree
from kalena.agent.loop import Agent
from kalena.agent.notify import AgentEvent, Notifier
from kalena.agent.runtime import ProcessRuntime, Submission, submit
from kalena.agent.state import StateStore
from kalena.agent.telemetry import Counters
from kalena.agent.writer import CgroupWriter, ManagedScope
from kalena.core.config import PolicyConfig
from kalena.core.enforcement import EscalationConfig, EvictionConfig
from kalena.core.lifecycle import IllegalTransition, TaskState, TransitionReason
from kalena.core.placement import ContextKeeper
from kalena.core.resources import DIMS
from kalena.ir.errors import Problem

MIB = 2**20
SLEEP = (sys.executable, "-c", "import time; time.sleep(60)")


class Clock:
    def __init__(self, t: float = 10_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


class LiveReader(FsCgroupReader):
    """cgroup.procs here is a plain file: list only the pids that are still alive."""

    def procs(self, name: str) -> tuple[int, ...]:
        out = []
        for pid in super().procs(name):
            try:
                os.kill(pid, 0)
                with open(f"/proc/{pid}/stat") as f:
                    if f.read().split(") ", 1)[1].startswith("Z"):
                        continue  # a zombie is not running
            except (ProcessLookupError, FileNotFoundError):
                continue
            out.append(pid)
        return tuple(out)


class Telemetry:
    """Counters set by the test: ``usage[wid] = {"cpu": cores, "ram": GiB}`` accumulated per call."""

    name = "fake"

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.usage: dict[str, dict[str, float]] = {}
        self._cpu_ns: dict[str, float] = {}
        self._last: float | None = None
        self.calls = 0

    def counters(self, cgroups, now, throttling=()):
        self.calls += 1
        dt = 0.0 if self._last is None else now - self._last
        self._last = now
        out = {}
        for wid in cgroups:
            u = self.usage.get(wid)
            if u is None:
                continue  # missing telemetry
            self._cpu_ns[wid] = self._cpu_ns.get(wid, 0.0) + u.get("cpu", 0.0) * dt * 1e9
            out[wid] = Counters(now, int(self._cpu_ns[wid]), int(u.get("ram", 0.0) * 2**30), 0, 0, 0)
        return out


DECL = {
    "apiVersion": "kalena.naughtian.io/v1alpha1",
    "kind": "NodeDeclaration",
    "node": {"name": "n1", "capacity": {"cpu": 4, "ram": "1Gi"}},
    "workloads": [
        {
            "id": "prod/web",
            "cgroup": "prod/web",
            "priority": 100,
            "requests": {"cpu": 1, "ram": "256Mi"},
            "limits": {"cpu": 2, "ram": "900Mi"},
        },
        {
            "id": "ds/logger",
            "cgroup": "ds/logger",
            "daemonset": True,
            "requests": {"cpu": "100m", "ram": "64Mi"},
        },
    ],
}


class Harness:
    def __init__(
        self, tmp_path: Path, host, config: AgentConfig | None = None, decl: dict | None = None
    ) -> None:
        self.clock = Clock()
        self.tree = CgroupTree(host.layout(), "kalena")
        self.state_dir = tmp_path / "state"
        self.decl_path = tmp_path / "node.yaml"
        self.decl_path.write_text(yaml.safe_dump(decl or DECL))
        self.config = config or AgentConfig(
            policy=PolicyConfig(
                eviction=EvictionConfig(min_run_time_s=0, grace_period_s=5, acute_grace_period_s=0),
                escalation=EscalationConfig(rounds=1000, persist_s=1e6),
            )
        )
        self.telemetry = Telemetry(self.clock)
        self.make()

    def make(self) -> Agent:
        reader = LiveReader(self.tree, proc_pressure=self.state_dir / "no-psi")
        log = ActionLog(self.state_dir / "actions.jsonl")
        writer = CgroupWriter(self.tree, ManagedScope(), clock=self.clock)
        decl = parse_declaration(yaml.safe_load(self.decl_path.read_text()), str(self.decl_path))
        self.agent = Agent(
            decl,
            self.config,
            tree=self.tree,
            reader=reader,
            writer=writer,
            telemetry=self.telemetry,
            notifier=Notifier(self.clock),
            store=StateStore(self.state_dir / "state.json"),
            log=log,
            runtime=ProcessRuntime(writer, reader),
            inbox=self.state_dir / "inbox",
            clock=self.clock,
            declaration_path=self.decl_path,
        )
        return self.agent

    def submit(self, name: str, priority: int, ram_mib: float = 128, cpu: float = 0.5) -> None:
        submit(
            self.state_dir / "inbox",
            Submission(name, SLEEP, {"cpu": cpu, "ram": ram_mib / 1024}, None, priority),
        )

    def step(self, dt: float = 1.0, events=()):
        self.clock.t += dt
        return self.agent.step(events)

    def log(self, kind: str) -> list[dict]:
        return [r for r in self.agent.log.memory if r["kind"] == kind]

    def kill_all(self) -> None:
        for job in self.agent.state.jobs.values():
            if job.pid:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(job.pid, signal.SIGKILL)
        for rec in self.agent.state.evictions:
            for pid in rec.pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)


@pytest.fixture
def harness(tmp_path, fake_host):
    made: list[Harness] = []

    def build(**kw) -> Harness:
        h = Harness(tmp_path, fake_host("hybrid"), **kw)
        made.append(h)
        return h

    yield build
    for h in made:
        h.kill_all()


def test_admission_is_the_cores_schedule_and_pending_says_why(harness):
    h = harness()
    h.agent.start()
    h.submit("a", 1, ram_mib=300)
    h.submit("b", 2, ram_mib=300)
    h.submit("c", 3, ram_mib=300)  # 256 (prod) + 3 x 300 > 1024 - 64 (the DaemonSet)
    r = h.step()
    assert r.admitted == ("batch/c.1", "batch/b.1")  # the core's order: highest priority first
    assert h.agent.state.status("a") == "queued"
    a = h.agent.state.jobs["a"]
    assert a.why_pending == "0/1 nodes are available: 1 Insufficient ram."
    assert a.why_pending_codes == ["insufficient-resource"] and a.run == 0
    assert [(p["job"], p["codes"]) for p in h.log("pending")] == [("a", ["insufficient-resource"])]
    h.step()
    assert len(h.log("pending")) == 1  # the same reason is logged once


def test_a_higher_priority_job_submitted_later_is_admitted_first(harness):
    h = harness()
    h.agent.start()
    h.submit("early", 1, ram_mib=500)
    h.submit("late", 5, ram_mib=500)  # only one of the two fits
    assert h.step().admitted == ("batch/late.1",)
    assert h.agent.state.status("early") == "queued" and h.agent.state.status("late") == "running"
    assert h.agent.state.jobs["early"].why_pending_codes == ["insufficient-resource"]


def test_a_harmful_pairing_keeps_the_job_pending_until_it_expires(harness):
    h = harness()
    h.agent.start()
    window = h.config.policy.pairing.window_s
    t0 = h.clock.t
    for i in range(h.config.policy.pairing.max_evictions):  # evicted from this node too often
        h.agent.batch.evicted_from_node("batch/x", t0 - 10 + i, None)
    h.submit("x", 1)
    h.submit("y", 1)  # another class: not blacklisted
    assert h.step().admitted == ("batch/y.1",)
    x = h.agent.state.jobs["x"]
    assert x.why_pending == "0/1 nodes are available: 1 Harmful pairing."
    assert x.why_pending_codes == ["harmful-pairing"]
    logged = h.log("pending")[-1]
    assert (logged["job"], logged["why"], logged["codes"]) == ("x", x.why_pending, ["harmful-pairing"])
    h.clock.t = t0 - 10 + window  # the oldest of the three leaves the window: forgiven
    assert h.step().admitted == ("batch/x.1",)
    assert h.agent.state.jobs["x"].why_pending is None and h.agent.state.jobs["x"].why_pending_codes is None


def test_slack_ineligibility_keeps_jobs_pending_until_its_deadline_and_survives_a_restart(harness):
    h = harness()
    h.agent.start()
    until = h.clock.t + 100
    h.agent.batch.escalated(until)
    h.submit("a", 1)
    assert h.step().admitted == ()
    a = h.agent.state.jobs["a"]
    assert a.why_pending == "0/1 nodes are available: 1 Node slack ineligible."
    assert a.why_pending_codes == ["node-slack-ineligible"]
    assert h.agent.state.slack_deadline() == until
    h.make()  # a new agent process: the deadline is in the state file (the keeper's JSON)
    h.agent.start()
    assert h.step().admitted == () and h.agent.batch.keeper.ineligible_until[0] == until
    h.clock.t = until
    assert h.step().admitted == ("batch/a.1",)


def test_a_state_file_from_before_the_keeper_is_folded_into_it(harness):
    h = harness()
    h.agent.start()
    h.submit("x", 1)
    t = h.clock.t
    h.agent.state.eviction_history = [
        ("batch/x", "n1", t - 3),
        ("batch/x", "n1", t - 2),
        ("batch/x", "n1", t - 1),
    ]
    h.agent.state.placement_context = None
    h.agent.store.save(h.agent.state)
    data = json.loads((h.state_dir / "state.json").read_text())
    data.pop("placement_context")
    data["slack_ineligible_until"] = t + 5.0
    (h.state_dir / "state.json").write_text(json.dumps(data))
    h.make()
    h.agent.start()
    keeper, state = h.agent.batch.keeper, h.agent.state
    assert [e.time for e in keeper.history] == [t - 3, t - 2, t - 1] and keeper.ineligible_until[0] == t + 5
    assert state.eviction_history == [] and state.slack_ineligible_until is None
    h.step()
    assert state.jobs["x"].why_pending_codes == ["node-slack-ineligible"]
    h.clock.t = t + 5.0
    h.step()
    assert state.jobs["x"].why_pending_codes == ["harmful-pairing"]


def test_a_corrupt_scheduling_context_refuses_to_load(harness):
    h = harness()
    h.agent.start()
    data = json.loads((h.state_dir / "state.json").read_text())
    data["placement_context"]["cooldowns"] = [["batch/x", "elsewhere", 1.0]]
    (h.state_dir / "state.json").write_text(json.dumps(data))
    with pytest.raises(
        ValueError, match=r"placement_context: scheduling context cooldowns\[0\]: node 'elsewhere'"
    ):
        StateStore(h.state_dir / "state.json").load()


EAGER = PolicyConfig(eviction=EvictionConfig(min_run_time_s=0))  # no batch is too young to evict


def test_missing_telemetry_holds_reservations(harness):
    h = harness(config=AgentConfig(estimate_interval_s=10, policy=EAGER))
    h.agent.start()
    rows = h.agent.ledger.rows()
    before = h.agent.ledger.reservation_sum.copy()
    # no usage for anybody for a minute of estimation ticks
    for _ in range(60):
        h.step()
    assert np.array_equal(h.agent.ledger.reservation_sum, before)
    assert h.telemetry.calls == 60 and len(rows.rows) == 1


def test_estimation_moves_reservations_from_usage(harness):
    h = harness(config=AgentConfig(estimate_interval_s=10, policy=EAGER))
    h.agent.start()
    h.telemetry.usage["prod/web"] = {"cpu": 1.9, "ram": 0.45}
    for _ in range(400):  # past the 300 s startup grace, then a rise is immediate
        h.step()
    r = h.agent.ledger.reservation_of("prod/web")
    assert r[DIMS.index("ram")] == pytest.approx(1.15 * 0.45)  # m * u: a rise is immediate
    assert r[DIMS.index("cpu")] == pytest.approx(2.0)  # 1.15 * 1.9 capped at the 2-core limit
    assert h.agent.state.reservations["prod/web"][DIMS.index("ram")] == pytest.approx(1.15 * 0.45)


def test_each_victim_is_evicted_once_and_requeued_after_its_cooldown(harness):
    h = harness()
    h.agent.start()
    h.submit("low", 1, ram_mib=200)
    h.submit("high", 5, ram_mib=200)
    h.step()
    pids = {j.name: j.pid for j in h.agent.state.jobs.values()}
    h.telemetry.usage.update({"batch/low.1": {"ram": 0.15}, "batch/high.1": {"ram": 0.15}})
    h.telemetry.usage["prod/web"] = {"ram": 0.6}  # 0.6 + 2 x 0.195 > 0.9375 GiB after the DaemonSet
    r = h.step()
    assert r.evicted == ("batch/low.1",)
    assert [v.workload for v in r.eviction_plan.victims] == ["batch/low.1"]
    evict = h.log("evict")
    assert len(evict) == 1 and evict[0]["why"]["cause"] == "reservation-ledger-breach"
    assert evict[0]["victim_order"] == ["batch/low.1"] and evict[0]["trigger"][0]["kind"] == "sample"
    # the SIGTERM killed the sleep; the next rounds finish the eviction and never start another
    for _ in range(3):
        h.step()
    assert len(h.log("evict")) == 1 and len(h.log("evicted")) == 1
    cooling = h.agent.batch.keeper.cooldowns[("batch/low", 0)]  # the core keeper's cooldown on this node
    assert h.agent.state.status("low") == "queued" and cooling == pytest.approx(evict[0]["time"] + 600)
    assert "eviction-cooldown" in h.agent.state.jobs["low"].why_pending_codes  # pending, with the core's why
    with pytest.raises(ProcessLookupError):
        os.kill(pids["low"], 0)
    os.kill(pids["high"], 0)  # still running


def test_an_eviction_in_flight_counts_as_released(harness):
    h = harness()
    h.agent.start()
    h.submit("low", 1, ram_mib=200)
    h.submit("high", 5, ram_mib=200)
    h.step()
    h.telemetry.usage.update({"batch/low.1": {"ram": 0.15}, "batch/high.1": {"ram": 0.15}})
    h.telemetry.usage["prod/web"] = {"ram": 0.6}
    os.kill(h.agent.state.jobs["low"].pid, signal.SIGSTOP)  # stopped: SIGTERM waits, it is slow to die
    r1 = h.step()
    r2 = h.step()
    assert r1.evicted == ("batch/low.1",) and r2.evicted == ()  # no second victim during the grace
    os.kill(h.agent.state.evictions[0].pids[0], signal.SIGCONT)


def test_escalation_drains_batch_and_makes_the_node_slack_ineligible(harness):
    policy = PolicyConfig(
        eviction=EvictionConfig(min_run_time_s=1e6, grace_period_s=5),  # eviction spares young batch
        escalation=EscalationConfig(rounds=3, persist_s=30),
    )
    cfg = AgentConfig(policy=policy)
    h = harness(config=cfg)
    h.agent.start()
    h.submit("a", 1, ram_mib=200)
    h.step()
    h.telemetry.usage["batch/a.1"] = {"ram": 0.1}
    h.telemetry.usage["prod/web"] = {"ram": 0.8}  # a ledger breach that eviction may not relieve
    reports = [h.step() for _ in range(5)]
    assert [r.escalation.escalate for r in reports].count(True) == 1
    esc = h.log("escalate")[0]
    assert esc["drain"] == ["batch/a.1"] and esc["reason"]["code"] == "mitigation-not-converging"
    h.submit("b", 1, ram_mib=10)
    h.step()
    b = h.agent.state.jobs["b"]
    assert b.why_pending == "0/1 nodes are available: 1 Node slack ineligible."
    assert b.why_pending_codes == ["node-slack-ineligible"]


def test_run_steps_on_ticks_and_on_events(harness):
    h = harness()
    h.agent.start()
    waits: list[float] = []
    script = [[], [AgentEvent("psi", "x", "cpu", False, 0, 0)], [], []]

    def wait(timeout: float):
        waits.append(timeout)
        h.clock.t += 0.25 if script[len(waits) - 1] else timeout
        return script[len(waits) - 1]

    steps = []
    h.agent.run(wait=wait, should_stop=lambda: len(waits) >= len(script), on_step=steps.append)
    # tick at t0, an event 0.25 s later (stepped at once), then the tick due 1 s after t0
    assert [len(s.events) for s in steps] == [0, 1, 0, 0]
    assert waits[0] == 0.0 and waits[2] == pytest.approx(0.75)


def test_a_bad_declaration_reload_changes_nothing(harness):
    h = harness()
    h.agent.start()
    ledger_before = h.agent.ledger
    h.decl_path.write_text("node: {name: n1}\nworkloads: [{id: prod/web, requests: {ram: lots}}]\n")
    os.utime(h.decl_path, (1, 1))
    h.step()
    assert h.agent.ledger is ledger_before
    rec = h.log("declaration")[-1]
    assert rec["accepted"] is False and any("apiVersion" in p for p in rec["problems"])
    # a good change is applied whole
    decl = dict(
        DECL,
        workloads=[*DECL["workloads"], {"id": "prod/db", "cgroup": "prod/db", "requests": {"ram": "64Mi"}}],
    )
    h.decl_path.write_text(yaml.safe_dump(decl))
    os.utime(h.decl_path, (2, 2))
    h.step()
    assert "prod/db" in h.agent.ledger.production_ids()


def test_restart_resumes_from_the_state_file(harness):
    h = harness()
    h.agent.start()
    h.submit("a", 1)
    h.step()
    pid = h.agent.state.jobs["a"].pid
    h.agent.state.production_originals["prod/web"] = float("inf")  # as if a cap were in force
    h.agent.store.save(h.agent.state)
    h.make()  # a new agent process: same files, nothing in memory
    h.agent.start()
    assert h.agent.state.status("a") == "running" and h.agent.state.jobs["a"].pid == pid
    assert "batch/a.1" in h.agent.ledger.batch_ids()
    assert h.agent.state.production_originals == {}  # production restored at start
    starts = [r for r in h.agent.log.memory if r["kind"] == "start"]
    assert starts[-1]["resumed"] is True


def test_a_start_a_crash_cut_short_is_started_after_the_restart_not_called_done(harness):
    """The agent dies between saving STARTING and starting the process: the restarted agent sees
    a run that never started (no CPU time in its cgroup) and starts it, instead of reaping an
    empty cgroup as a finished run."""
    h = harness()
    h.agent.start()
    h.submit("a", 1)

    def crash(job, reason):
        raise KeyboardInterrupt  # the process dies here: STARTING is saved, nothing was started

    h.agent.runtime.start = crash
    with pytest.raises(KeyboardInterrupt):
        h.step()
    assert StateStore(h.state_dir / "state.json").load().task("a") is TaskState.STARTING
    # the kernel makes the counter with the cgroup, at zero; the fake host's mkdir does not
    (h.tree.dir(h.tree.layout.home("cpuacct"), "batch/a.1") / "cpuacct.usage").write_text("0\n")
    h.make()
    h.agent.start()
    h.step()
    job = h.agent.state.jobs["a"]
    assert h.agent.state.task("a") is TaskState.RUNNING and job.pid is not None
    os.kill(job.pid, 0)  # its process is up
    assert _walk(h, "a")[-2:] == [("starting", "start-requested"), ("running", "started")]
    assert h.log("finish") == []


def test_a_batch_run_outside_the_state_is_swept_at_start(harness):
    """A run cgroup under the batch parent that the state does not know (a state folder deleted,
    another agent's leftovers) runs outside the ledger: the agent kills and removes it at start,
    and keeps the runs it knows."""
    h = harness()
    h.agent.start()
    h.submit("kept", 1)
    h.step()
    kept_pid = h.agent.state.jobs["kept"].pid
    stray = h.agent.writer.create("batch/stray.1", "a leftover")
    assert stray
    p = subprocess.Popen(SLEEP)
    for f in h.agent.writer.procs_files("batch/stray.1"):
        f.write_text(f"{p.pid}\n")
    h.make()
    written = []
    h.agent.writer.audit = written.append
    h.agent.start()
    assert p.wait(10) == -signal.SIGKILL
    assert [r["workload"] for r in h.log("swept")] == ["batch/stray.1"]
    # its cgroup is removed (an rmdir per hierarchy; the fake host's folders hold plain files, so
    # the rmdir fails here where the kernel's would not)
    rmdirs = [r for r in written if r.action == "rmdir" and r.cgroup == "batch/stray.1"]
    assert len(rmdirs) == len(h.tree.layout.hierarchies)
    os.kill(kept_pid, 0)  # the known run is untouched
    assert h.agent.state.status("kept") == "running"


def test_psi_unavailable_means_polling_with_a_warning(harness):
    h = harness()  # the fake host has no pressure files: no trigger can be armed
    h.agent.start()
    warnings = [w["what"] for w in h.log("warning") if "PSI trigger unavailable" in w["what"]]
    assert len(warnings) == len(h.agent.sources.psi.polled) == 4
    assert all("polling avg10 each round (fallback" in w for w in warnings)
    start = h.log("start")[0]
    assert start["psi_window_s"] is None and all("fallback" in line for line in start["psi"])
    # a pressure file that appears later is armed at the next estimation tick
    root = h.tree.dir(h.tree.layout.v2, "")
    (root / "memory.pressure").write_text("")
    h.step(dt=10.0)
    assert len(h.agent.sources.psi.polled) == 2  # "some" and "full" on the same file are armed


def test_a_production_eviction_ends_with_its_own_processes_not_its_restart(harness):
    """The limit-breach override stops the processes it found; the owner's restart is not hit."""
    h = harness()
    h.agent.start()

    def start_in(cg: str) -> subprocess.Popen[bytes]:
        p = subprocess.Popen(SLEEP)
        for hier in h.tree.layout.hierarchies:
            d = h.tree.dir(hier, cg)
            d.mkdir(parents=True, exist_ok=True)
            (d / "cgroup.procs").write_text(f"{p.pid}\n")
        return p

    first = start_in("prod/web")
    h.telemetry.usage["prod/web"] = {"ram": 0.95}  # above its own 900 MiB limit and the node
    r = h.step()
    assert r.evicted == ("prod/web",) and h.log("evict")[0]["why"]["limit_breach_override"] is True
    assert first.wait(10) == -signal.SIGTERM
    restarted = start_in("prod/web")  # its owner (systemd, say) starts it again, same cgroup
    h.telemetry.usage["prod/web"] = {"ram": 0.3}
    try:
        h.step()
        assert h.log("evicted")[0]["workload"] == "prod/web" and not h.agent.state.in_flight()
        for _ in range(3):
            h.step(dt=10.0)  # past the grace: nothing more is sent to anybody
        assert restarted.poll() is None and len(h.log("evict")) == 1 and h.log("sigkill") == []
    finally:
        restarted.kill()
        restarted.wait()


# -- the jobs' lifecycle (the core's table) ---------------------------------------------------------
def _wait_for_flag(flag: Path) -> tuple[str, ...]:
    """A run that lives until ``flag`` exists, then exits 0 (SIGTERM ends it before that)."""
    code = "import os, sys, time\nwhile not os.path.exists(sys.argv[1]):\n    time.sleep(0.02)"
    return (sys.executable, "-c", code, str(flag))


def _steps_until(h: Harness, check, dt: float = 0.1, bound_s: float = 30.0) -> None:
    """Step (``dt`` of fake time each) until ``check()``; the real-time bound only stops a hung test."""
    end = time.monotonic() + bound_s
    while not check():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.02)  # processes die and exit in real time
        h.step(dt)


def _walk(h: Harness, job: str) -> list[tuple[str, str]]:
    return [(t.state.value, t.reason.value) for t in h.agent.state.history(job)]


def test_a_jobs_history_through_eviction_requeue_and_completion_is_the_cores_walk(harness, tmp_path):
    h = harness()
    h.agent.start()
    flag = tmp_path / "finish"
    submit(h.state_dir / "inbox", Submission("a", _wait_for_flag(flag), {"cpu": 0.1, "ram": 0.195}, None, 1))
    saved, on_disk = StateStore(h.state_dir / "state.json"), []

    def on_disk_first(act):  # what the state file says when the side effect happens (write-ahead)
        def wrapped(*args, **kw):
            on_disk.append(saved.load().task("a"))
            return act(*args, **kw)

        return wrapped

    h.agent.runtime.start = on_disk_first(h.agent.runtime.start)
    h.agent.writer.signal = on_disk_first(h.agent.writer.signal)
    assert h.step().admitted == ("batch/a.1",)
    h.telemetry.usage.update({"batch/a.1": {"ram": 0.15}, "prod/web": {"ram": 0.8}})  # a ledger breach
    assert h.step(0.1).evicted == ("batch/a.1",)
    assert on_disk == [TaskState.STARTING, TaskState.EVICTING]  # before the process, before SIGTERM
    del h.telemetry.usage["batch/a.1"]
    h.telemetry.usage["prod/web"] = {"ram": 0.3}
    _steps_until(
        h, lambda: h.agent.state.task("a") is TaskState.EVICTED or len(h.agent.state.history("a")) > 6
    )
    evicted_at = h.log("evict")[0]["time"]
    assert h.agent.state.task("a") is TaskState.PENDING  # requeued at once, as in the simulator
    assert h.agent.batch.keeper.cooldowns[("batch/a", 0)] == pytest.approx(evicted_at + 600)  # the cooldown
    h.step()
    assert h.agent.state.jobs["a"].why_pending_codes == ["eviction-cooldown"]  # the core's filter waits
    flag.touch()  # the second run exits 0 at once
    h.step(600.0)
    assert h.log("admit")[-1]["workload"] == "batch/a.2"
    _steps_until(h, lambda: h.agent.state.task("a").terminal)
    assert _walk(h, "a") == [
        ("pending", "submitted"),
        ("placed", "admitted"),
        ("starting", "start-requested"),
        ("running", "started"),
        ("evicting", "evicted-ledger-breach"),
        ("evicted", "exited"),  # SIGTERM was enough: no SIGKILL
        ("pending", "requeued"),  # its cooldown on this node is the keeper's: a placement filter
        ("placed", "admitted"),
        ("starting", "start-requested"),
        ("running", "started"),
        ("succeeded", "finished"),
    ]
    times = [t.time for t in h.agent.state.history("a")]
    assert times == sorted(times) and times[4] == evicted_at and times[7] >= evicted_at + 600  # placed again
    assert h.agent.state.status("a") == "done" and h.log("finish")[-1]["status"] == "done"


def test_a_finished_job_submitted_again_starts_a_fresh_history(harness):
    h = harness()
    h.agent.start()
    quick = (sys.executable, "-c", "pass")
    submit(h.state_dir / "inbox", Submission("once", quick, {"ram": 0.01}, None, 1))
    h.step()
    _steps_until(h, lambda: h.agent.state.task("once") is TaskState.SUCCEEDED)
    submit(h.state_dir / "inbox", Submission("once", SLEEP, {"ram": 0.01}, None, 1))
    h.step()
    assert _walk(h, "once") == [
        ("pending", "submitted"),
        ("placed", "admitted"),
        ("starting", "start-requested"),
        ("running", "started"),
    ]
    assert h.agent.state.history("once")[0].time == h.clock.t and len(h.agent.state.lifecycle) == 1
    assert h.agent.state.jobs["once"].workload_id == "batch/once.2"  # never the finished run's id
    submit(h.state_dir / "inbox", Submission("once", SLEEP, {"ram": 0.01}, None, 1))
    h.step()  # still running: refused, as before, and its history goes on untouched
    assert "job 'once' is still running" in h.log("rejected-submission")[-1]["problem"]
    assert len(h.agent.state.history("once")) == 4


def test_finishing_an_evicting_job_raises_the_cores_illegal_transition(harness):
    h = harness()
    h.agent.start()
    h.submit("low", 1, ram_mib=200)
    h.step()
    os.kill(h.agent.state.jobs["low"].pid, signal.SIGSTOP)  # stopped: it stays in its grace period
    h.telemetry.usage.update({"batch/low.1": {"ram": 0.15}, "prod/web": {"ram": 0.8}})
    assert h.step().evicted == ("batch/low.1",)
    before = h.agent.state.history("low")
    with pytest.raises(IllegalTransition, match=r"to succeeded \(reason finished\).*'low' \(evicting\)"):
        h.agent.state.move("low", TaskState.SUCCEEDED, h.clock.t, TransitionReason.FINISHED)
    assert h.agent.state.history("low") == before and h.agent.state.status("low") == "evicting"
    os.kill(h.agent.state.evictions[0].pids[0], signal.SIGCONT)


def test_throttled_moves_running_runs_by_their_quota(harness):
    h = harness()
    h.agent.start()
    h.submit("a", 1)
    h.submit("b", 1)
    h.step()
    t = h.clock.t
    assert h.agent.batch.throttled({"batch/a.1", "prod/web"}, t) == ("batch/a.1",)
    assert h.agent.batch.throttled({"batch/a.1"}, t + 1) == ()  # already throttled: no new entry
    assert h.agent.state.task("a") is TaskState.THROTTLED and h.agent.state.status("a") == "running"
    assert set(h.agent.batch.running()) == {"batch/a.1", "batch/b.1"}  # still running, throttled
    assert h.agent.batch.throttled(set(), t + 2) == ("batch/a.1",)
    assert _walk(h, "a")[-2:] == [("throttled", "throttled"), ("running", "unthrottled")]
    assert [x.time for x in h.agent.state.history("a")[-2:]] == [t, t + 2]
    assert _walk(h, "b")[-1] == ("running", "started")


def test_a_run_the_shrunk_node_cannot_hold_is_evicted_as_readmission_rejected_and_requeued(harness):
    h = harness()
    h.agent.start()
    h.submit("a", 1, ram_mib=300)
    h.step()
    h.decl_path.write_text(
        yaml.safe_dump({**DECL, "node": {"name": "n1", "capacity": {"cpu": 4, "ram": "512Mi"}}})
    )
    os.utime(h.decl_path, (3, 3))
    h.step()  # the reloaded ledger: 256 (prod) + 64 (DaemonSet) + 300 > 512 MiB
    assert h.log("evict")[-1]["cause"] == "readmission-rejected"
    _steps_until(h, lambda: h.agent.state.task("a") is not TaskState.EVICTING)
    assert _walk(h, "a")[3:] == [
        ("running", "started"),
        ("evicting", "readmission-rejected"),
        ("evicted", "exited"),  # SIGTERM first, as any eviction: the sleep exits within its grace
        ("pending", "requeued"),  # no cooldown: schedulable again at once
    ]
    assert "Insufficient ram" in h.agent.state.jobs["a"].why_pending


def test_a_run_that_cannot_start_fails_as_start_failed(harness):
    h = harness()
    h.agent.start()
    submit(h.state_dir / "inbox", Submission("ghost", ("/nonexistent/binary",), {"ram": 0.01}, None, 1))
    assert h.step().admitted == ()
    assert _walk(h, "ghost")[-2:] == [("starting", "start-requested"), ("failed", "start-failed")]
    assert h.log("finish")[-1]["status"] == "failed" and "batch/ghost.1" not in h.agent.ledger.batch_ids()


def test_an_enforce_only_agent_takes_no_submissions_but_still_runs_its_round(harness):
    """A Kubernetes DaemonSet agent enforces; the cluster scheduler admits (``admit=False``)."""
    h = harness(config=AgentConfig(admit=False))
    h.agent.start()
    h.submit("a", 1, ram_mib=100)
    r = h.step()
    assert r.admitted == () and h.agent.state.jobs == {}  # the submission was not even read
    assert (h.state_dir / "inbox").exists() and list((h.state_dir / "inbox").glob("*.json"))
    assert r.throttle.node == "n1"  # the node round ran: named, not index 0


def test_a_declaration_source_feeds_the_loop_whole_or_not_at_all(harness):
    """The declaration is a port: a changed one is installed whole; a bad one changes nothing."""
    h = harness()
    agent = h.agent
    agent.start()
    good = parse_declaration({**DECL, "node": {"name": "n1", "capacity": {"cpu": 8, "ram": "2Gi"}}}, "mem")

    class Source:
        def __init__(self) -> None:
            self.next: object = None

        def changed(self):  # type: ignore[no-untyped-def]
            out, self.next = self.next, None
            return out

    src = Source()
    agent.declarations = src
    src.next = DeclarationError([Problem("mem", "node.capacity.cpu", "must be a number", "x")])
    h.step()
    assert agent.ledger is not None and agent.ledger.capacity[0, 0] == pytest.approx(3.9)  # unchanged
    assert [r["accepted"] for r in h.log("declaration")] == [False]
    src.next = good
    h.step()
    assert agent.ledger.capacity[0, 0] == pytest.approx(7.9)  # 8 cores less the DaemonSet's 0.1
    assert [r["accepted"] for r in h.log("declaration")] == [False, True]


@pytest.mark.parametrize(
    ("port", "impl"),
    [
        ("Runtime", "kalena.agent.runtime.ProcessRuntime"),
        ("Enforcer", "kalena.agent.writer.CgroupWriter"),
        ("ObservationSource", "kalena.agent.telemetry.CgroupfsTelemetry"),
        ("Runtime", "kalena.k8s.agent.PodRuntime"),
        ("Disruptor", "kalena.k8s.agent.EvictionApi"),
        ("PlacedSource", "kalena.k8s.agent.NodePods"),
        ("DeclarationSource", "kalena.k8s.agent.NodePods"),
    ],
)
def test_every_port_is_implemented_with_the_same_signatures(port, impl):
    """The protocols name what the loop uses; the real implementations offer exactly that."""
    import importlib
    import inspect

    from kalena.agent import ports

    proto = getattr(ports, port)
    module, _, name = impl.rpartition(".")
    cls = getattr(importlib.import_module(module), name)
    names = [n for n, v in vars(proto).items() if callable(v) and not n.startswith("_")]
    assert names
    for name in names:
        want = list(inspect.signature(getattr(proto, name)).parameters)
        got = list(inspect.signature(getattr(cls, name)).parameters)
        assert got[: len(want)] == want, (impl, name)


def test_a_run_the_kernel_oom_killed_is_requeued_as_the_simulator_does(harness):
    """The kernel's OOM kill (the run's cgroup counts an ``oom_kill``, the process died of
    SIGKILL) is EVICTED (killed-oom) then PENDING again, not FAILED; a plain SIGKILL is FAILED."""
    h = harness()
    h.agent.start()
    die = (sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)")
    submit(h.state_dir / "inbox", Submission("oomed", die, {"ram": 0.01}, None, 1))
    submit(h.state_dir / "inbox", Submission("killed", die, {"ram": 0.01}, None, 1))
    assert set(h.step().admitted) == {"batch/oomed.1", "batch/killed.1"}
    mem = h.tree.layout.home("memory")
    (h.tree.dir(mem, "batch/oomed.1") / "memory.oom_control").write_text(
        "oom_kill_disable 0\nunder_oom 0\noom_kill 1\n"
    )
    _steps_until(
        h,
        lambda: h.agent.state.task("killed") is TaskState.FAILED and len(h.agent.state.history("oomed")) >= 6,
    )
    walk = _walk(h, "oomed")
    assert walk[:5] == [
        ("pending", "submitted"),
        ("placed", "admitted"),
        ("starting", "start-requested"),
        ("running", "started"),
        ("evicted", "killed-oom"),
    ]
    assert walk[5] == ("pending", "requeued")
    assert _walk(h, "killed")[-1] == ("failed", "exit-error")
    assert [r["workload"] for r in h.log("oom-killed")] == ["batch/oomed.1"]
    assert h.agent.state.jobs["oomed"].run >= 1  # requeued: its next run is a new workload id


def test_the_cooldown_is_saved_with_the_eviction_record_before_the_signal(harness):
    """A SIGKILL of the agent right after it signals a victim must not lose the victim's cooldown:
    the restarted agent completes the eviction from the state file and must not admit the job again."""
    h = harness()
    h.agent.start()
    h.submit("low", 1, ram_mib=200)
    h.submit("high", 5, ram_mib=200)
    h.step()
    saved_at_signal = []
    writer = h.agent.evictor.writer
    signal_ = writer.signal

    def signal_and_look(*args, **kwargs):  # what a crash at this instant leaves on disk
        saved_at_signal.append(StateStore(h.state_dir / "state.json").load())
        return signal_(*args, **kwargs)

    writer.signal = signal_and_look
    h.telemetry.usage.update({"batch/low.1": {"ram": 0.15}, "batch/high.1": {"ram": 0.15}})
    h.telemetry.usage["prod/web"] = {"ram": 0.6}
    assert h.step().evicted == ("batch/low.1",)
    (saved,) = saved_at_signal
    assert [e.workload for e in saved.in_flight()] == ["batch/low.1"]
    keeper = ContextKeeper.from_json(saved.placement_context)
    assert keeper.cooldowns[("batch/low", 0)] == pytest.approx(saved.in_flight()[0].requeue_until)


class Budget:
    """A cluster's disruptor (as Kubernetes' Eviction API with a PodDisruptionBudget): refuses
    while ``allowed`` is 0, then accepts and signals the run as the kubelet would."""

    def __init__(self) -> None:
        self.allowed = 0
        self.asked: list[tuple[str, float, bool]] = []
        self.killed: list[str] = []
        self.pids: dict[str, int] = {}

    def evict(self, workload, grace_s, override, reason):
        from kalena.agent.ports import Disruption

        self.asked.append((workload, grace_s, override))
        if self.allowed <= 0:
            return Disruption(
                False, "HTTP 429: Cannot evict pod as it would violate the pod's disruption budget."
            )
        self.allowed -= 1
        os.kill(self.pids[workload], signal.SIGTERM)
        return Disruption(True, "accepted")

    def kill(self, workload, reason):
        self.killed.append(workload)


def test_a_refused_eviction_is_respected_asked_again_each_round_and_has_no_deadline_until_accepted(harness):
    h = harness()
    budget = Budget()
    h.agent.evictor.disruptor = budget
    h.agent.start()
    h.submit("low", 1, ram_mib=200)
    h.submit("high", 5, ram_mib=200)
    h.step()
    budget.pids = {j.workload_id: j.pid for j in h.agent.state.jobs.values()}
    h.telemetry.usage.update({"batch/low.1": {"ram": 0.15}, "batch/high.1": {"ram": 0.15}})
    h.telemetry.usage["prod/web"] = {"ram": 0.6}
    assert h.step().evicted == ("batch/low.1",)
    (rec,) = h.agent.state.in_flight()
    assert rec.refused is not None and "disruption budget" in rec.refused
    assert h.agent.evictor.next_deadline() is None  # no deadline to wake for: asked again each round
    for _ in range(3):
        h.step(dt=10.0)  # long past the 5 s grace: a refusal is never forced
    assert budget.killed == [] and len(h.log("eviction-refused")) == 1  # said once
    assert [a[0] for a in budget.asked] == ["batch/low.1"] * 4 and not any(a[2] for a in budget.asked)
    os.kill(budget.pids["batch/low.1"], 0)  # still running: the budget holds
    assert h.agent.state.task("low") is TaskState.EVICTING
    budget.allowed = 1
    h.step()
    assert h.log("eviction-accepted") and h.agent.state.in_flight()[0].refused is None
    assert h.agent.evictor.next_deadline() == pytest.approx(h.clock.t + 5)  # its grace runs from now
    assert until_gone(h, "low")
    os.kill(budget.pids["batch/high.1"], 0)  # the other run was never asked for


def until_gone(h: Harness, name: str) -> bool:
    for _ in range(50):
        h.step(dt=0.1)
        if h.agent.state.task(name) is not TaskState.EVICTING:
            return True
        time.sleep(0.05)
    return False
