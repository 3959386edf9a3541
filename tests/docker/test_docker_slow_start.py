"""A batch container whose start takes long does not hold the agent's round (issue 11).

On a busy machine a batch container starts slowly: runc's init runs in the run's cgroup, under
parents of the minimal CPU weight. Here the start is held still for as long as the test wants: the
batch runs' parent is frozen (the cgroup freezer) while the agent starts the run, so the engine's
start cannot end until it is thawed. (A CPU quota of 1 ms a second on that parent would do the same
on cgroup v2, but cgroup v1 refuses a child's quota above its parent's, so the run's own quota
could not be written: the freezer holds the start with every knob of the run in place.)

The round returns with the job STARTING and its knobs on its cgroup; the next rounds take it to
RUNNING once the start has ended, or FAILED (start-failed) when the start failed; a job cancelled
while it starts ends at once, and its container goes once the start has answered. Every wait is a
bound on a hung test, never an assertion about speed.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from docker_testlib import until

from kalena.agent.config import AgentConfig
from kalena.agent.declaration import parse_declaration
from kalena.agent.layout import detect
from kalena.core.config import PolicyConfig
from kalena.core.enforcement import EscalationConfig, EvictionConfig
from kalena.core.lifecycle import TaskState, TransitionReason
from kalena.docker.agent import build_docker_agent
from kalena.store import Store

pytestmark = [pytest.mark.docker, pytest.mark.slow]


class Freezer:
    """Holds every process of a cgroup still (the v1 freezer, else v2 ``cgroup.freeze``), its
    descendants made later included."""

    def __init__(self, cgroup: str) -> None:
        v1 = Path("/sys/fs/cgroup/freezer")
        v2 = detect().v2
        if v1.is_dir():  # runc puts a container in the v1 freezer wherever that is mounted
            d = v1 / cgroup.lstrip("/")
            d.mkdir(parents=True, exist_ok=True)
            self.file, self.on, self.off = d / "freezer.state", "FROZEN", "THAWED"
        elif v2 is not None and (v2.dir(cgroup) / "cgroup.freeze").exists():
            self.file, self.on, self.off = v2.dir(cgroup) / "cgroup.freeze", "1", "0"
        else:
            pytest.skip("no cgroup freezer on this host")

    def freeze(self) -> None:
        self.file.write_text(self.on)

    def thaw(self) -> None:
        self.file.write_text(self.off)


@pytest.fixture
def agent(engine, cgroup_root: str, tmp_path: Path) -> Iterator:
    base = parse_declaration(
        {
            "apiVersion": "kalena.naughtian.io/v1alpha1",
            "kind": "NodeDeclaration",
            "node": {"name": "slow1", "capacity": {"cpu": 2, "ram": "1Gi"}},
        },
        "test",
    )
    policy = PolicyConfig(  # about starting, not pressure: a loaded machine must not drain the node
        eviction=EvictionConfig(min_run_time_s=0.0, grace_period_s=2.0),
        escalation=EscalationConfig(rounds=10_000, persist_s=1e9),
    )
    config = AgentConfig(sample_interval_s=0.5, estimate_interval_s=1.0, policy=policy)
    made = build_docker_agent(
        tmp_path / "state", base=base, config=config, cgroup_root=cgroup_root, relist_s=1.0
    )
    made.start()
    yield made
    made.shutdown()
    made.log.close()


@pytest.fixture
def frozen_batch(agent, cgroup_root: str) -> Iterator[Freezer]:
    """The batch runs' parent, frozen; thawed at the end whatever happened."""
    f = Freezer(f"{cgroup_root}/batch")
    f.freeze()
    yield f
    f.thaw()


def queue(agent, name: str, image: str, command: list[str]) -> None:
    with Store(Path(agent.store.path)) as store:
        spec = {"name": name, "image": image, "command": command, "requests": {"cpu": 0.5, "ram": 0.05}}
        store.submit([(name, spec)], time.time())


def held_job(
    prefix: str, tag: str, image: str, containers: list[str], cgroup_root: str, agent
) -> tuple[str, str, str]:
    """A job queued to sleep, its container to be removed at the end: (job, container, cgroup)."""
    job = f"{prefix}-{tag}"
    name = f"kalena-{job}.1"
    containers.append(name)
    queue(agent, job, image, ["sleep", "600"])
    return job, name, f"{cgroup_root}/batch/{job}.1"


def cpu_quota_us(cgroup: str) -> int:
    h = detect().home("cpu")
    assert h is not None
    d = h.dir(cgroup)
    if (d / "cpu.cfs_quota_us").exists():
        return int((d / "cpu.cfs_quota_us").read_text())
    q = (d / "cpu.max").read_text().split()[0]
    return -1 if q == "max" else int(q)


def docker_lines(agent, container: str) -> list[dict]:
    return [r for r in agent.log.memory if r["kind"] == "docker" and r["container"] == container]


