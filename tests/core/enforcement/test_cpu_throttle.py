"""CPU throttling of batch: the allowance (shrink at once, grow slowly), quotas, caps, advisories."""

from __future__ import annotations

import math

import numpy as np
import pytest

from kalena.core.enforcement import (
    ThrottleCause,
    ThrottleConfig,
    batch_cpu_allowance,
    plan_throttle,
    water_fill,
    weight_to_shares,
)
from kalena.core.verdict import ReasonCode
from kalena.testing.enforcement import batch_resident, node_snapshot, resident

CFG = ThrottleConfig()  # headroom 0.05, growth 0.05, cut 0.5
NOW = 0.0

# (id, capacity, service claim, batch used, pressured, previous, expected target, expected allowance)
ALLOWANCE = [
    ("first-round-takes-target", 10, 4, None, False, None, 5.5, 5.5),
    ("shrink-at-once", 10, 8, None, False, 5.5, 1.5, 1.5),
    ("grow-slowly", 10, 4, None, False, 1.5, 5.5, 2.0),
    ("growth-stops-at-target", 10, 4, None, False, 5.3, 5.5, 5.5),
    ("service-above-capacity", 10, 12, None, False, 3.0, 0.0, 0.0),
    ("pressure-halves-batch-usage", 10, 4, 4.0, True, 5.5, 2.0, 2.0),
    ("pressure-uses-smaller-previous", 10, 4, 5.0, True, 3.0, 1.5, 1.5),
    ("pressure-without-history-halves-target", 10, 4, None, True, None, 2.75, 2.75),
    ("pressure-never-grows", 10, 1, 4.0, True, 1.0, 0.5, 0.5),
    ("unconstrained-node", math.inf, 4, None, False, None, math.inf, math.inf),
]


@pytest.mark.parametrize(
    ("cap", "claim", "used", "pressured", "prev", "target", "allowance"),
    [c[1:] for c in ALLOWANCE],
    ids=[c[0] for c in ALLOWANCE],
)
def test_batch_cpu_allowance(
    cap: float,
    claim: float,
    used: float | None,
    pressured: bool,
    prev: float | None,
    target: float,
    allowance: float,
) -> None:
    assert batch_cpu_allowance(cap, claim, used, pressured, prev, CFG) == pytest.approx((target, allowance))


def test_growth_takes_ceil_target_over_step_rounds_and_each_step_is_bounded() -> None:
    prev, steps, seen = 0.0, 0, []
    while prev < 5.5:
        _, nxt = batch_cpu_allowance(10.0, 4.0, None, False, prev, CFG)
        assert 0 < nxt - prev <= 0.5 + 1e-12
        prev, steps = nxt, steps + 1
        seen.append(nxt)
    assert steps == 11 and seen[-1] == pytest.approx(5.5)


def test_previous_allowance_must_be_valid() -> None:
    with pytest.raises(ValueError, match="previous_allowance"):
        batch_cpu_allowance(10.0, 1.0, None, False, -1.0, CFG)


WATER = [
    ("proportional-to-basis", 4.0, [math.inf, math.inf], [1.0, 3.0], [1.0, 3.0]),
    ("capped-share-goes-to-others", 4.0, [0.5, math.inf], [1.0, 1.0], [0.5, 3.5]),
    ("all-capped", 10.0, [1.0, 2.0], [1.0, 1.0], [1.0, 2.0]),
    ("nothing-to-share", 0.0, [1.0, 2.0], [1.0, 1.0], [0.0, 0.0]),
    ("infinite-total", math.inf, [1.0, 2.0], [1.0, 1.0], [1.0, 2.0]),
    ("cascade", 6.0, [1.0, 2.0, math.inf], [1.0, 1.0, 1.0], [1.0, 2.0, 3.0]),
]


@pytest.mark.parametrize(
    ("total", "caps", "basis", "expected"), [c[1:] for c in WATER], ids=[c[0] for c in WATER]
)
def test_water_fill(total: float, caps: list[float], basis: list[float], expected: list[float]) -> None:
    assert water_fill(total, np.array(caps), np.array(basis)).tolist() == pytest.approx(expected)


