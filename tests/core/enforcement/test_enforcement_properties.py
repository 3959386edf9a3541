"""Property tests over random node snapshots: who may be a victim, when the loop stops, quota bounds."""

from __future__ import annotations

import dataclasses
import math
from random import Random

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from kalena.core.enforcement import (
    CandidateGroup,
    EvictionCandidate,
    EvictionCause,
    EvictionConfig,
    NodeConditions,
    NodeSnapshot,
    StarvationConfig,
    ThrottleConfig,
    eviction_sort_key,
    ledger_holds,
    plan_anti_starvation,
    plan_evictions,
    plan_throttle,
)
from kalena.core.enforcement import eviction as eviction_module
from kalena.core.enforcement.eviction import can_name_victim
from kalena.core.model import Tier
from kalena.core.resources import CPU, DIM_INDEX, NDIM, NON_COMPRESSIBLE

NOW = 10_000.0
EVICTION = EvictionConfig(min_run_time_s=120.0)
AMOUNT = st.one_of(st.sampled_from([0.0, 0.5, 1.0, 2.0, 4.0]), st.floats(0.0, 8.0, allow_nan=False))


def _matrix(w: int, elements: st.SearchStrategy[float]) -> st.SearchStrategy[np.ndarray]:
    return hnp.arrays(np.float64, (w, NDIM), elements=elements)


@st.composite
def snapshots(draw: st.DrawFn) -> NodeSnapshot:
    """Up to 10 residents with random tiers, priorities, DaemonSet flags, starts and signals;
    reservations at 0.5x, 1x or 1.5x the request; some limits infinite, some usage unsampled."""
    w = draw(st.integers(0, 10))
    req = draw(_matrix(w, AMOUNT))
    res = req * draw(_matrix(w, st.sampled_from([0.5, 1.0, 1.5])))
    limit = draw(_matrix(w, st.one_of(st.just(math.inf), AMOUNT)))
    usage = draw(_matrix(w, st.one_of(st.just(math.nan), AMOUNT)))
    cap = draw(hnp.arrays(np.float64, NDIM, elements=st.one_of(st.floats(0.0, 24.0), st.just(math.inf))))
    flags = hnp.arrays(bool, NDIM)
    column = lambda dtype, elements: hnp.arrays(dtype, w, elements=elements)  # noqa: E731
    return NodeSnapshot(
        node="n0",
        capacity=cap,
        ids=tuple(f"w{i:02d}" for i in range(w)),
        is_batch=draw(column(bool, st.booleans())),
        priority=draw(column(np.int64, st.integers(0, 3))),
        is_daemonset=draw(column(bool, st.sampled_from([False, False, False, True]))),
        request=req,
        reservation=res,
        limit=limit,
        usage=usage,
        started_at=draw(column(np.float64, st.sampled_from([-math.inf, 0.0, NOW - 60.0, NOW - 120.0, NOW]))),
        slack_cpu=draw(column(bool, st.booleans())),
        conditions=NodeConditions(
            triggered=draw(flags),
            acute=draw(flags),
            psi_some=draw(
                hnp.arrays(np.float64, NDIM, elements=st.one_of(st.just(math.nan), st.floats(0.0, 1.0)))
            ),
        ),
    )


def _sum_without(snap: NodeSnapshot, gone: set[str], d: int) -> float:
    """The ledger on ``d`` once ``gone`` are evicted: batch leaves, service keeps ``min(r', R)``."""
    eff = snap.effective_reservation
    total = 0.0
    for i, wid in enumerate(snap.ids):
        if not snap.in_ledger[i]:
            continue
        if wid not in gone:
            total += eff[i, d]
        elif not snap.is_batch[i]:
            total += min(eff[i, d], snap.request[i, d])
    return total


