"""The node agent on a real Docker engine: discovery, production caps through ``docker update``, and
the end-to-end scenario of issue 11 (batch in the slack of a production container, throttled when
it needs its CPU back, stopped with SIGTERM before anything is OOM-killed when it grows, requeued
and run again).

The test drives the agent's rounds itself; every wait is a bound on a hung test, never an
assertion about latency (``bench/bench_docker.py`` measures the reaction time).
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import pytest
from docker_testlib import until
from typer.testing import CliRunner

from kalena.agent.config import AgentConfig
from kalena.agent.declaration import parse_declaration
from kalena.agent.layout import detect
from kalena.agent.writer import Knob, KnobWrite, ManagedScope
from kalena.api.metrics import render_metrics
from kalena.cli.main import app
from kalena.core.config import PolicyConfig
from kalena.core.enforcement import EscalationConfig, EvictionConfig
from kalena.core.estimators import DecayParams
from kalena.core.lifecycle import TaskState, TransitionReason
from kalena.docker.agent import build_docker_agent
from kalena.docker.cgroups import remove_empty_tree
from kalena.docker.declarations import DockerDeclarations
from kalena.docker.enforcer import DockerEnforcer
from kalena.docker.engine import Engine
from kalena.store import Store

pytestmark = [pytest.mark.docker, pytest.mark.slow]
RUNNER = CliRunner()


def kalena(*args: str):
    """The kalena command, in this process (its real code: options, store, output)."""
    return RUNNER.invoke(app, list(args))


P = "kalena.naughtian.io/"
MIB = 2**20


def run_container(engine: Engine, image: str, name: str, cmd: str, labels=None, **host) -> str:
    hc = engine.api.create_host_config(**host)
    c = engine.api.create_container(
        image, command=["sh", "-c", cmd], name=name, labels=labels or {}, host_config=hc
    )
    engine.api.start(c["Id"])
    return c["Id"]


def sh(engine: Engine, name: str, cmd: str, detach: bool = False) -> str:
    ex = engine.api.exec_create(name, ["sh", "-c", cmd])
    out = engine.api.exec_start(ex["Id"], detach=detach)
    return "" if detach else out.decode(errors="replace")


def quota_file(cgroup_dir: Path) -> int:
    return int((cgroup_dir / "cpu.cfs_quota_us").read_text())


def cpu_dir(cgroup: str) -> Path:
    h = detect().home("cpu")
    assert h is not None
    return h.dir(cgroup)


def test_running_containers_become_the_declaration(engine, image, tag, containers, cgroup_root):
    name = f"web-{tag}"
    containers.append(name)
    cid = run_container(
        engine,
        image,
        name,
        "sleep 600",
        {P + "priority": "7", P + "slack-memory": "maybe"},
        nano_cpus=500_000_000,
        mem_limit=64 * MIB,
    )
    problems: list[tuple[str, ...]] = []
    decls = DockerDeclarations(engine, detect(), on_problems=problems.append)
    decl = decls.build()
    mine = [a for a in decl.production if a.spec.id == f"docker/{name}"]
    assert len(mine) == 1
    a = mine[0]
    assert a.cgroup.endswith(cid) and cpu_dir(a.cgroup).is_dir()
    assert a.spec.requests["cpu"] == 0.5 and a.spec.requests["ram"] == 64 / 1024
    assert a.spec.priority == 0  # a bad value voids the classification: service with defaults
    assert a.started_at is not None and abs(a.started_at - time.time()) < 300
    assert decl.node.allocatable["cpu"] == float(engine.info()["NCPU"])
    assert any(f"container {name}: label {P}slack-memory" in p for p in problems[-1])
    assert decls.changed() is not None  # the first call of the source lists
    assert decls.changed() is None  # nothing happened since


def test_production_cap_goes_through_docker_update_and_is_restored_exactly(engine, image, tag, containers):
    """inspect shows the cap while it is in force and exactly the container's own setting after."""
    free, cpus = f"free-{tag}", f"cpus-{tag}"
    containers += [free, cpus]
    run_container(engine, image, free, "sleep 600")
    run_container(engine, image, cpus, "sleep 600", nano_cpus=1_500_000_000)
    layout = detect()
    decls = DockerDeclarations(engine, layout)
    decls.build()
    from kalena.agent.build import cgroup_tree

    writer = DockerEnforcer(cgroup_tree("/kalena-unused", layout), ManagedScope(), engine=engine)
    cg = {c.name: cg for cg, c in decls.containers.items() if c.name in (free, cpus)}
    writer.scope = ManagedScope(adopted=frozenset(cg.values()))
    writer.containers_of = lambda: decls.containers
    before = {n: engine.api.inspect_container(n)["HostConfig"] for n in (free, cpus)}

    recs = writer.apply(
        [
            KnobWrite(cg[free], Knob.CPU_QUOTA, 0.3, "test cap"),
            KnobWrite(cg[cpus], Knob.CPU_QUOTA, 0.4, "test cap"),
        ]
    )
    assert all(r.ok and r.action == "docker-update" for r in recs), recs
    hc = {n: engine.api.inspect_container(n)["HostConfig"] for n in (free, cpus)}
    assert hc[free]["CpuQuota"] == 30_000 and quota_file(cpu_dir(cg[free])) == 30_000
    assert hc[cpus]["NanoCpus"] == 400_000_000 and quota_file(cpu_dir(cg[cpus])) == 40_000

    writer.apply(
        [
            KnobWrite(cg[free], Knob.CPU_QUOTA, math.inf, "uncap"),
            KnobWrite(cg[cpus], Knob.CPU_QUOTA, 1.5, "uncap"),
        ]
    )
    after = {n: engine.api.inspect_container(n)["HostConfig"] for n in (free, cpus)}
    assert after[cpus]["NanoCpus"] == before[cpus]["NanoCpus"] == 1_500_000_000
    assert quota_file(cpu_dir(cg[cpus])) == 150_000
    assert after[free]["NanoCpus"] == 0 and after[free]["CpuQuota"] in (0, -1)  # -1: Docker's "none"
    assert quota_file(cpu_dir(cg[free])) == -1  # as before the cap: no quota


