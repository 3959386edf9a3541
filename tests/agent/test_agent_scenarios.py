"""Issue 4's definition of done, on this host's real cgroups with real processes (root only).

The test drives the agent's rounds itself (``agent.step(events)`` after collecting the
kernel's notifications), so nothing here depends on speed: every wait is a bound on a hung
test, never an assertion about latency (latency is measured in bench/bench_agent_latency.py).
"""

from __future__ import annotations

import math
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from agent_testlib import remove_tree

from kalena.agent.build import build_agent
from kalena.agent.cgroupfs import FsCgroupReader, read_text
from kalena.agent.config import AgentConfig
from kalena.agent.declaration import parse_declaration
from kalena.agent.layout import CgroupTree
from kalena.agent.loop import Agent
from kalena.agent.notify import AgentEvent
from kalena.agent.runtime import Submission, submit
from kalena.agent.writer import CgroupWriter, Knob, KnobWrite, ManagedScope
from kalena.core.config import PolicyConfig
from kalena.core.controller import RoundConfig
from kalena.core.enforcement import EscalationConfig, EvictionConfig

MIB = 2**20
MEM = (sys.executable, "-m", "kalena.agent.loadgen", "mem", "--mib")
CPU = (sys.executable, "-m", "kalena.agent.loadgen", "cpu")
CALM = EscalationConfig(rounds=10_000, persist_s=1e9)  # these tests are about eviction and throttling
CALM_POLICY = PolicyConfig(escalation=CALM)


def _need_memory_controller(tree: CgroupTree) -> None:
    if tree.layout.home("memory") is None:
        pytest.skip("no memory controller in any hierarchy (v2 without +memory delegated here)")


def until(check: Callable[[], bool], bound_s: float = 30.0, every_s: float = 0.1) -> bool:
    """Poll ``check`` until it holds; the bound only stops a hung test."""
    end = time.monotonic() + bound_s
    while time.monotonic() < end:
        if check():
            return True
        time.sleep(every_s)
    return check()


def decl(node: dict, workloads: list[dict]):
    return parse_declaration(
        {
            "apiVersion": "kalena.naughtian.io/v1alpha1",
            "kind": "NodeDeclaration",
            "node": node,
            "workloads": workloads,
        },
        "test",
    )


def make_agent(tree: CgroupTree, state_dir: Path, d, **cfg) -> Agent:
    return build_agent(d, state_dir, config=AgentConfig(**cfg), cgroup_root=tree.root, layout=tree.layout)


def collect(agent: Agent, kind: str, bound_s: float = 20.0) -> list[AgentEvent]:
    """Kernel notifications until one of ``kind`` arrives (all of them are returned)."""
    got: list[AgentEvent] = []
    end = time.monotonic() + bound_s
    while time.monotonic() < end and not any(e.kind == kind for e in got):
        got.extend(agent.notifier.wait(0.5))
    return got


def evict_lines(agent: Agent) -> list[dict]:
    return [r for r in agent.log.memory if r["kind"] == "evict"]


def oom_kills(tree: CgroupTree) -> int:
    """OOM kills anywhere under Kalena's root (v1 counts them in the victim's own cgroup)."""
    h = tree.layout.home("memory")
    name = "memory.oom_control" if h.version == 1 else "memory.events"
    top = tree.dir(h, "")
    total = 0
    for d in [top, *(p for p in top.rglob("*") if p.is_dir())]:
        text = read_text(d / name) or ""
        total += int(dict(line.split() for line in text.splitlines() if line.strip()).get("oom_kill", 0))
    return total


def grow(p, mib: int) -> str:
    p.stdin.write(f"grow {mib}\n")
    p.stdin.flush()
    return p.stdout.readline().strip()


# -- 1. memory: batch goes before the OOM killer reaches production ----------------------------------
NODE_MEM = {"name": "n1", "capacity": {"cpu": 2, "ram": "560Mi"}, "memoryLimit": "640Mi"}
PROD_WEB = {
    "id": "prod/web",
    "cgroup": "prod/web",
    "priority": 100,
    "requests": {"cpu": 0.1, "ram": "128Mi"},
    "limits": {"ram": "620Mi"},
}