def steps_of(agent, job: str) -> list[tuple[TaskState, TransitionReason]]:
    return [(t.state, t.reason) for t in agent.state.history(job)]


def test_the_round_returns_while_a_start_is_held_and_the_job_runs_once_it_ends(
    engine, image, tag, containers, cgroup_root, agent, frozen_batch
):
    job, name, cgroup = held_job("slow", tag, image, containers, cgroup_root, agent)
    wid = f"batch/{job}.1"

    report = agent.step()  # admits the job; its start cannot end while the parent is frozen
    assert report.admitted == (wid,)
    assert agent.state.task(job) is TaskState.STARTING
    assert engine.status(name) == "created"  # the engine is still starting it
    assert cpu_quota_us(cgroup) > 0  # its knobs were written before the start: never unthrottled
    for _ in range(4):  # the next rounds return too, relisting the engine (relist_s) meanwhile
        time.sleep(0.5)
        agent.step()
        assert agent.state.task(job) is TaskState.STARTING
    assert engine.status(name) == "created"
    # no listing waited on the start (an inspect of the starting container times out: the
    # engine's view would be refused)
    refused = [r for r in agent.log.memory if r["kind"] == "declaration" and not r["accepted"]]
    assert refused == []

    frozen_batch.thaw()
    up = (TaskState.RUNNING, TaskState.THROTTLED)  # (a loaded machine's production may throttle it)
    assert until(lambda: agent.state.task(job) in up, every=agent.step, bound_s=120)
    facts = engine.inspect(name)
    assert facts is not None and facts.running and agent.state.jobs[job].pid == facts.pid
    assert steps_of(agent, job)[:4] == [
        (TaskState.PENDING, TransitionReason.SUBMITTED),
        (TaskState.PLACED, TransitionReason.ADMITTED),
        (TaskState.STARTING, TransitionReason.START_REQUESTED),
        (TaskState.RUNNING, TransitionReason.STARTED),
    ]
    assert [r["action"] for r in docker_lines(agent, name)] == ["create", "start"]  # started once
    # admitted once, when its start was asked for; its pid once it answered
    lines = [r for r in agent.log.memory if r["kind"] in ("admit", "started") and r["workload"] == wid]
    assert [(r["kind"], r["pid"]) for r in lines] == [("admit", None), ("started", facts.pid)]


def test_a_start_that_fails_while_the_round_goes_on_ends_the_job_failed(
    engine, image, tag, containers, cgroup_root, agent, frozen_batch
):
    job, name, cgroup = held_job("dies", tag, image, containers, cgroup_root, agent)
    agent.step()
    assert agent.state.task(job) is TaskState.STARTING
    # runc's init, held in the run's cgroup: killed, the start fails (once thawed: a frozen process
    # takes its SIGKILL when it runs again)
    assert until(lambda: bool(agent.writer.pids(cgroup)), bound_s=120)
    for pid in agent.writer.pids(cgroup):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    frozen_batch.thaw()

    assert until(lambda: agent.state.task(job) is TaskState.FAILED, every=agent.step, bound_s=120)
    assert steps_of(agent, job)[-2:] == [
        (TaskState.STARTING, TransitionReason.START_REQUESTED),
        (TaskState.FAILED, TransitionReason.START_FAILED),
    ]
    assert (agent.state.jobs[job].why_pending or "").startswith("failed to start: ")
    assert engine.status(name) is None  # its container is removed with its cgroups
    assert f"batch/{job}.1" not in agent.ledger.batch_ids()


def test_a_job_cancelled_while_it_starts_ends_at_once_and_its_container_goes(
    engine, image, tag, containers, cgroup_root, agent, frozen_batch
):
    job, name, cgroup = held_job("gone", tag, image, containers, cgroup_root, agent)
    agent.step()
    assert agent.state.task(job) is TaskState.STARTING
    with Store(Path(agent.store.path)) as store:
        store.cancel(job, time.time())

    agent.step()  # takes the cancel: the kill waits for the start to answer, the round does not
    assert agent.state.task(job) is TaskState.CANCELLED
    kills = [r for r in docker_lines(agent, name) if r["action"] == "kill"]
    assert kills and kills[0]["signal"] == "SIGKILL" and kills[0]["queued"]
    assert engine.status(name) == "created"

    frozen_batch.thaw()
    hierarchies = detect().hierarchies

    def gone() -> bool:
        return engine.status(name) is None and not any(h.dir(cgroup).exists() for h in hierarchies)

    assert until(gone, every=agent.step, bound_s=120)
    assert agent.state.task(job) is TaskState.CANCELLED
    admits = [r for r in agent.log.memory if r["kind"] == "admit" and r["workload"] == f"batch/{job}.1"]
    assert len(admits) == 1 and admits[0]["starting"]  # it was admitted, though it never ran