def _agent(tmp_path: Path, cgroup_root: str, capacity: dict):
    base = parse_declaration(
        {
            "apiVersion": "kalena.naughtian.io/v1alpha1",
            "kind": "NodeDeclaration",
            "node": {"name": "dk1", "capacity": capacity},
        },
        "test",
    )
    policy = PolicyConfig(
        decay=DecayParams(half_life_s=2.0),  # production's reservation falls back in seconds, not minutes
        eviction=EvictionConfig(min_run_time_s=0.0, grace_period_s=5.0, cooldown_s=3.0),
        escalation=EscalationConfig(
            rounds=10_000, persist_s=1e9
        ),  # this test is about eviction and throttling
    )
    config = AgentConfig(sample_interval_s=0.5, estimate_interval_s=1.0, policy=policy)
    return build_docker_agent(
        tmp_path / "state", base=base, config=config, cgroup_root=cgroup_root, relist_s=2.0
    )


def parent_weights(cgroup_root: str) -> list[str]:
    out = []
    for name in (cgroup_root, f"{cgroup_root}/batch"):
        d = cpu_dir(name)
        f = d / "cpu.shares" if (d / "cpu.shares").exists() else d / "cpu.weight"
        out.append(f.read_text().strip())
    return out


def unstarve(cgroup_root: str) -> None:
    """Batch's parents back at the default weight once the agent is gone: a SIGKILLed process still
    needs the CPU to exit, which the minimal weight hands out only in a loaded machine's gaps (a
    forced removal of a busy batch container would time out)."""
    for name in (cgroup_root, f"{cgroup_root}/batch"):
        d = cpu_dir(name)
        if (d / "cpu.shares").exists():
            (d / "cpu.shares").write_text("1024")
        elif (d / "cpu.weight").exists():
            (d / "cpu.weight").write_text("100")


