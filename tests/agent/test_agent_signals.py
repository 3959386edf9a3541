"""From notifications to NodeConditions; which files are watched; the round's desired knobs."""

from __future__ import annotations

import math

import numpy as np
import pytest

from kalena.agent import knobs
from kalena.agent.config import AgentConfig
from kalena.agent.layout import CgroupTree
from kalena.agent.notify import AgentEvent
from kalena.agent.signals import PsiAverages, conditions, trigger_specs
from kalena.agent.state import JobRecord
from kalena.agent.writer import CgroupWriter, Knob, ManagedScope
from kalena.core.enforcement import (
    StarvationDecision,
    ThrottleCause,
    ThrottleConfig,
    ThrottleDecision,
    plan_throttle,
)
from kalena.core.resources import DIM_INDEX
from kalena.core.verdict import Reason, ReasonCode
from kalena.testing.enforcement import batch_resident, node_snapshot, resident

CFG = AgentConfig()


def ev(kind: str, dim: str, acute: bool = False) -> AgentEvent:
    return AgentEvent(kind, "src", dim, acute, 0.0, 0.0)


@pytest.mark.parametrize(
    ("events", "triggered", "acute", "memory_events"),
    [
        ([], set(), set(), 0),
        ([ev("psi", "cpu")], {"cpu"}, set(), 0),
        ([ev("psi", "ram", acute=True)], {"ram"}, {"ram"}, 0),
        ([ev("memory-threshold", "ram"), ev("oom", "ram", True)], {"ram"}, {"ram"}, 2),
        ([ev("psi", "disk.read")], {"disk.read", "disk.write"}, set(), 0),
    ],
    ids=[
        "quiet",
        "cpu-trigger",
        "memory-full-is-acute",
        "memory-events",
        "io-is-both-disks",
    ],
)
def test_conditions(events, triggered, acute, memory_events):
    c = conditions(events, PsiAverages(0.3, 0.1, 0.0, math.nan), CFG)
    assert {d for d, i in DIM_INDEX.items() if c.triggered[i]} == triggered
    assert {d for d, i in DIM_INDEX.items() if c.acute[i]} == acute
    assert c.memory_events == memory_events
    assert c.psi_some[DIM_INDEX["cpu"]] == 0.3 and math.isnan(c.psi_some[DIM_INDEX["disk.read"]])


@pytest.mark.parametrize(
    ("mode", "labels"),
    [
        ("hybrid", ["root:memory:some", "root:memory:full", "root:io:some", "prod/web:cpu:some"]),
        ("v1", ["system:memory:some", "system:memory:full", "system:io:some", "system:cpu:some"]),
    ],
    ids=["per-cgroup-where-v2-exists", "system-on-v1-only"],
)
def test_trigger_specs_prefer_the_most_specific_files(fake_host, mode, labels):
    tree = CgroupTree(fake_host(mode).layout(), "kalena")
    specs = trigger_specs(tree, {"prod/web": "prod/web"}, CFG)
    assert [s.label for s in specs] == labels
    assert [s.acute for s in specs] == [False, True, False, False]
    if mode == "hybrid":
        assert specs[3].path == tree.dir(tree.layout.v2, "prod/web") / "cpu.pressure"


def _job(name: str, **kw) -> JobRecord:
    j = JobRecord(name, ["true"], kw.get("requests", {"cpu": 1, "ram": 0.25}), kw.get("limits"), 1, 0.0)
    j.workload_id = j.cgroup = f"batch/{name}.1"
    j.slack_memory = kw.get("slack_memory", False)
    return j


def test_batch_writes_carry_quota_weight_and_memory_envelope():
    snap = node_snapshot(batch_resident("batch/a.1", cpu=1, ram=0.25), cpu=4, ram=8)
    plan = plan_throttle(snap, ThrottleConfig(), 0.0)
    writes = knobs.batch_writes(plan, {"batch/a.1": _job("a", limits={"ram": 0.5})})
    by = {w.knob: w.value for w in writes}
    assert by[Knob.CPU_QUOTA] == pytest.approx(plan.decisions[0].quota)
    assert by[Knob.CPU_WEIGHT] == 1
    assert by[Knob.MEMORY_MAX] == 0.5 * 2**30 and by[Knob.MEMORY_HIGH] == 0.25 * 2**30
    slack = {w.knob: w.value for w in knobs.memory_writes(_job("b", slack_memory=True))}
    assert slack[Knob.MEMORY_MAX] == math.inf and slack[Knob.MEMORY_HIGH] == math.inf


def test_service_caps_record_the_original_and_are_lifted(fake_host):
    tree = CgroupTree(fake_host("v2").layout(), "kalena")
    d = tree.dir(tree.layout.v2, "prod/web")
    d.mkdir(parents=True)
    (d / "cpu.max").write_text("150000 100000\n")
    writer = CgroupWriter(tree, ManagedScope())
    snap = node_snapshot(resident("prod/web", cpu=1, usage={"cpu": 2}), cpu=4)
    cap = ThrottleDecision(
        "prod/web", "cpu", 1.2, None, ThrottleCause.ANTI_STARVATION, Reason(ReasonCode.ANTI_STARVATION)
    )
    capped = StarvationDecision(snap.node, 0, 0.0, 300.0, (), (cap,), 0.8, 0.8)
    originals: dict[str, float] = {}
    w1 = knobs.production_writes(capped, {"prod/web": "prod/web"}, originals, writer)
    assert [(w.cgroup, w.value) for w in w1] == [("prod/web", 1.2)] and originals == {"prod/web": 1.5}
    none = StarvationDecision(snap.node, 0, 0.0, 300.0, (), (), 0.0, 0.0)
    w2 = knobs.production_writes(none, {"prod/web": "prod/web"}, originals, writer)
    assert [(w.cgroup, w.value) for w in w2] == [("prod/web", 1.5)] and originals == {}
    assert knobs.production_writes(none, {"prod/web": "prod/web"}, originals, writer) == []
    assert np.isfinite(w2[0].value)