@pytest.mark.slow
def test_production_growth_evicts_lowest_priority_batch_before_any_oom(real_tree, spawn, tmp_path):
    """Node: 640 MiB cgroup limit, 560 MiB of capacity. Production grows 64 -> 300 -> 500 MiB
    next to three 64 MiB batch runs (128 MiB requests). Without the agent, 500 MiB of production
    plus the three runs exceed 640 MiB and the kernel OOM-kills production (the control test
    below); with it, batch is evicted by ascending priority first and production never is."""
    _need_memory_controller(real_tree)
    d = decl(NODE_MEM, [PROD_WEB])
    agent = make_agent(
        real_tree,
        tmp_path,
        d,
        policy=PolicyConfig(
            eviction=EvictionConfig(min_run_time_s=0, grace_period_s=5, acute_grace_period_s=0),
            escalation=CALM,
            round=RoundConfig(trigger_fraction=0.75),  # a 480 MiB usage eventfd on the node
        ),
    )
    agent.start()
    owner = CgroupWriter(real_tree, ManagedScope())  # production's owner, not the agent
    owner.create("prod/web", "test: production is started by its owner")
    prod = spawn("mem", "--mib", "64", cgroup_procs=owner.procs_files("prod/web"))
    assert prod.stdout.readline().strip() == "ready 64"
    for name, prio in (("b-low", 1), ("b-mid", 3), ("b-high", 5)):
        submit(
            agent.batch.submissions.inbox,
            Submission(name, (*MEM, "64"), {"cpu": 0.1, "ram": 0.125}, None, prio),
        )
    assert set(agent.step().admitted) == {"batch/b-low.1", "batch/b-mid.1", "batch/b-high.1"}
    reader = FsCgroupReader(real_tree)
    runs = [f"batch/{n}.1" for n in ("b-low", "b-mid", "b-high")]
    assert until(lambda: all((reader.read(r).memory_usage or 0) >= 64 * MIB for r in runs))
    assert agent.step().evicted == ()

    assert grow(prod, 300) == "at 300"
    v1 = real_tree.layout.home("memory").version == 1
    # v1: the node's usage eventfd fires at 480 MiB; v2 has no usage threshold without setting
    # memory.high, which would throttle production: there the 1 s sample finds the breach
    events = collect(agent, "memory-threshold") if v1 else []
    report = agent.step(events)
    assert report.evicted == ("batch/b-low.1", "batch/b-mid.1")
    lines = evict_lines(agent)
    assert [line["workload"] for line in lines] == ["batch/b-low.1", "batch/b-mid.1"]
    for line in lines:
        assert line["victim_order"] == ["batch/b-low.1", "batch/b-mid.1"]
        expected = "memory-threshold" if v1 else "sample"
        assert any(t["kind"] == expected for t in line["trigger"])  # the record names the trigger
        assert line["why"]["cause"] == "reservation-ledger-breach"
        assert line["why"]["node_condition"]["dimension"] == "ram"
        assert line["why"]["reservation_rose"]["workload"] == "prod/web"
    assert lines[0]["why"]["priority_comparison"] == {"victim": 1, "highest_protected": 100, "protected": 2}
    assert until(lambda: bool(agent.step() and not agent.state.in_flight()))

    assert grow(prod, 500) == "at 500"  # would OOM with all three runs still there (control test)
    agent.step()
    assert prod.poll() is None  # production alive
    assert oom_kills(real_tree) == 0  # and the kernel never had to kill anything
    assert [line["workload"] for line in evict_lines(agent)][-1] == "batch/b-high.1"  # the last, last
    agent.shutdown()


@pytest.mark.slow
def test_control_without_the_agent_the_kernel_kills_production(real_tree, spawn):
    """The same node and loads with nobody evicting: the OOM killer picks production (the largest)."""
    _need_memory_controller(real_tree)
    w = CgroupWriter(real_tree, ManagedScope())
    w.apply([KnobWrite("", Knob.MEMORY_MAX, 640 * MIB, "the node")])
    for name in ("b-low", "b-mid", "b-high"):
        w.create(f"batch/{name}", "test")
        p = spawn("mem", "--mib", "64", cgroup_procs=w.procs_files(f"batch/{name}"))
        assert p.stdout.readline().strip() == "ready 64"
    w.create("prod/web", "test")
    prod = spawn("mem", "--mib", "64", cgroup_procs=w.procs_files("prod/web"))
    assert prod.stdout.readline().strip() == "ready 64"
    assert grow(prod, 300) == "at 300"
    assert grow(prod, 500) == ""  # no answer: it died
    assert prod.wait(30) == -signal.SIGKILL
    assert oom_kills(real_tree) >= 1