def test_kalena_root_and_the_runs_parent_have_the_minimal_weight(engine, cgroup_root, tmp_path):
    """Production is the engine's, so Kalena's root holds only batch: the root and the runs' parent
    get the minimal weight (a run's own weight counts only among its siblings, and the kernel first
    splits a busy CPU between the root and /docker)."""
    agent = _agent(tmp_path, cgroup_root, {"cpu": 2, "ram": "600Mi"})
    agent.start()
    try:
        assert parent_weights(cgroup_root) in (["2", "2"], ["1", "1"])  # v1 shares 2, v2 weight 1
    finally:
        agent.shutdown()
        agent.log.close()


def test_batch_fills_slack_is_throttled_evicted_with_sigterm_requeued_and_runs_again(
    engine, image, tag, containers, cgroup_root, tmp_path
):
    web = f"web-{tag}"
    containers.append(web)
    run_container(
        engine,
        image,
        web,
        "while true; do sleep 0.2; done",
        {P + "request.cpu": "0.5", P + "request.ram": "128Mi", P + "priority": "100"},
        mem_limit=700 * MIB,
        tmpfs={"/fill": "size=500m"},
    )
    # batch's parents have the minimal weight (the policy's default), so on a machine that other
    # test workers keep busy its containers start slowly, in the gaps: a start the round does not
    # wait for stays STARTING, and a later round takes it to RUNNING (test_docker_slow_start.py)
    agent = _agent(tmp_path, cgroup_root, {"cpu": 2, "ram": "600Mi"})
    agent.start()
    lo, hi = f"lo-{tag}", f"hi-{tag}"
    work = ("sh", "-c", "dd if=/dev/zero of=/dev/shm/m bs=1M count=60 2>/dev/null; while :; do :; done")
    db = str(tmp_path / "state" / "kalena.db")  # the agent's store, where kalena submit queues
    for name, prio in ((lo, 1), (hi, 5)):
        args = ["--store", db, "--image", image, "--name", name, "--priority", str(prio)]
        args += ["--request", "cpu=500m", "--request", "ram=100Mi", "--", *work]
        res = kalena("submit", *args)
        assert res.exit_code == 0 and res.stdout.strip() == name, res.output
    try:
        step = agent.step
        walks = lambda: {j: [t.state.value for t in agent.state.history(j)] for j in agent.state.jobs}  # noqa: E731
        up = (TaskState.RUNNING, TaskState.THROTTLED)  # (pressure on a loaded machine may throttle them)
        assert until(
            lambda: len(agent.state.jobs) == 2 and all(agent.state.task(j) in up for j in (lo, hi)),
            bound_s=300,  # wide: their starts run in the gaps a loaded machine leaves
            every=step,
        ), walks()
        for j in (lo, hi):
            facts = engine.inspect(f"kalena-{j}.1")
            assert facts is not None and facts.running
            assert facts.cgroup_parent == f"{cgroup_root}/batch/{j}.1"
            # the kernel's OOM killer takes batch before the engine's other containers (score 0)
            assert Path(f"/proc/{facts.pid}/oom_score_adj").read_text().strip() == "1000"
            assert facts.nano_cpus == 0 and facts.cpu_quota == 0  # inspect: no CPU setting of its own ...
        # ... Kalena's quota sits on the parent, and grows into the slack
        parent = {j: cpu_dir(f"{cgroup_root}/batch/{j}.1") for j in (lo, hi)}
        assert until(lambda: all(quota_file(parent[j]) > 50_000 for j in (lo, hi)), every=step)
        # Kalena's root holds only batch here (production is the engine's): the root and the runs'
        # parent have the minimal weight (v1 shares 2, v2 weight 1), as the runs have
        assert parent_weights(cgroup_root) in (["2", "2"], ["1", "1"])

        # 1. production needs its CPU back: both batch runs are throttled below their request
        for k in range(2):
            sh(engine, web, f"echo $$ > /tmp/burn{k}; while :; do :; done", detach=True)
        assert until(lambda: all(agent.state.task(j) is TaskState.THROTTLED for j in (lo, hi)), every=step)
        assert all(quota_file(parent[j]) < 50_000 for j in (lo, hi))
        sh(engine, web, "kill $(cat /tmp/burn0) $(cat /tmp/burn1)")

        # 2. production grows its memory: the lowest priority goes first, with SIGTERM, before any OOM
        # production (420 MiB, reservation 1.15 x usage) and both runs (60 MiB each) no longer fit 600 MiB;
        # without the lower-priority run they do
        sh(engine, web, "dd if=/dev/zero of=/fill/x bs=1M count=420 2>/dev/null")
        assert until(
            lambda: agent.state.task(lo) in (TaskState.EVICTING, TaskState.EVICTED, TaskState.PENDING),
            every=step,
        )
        kills = [r for r in agent.log.memory if r["kind"] == "docker" and r["action"] == "kill"]
        assert kills and kills[0]["container"] == f"kalena-{lo}.1" and kills[0]["signal"] == "SIGTERM"
        assert agent.state.task(hi) in (TaskState.RUNNING, TaskState.THROTTLED)
        assert until(
            lambda: agent.state.task(lo) is TaskState.PENDING or agent.state.jobs[lo].run > 1, every=step
        )
        assert engine.inspect(f"kalena-{lo}.1") is None  # its container is removed with its cgroups
        assert engine.inspect(web).running and not engine.inspect(web).oom_killed

        # 3. production shrinks again: the requeued job runs again, as a later run of the same job
        sh(engine, web, "rm -f /fill/x")

        def ran_again() -> bool:  # (the listing: an inspect would wait for a start under way)
            run = agent.state.jobs[lo].run
            up = run > 1 and engine.status(f"kalena-{lo}.{run}") not in (None, "created")
            # and the agent has taken the start's answer (the engine may say running a round before)
            return up and agent.state.task(lo) in (TaskState.RUNNING, TaskState.THROTTLED)

        # a wide bound: batch has the minimal CPU weight, so on a CI machine whose other test worker
        # keeps both cores busy its container starts only in the gaps
        walk = lambda: [(t.state.value, t.reason.value) for t in agent.state.history(lo)]  # noqa: E731
        assert until(ran_again, bound_s=300, every=step), (walk(), agent.state.jobs[lo].why_pending)
        steps = [(t.state, t.reason) for t in agent.state.history(lo)]
        assert (TaskState.EVICTING, TransitionReason.EVICTED_LEDGER_BREACH) in steps
        assert (TaskState.PENDING, TransitionReason.REQUEUED) in steps
        assert [s for s, _ in steps].count(TaskState.RUNNING) >= 2
        assert all(
            t.state is not TaskState.EVICTING for t in agent.state.history(hi)
        )  # higher priority stayed
        ran = [engine.inspect(f"kalena-{j}.{r}") for j in (lo, hi) for r in (1, 2, 3)]
        assert not any(f is not None and f.oom_killed for f in ran)
        assert not engine.inspect(web).oom_killed

        # 4. the store has every step, and kalena job why says each with its reason
        agent.store.save(agent.state)
        with Store(Path(db)) as store:
            saved = [(t.state, t.reason) for t in store.transitions(lo)]
        assert saved == [(s.value, r.value) for s, r in steps]  # no step lost, none twice
        why = kalena("job", "why", lo, "--store", db)
        assert why.exit_code == 0, why.output
        text = why.stdout
        assert "pending (submitted)" in text and "running (started)" in text
        assert "throttled (throttled)" in text and "CPU quota set to" in text  # why throttled
        assert "evicting (evicted-ledger-breach)" in text, text
        assert "evict: evicted (reservation-ledger-breach on ram): Reservation ledger breach" in text
        assert "pending (requeued)" in text and "placed on node" in text
        listed = json.loads(kalena("jobs", "--store", db, "--json").stdout)
        assert {j["job"]: j["state"] for j in listed}[hi] in ("running", "throttled")

        # 5. the slack view and the counters, for people (kalena status) and Prometheus
        agent.step()
        status = json.loads(kalena("status", "--store", db, "--json").stdout)["nodes"]["dk1"]
        assert status["capacity"]["cpu"] == 2 and status["production"] >= 1
        assert status["reservations"]["ram"] > 0 and status["usage"]["cpu"] > 0
        assert hi in [b["job"] for b in status["batch"]]
        assert "CAPACITY" in kalena("status", "--store", db).stdout
        with Store(Path(db)) as store:
            text = render_metrics(store)[0].decode()
        assert 'kalena_node_capacity{node="dk1",resource="cpu"} 2.0' in text
        assert 'kalena_evictions_total{node="dk1",reason="reservation-ledger-breach"}' in text
        assert 'kalena_throttles_total{node="dk1"}' in text and 'kalena_placements_total{node="dk1"} ' in text
    finally:
        agent.shutdown()
        agent.log.close()
        unstarve(cgroup_root)
        for j in (lo, hi):
            for r in (1, 2, 3):
                engine.remove(f"kalena-{j}.{r}")