def test_quotas_weight_and_causes() -> None:
    snap = node_snapshot(
        resident("svc", cpu=2),
        batch_resident("denied", cpu=1, slack_cpu=False),
        batch_resident("free", cpu=1),
        batch_resident("limited", cpu=1, limits={"cpu": 0.5}),
        resident("ds", tier="batch", daemonset=True, cpu=1),
        cpu=10,
    )
    plan = plan_throttle(snap, CFG, NOW)
    got = {d.workload.split("/")[-1]: (round(d.quota, 9), d.cause) for d in plan.decisions}
    # allowance = 10 - 2 - 0.5 = 7.5: denied capped at its request, limited at its limit, free takes the rest
    assert got == {
        "denied": (1.0, ThrottleCause.SLACK_CPU_DENIED),
        "free": (6.0, ThrottleCause.SLACK),
        "limited": (0.5, ThrottleCause.LIMIT),
    }
    assert all(d.weight == 1 and d.dimension == "cpu" for d in plan.decisions)
    assert plan.allowance == plan.target == 7.5 and not plan.pressured and plan.service_claim == 2.0
    r = plan.decisions[0].reason
    assert r.code is ReasonCode.COMPRESSIBLE_PRESSURE and (r.used, r.capacity) == (2.0, 10.0)


def test_slack_cpu_denied_caps_at_request_even_with_plenty_of_slack() -> None:
    snap = node_snapshot(batch_resident("b", cpu=0.5, slack_cpu=False), cpu=64)
    (d,) = plan_throttle(snap, CFG, NOW).decisions
    assert d.quota == 0.5 and d.cause is ThrottleCause.SLACK_CPU_DENIED


@pytest.mark.parametrize(
    ("kwargs", "pressured"),
    [
        ({}, False),
        ({"psi_some": {"cpu": 0.25}}, True),
        ({"psi_some": {"cpu": 0.1}}, False),
        ({"triggered": ("cpu",)}, True),
        ({"psi_some": {"ram": 0.9}}, False),
    ],
    ids=["quiet", "psi-above-threshold", "psi-below-threshold", "trigger", "ram-psi-is-not-cpu"],
)
def test_cpu_pressure_signal(kwargs: dict, pressured: bool) -> None:
    snap = node_snapshot(resident("s", cpu=2), batch_resident("b", cpu=1, usage={"cpu": 4}), cpu=10, **kwargs)
    plan = plan_throttle(snap, CFG, NOW, previous_allowance=6.0)
    assert plan.pressured is pressured
    (d,) = plan.decisions
    if pressured:
        assert plan.allowance == 2.0 and d.cause is ThrottleCause.PRESSURE and d.quota == 2.0
    else:
        assert plan.allowance == 6.5 and d.cause is ThrottleCause.GROWING


def test_quota_floor_is_the_kernel_minimum_when_service_takes_everything() -> None:
    snap = node_snapshot(resident("s", cpu=10, usage={"cpu": 12}), batch_resident("b", cpu=1), cpu=10)
    (d,) = plan_throttle(snap, CFG, NOW).decisions
    assert d.quota == CFG.min_quota_cores


def test_floors_from_anti_starvation_within_own_cap() -> None:
    snap = node_snapshot(
        resident("s", cpu=10),
        batch_resident("a", cpu=1),
        batch_resident("tiny", cpu=0.1, slack_cpu=False),
        cpu=10,
    )
    plan = plan_throttle(snap, CFG, NOW, floors={"default/a": 0.25, "default/tiny": 0.25})
    got = {d.workload: (d.quota, d.cause) for d in plan.decisions}
    assert got["default/a"] == (0.25, ThrottleCause.ANTI_STARVATION)
    assert got["default/tiny"] == (0.1, ThrottleCause.ANTI_STARVATION)
    assert plan.decisions[0].reason.code is ReasonCode.ANTI_STARVATION


def test_disk_and_network_are_advisory_only() -> None:
    snap = node_snapshot(
        resident("s", disk_read=10, usage={"disk.read": 50}),
        batch_resident("b1", disk_read=10, usage={"disk.read": 30}),
        batch_resident("b2", disk_read=10, usage={"disk.read": 40}),
        cpu=10,
        disk_read=100,
        disk_write=100,
        network_in=100,
        network_out=100,
        triggered=("network.out",),
    )
    plan = plan_throttle(snap, CFG, NOW)
    assert {d.dimension for d in plan.decisions} == {"cpu"}
    adv = {a.dimension: a for a in plan.advisories}
    assert list(adv) == ["disk.read", "disk.write", "network.in", "network.out"]
    dr = adv["disk.read"]
    assert (dr.used, dr.capacity, dr.batch_used, dr.pressured) == (120.0, 100.0, 70.0, True)
    assert dr.batch_users == (("default/b2", 40.0), ("default/b1", 30.0))
    assert not adv["disk.write"].pressured and adv["network.out"].pressured


@pytest.mark.parametrize(
    ("weight", "shares"), [(1, 2), (100, 2597), (10000, 262144)], ids=["min", "default", "max"]
)
def test_weight_to_shares(weight: int, shares: int) -> None:
    assert weight_to_shares(weight) == shares


def test_weight_to_shares_rejects_out_of_range() -> None:
    with pytest.raises(ValueError, match=r"cpu\.weight"):
        weight_to_shares(0)
