"""Shortcuts the simulator takes around two core policies are exact: escalation and anti-starvation."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from kalena.core.enforcement import (
    EscalationConfig,
    MitigationRound,
    NodeSnapshot,
    StarvationConfig,
    decide_escalation,
    plan_anti_starvation,
)
from kalena.core.resources import CPU
from kalena.sim.engine import could_escalate, starvation_rows
from kalena.testing.enforcement import batch_resident, node_snapshot, resident

SNAP = node_snapshot(batch_resident("b", cpu=1, ram=1), cpu=4, ram=4)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.floats(0, 20), st.booleans()), min_size=0, max_size=8),
    st.integers(1, 5),
    st.floats(1, 60),
)
def test_could_escalate_is_exactly_the_cores_condition(steps, rounds, persist):
    t, history = 0.0, []
    for gap, persisted in steps:
        t += gap
        history.append(MitigationRound(t, persisted, ("ram",)))
    config = EscalationConfig(rounds=rounds, persist_s=persist)
    assert could_escalate(history, config) == decide_escalation(SNAP, history, config, t).escalate


def _subset(snap: NodeSnapshot, keep: np.ndarray) -> NodeSnapshot:
    arrays = (
        "is_batch",
        "priority",
        "is_daemonset",
        "request",
        "reservation",
        "limit",
        "usage",
        "started_at",
    )
    return NodeSnapshot(
        node=snap.node,
        capacity=snap.capacity,
        ids=tuple(snap.ids[i] for i in keep),
        slack_cpu=snap.slack_cpu[keep],
        equivalence_keys=tuple(snap.equivalence_keys[i] for i in keep),
        **{name: getattr(snap, name)[keep] for name in arrays},
    )


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.tuples(st.floats(0.05, 4), st.floats(0, 4), st.floats(0, 300)), min_size=1, max_size=6),
    st.lists(st.tuples(st.floats(0.1, 8), st.floats(0, 8), st.floats(0, 10)), min_size=0, max_size=6),
)
def test_anti_starvation_over_batch_and_greedy_rows_equals_the_whole_node(batch, service):
    residents = [batch_resident(f"b{i}", cpu=r, usage={"cpu": u}) for i, (r, u, _) in enumerate(batch)]
    residents += [
        resident(f"s{i}", cpu=r, reservation={"cpu": res}, usage={"cpu": u})
        for i, (r, res, u) in enumerate(service)
    ]
    full = node_snapshot(*residents, cpu=16)
    throttled = {f"b{i}": t for i, (_, _, t) in enumerate(batch)}
    table = SimpleNamespace(usage=np.asarray(full.usage))
    rows = SimpleNamespace(is_batch=np.asarray(full.is_batch), reservation=np.asarray(full.reservation))
    keep = starvation_rows(np.arange(len(full)), table, rows)
    assert set(np.flatnonzero(full.is_batch)) <= set(keep.tolist())
    cfg = StarvationConfig()
    a = plan_anti_starvation(full, throttled, 300.0, cfg, 0.0)
    b = plan_anti_starvation(_subset(full, keep), throttled, 300.0, cfg, 0.0)
    assert (a.starved, a.caps, a.needed, a.released) == (b.starved, b.caps, b.needed, b.released)
    assert all(full.usage[full.ids.index(c.workload), CPU] > 0 for c in a.caps)