def test_hand_made_batch_containers_are_adopted_as_jobs_and_strays_are_swept(
    engine, image, tag, containers, cgroup_root, tmp_path
):
    """``docker create``/``docker run`` with the batch label: each becomes a job (its labels' priority
    and requests), the hand-made container is removed, and the job runs as Kalena's own container.
    One with its own --entrypoint stays production (reported). A container of Kalena's in this
    agent's tree that its state does not know is removed at start; one in another tree is not."""
    made, ran, odd = f"made-{tag}", f"ran-{tag}", f"odd-{tag}"
    batch = {P + "tier": "batch", P + "priority": "3", P + "request.cpu": "200m", "team": "ml"}
    hc = engine.api.create_host_config()
    engine.api.create_container(
        image, command=["sh", "-c", "sleep 1"], name=made, labels=batch, host_config=hc
    )
    run_container(engine, image, ran, "sleep 300", batch)
    odd_id = engine.api.create_container(
        image, command=["300"], entrypoint=["sleep"], name=odd, labels=batch, host_config=hc
    )["Id"]
    engine.api.start(odd_id)
    ghost, other = f"kalena-{tag}ghost.1", f"kalena-{tag}other.1"
    managed = {P + "managed-by": "kalena", P + "tier": "batch"}
    for name, parent in ((ghost, f"{cgroup_root}/batch/{tag}ghost.1"), (other, f"/elsewhere-{tag}/batch/x")):
        hc2 = engine.api.create_host_config(cgroup_parent=parent)
        engine.api.create_container(
            image, command=["sleep", "300"], name=name, labels=managed, host_config=hc2
        )
        engine.api.start(name)
    containers.extend([made, ran, odd, ghost, other, f"kalena-adopted-{made}.1", f"kalena-adopted-{ran}.1"])
    agent = _agent(tmp_path, cgroup_root, {"cpu": 2, "ram": "1Gi"})
    try:
        agent.start()
        assert engine.inspect(ghost) is None  # swept: Kalena's, in this tree, unknown to the state
        assert engine.inspect(other) is not None  # another agent's tree: not this one's to remove
        jobs = {f"adopted-{made}", f"adopted-{ran}"}
        assert until(lambda: jobs <= set(agent.state.jobs), every=agent.step, bound_s=30), (
            set(agent.state.jobs),
            [r for r in agent.log.memory if r["kind"] in ("declaration", "rejected-submission", "warning")],
        )
        for name in (made, ran):
            job = agent.state.jobs[f"adopted-{name}"]
            assert job.priority == 3 and job.requests == {"cpu": 0.2} and job.image == image
            assert job.labels == {"team": "ml"} and job.adopted_from is not None
            assert engine.inspect(name) is None  # the hand-made container is gone
        assert agent.state.jobs[f"adopted-{made}"].command == ["sh", "-c", "sleep 1"]
        assert engine.inspect(odd).running and f"adopted-{odd}" not in agent.state.jobs
        assert any("own --entrypoint" in p for p in agent.declarations.problems)
        assert until(
            lambda: agent.state.task(f"adopted-{made}") is TaskState.SUCCEEDED, every=agent.step, bound_s=60
        )
        assert until(  # (the listing: an inspect would wait for a start under way)
            lambda: engine.status(f"kalena-adopted-{ran}.1") == "running", every=agent.step, bound_s=120
        )
        kinds = [r["kind"] for r in agent.log.memory]
        assert kinds.count("adopt") == 2 and "swept" in kinds
    finally:
        agent.shutdown()
        agent.log.close()
        engine.remove(other)
        for top in Path("/sys/fs/cgroup").glob(f"*/elsewhere-{tag}"):
            remove_empty_tree(top)