def _eligible(snap: NodeSnapshot, i: int, d: int, acute: bool) -> bool:
    """Would row ``i`` still be an eviction candidate for ``d``?"""
    if snap.is_daemonset[i]:
        return False
    kept = 0.0 if snap.is_batch[i] else snap.request[i, d]
    if not snap.effective_reservation[i, d] - kept > 0:  # evicting it would free nothing
        return False
    over = not math.isnan(snap.usage[i, d]) and snap.usage[i, d] > snap.limit[i, d]
    old = acute or snap.age(NOW)[i] >= EVICTION.min_run_time_s
    return over or (bool(snap.is_batch[i]) and old)


@settings(max_examples=200, deadline=None)
@given(snapshots())
def test_service_only_through_the_override_and_daemonsets_never(snap: NodeSnapshot) -> None:
    plan = plan_evictions(snap, EVICTION, NOW)
    ds = {snap.ids[i] for i in np.flatnonzero(snap.is_daemonset)}
    names = [v.workload for v in plan.victims]
    assert len(names) == len(set(names))
    for v in plan.victims:
        assert v.workload not in ds
        i, d = snap.index(v.workload), DIM_INDEX[v.dimension]
        if v.tier is Tier.SERVICE:
            assert v.cause is EvictionCause.LIMIT_BREACH
            assert v.why is not None and v.why.limit_breach_override
            assert snap.usage[i, d] > snap.limit[i, d]
        assert v.releases[v.dimension] > 0
    # within one dimension, victims follow the named sort key
    for d in {v.dimension for v in plan.victims}:
        keys = [
            eviction_sort_key(_candidate(snap, v.workload, v.dimension, v.cause))
            for v in plan.victims
            if v.dimension == d
        ]
        assert keys == sorted(keys)


def _candidate(snap: NodeSnapshot, wid: str, dim: str, cause: EvictionCause) -> EvictionCandidate:
    i, d = snap.index(wid), DIM_INDEX[dim]
    u = snap.usage[i, d]
    if cause is EvictionCause.LIMIT_BREACH:
        return EvictionCandidate(
            wid, CandidateGroup.LIMIT_BREACH, int(snap.priority[i]), float(u - snap.limit[i, d])
        )
    amount = snap.reservation[i, d] if math.isnan(u) else u
    return EvictionCandidate(wid, CandidateGroup.BATCH, int(snap.priority[i]), float(amount))


@settings(max_examples=200, deadline=None)
@given(snapshots())
def test_loop_stops_as_soon_as_the_ledger_holds(snap: NodeSnapshot) -> None:
    plan = plan_evictions(snap, EVICTION, NOW)
    everyone = {v.workload for v in plan.victims}
    pressured = {p.condition.dimension for p in plan.pressures}
    assert all(v.dimension in pressured for v in plan.victims)
    for p in plan.pressures:
        d = DIM_INDEX[p.condition.dimension]
        assert NON_COMPRESSIBLE[d]
        cap = float(snap.capacity[d])
        after = _sum_without(snap, everyone, d)
        assert p.holds is ledger_holds(after, cap)
        if not p.holds:  # exhausted: nobody eligible is left
            assert not any(
                _eligible(snap, i, d, p.condition.acute) and snap.ids[i] not in everyone
                for i in range(len(snap))
            )
        # every prefix of the plan that ends right before one of d's victims leaves d breached
        for k, v in enumerate(plan.victims):
            if v.dimension == p.condition.dimension:
                before = {x.workload for x in plan.victims[:k]}
                assert not ledger_holds(_sum_without(snap, before, d), cap)


@settings(max_examples=100, deadline=None)
@given(snapshots(), st.randoms(use_true_random=False))
def test_plan_does_not_depend_on_row_order(snap: NodeSnapshot, rnd: Random) -> None:
    order = list(range(len(snap)))
    rnd.shuffle(order)
    shuffled = NodeSnapshot(
        node=snap.node,
        capacity=snap.capacity,
        ids=tuple(snap.ids[i] for i in order),
        is_batch=snap.is_batch[order],
        priority=snap.priority[order],
        is_daemonset=snap.is_daemonset[order],
        request=snap.request[order],
        reservation=snap.reservation[order],
        limit=snap.limit[order],
        usage=snap.usage[order],
        started_at=snap.started_at[order],
        slack_cpu=snap.slack_cpu[order],
        conditions=snap.conditions,
    )
    a, b = plan_evictions(snap, EVICTION, NOW), plan_evictions(shuffled, EVICTION, NOW)
    assert [(v.workload, v.dimension) for v in a.victims] == [(v.workload, v.dimension) for v in b.victims]


