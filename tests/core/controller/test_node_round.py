"""The node round's own rules, each written once: signals, the estimator limit, pressure persisted,
escalation and its epochs, the state carried between rounds."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest
from hypothesis import given, settings

from kalena.core.config import PolicyConfig
from kalena.core.controller import (
    RoundConfig,
    RoundState,
    estimator_limits,
    node_round,
    node_signals,
    view_from_ledger,
)
from kalena.core.controller.view import NodeSignals
from kalena.core.enforcement import EscalationConfig, EvictionCause, ThrottleConfig
from kalena.core.enforcement.nodes import NodesView
from kalena.core.ledger import Ledger, PlaceBatch
from kalena.core.resources import CPU, NDIM, RAM, Resources
from kalena.testing.builders import node, workload
from kalena.testing.controller import nodes_views
from kalena.testing.enforcement import batch_resident, node_snapshot, resident

CFG = PolicyConfig()


def _one(*residents, ram=8.0, cpu=4.0, **conditions) -> NodesView:
    return NodesView.of_snapshots([node_snapshot(*residents, ram=ram, cpu=cpu, **conditions)])


# (id, rows' ram usage, node_used ram, node_limit ram, acute, triggered) on a node of 10 GiB
SIGNALS = [
    ("quiet", [4.0], math.nan, math.nan, False, False),
    ("rows-above-90-percent-trigger", [4.0, 5.1], math.nan, math.nan, False, True),
    ("rows-above-95-percent-acute", [4.0, 5.6], math.nan, math.nan, True, True),
    ("own-accounting-wins", [1.0], 9.6, math.nan, True, True),
    ("own-limit-moves-the-level", [9.6], math.nan, 20.0, False, False),
    ("unknown-limit-never-acute", [9.9], math.nan, math.inf, False, False),
]


@pytest.mark.parametrize(
    ("rows", "used", "limit", "acute", "triggered"), [c[1:] for c in SIGNALS], ids=[c[0] for c in SIGNALS]
)
def test_acute_and_trigger_rule(rows, used, limit, acute, triggered):
    residents = [resident(f"s{i}", ram=1.0, usage={"ram": u}) for i, u in enumerate(rows)]
    view = _one(*residents, ram=10.0)
    own_used = np.full((1, NDIM), np.nan)
    own_used[0, RAM] = used
    own_limit = np.full((1, NDIM), np.nan)
    own_limit[0, RAM] = limit
    view = NodesView(**{**_fields(view), "node_used": own_used, "node_limit": own_limit})
    a, t = node_signals(view, RoundConfig())
    assert (bool(a[0, RAM]), bool(t[0, RAM])) == (acute, triggered)
    assert not a[0, CPU] and not t[0, CPU]  # the rule is for the non-compressible dimensions only


def _fields(view: NodesView) -> dict:
    return {f: getattr(view, f) for f in view.__dataclass_fields__ if not f.startswith("_")}


def test_estimator_limit_is_the_limit_within_capacity_but_never_below_the_request():
    limit = np.array([[2.0, math.inf, 8.0]])
    cap = np.array([[4.0, 16.0, 4.0]])
    req = np.array([[1.0, 2.0, 6.0]])
    assert estimator_limits(limit, cap, req).tolist() == [[2.0, 16.0, 6.0]]


def test_cpu_pressure_persists_only_once_every_batch_quota_is_at_the_minimum():
    cfg = PolicyConfig(escalation=EscalationConfig(rounds=3, persist_s=1e6))
    view = _one(
        resident("web", cpu=3.0, usage={"cpu": 3.0}),
        batch_resident("b", cpu=1.0, usage={"cpu": 1.0}),
        psi_some={"cpu": 0.6},
    )
    state, seen = RoundState.initial(1), []
    for r in range(14):
        d = node_round(view, state, cfg, float(r))
        state = d.state
        seen.append((float(d.throttle.quota[0]), bool(d.pressure[0, CPU]), bool(d.escalate[0])))
    quotas = [q for q, _, _ in seen]
    assert quotas == sorted(quotas, reverse=True)  # the allowance halves every round under pressure
    first = next(i for i, (q, _, _) in enumerate(seen) if q <= ThrottleConfig().min_quota_cores)
    assert not any(p for _, p, _ in seen[:first]) and all(p for _, p, _ in seen[first : first + 3])
    assert [e for _, _, e in seen].index(True) == first + 3  # three failed rounds after exhaustion


def test_escalation_drains_after_the_plan_with_consecutive_epochs():
    """A signal without a breach evicts nobody; persisting, it escalates: every batch is drained."""
    cfg = PolicyConfig(escalation=EscalationConfig(rounds=2, persist_s=1e6))
    view = _one(
        resident("web", ram=2.0, usage={"ram": 2.0}),
        batch_resident("b1", ram=1.0, priority=1, usage={"ram": 1.0}),
        batch_resident("b2", ram=1.0, priority=0, usage={"ram": 1.0}),
        triggered=("ram",),
    )
    state = RoundState.initial(1)
    decisions = []
    for r in range(3):
        d = node_round(view, state, cfg, 10.0 * r)
        state = d.state
        decisions.append(d)
    assert [bool(d.escalate[0]) for d in decisions] == [False, False, True]
    act = decisions[2].actions_of(0)
    assert act is not None and act.plan is None  # a signal without a breach: pressure, no plan, no victim
    assert [v.workload for v in act.victims] == [
        "default/b2",
        "default/b1",
    ]  # eviction order: lower priority first
    assert {v.cause for v in act.victims} == {EvictionCause.ESCALATION_DRAIN}
    assert act.first_epoch == int(view.epoch[0])
    assert decisions[2].slack_ineligible_until[0] == 20.0 + cfg.escalation.cooldown_s
    assert decisions[2].gone.tolist() == [False, True, True]
    assert state.runs.rounds[0] == 0 and math.isnan(state.runs.open_time[0])  # afresh after escalating


def test_a_service_victim_stays_at_its_request_for_the_throttle():
    """Evicting a service over its limit frees only its excess: the throttle sees it at r = R."""
    view = _one(
        resident("leaky", ram=1.0, cpu=1.0, limits={"ram": 2.0}, usage={"ram": 7.5, "cpu": 1.0}),
        batch_resident("b", ram=1.0, cpu=1.0, usage={"ram": 0.5, "cpu": 0.5}),
        ram=8.0,
        cpu=4.0,
    )
    d = node_round(view, RoundState.initial(1), CFG, 0.0)
    act = d.actions_of(0)
    assert act is not None and [v.workload for v in act.victims] == ["default/leaky"]
    assert act.victims[0].limit_breach_override and not d.gone.any()
    assert d.throttle.claim[0] == 1.0  # the victim counts max(R, u) = 1 core, not its old reservation


def test_a_victims_rise_is_told_against_the_last_round_beside_a_node_that_names_nobody():
    """The previous round's reservations reach every plan that can name a victim, whatever other
    nodes the screen flags (here one whose production alone breaches its ledger)."""

    def view(batch_ram: float) -> NodesView:
        alone = node_snapshot(
            resident("web", ram=6.0, reservation={"ram": 9.0}, usage={"ram": 5.0}), node="a", ram=8.0
        )
        mixed = node_snapshot(
            resident("db", ram=4.0, usage={"ram": 4.0}),
            batch_resident("b", ram=1.0, reservation={"ram": batch_ram}, usage={"ram": 1.0}),
            node="b",
            ram=8.0,
        )
        return NodesView.of_snapshots([alone, mixed])

    first = node_round(view(2.0), RoundState.initial(2), CFG, 0.0)
    plan = first.eviction_plan(0)
    assert plan.victims == () and plan.pressures and not plan.pressures[0].holds  # 9 > 8, nobody to name
    assert first.actions_of(1) is None  # 4 + 2 <= 8
    second = node_round(view(5.0), first.state, CFG, 10.0)
    act = second.actions_of(1)
    assert act is not None and [v.workload for v in act.victims] == ["default/b"]
    rose = act.victims[0].why.reservation_rose
    assert rose is not None and (rose.workload, rose.basis, rose.before, rose.after) == (
        "default/b",
        "previous",
        2.0,
        5.0,
    )


@settings(max_examples=80, deadline=None)
@given(nodes_views())
def test_round_state_survives_json(view: NodesView):
    state = RoundState.initial(view.n_nodes)
    for r in range(3):
        state = node_round(view, state, CFG, 5.0 * r).state
    back = RoundState.from_json(json.loads(json.dumps(state.to_json())))
    assert back.equals(state)
    # with serials (the simulator's views): kept by serial, not by id, and back the same
    counted = dataclasses.replace(view, serial=np.where(view.live, np.arange(len(view)) * 3 + 1, -1))
    state = RoundState.initial(view.n_nodes)
    for r in range(3):
        state = node_round(counted, state, CFG, 5.0 * r).state
    data = json.loads(json.dumps(state.to_json()))
    assert "previous" not in data and len(data["previous_by_serial"]) == int(view.live.sum())
    back = RoundState.from_json(data)
    assert back.equals(state) and back.previous_ids is None
    assert not back.equals(RoundState.from_json({**data, "previous_by_serial": []})) or not view.live.any()


BAD_STATE = [
    ("version", {"version": 2}, "version"),
    ("unknown-key", {"extra": 1}, "extra"),
    ("allowance-not-a-number", {"allowance": ["x"]}, "allowance"),
    ("rounds-negative", {"rounds": [-1]}, "rounds"),
    ("dims-not-names", {"dims": [["cpux"]]}, "dims"),
    ("lengths-differ", {"first": [1.0, 2.0]}, "first"),
    ("serial-entry-short", {"previous_by_serial": [[1, 2]]}, r"previous_by_serial\[0\]"),
    ("serial-negative", {"previous_by_serial": [[-1, 0, [0.0] * 8]]}, "serial"),
    ("serial-twice", {"previous_by_serial": [[1, 0, [0.0] * 8], [1, 1, [0.0] * 8]]}, "one serial twice"),
    ("serial-and-ids", {"previous_by_serial": [], "previous": {}, "previous_slots": {}}, "replaces"),
]


@pytest.mark.parametrize(("patch", "key"), [c[1:] for c in BAD_STATE], ids=[c[0] for c in BAD_STATE])
def test_a_bad_round_state_names_its_key(patch, key):
    data = {**RoundState.initial(1).to_json(), **patch}
    with pytest.raises(ValueError, match=key):
        RoundState.from_json(data)


def test_view_from_ledger_slices_and_gathers_alike():
    nodes = [node("a", cpu=8, ram=16), node("b", cpu=8, ram=16)]
    led = Ledger(nodes, [Resources.of(cpu=8, ram=16)] * 2)
    for i in range(4):
        led.apply(PlaceBatch(workload(f"b{i}", tier="batch", cpu=1, ram=1), i % 2, led.node_epoch(i % 2)))
    h = led.row_arrays().high
    use = np.arange(h * NDIM, dtype=float).reshape(h, NDIM)
    kw = {
        "usage": use,
        "limit": np.full((h, NDIM), np.inf),
        "started_at": np.zeros(h),
        "signals": NodeSignals.quiet(2),
    }
    sliced = view_from_ledger(led, **kw).check()
    copied = view_from_ledger(led, copy=True, **kw).check()
    assert sliced.ids.tolist() == copied.ids.tolist() == [f"default/b{i}" for i in range(4)]
    assert np.array_equal(sliced.usage, copied.usage) and np.array_equal(sliced.node, [0, 1, 0, 1])
    assert copied.usage.base is not use
