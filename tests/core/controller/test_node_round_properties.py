"""The node round over many nodes equals the one-node round applied node by node (property tests).

Also: the compact escalation runs equal ``failed_run``/``decide_escalation`` over the full history,
and the one-node wrappers (``plan_throttle``, ``plan_anti_starvation``) are the vectorised code.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from kalena.core.config import PolicyConfig
from kalena.core.controller import RoundDecision, RoundState, node_round
from kalena.core.enforcement import EscalationConfig, MitigationRound, decide_escalation, failed_run
from kalena.core.enforcement.escalation import EscalationRuns, advance_runs
from kalena.core.enforcement.eviction import plan_evictions
from kalena.core.enforcement.nodes import NodesView
from kalena.core.enforcement.starvation import plan_anti_starvation, starvation_nodes
from kalena.core.enforcement.throttle import plan_throttle, throttle_nodes
from kalena.core.resources import CPU, NDIM
from kalena.testing.controller import node_view, nodes_views
from kalena.testing.enforcement import node_snapshot

CFG = PolicyConfig()


def _evolve(view: NodesView, decision: RoundDecision, t: float) -> NodesView:
    """The next round's view as a shell would see it: the gone rows left, usage drifts."""
    keep = ~decision.gone
    rng = np.random.default_rng(int(t))
    usage = view.usage[keep] * rng.choice([0.5, 1.0, 1.5], size=(int(keep.sum()), 1))

    def rows(a: np.ndarray) -> np.ndarray:
        return a[keep]

    epoch = view.epoch + np.bincount(
        view.node[decision.gone], minlength=view.n_nodes
    )  # each accepted eviction bumps the node's epoch
    return NodesView(
        names=view.names,
        capacity=view.capacity,
        epoch=epoch,
        node=rows(view.node),
        ids=rows(view.ids),
        keys=rows(view.keys),
        is_batch=rows(view.is_batch),
        is_daemonset=rows(view.is_daemonset),
        priority=rows(view.priority),
        request=rows(view.request),
        reservation=rows(view.reservation),
        limit=rows(view.limit),
        usage=usage,
        started_at=rows(view.started_at),
        slack_cpu=rows(view.slack_cpu),
        evicting=rows(view.evicting),
        throttled_s=rows(view.throttled_s),
        slot=rows(view.slot),
        triggered=view.triggered,
        acute=view.acute,
        psi_some=view.psi_some,
        memory_events=view.memory_events,
        present=None if view.present is None else view.present[keep],
        serial=None if view.serial is None else rows(view.serial),
    )


def _per_row(view: NodesView, d: RoundDecision) -> dict[str, tuple]:
    """Everything the decision says about each row, keyed by workload id."""
    quota = dict(zip(view.ids[d.throttle.rows].tolist(), d.throttle.quota.tolist(), strict=True))
    cause = dict(zip(view.ids[d.throttle.rows].tolist(), d.throttle.cause.tolist(), strict=True))
    return {
        wid: (
            quota.get(wid),
            cause.get(wid),
            float(d.starvation.cap[i]),
            float(d.starvation.floor[i]),
            bool(d.gone[i]),
        )
        for i, wid in enumerate(view.ids.tolist())
        if view.live[i]  # a free slot is nobody: nothing is decided about it
    }


def _per_node(d: RoundDecision, k: int) -> tuple:
    a = d.actions_of(k)
    victims = () if a is None else tuple((v.workload, v.cause, v.grace_period_s) for v in a.victims)
    return (
        victims,
        None if a is None else a.first_epoch,
        d.pressure[k].tolist(),
        d.acute[k].tolist(),
        d.triggered[k].tolist(),
        bool(d.escalate[k]),
        d.slack_ineligible_until[k],
        d.throttle.allowance[k],
        d.throttle.target[k],
        d.starvation.released[k],
        int(d.state.runs.rounds[k]),
    )


