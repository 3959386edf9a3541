"""One recorded node, replayed through the simulator's path and through the node agent's path.

The *recording* (:class:`Recording`) is what a node showed over ``ROUNDS`` rounds of ``DT``
seconds: each production workload's usage, each batch job's submission, usage while it runs and
run time to completion, and the kernel's cpu pressure (PSI ``some`` and trigger notifications).
Every number is a binary fraction, so that the agent's path (cumulative counters -> rates, percent
-> fraction, bytes -> GiB) reproduces it exactly; a resident's first observation has no cpu rate
(a rate needs two counters), on both paths.

* :class:`ReplaySimulation` is the simulator with its world models replaced by the recording
  (usage, completions, pressure); everything else (estimation, the core round, evictions with
  their requeue, placement through the admission bound and ``schedule``, the lifecycle) is the
  simulator's own code.
* :class:`AgentReplay` is the node agent with in-memory ports: an in-memory runtime (a run
  starts at once and finishes after its recorded run time), telemetry that emits the recorded
  usage as counters, the product's cgroup writer and reader on a fake cgroup host in a temporary
  folder (the kernel cannot be made to show a recorded usage, hence the fake), PSI files written
  there from the recording, trigger notifications passed to ``step``.

Both record the core's ``RoundDecision`` of every round and the lifecycle of every job;
:func:`normalise` turns a decision into plain data keyed by workload id (a batch run
``batch/<job>.<run>`` of the agent is the simulator's pod ``batch/<job>``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
from agent_testlib import make_fake_host

from kalena.agent.actionlog import ActionLog
from kalena.agent.batch import batch_spec
from kalena.agent.cgroupfs import FsCgroupReader
from kalena.agent.config import AgentConfig
from kalena.agent.declaration import Declaration, parse_declaration
from kalena.agent.layout import CgroupTree
from kalena.agent.loop import Agent
from kalena.agent.notify import AgentEvent, Notifier
from kalena.agent.runtime import Submission, submit
from kalena.agent.state import JobRecord, StateStore
from kalena.agent.telemetry import Counters
from kalena.agent.writer import CgroupWriter, ManagedScope
from kalena.core.cluster import Cluster
from kalena.core.config import PolicyConfig
from kalena.core.controller import NodeSignals, RoundDecision, spec_limits
from kalena.core.lifecycle import Transition
from kalena.core.resources import CPU, RAM
from kalena.sim import SimConfig, Simulation
from kalena.sim.batch import BatchTasks
from kalena.sim.params import default_batch

DT = 10.0
ROUNDS = 720  # two hours
GIB = 2**30
NODE = "n1"


# -- the recording ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Job:
    name: str
    submit: float
    cpu: float  # request, cores
    ram: float  # request, GiB (its memory limit too: slack memory denied)
    priority: int
    run_s: float  # run time to completion
    use_cpu: float
    use_ram: float

    def submission(self) -> Submission:
        return Submission(
            self.name, ("replay",), {"cpu": self.cpu, "ram": self.ram}, {"ram": self.ram}, self.priority
        )


@dataclass(frozen=True)
class Production:
    id: str
    cpu: float
    ram: float
    limit_cpu: float
    limit_ram: float
    priority: int
    use: np.ndarray  # (ROUNDS + 1, 2): cpu cores, ram GiB at round k (row 0 unused)


@dataclass(frozen=True)
class Recording:
    cpu: float
    ram: float
    production: tuple[Production, ...]
    jobs: tuple[Job, ...]
    psi: np.ndarray  # (ROUNDS + 1,) cpu PSI some avg10, a fraction
    cpu_trigger: np.ndarray  # (ROUNDS + 1,) bool: a cpu PSI notification arrived that round

    def declaration(self) -> dict[str, Any]:
        return {
            "apiVersion": "kalena.naughtian.io/v1alpha1",
            "kind": "NodeDeclaration",
            # the kernel kills at the node's capacity (the simulator's kill level): declared
            "node": {"name": NODE, "capacity": {"cpu": self.cpu, "ram": self.ram}, "memoryLimit": self.ram},
            "workloads": [
                {
                    "id": p.id,
                    "cgroup": p.id,
                    "priority": p.priority,
                    "requests": {"cpu": p.cpu, "ram": p.ram},
                    "limits": {"cpu": p.limit_cpu, "ram": p.limit_ram},
                }
                for p in self.production
            ],
        }

    def job(self, name: str) -> Job:
        return next(j for j in self.jobs if j.name == name)


def _q(x: np.ndarray | float, step: float = 1 / 64) -> np.ndarray:
    """Round to a binary fraction (exact through counters and rates)."""
    return np.round(np.asarray(x) / step) * step


def record(seed: int = 7) -> Recording:
    """A two-hour node (8 cores, 16 GiB): three services, 48 batch jobs, and the episodes of the
    conformance test: cpu pressure (rounds 150-230: PSI high, the throttle halves to the floor and
    escalates), a memory surge that breaches the ledger (rounds 330-380) and a service over its
    own memory limit while the node is breached (rounds 480-483: the limit-breach override)."""
    rng = np.random.default_rng(seed)
    k = np.arange(ROUNDS + 1)
    wave = 0.5 + 0.5 * np.sin(2 * np.pi * k / 240.0)

    def series(cpu0: float, cpu_amp: float, ram0: float, ram_amp: float) -> np.ndarray:
        cpu = cpu0 + cpu_amp * wave + rng.uniform(0, 0.1, len(k))
        ram = ram0 + ram_amp * wave + rng.uniform(0, 0.05, len(k))
        return np.stack([_q(cpu), _q(ram, 1 / 256)], axis=1)

    web = series(0.5, 0.5, 1.0, 0.25)
    db = series(0.5, 0.25, 2.0, 0.25)
    cache = series(0.25, 0.125, 1.0, 0.125)
    web[150:231, 0] = _q(3.5 + rng.uniform(0, 0.25, 81))  # the cpu episode: a service needs its cpu back
    db[330:381, 1] = _q(np.linspace(3.0, 7.5, 51), 1 / 256)  # the memory surge
    # db above its own limit (8) while the node is breached: the override evicts it, its owner
    # restarts it (a kernel would have killed it had the limit been its cgroup's memory.max)
    db[480:484, 1] = 8.5
    cache[470:501, 1] = 3.5
    production = (
        Production("prod/web", 2.0, 3.0, 4.0, 4.0, 100, web),
        Production("prod/db", 2.0, 5.0, 3.0, 8.0, 200, db),
        Production("prod/cache", 1.0, 2.0, 2.0, 4.0, 100, cache),
    )
    jobs = []
    for i in range(48):
        cpu = float(rng.choice([0.25, 0.5, 0.75, 1.0]))
        ram = float(rng.choice([0.5, 1.0, 1.5, 2.0]))
        jobs.append(
            Job(
                name=f"j{i:02d}",
                submit=float(np.round(rng.uniform(0, 0.85 * ROUNDS * DT))),
                cpu=cpu,
                ram=ram,
                priority=int(rng.integers(1, 4)),
                run_s=float(rng.choice([300.0, 600.0, 900.0, 1500.0])),
                use_cpu=cpu * 0.75,
                use_ram=ram * 0.75,
            )
        )
    jobs.sort(key=lambda j: (j.submit, j.name))
    psi = np.zeros(ROUNDS + 1)
    psi[150:231] = 0.5
    psi[231:241] = 0.125
    return Recording(8.0, 16.0, production, tuple(jobs), psi, psi >= 0.5)


def observed(use: tuple[float, float], age: int) -> tuple[float, float]:
    """What a node reports of a resident at its ``age``-th observation (0: the first, no cpu rate)."""
    return (math.nan if age == 0 else use[0], use[1])


def policy() -> PolicyConfig:
    return PolicyConfig(estimator="decay")


def decl(rec: Recording) -> Declaration:
    return parse_declaration(rec.declaration(), "replay.yaml")


# -- the simulator's path --------------------------------------------------------------------------
def tasks_of(rec: Recording) -> BatchTasks:
    """The recording's jobs as the simulator's batch population (one pod per job), with the specs
    the node agent builds for them (``batch_spec``; the pod id is the job's, without a run)."""
    specs = tuple(batch_spec(_job_record(j), f"batch/{j.name}") for j in rec.jobs)
    n = len(rec.jobs)
    return BatchTasks(
        job=np.arange(n),
        submit=np.array([j.submit for j in rec.jobs]),
        requests=np.array([s.requests.array() for s in specs]),
        priority=np.array([j.priority for j in rec.jobs]),
        nominal=np.array([j.run_s for j in rec.jobs]),
        work=np.full(n, 1e12),  # completions are the recording's (ReplaySimulation._finished_rows)
        demand=np.array([j.use_cpu for j in rec.jobs]),
        ram_use=np.array([j.use_ram for j in rec.jobs]),
        warm=np.zeros(n, dtype=bool),
        specs=specs,
    )


def _job_record(j: Job) -> JobRecord:
    return j.submission().job(j.submit)


class ReplaySimulation(Simulation):
    """The simulator on the recording (module docstring)."""

    production_started = DT  # the recording starts at 0; production is first seen at round 1

    def __init__(self, rec: Recording) -> None:
        self.rec = rec
        d = decl(rec)
        specs = [a.spec for a in d.production]
        cluster = Cluster.build([d.node], [], specs, {s.id: NODE for s in specs})
        cfg = SimConfig(
            hours=ROUNDS * DT / 3600.0,
            tick_s=DT,
            schedule_interval_s=DT,  # the agent admits every round
            prewarm_s=0.0,
            batch_warm_start=False,
            batch=replace(default_batch(), startup_s=0.0),  # a process is up once exec'd
            policy=policy(),
        )
        self.decisions: list[dict[str, Any]] = []
        self.tally = Tally()
        super().__init__(cluster, cfg, tasks_of(rec))

    def _init_production(self, p: int) -> None:
        rs = self.ledger.row_arrays()
        self.table.limit[:p] = [spec_limits(s) for s in rs.specs[:p]]  # the declared limits
        super()._init_production(p)

    def _usage_and_cpu(self, k: int, now: float, dt: float) -> tuple[float, float]:
        t, rs = self.table, self.ledger.row_arrays()
        h = rs.high
        t.usage[:h] = np.nan
        for p in self.rec.production:
            t.usage[self.ledger.row_of(p.id), [CPU, RAM]] = observed(tuple(p.use[k]), k - 1)
        for row in self._batch_rows().tolist():
            j = self.rec.jobs[int(t.task[row])]
            age = round((now - t.started[row]) / dt) - 1
            t.usage[row, [CPU, RAM]] = observed((j.use_cpu, j.use_ram), age)
        self.psi[:] = self.rec.psi[k]
        return 0.0, 0.0

    def _finished_rows(self, h: int) -> np.ndarray:
        rows = self._batch_rows()
        t = self.table
        run = np.array([self.rec.jobs[int(i)].run_s for i in t.task[rows]])
        return rows[self.now - t.started[rows] >= run]

    def signals(self) -> NodeSignals:
        s = super().signals()
        if self.rec.cpu_trigger[self.tick_no]:
            s.triggered[:, CPU] = True
        return s

    def _decided(self, decision: RoundDecision) -> None:
        self.decisions.append(normalise(decision))  # now: its view holds the simulator's live arrays
        self.tally.of(decision)

    def histories(self) -> dict[str, list[tuple[str, float, str]]]:
        return {
            j.name: _history(self.life.history(i)) for i, j in enumerate(self.rec.jobs) if i < len(self.life)
        }


def _history(entries: Sequence[Transition]) -> list[tuple[str, float, str]]:
    return [(e.state.value, e.time, e.reason.value) for e in entries]


# -- the agent's path ------------------------------------------------------------------------------
class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


class MemoryRuntime:
    """The runtime port in memory: a run starts at once and is done after its recorded run time."""

    def __init__(self, rec: Recording, clock: Clock) -> None:
        self.rec, self.clock = rec, clock
        self.starts: dict[str, float] = {}  # run workload id -> start time
        self.pid = 1000

    def start(self, job: JobRecord, reason: str) -> int:
        assert job.workload_id is not None
        self.starts[job.workload_id] = self.clock()
        self.pid += 1
        return self.pid

    def finished(self, job: JobRecord) -> tuple[bool, int | None]:
        t0 = self.starts[job.workload_id or ""]
        return self.clock() - t0 >= self.rec.job(job.name).run_s, 0

    def release(self, workload_id: str) -> int | None:
        self.starts.pop(workload_id, None)
        return None

    def cleanup(self, cgroup: str, reason: str) -> None:
        return None

    def terminate(self, job: JobRecord, reason: str) -> None:
        return None  # an in-memory run has no process: it is gone once evicted

    def kill(self, job: JobRecord, reason: str) -> None:
        return None

    def started(self, job: JobRecord) -> bool | None:
        return (job.workload_id or "") in self.starts

    def sweep(self, keep, reason: str) -> tuple[str, ...]:  # type: ignore[no-untyped-def]
        return ()  # an in-memory run outside the state does not exist

    def oom_killed(self, job: JobRecord) -> bool | None:
        return None


class RecordedTelemetry:
    """The observation port: the recording's usage as cumulative counters (cpu ns, bytes)."""

    name = "recorded"

    def __init__(self, rec: Recording, runtime: MemoryRuntime) -> None:
        self.rec, self.runtime = rec, runtime
        self.cpu_ns: dict[str, int] = {}
        self.k = 0
        self.production = {p.id: p for p in rec.production}

    def counters(self, cgroups, now, throttling=()):  # type: ignore[no-untyped-def]
        out = {}
        for wid in cgroups:
            p = self.production.get(wid)
            if p is not None:
                cpu, ram = (float(x) for x in p.use[self.k])
            else:
                j = self.rec.job(_job_name(wid))
                cpu, ram = j.use_cpu, j.use_ram
            if wid in self.cpu_ns:  # a rate over the round since the last sample
                self.cpu_ns[wid] += round(cpu * DT * 1e9)
            else:
                self.cpu_ns[wid] = 0
            out[wid] = Counters(now, self.cpu_ns[wid], round(ram * GIB), None, None, 0)
        return out


def _job_name(wid: str) -> str:
    return wid.split("/", 1)[1].rsplit(".", 1)[0]


class AgentReplay:
    """The node agent on the recording with in-memory ports (module docstring)."""

    def __init__(self, rec: Recording, tmp: Path) -> None:
        self.rec = rec
        self.clock = Clock()
        host = make_fake_host(tmp / "cg", "v2")
        self.tree = CgroupTree(host.layout(), "kalena")
        self.inbox = tmp / "inbox"
        self.runtime = MemoryRuntime(rec, self.clock)
        self.telemetry = RecordedTelemetry(rec, self.runtime)
        writer = CgroupWriter(self.tree, ManagedScope(), clock=self.clock)
        self.agent = Agent(
            decl(rec),
            AgentConfig(policy=policy(), sample_interval_s=DT, estimate_interval_s=DT),
            tree=self.tree,
            reader=FsCgroupReader(self.tree, proc_pressure=tmp / "no-psi"),
            writer=writer,
            telemetry=self.telemetry,
            notifier=Notifier(self.clock),
            store=StateStore(tmp / "state.json"),
            log=ActionLog(tmp / "actions.jsonl"),
            runtime=self.runtime,
            inbox=self.inbox,
            clock=self.clock,
            monotonic=self.clock,
        )
        self.decisions: list[dict[str, Any]] = []
        self.tally = Tally()
        self.next_job = 0

    def run(self) -> None:
        self.agent.start()
        v2 = self.tree.layout.v2
        assert v2 is not None
        for p in self.rec.production:
            self.tree.dir(v2, p.id).mkdir(parents=True, exist_ok=True)
        for k in range(1, ROUNDS + 1):
            now = self.clock.t = k * DT
            jobs = self.rec.jobs
            while self.next_job < len(jobs) and jobs[self.next_job].submit <= now:
                submit(self.inbox, jobs[self.next_job].submission())
                self.next_job += 1
            avg10 = 100.0 * float(self.rec.psi[k])
            for p in self.rec.production:
                (self.tree.dir(v2, p.id) / "cpu.pressure").write_text(
                    f"some avg10={avg10:.2f} avg60=0.00 avg300=0.00 total=0\n"
                    "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"
                )
            events = []
            if self.rec.cpu_trigger[k]:
                events.append(AgentEvent("psi", "prod/web:cpu:some", "cpu", False, now, now))
            self.telemetry.k = k
            d = self.agent.step(events).decision
            self.decisions.append(normalise(d))
            self.tally.of(d)

    def histories(self) -> dict[str, list[tuple[str, float, str]]]:
        st = self.agent.state
        return {name: _history(st.history(name)) for name in st.jobs}


# -- comparing -------------------------------------------------------------------------------------
_RUN = re.compile(r"^(batch/.+)\.\d+$")


def pod(wid: str) -> str:
    """A workload id as the simulator names it: an agent run ``batch/<job>.<run>`` is ``batch/<job>``."""
    m = _RUN.match(wid)
    return m.group(1) if m else wid


def _num(x: float) -> float | str:
    return "nan" if math.isnan(x) else float(x)


def _vec(a: np.ndarray) -> list[Any]:
    return [_num(float(x)) if np.asarray(x).dtype.kind == "f" else x.item() for x in np.asarray(a).ravel()]


def normalise(d: RoundDecision) -> dict[str, Any]:
    """One node's decision as plain data keyed by workload id (rows in id order)."""
    v = d.view
    assert v.n_nodes == 1
    live = np.flatnonzero(v.in_ledger | v.is_batch) if v.present is None else np.flatnonzero(v.present)
    quota = dict(zip(d.throttle.rows.tolist(), d.throttle.quota.tolist(), strict=True))
    rows = {}
    for i in live.tolist():
        rows[pod(str(v.ids[i]))] = {
            "reservation": _vec(v.reservation[i]),
            "usage": _vec(v.usage[i]),
            "limit": _vec(v.limit[i]),
            "quota": _num(quota.get(i, math.nan)),
            "cap": _num(float(d.starvation.cap[i])),
            "floor": _num(float(d.starvation.floor[i])),
            "gone": bool(d.gone[i]),
            "below_request": bool(d.below_request[i]),
        }
    actions = []
    for a in d.actions:
        actions.append(
            {
                "victims": [
                    (pod(x.workload), x.cause.value, x.dimension, x.limit_breach_override, x.grace_period_s)
                    for x in a.victims
                ],
                "plan": None
                if a.plan is None
                else [
                    (
                        p.condition.dimension,
                        p.holds,
                        [pod(w) for w in p.victims],
                        [pod(w) for w in p.skipped_min_run_time],
                    )
                    for p in a.plan.pressures
                ],
                "escalation": None
                if a.escalation is None
                else (
                    a.escalation.failed_rounds,
                    a.escalation.persisted_s,
                    a.escalation.slack_ineligible_until,
                ),
            }
        )
    t = d.throttle
    return {
        "now": d.now,
        "rows": dict(sorted(rows.items())),
        "actions": actions,
        "acute": _vec(d.acute),
        "triggered": _vec(d.triggered),
        "pressure": _vec(d.pressure),
        "escalate": _vec(d.escalate),
        "slack_ineligible_until": _vec(d.slack_ineligible_until),
        "throttle": (_vec(t.claim), _vec(t.target), _vec(t.allowance), _vec(t.pressured)),
        "state": (_vec(d.state.allowance), _vec(d.state.runs.rounds), _vec(d.state.runs.persisted_s)),
    }


def first_difference(a: Sequence[dict[str, Any]], b: Sequence[dict[str, Any]]) -> str | None:
    """The first round where two normalised sequences differ, described (``None``: identical)."""
    for k, (x, y) in enumerate(zip(a, b, strict=True), start=1):
        if x != y:
            keys = [key for key in x if x[key] != y.get(key)]
            detail = {key: (x[key], y.get(key)) for key in keys if key != "rows"}
            if "rows" in keys:
                rk = sorted(set(x["rows"]) | set(y["rows"]))
                detail["rows"] = {
                    r: (x["rows"].get(r), y["rows"].get(r))
                    for r in rk
                    if x["rows"].get(r) != y["rows"].get(r)
                }
            return f"round {k} (t = {x['now']:g} s): {detail}"
    return None


@dataclass
class Tally:
    """What the replay exercised (the test asserts each happened)."""

    counts: dict[str, int] = field(default_factory=dict)

    def add(self, key: str, n: int = 1) -> None:
        self.counts[key] = self.counts.get(key, 0) + n

    def of(self, d: RoundDecision) -> None:
        self.add("rounds")
        if d.triggered[0, CPU] or d.throttle.pressured[0]:
            self.add("cpu-pressure")
        if d.triggered[0, RAM] or d.acute[0, RAM] or d.pressure[0, RAM]:
            self.add("memory-pressure")
        if bool(d.escalate[0]):
            self.add("escalations")
        for a in d.actions:
            for v in a.victims:
                self.add(f"evict:{v.cause.value}")
                if v.limit_breach_override:
                    self.add("limit-breach-override")