@settings(max_examples=200, deadline=None)
@given(
    snapshots(),
    st.one_of(st.none(), st.floats(0.0, 30.0)),
    st.dictionaries(st.sampled_from([f"w{i:02d}" for i in range(10)]), st.floats(0.0, 2.0), max_size=4),
)
def test_throttle_quotas_within_zero_and_capacity(
    snap: NodeSnapshot, previous: float | None, floors: dict[str, float]
) -> None:
    cfg = ThrottleConfig()
    plan = plan_throttle(snap, cfg, NOW, previous_allowance=previous, floors=floors)
    cap = float(snap.capacity[CPU])
    assert 0.0 <= plan.allowance <= cap
    if previous is not None and plan.allowance > previous:
        assert plan.allowance <= previous + cfg.growth_fraction * cap + 1e-9  # grows slowly
    assert {d.workload for d in plan.decisions} == {
        snap.ids[i] for i in range(len(snap)) if snap.is_batch[i] and not snap.is_daemonset[i]
    }
    for d in plan.decisions:
        assert 0.0 <= d.quota <= cap
        assert not math.isnan(d.quota)


@settings(max_examples=200, deadline=None)
@given(snapshots(), st.lists(st.floats(0.0, 400.0), min_size=10, max_size=10))
def test_anti_starvation_caps_only_services_above_reservation(
    snap: NodeSnapshot, throttled: list[float]
) -> None:
    dec = plan_anti_starvation(
        snap, {f"w{i:02d}": t for i, t in enumerate(throttled)}, 300.0, StarvationConfig(), NOW
    )
    for c in dec.caps:
        i = snap.index(c.workload)
        assert not snap.is_batch[i] and not snap.is_daemonset[i]
        u, r = snap.usage[i, CPU], snap.reservation[i, CPU]
        assert u > r  # running above its own reservation (a NaN usage would fail this)
        assert r - 1e-12 <= c.quota < u
    assert dec.released <= dec.needed + 1e-9


@st.composite
def nobody_to_name(draw: st.DrawFn) -> NodeSnapshot:
    """A snapshot with no batch resident in the ledger and nobody over a limit on ram or storage:
    a node where production alone can breach the ledger."""
    snap = draw(snapshots())
    nc = np.flatnonzero(NON_COMPRESSIBLE)
    limit = snap.limit.copy()
    limit[:, nc] = np.fmax(limit[:, nc], snap.usage[:, nc])  # (fmax: a missing usage keeps the limit)
    return dataclasses.replace(snap, is_batch=snap.is_batch & snap.is_daemonset, limit=limit)


@settings(max_examples=300, deadline=None)
@given(nobody_to_name())
def test_a_plan_that_can_name_nobody_is_the_full_plan_bit_for_bit(snap: NodeSnapshot) -> None:
    """The short plan for a node without candidates gives what the whole loop gives: the same
    pressures, sums, verdicts and (no) victims."""
    assert not can_name_victim(snap.in_ledger, snap.is_batch, snap.usage, snap.limit)
    short = plan_evictions(snap, EVICTION, NOW)
    full = eviction_module._plan(snap, snap.effective_reservation, EVICTION, NOW)
    assert short == full and repr(short) == repr(full)  # (repr: a -0.0 or a NaN would show)
    assert short.victims == ()


@settings(max_examples=300, deadline=None)
@given(snapshots())
def test_a_node_said_to_name_nobody_never_has_a_victim(snap: NodeSnapshot) -> None:
    full = eviction_module._plan(snap, snap.effective_reservation, EVICTION, NOW)
    if full.victims:
        assert can_name_victim(snap.in_ledger, snap.is_batch, snap.usage, snap.limit)