# -- 2. cpu: the batch quota is cut when production demand rises --------------------------------------
def test_production_cpu_demand_cuts_the_batch_quota(real_tree, spawn, tmp_path):
    d = decl(
        {"name": "n1", "capacity": {"cpu": 2, "ram": "2Gi"}},
        [{"id": "prod/api", "cgroup": "prod/api", "priority": 100, "requests": {"cpu": 0.25, "ram": "64Mi"}}],
    )
    agent = make_agent(real_tree, tmp_path, d, policy=CALM_POLICY)
    agent.start()
    owner = CgroupWriter(real_tree, ManagedScope())
    owner.create("prod/api", "test")
    submit(agent.batch.submissions.inbox, Submission("spin", CPU, {"cpu": 0.5, "ram": 0.0625}, None, 1))
    assert agent.step().admitted == ("batch/spin.1",)
    time.sleep(0.5)
    first = agent.step()
    q0 = agent.writer.current("batch/spin.1", Knob.CPU_QUOTA)
    # full speed: the slack allowance C - S - h*C = 2 - 0.25 - 0.1 cores, more than the one core it can use
    assert first.throttle.allowance == pytest.approx(1.65)
    assert q0 == pytest.approx(1.65, rel=1e-3)
    # the runs' parent yields to production under contention (a run's own weight counts only among
    # its siblings); the root, which holds production here too, keeps its weight
    minimal = (1.0, 2.0)  # cpu.weight 1 on v2, cpu.shares 2 on v1
    assert agent.writer.current("batch", Knob.CPU_WEIGHT) in minimal
    assert agent.writer.current("", Knob.CPU_WEIGHT) not in minimal

    for _ in range(2):
        p = spawn("cpu", cgroup_procs=owner.procs_files("prod/api"))
        assert p.stdout.readline().strip() == "ready"
    cut = None
    for _ in range(30):  # rounds, not seconds: each waits for a notification or 1 s
        r = agent.step(agent.notifier.wait(1.0))
        q = agent.writer.current("batch/spin.1", Knob.CPU_QUOTA)
        if q is not None and q < q0:
            cut = r
            break
    assert cut is not None, "the batch quota was never cut"
    throttles = [
        x for x in agent.log.memory if x["kind"] == "throttle" and x["why"]["workload"] == "batch/spin.1"
    ]
    assert throttles[-1]["why"]["quota_cores"] < q0
    assert throttles[-1]["why"]["cause"] in ("pressure", "slack")
    assert throttles[-1]["why"]["service_claim"] > 0.25 or throttles[-1]["why"]["pressured"]
    agent.shutdown()


