"""Docker Swarm (a single-node swarm on a second engine): production services are recognised with
their reservations and placement constraints, batch runs in their slack as plain containers on
the node's engine, and a new production service is still placed by Swarm, whose scheduler sees
no batch at all: the agent then gives the capacity back (the lower-priority batch run is evicted,
SIGTERM first), and production is never touched.

Why batch is not a Swarm service (docs/docker.md): its knobs sit on Kalena's cgroup parent, which
a service cannot name; it starts without a manager's scheduling round; and an evicted service task
would be restarted by Swarm's reconciler, fighting the eviction.
"""

from __future__ import annotations

import time

import pytest
from docker_testlib import running_tasks, service, until

from kalena.agent.config import AgentConfig
from kalena.agent.declaration import parse_declaration
from kalena.core.config import PolicyConfig
from kalena.core.enforcement import EscalationConfig, EvictionConfig
from kalena.core.lifecycle import TaskState, TransitionReason
from kalena.docker.agent import build_docker_agent
from kalena.docker.labels import SWARM_CONSTRAINTS, SWARM_SERVICE
from kalena.store import Store

pytestmark = [pytest.mark.docker, pytest.mark.slow]
P = "kalena.naughtian.io/"
MIB = 2**20


def test_swarm_services_are_production_batch_uses_their_slack_and_swarm_still_places(
    swarm, image, tag, cgroup_root, tmp_path
):
    web = service(swarm, f"web-{tag}", image, 128, 0.25, constraints=["node.role==manager"])
    assert until(lambda: len(running_tasks(swarm, web)) == 1)
    base = parse_declaration(
        {"apiVersion": "kalena.naughtian.io/v1alpha1", "kind": "NodeDeclaration",
         "node": {"name": "swarm1", "capacity": {"cpu": 2, "ram": "600Mi"}}},
        "test",
    )  # fmt: skip
    policy = PolicyConfig(
        eviction=EvictionConfig(min_run_time_s=0.0, grace_period_s=2.0, cooldown_s=3.0),
        escalation=EscalationConfig(rounds=10_000, persist_s=1e9),  # about placement, not pressure
    )
    config = AgentConfig(sample_interval_s=0.5, estimate_interval_s=1.0, policy=policy)
    agent = build_docker_agent(
        tmp_path / "state", endpoint=swarm.endpoint, base=base, config=config, cgroup_root=cgroup_root,
        relist_s=1.0,
    )  # fmt: skip
    lo, hi = f"lo-{tag}", f"hi-{tag}"
    try:
        agent.start()
        # 1. the service's task is production, with its reservations as requests and its constraints
        prod = {a.spec.id: a.spec for a in agent.declaration.production}
        (task,) = [s for s in prod.values() if s.labels.get(SWARM_SERVICE) == web]
        assert task.requests.to_dict(skip_zero=True) == pytest.approx({"cpu": 0.25, "ram": 128 / 1024})
        assert task.labels[SWARM_CONSTRAINTS] == "node.role==manager"
        # 2. batch fills the slack, as plain containers on the node's engine (not Swarm services)
        with Store(tmp_path / "state" / "kalena.db") as db:
            for name, prio in ((lo, 1), (hi, 5)):
                spec = {"name": name, "image": image, "command": ["sleep", "3600"], "priority": prio,
                        "requests": {"cpu": 0.1, "ram": 150 / 1024}}  # fmt: skip
                db.submit([(name, spec)], time.time())
        assert until(
            lambda: all(j in agent.state.jobs and agent.state.task(j) is TaskState.RUNNING for j in (lo, hi)),
            every=agent.step,
        )
        for j in (lo, hi):
            facts = swarm.inspect(f"kalena-{j}.1")
            assert facts is not None and facts.running and SWARM_SERVICE not in facts.labels
        # 3. a new production service: Swarm places it (it sees no batch), Kalena gives the memory back
        api = service(swarm, f"api-{tag}", image, 300, 0.25)
        assert until(lambda: len(running_tasks(swarm, api)) == 1, every=agent.step)
        # 128 + 300 of production and 2 x 150 of batch exceed 600 MiB; without the lower priority they fit
        assert until(
            lambda: agent.state.task(lo) in (TaskState.EVICTING, TaskState.EVICTED, TaskState.PENDING),
            every=agent.step,
        )
        steps = [(t.state, t.reason) for t in agent.state.history(lo)]
        # the new production makes the rebuilt ledger refuse the lower-priority run
        assert (TaskState.EVICTING, TransitionReason.READMISSION_REJECTED) in steps
        kills = [r for r in agent.log.memory if r["kind"] == "docker" and r["action"] == "kill"]
        assert kills[0]["container"] == f"kalena-{lo}.1" and kills[0]["signal"] == "SIGTERM"
        assert agent.state.task(hi) is TaskState.RUNNING  # the higher priority stays
        for svc in (web, api):  # production never touched: its tasks run on, never restarted
            assert len(running_tasks(swarm, svc)) == len(swarm.api.tasks(filters={"service": svc})) == 1
        writes = [r for r in agent.log.memory if r["kind"] == "write" and "docker" in str(r.get("cgroup"))]
        assert writes == []
    finally:
        agent.shutdown()
        agent.log.close()
        for j in (lo, hi):
            for r in (1, 2):
                swarm.remove(f"kalena-{j}.{r}")