def _same(a: object, b: object) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or a == b
    if isinstance(a, tuple | list) and isinstance(b, tuple | list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return a == b


@settings(max_examples=150, deadline=None)
@given(nodes_views(), st.integers(1, 4))
def test_vectorised_round_equals_one_node_rounds(view: NodesView, rounds: int) -> None:
    whole = RoundState.initial(view.n_nodes)
    parts = [RoundState.initial(1) for _ in range(view.n_nodes)]
    for r in range(rounds):
        now = 100.0 + 20.0 * r
        d = node_round(view, whole, CFG, now)
        rows = _per_row(view, d)
        free = ~view.live  # free slots get nothing: no quota, no cap, never gone
        assert not d.gone[free].any() and np.isinf(d.starvation.cap[free]).all()
        assert view.live[d.throttle.rows].all()
        for k in range(view.n_nodes):
            one = node_view(view, k)
            dk = node_round(one, parts[k], CFG, now)
            assert _same(_per_node(d, k), _per_node(dk, 0)), f"round {r}, node {k}"
            for wid, facts in _per_row(one, dk).items():
                assert _same(rows[wid], facts), f"round {r}, node {k}, {wid}"
            parts[k] = dk.state
        whole = d.state
        view = _evolve(view, d, now)


@settings(max_examples=150, deadline=None)
@given(nodes_views())
def test_the_rounds_plans_are_plan_evictions_of_each_snapshot(view: NodesView) -> None:
    """Every plan the round makes is ``plan_evictions`` of that node's snapshot, bit for bit: the
    plans that name somebody and those the round works out from the columns alone (nobody to name)."""
    now = 100.0
    d = node_round(view, RoundState.initial(view.n_nodes), CFG, now)
    for k in range(view.n_nodes):
        a = d.actions_of(k)
        if a is None or a.plan is None:
            continue
        snap = view.snapshot(k, conditions=view.conditions_of(k, d.acute, d.triggered))
        assert repr(a.plan) == repr(plan_evictions(snap, CFG.eviction, now)), f"node {k}"


@settings(max_examples=100, deadline=None)
@given(nodes_views(), st.integers(2, 4), st.data())
def test_serials_recognise_the_rows_the_ids_do(view: NodesView, rounds: int, data: st.DataObject) -> None:
    """A view with serials (the simulator's) decides what the same view without them decides, a
    workload that takes over a slot included: the state carries serials instead of every id."""
    w = len(view)
    counted = dataclasses.replace(view, serial=np.where(view.live, np.arange(w) + 10, -1)).check()
    by_id, by_serial = RoundState.initial(view.n_nodes), RoundState.initial(view.n_nodes)
    fresh = 10 + w
    for r in range(rounds):
        now = 100.0 + 20.0 * r
        a, b = node_round(view, by_id, CFG, now), node_round(counted, by_serial, CFG, now)
        assert repr(a.actions) == repr(b.actions), f"round {r}"
        assert b.state.previous_ids is None and b.state.previous_serials is not None
        view, counted = _evolve(view, a, now), _evolve(counted, b, now)
        live = np.flatnonzero(view.live)
        if len(live) and data.draw(st.booleans()):  # a new workload in a slot the last one left
            i = int(live[data.draw(st.integers(0, len(live) - 1))])
            view.ids[i] = counted.ids[i] = f"new{r}"
            counted.serial[i] = fresh
            fresh += 1
        by_id, by_serial = a.state, b.state


@settings(max_examples=100, deadline=None)
@given(nodes_views(max_nodes=1))
def test_one_node_wrappers_are_the_vectorised_policies(view: NodesView) -> None:
    snap = view.snapshot(0)
    throttled = {
        str(w): float(t)
        for w, t, here in zip(view.ids, view.throttled_s, view.live, strict=True)
        if t > 0 and here
    }
    # the snapshot carries no evictions in flight: compare with a view that has none
    plain = NodesView.of_snapshots([snap], throttled_s=[throttled])
    s = starvation_nodes(plain, 300.0, CFG.starvation)
    decision = plan_anti_starvation(snap, throttled, 300.0, CFG.starvation, 0.0)
    assert decision.needed == s.needed[0] and decision.released == s.released[0]
    assert {c.workload: c.quota for c in decision.caps} == {
        str(plain.ids[i]): float(s.cap[i]) for i in np.flatnonzero(np.isfinite(s.cap))
    }
    t = throttle_nodes(plain, CFG.throttle, np.array([2.0]), s.floor)
    plan = plan_throttle(snap, CFG.throttle, 0.0, 2.0, decision.floors)
    assert plan.allowance == t.allowance[0] and plan.target == t.target[0]
    assert [d.quota for d in plan.decisions] == t.quota.tolist()


def _history_rule(pressures: list[bool], times: list[float], cfg: EscalationConfig) -> list[bool]:
    """The agent's rule over a full history (the reference): record round t-1 at round t."""
    history: list[MitigationRound] = []
    last: float | None = None
    out = []
    for p, t in zip(pressures, times, strict=True):
        if last is not None:
            history.append(MitigationRound(last, p, ("ram",)))
        last = t if p else None
        run = failed_run(history)
        esc = bool(run) and (len(run) >= cfg.rounds or run[-1].time - run[0].time >= cfg.persist_s)
        out.append(esc)
        if esc:
            history.clear()
            last = None
    return out


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.booleans(), min_size=1, max_size=30),
    st.lists(st.sampled_from([1.0, 5.0, 12.0]), min_size=30, max_size=30),
    st.integers(1, 4),
    st.sampled_from([10.0, 30.0]),
)
def test_compact_runs_equal_the_full_history(
    pressures: list[bool], gaps: list[float], rounds: int, persist: float
) -> None:
    cfg = EscalationConfig(rounds=rounds, persist_s=persist)
    times = list(np.cumsum(gaps[: len(pressures)]))
    expected = _history_rule(pressures, times, cfg)
    runs = EscalationRuns.empty(1)
    got = []
    for p, t in zip(pressures, times, strict=True):
        mask = np.zeros((1, NDIM), dtype=bool)
        mask[0, 1] = p
        runs, esc, _ = advance_runs(runs, mask, float(t), cfg)
        got.append(bool(esc[0]))
    assert got == expected


def test_decide_escalation_reads_the_compact_history() -> None:
    """``EscalationRuns.history`` gives ``decide_escalation`` the same verdict as the full list."""
    cfg = EscalationConfig(rounds=3, persist_s=30.0)
    runs = EscalationRuns.empty(1)
    mask = np.zeros((1, NDIM), dtype=bool)
    mask[0, CPU] = True
    for t in (0.0, 1.0, 2.0):
        runs, esc, judged = advance_runs(runs, mask, t, cfg)
    assert not esc[0] and judged.rounds[0] == 2
    snap = node_snapshot(ram=8, cpu=4)
    verdict = decide_escalation(snap, judged.history(0), cfg, 2.0)
    assert not verdict.escalate and verdict.failed_rounds == 2
    runs, esc, judged = advance_runs(runs, mask, 3.0, cfg)
    assert esc[0] and judged.rounds[0] == 3
    assert decide_escalation(snap, judged.history(0), cfg, 3.0).escalate