# -- 3. the limit-breach override; DaemonSets and foreign cgroups untouched ---------------------------
def test_limit_breach_evicts_production_and_never_touches_daemonsets_or_foreign_cgroups(
    real_tree, spawn, tmp_path
):
    _need_memory_controller(real_tree)
    d = decl(
        {"name": "n1", "capacity": {"cpu": 2, "ram": "320Mi"}, "memoryLimit": "1Gi"},
        [
            {
                "id": "prod/leaky",
                "cgroup": "prod/leaky",
                "priority": 100,
                "requests": {"ram": "64Mi"},
                "limits": {"ram": "96Mi"},
            },
            {
                "id": "prod/steady",
                "cgroup": "prod/steady",
                "priority": 100,
                "requests": {"ram": "64Mi"},
                "limits": {"ram": "128Mi"},
            },
            {
                "id": "ds/logger",
                "cgroup": "ds/logger",
                "daemonset": True,
                "requests": {"ram": "32Mi"},
                "limits": {"ram": "48Mi"},
            },
        ],
    )
    agent = make_agent(
        real_tree,
        tmp_path,
        d,
        policy=PolicyConfig(eviction=EvictionConfig(min_run_time_s=0, grace_period_s=5), escalation=CALM),
    )
    agent.start()
    owner = CgroupWriter(real_tree, ManagedScope())
    procs = {}
    for cg in ("prod/leaky", "prod/steady", "ds/logger"):
        owner.create(cg, "test")
        procs[cg] = spawn("mem", "--mib", "32", cgroup_procs=owner.procs_files(cg))
        assert procs[cg].stdout.readline().strip() == "ready 32"
    foreign = CgroupTree(real_tree.layout, real_tree.root + "-foreign")
    try:
        fw = CgroupWriter(foreign, ManagedScope())
        fw.create("svc", "test: somebody else's cgroup")
        stranger = spawn("mem", "--mib", "16", cgroup_procs=fw.procs_files("svc"))
        assert stranger.stdout.readline().strip() == "ready 16"
        submit(agent.batch.submissions.inbox, Submission("b", (*MEM, "32"), {"ram": 0.125}, None, 1))
        assert agent.step().admitted == ("batch/b.1",)
        knob_files = ("cpu.cfs_quota_us", "cpu.shares", "cpu.max", "cpu.weight")
        knob_files += ("memory.limit_in_bytes", "memory.soft_limit_in_bytes", "memory.max", "memory.high")
        ds_files = {
            p: p.read_text()
            for h in real_tree.layout.hierarchies
            for p in (real_tree.dir(h, "ds/logger") / f for f in knob_files)
            if p.exists()
        }
        assert ds_files
        assert grow(procs["ds/logger"], 100) == "at 100"  # a DaemonSet over its own limit: never a candidate
        assert agent.step().evicted == ()

        assert grow(procs["prod/leaky"], 160) == "at 160"
        events = collect(agent, "memory-threshold", bound_s=5.0)  # v1: the eventfd at its 96 MiB limit
        report = agent.step(events)
        assert report.evicted == ("prod/leaky",)
        line = evict_lines(agent)[0]
        assert line["why"]["limit_breach_override"] is True and line["why"]["cause"] == "limit-breach"
        assert line["victim_order"] == ["prod/leaky"]
        assert procs["prod/leaky"].wait(30) == -signal.SIGTERM
        assert until(lambda: bool(agent.step() and not agent.state.in_flight()))
        for cg in ("prod/steady", "ds/logger"):
            assert procs[cg].poll() is None, cg
        assert stranger.poll() is None and agent.state.status("b") == "running"
        # nothing under the DaemonSet or the foreign cgroup was ever written
        for path, text in ds_files.items():
            assert path.read_text() == text, path
        writes = [r for r in agent.log.memory if r["kind"] == "write"]
        assert writes and not [r for r in writes if "ds/logger" in r["path"] or "-foreign" in r["path"]]
    finally:
        remove_tree(foreign)
    agent.shutdown()


# -- never leave production throttled ------------------------------------------------------------------
def test_start_and_shutdown_restore_a_capped_production_cgroup(real_tree, spawn, tmp_path):
    d = decl({"name": "n1", "capacity": {"cpu": 2, "ram": "1Gi"}}, [{"id": "prod/api", "cgroup": "prod/api"}])
    owner = CgroupWriter(real_tree, ManagedScope())
    owner.create("prod/api", "test")
    agent = make_agent(real_tree, tmp_path, d)
    # a previous agent capped it and died: its state file says what the quota was before
    owner.apply([KnobWrite("prod/api", Knob.CPU_QUOTA, 0.05, "a cap left behind")])
    agent.state.production_originals["prod/api"] = math.inf
    agent.store.save(agent.state)
    agent = make_agent(real_tree, tmp_path, d)
    agent.start()
    assert agent.writer.current("prod/api", Knob.CPU_QUOTA) == math.inf
    restores = [r for r in agent.log.memory if r["kind"] == "write" and r["reason"] == "restore at start"]
    assert len(restores) == 1
    agent.shutdown()


@pytest.mark.slow
def test_kill_of_a_real_run_reaches_every_process(real_tree, tmp_path):
    """A run that forks: its eviction with no grace (acute) leaves nothing behind in the cgroup."""
    d = decl({"name": "n1", "capacity": {"cpu": 2, "ram": "1Gi"}}, [])
    agent = make_agent(real_tree, tmp_path, d, policy=CALM_POLICY)
    agent.start()
    forker = (sys.executable, "-c", "import os, time\nfor _ in range(3):\n    os.fork()\ntime.sleep(60)")
    submit(agent.batch.submissions.inbox, Submission("fork", forker, {"ram": 0.01}, None, 1))
    agent.step()
    reader = FsCgroupReader(real_tree)
    assert until(lambda: len(reader.procs("batch/fork.1")) == 8)
    agent.writer.kill("batch/fork.1", "test: acute eviction")
    assert until(lambda: reader.procs("batch/fork.1") == ())
    agent.step()  # the run's cgroup is empty: the agent reaps it and removes its cgroup
    assert agent.state.status("fork") in ("done", "failed")
    assert not reader.exists("batch/fork.1")
    agent.shutdown()
