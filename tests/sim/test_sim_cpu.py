"""CPU in the simulator: contention by weight, and the throttle fast path against the core's own plan."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kalena.core.enforcement import ThrottleConfig, plan_throttle
from kalena.core.resources import CPU
from kalena.sim import cpu
from kalena.testing.enforcement import batch_resident, node_snapshot, resident

CFG = ThrottleConfig()

# (id, capacity, service claim, batch used (None = unsampled), pressured, previous (None = first))
ALLOWANCE = [
    ("first-round-takes-target", 10, 4, None, False, None),
    ("shrink-at-once", 10, 8, None, False, 5.5),
    ("grow-slowly", 10, 4, None, False, 1.5),
    ("growth-stops-at-target", 10, 4, None, False, 5.3),
    ("service-above-capacity", 10, 12, None, False, 3.0),
    ("pressure-halves-batch-usage", 10, 4, 4.0, True, 5.5),
    ("pressure-uses-smaller-previous", 10, 4, 5.0, True, 3.0),
    ("pressure-without-history", 10, 4, None, True, None),
    ("pressure-never-grows", 10, 1, 4.0, True, 1.0),
    ("unconstrained-node", math.inf, 4, None, False, None),
    ("unconstrained-node-growing", math.inf, 4, 1.0, False, 2.0),
]


def _vector(cases):
    cap = np.array([c[0] for c in cases], dtype=float)
    claim = np.array([c[1] for c in cases], dtype=float)
    used = np.array([0.0 if c[2] is None else c[2] for c in cases])
    sampled = np.array([c[2] is not None for c in cases])
    pressured = np.array([c[3] for c in cases])
    prev = np.array([math.nan if c[4] is None else c[4] for c in cases])
    return cpu.allowances(cap, claim, used, sampled, pressured, prev, CFG)


@pytest.mark.parametrize("case", [c[1:] for c in ALLOWANCE], ids=[c[0] for c in ALLOWANCE])
def test_vectorised_allowance_equals_the_core_scalar(case):
    got = _vector([case])[0]
    want = cpu.core_allowance(*case, CFG)
    assert got == pytest.approx(want, rel=1e-12) or (math.isinf(got) and math.isinf(want))


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.floats(1, 128),
            st.floats(0, 160),
            st.one_of(st.none(), st.floats(0, 128)),
            st.booleans(),
            st.one_of(st.none(), st.floats(0, 128)),
        ),
        min_size=1,
        max_size=20,
    )
)
def test_vectorised_allowance_equals_the_core_on_random_nodes(cases):
    got = _vector(cases)
    for g, case in zip(got, cases, strict=True):
        assert g == pytest.approx(cpu.core_allowance(*case, CFG), rel=1e-9, abs=1e-12)


# (id, capacity, wants, weights, granted)
CONTENTION = [
    ("fits-untouched", 10.0, [2.0, 3.0], [1.0, 1.0], [2.0, 3.0]),
    ("equal-weights-share-evenly", 4.0, [4.0, 4.0], [1.0, 1.0], [2.0, 2.0]),
    ("weights-favour-production", 10.0, [10.0, 10.0], [79.0, 1.0], [9.875, 0.125]),
    ("small-want-keeps-all", 10.0, [1.0, 20.0], [1.0, 1.0], [1.0, 9.0]),
]


@pytest.mark.parametrize(
    ("cap", "want", "weight", "granted"), [c[1:] for c in CONTENTION], ids=[c[0] for c in CONTENTION]
)
def test_contention_is_weighted_max_min_fairness(cap, want, weight, granted):
    live = np.arange(len(want))
    got, psi = cpu.contend(
        live, np.zeros(len(want), dtype=np.int64), np.array(want), np.array(weight), np.array([cap])
    )
    assert got.tolist() == pytest.approx(granted)
    assert psi[0] == pytest.approx(max(0.0, 1 - cap / sum(want)))


def test_contention_leaves_rows_outside_live_alone():
    want = np.array([5.0, 5.0, 7.0])
    got, _ = cpu.contend(np.array([0, 1]), np.zeros(3, dtype=np.int64), want, np.ones(3), np.array([6.0]))
    assert got.tolist() == pytest.approx([3.0, 3.0, 7.0])


def _fast_vs_core(snap, allowance, previous, floors):
    b = np.flatnonzero(snap.is_batch)
    caps = np.minimum(snap.limit[b, CPU], snap.capacity[CPU])
    caps = np.where(snap.slack_cpu[b], caps, np.minimum(caps, snap.request[b, CPU]))
    fl = np.array([floors.get(snap.ids[i], 0.0) for i in b])
    q, binds = cpu.fast_quotas(
        np.zeros(len(b), dtype=np.int64),
        snap.request[b, CPU],
        caps,
        fl,
        np.array([allowance]),
        snap.capacity[[CPU]],
        CFG,
    )
    core = {d.workload: d.quota for d in plan_throttle(snap, CFG, 0.0, previous, floors).decisions}
    return {snap.ids[i]: float(x) for i, x in zip(b, q, strict=True)}, core, bool(binds[0])


@settings(max_examples=120, deadline=None)
@given(
    st.lists(st.tuples(st.floats(0.01, 4), st.floats(0, 6)), min_size=1, max_size=8),
    st.lists(st.tuples(st.floats(0.1, 8), st.floats(0, 10), st.floats(0, 10)), min_size=0, max_size=6),
    st.floats(8, 64),
    st.one_of(st.none(), st.floats(0, 64)),
    st.lists(st.floats(0, 1), min_size=0, max_size=8),
    st.lists(st.one_of(st.none(), st.floats(0.05, 3)), min_size=0, max_size=8),
)
def test_fast_path_quotas_equal_plan_throttle_where_no_cap_binds(
    batch, service, cap, previous, floor_list, limits
):
    residents = []
    floors = {}
    for i, (req, use) in enumerate(batch):
        lim = limits[i] if i < len(limits) else None
        kw = {"limits": {"cpu": max(lim, req)}} if lim is not None else {}
        residents.append(batch_resident(f"b{i}", cpu=req, usage={"cpu": use}, **kw))
        if i < len(floor_list) and floor_list[i] > 0.5:
            floors[f"b{i}"] = floor_list[i]
    for i, (req, res, use) in enumerate(service):
        residents.append(resident(f"s{i}", cpu=req, reservation={"cpu": res}, usage={"cpu": use}))
    snap = node_snapshot(*residents, cpu=cap)
    claim = float(snap.effective_reservation[~snap.is_batch, CPU].sum())
    used = float(np.nansum(snap.usage[snap.is_batch, CPU]))
    allowance = cpu.allowances(
        np.array([cap]),
        np.array([claim]),
        np.array([used]),
        np.array([True]),
        np.array([False]),
        np.array([math.nan if previous is None else previous]),
        CFG,
    )[0]
    fast, core, binds = _fast_vs_core(snap, allowance, previous, floors)
    if binds:
        return  # the simulator sends this node to plan_throttle itself
    assert cpu.audit(fast, core) == 0, (fast, core)


def test_a_binding_cap_is_flagged():
    snap = node_snapshot(
        batch_resident("b0", cpu=1, limits={"cpu": 1.0}, usage={"cpu": 1}),
        batch_resident("b1", cpu=1, usage={"cpu": 1}),
        cpu=10,
    )
    _, _, binds = _fast_vs_core(snap, 8.0, None, {})
    assert binds  # 8 * 1/2 = 4 > b0's limit of 1


def test_audit_counts_differences_and_missing_entries():
    assert cpu.audit({"a": 1.0, "b": 2.0}, {"a": 1.0, "b": 2.0}) == 0
    assert cpu.audit({"a": 1.0, "b": 2.5}, {"a": 1.0, "b": 2.0}) == 1
    assert cpu.audit({"a": 1.0}, {"a": 1.0, "b": 2.0}) == 1
    assert cpu.audit({"a": 1.0, "c": 1.0}, {"a": 1.0}) == 1
