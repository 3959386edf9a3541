"""Anti-starvation: only service running above its own reservation is capped, never below it."""

from __future__ import annotations

import math

import pytest

from kalena.core.enforcement import (
    StarvationConfig,
    ThrottleCause,
    ThrottleConfig,
    plan_anti_starvation,
    plan_throttle,
)
from kalena.core.verdict import ReasonCode
from kalena.testing.enforcement import batch_resident, node_snapshot, resident

CFG = StarvationConfig(theta=0.5, min_allocation_cores=0.25)
WINDOW = 300.0
NOW = 5_000.0


def greedy_node() -> list:
    return [
        resident("greedy", cpu=2, usage={"cpu": 4}),  # 2 cores above its reservation
        resident("greedier", cpu=1, usage={"cpu": 3}),  # 2 cores above
        resident("modest", cpu=4, usage={"cpu": 3.5}),  # within its reservation
        resident("unsampled", cpu=1),  # no usage sample: treated as within
        resident("ds", daemonset=True, cpu=0.1, usage={"cpu": 2}),  # outside the ledger
    ]


# (id, throttled seconds of batch "b", expected starved?)
THRESHOLD = [
    ("never-throttled", 0.0, False),
    ("exactly-theta", 150.0, False),
    ("above-theta", 151.0, True),
    ("whole-window", 300.0, True),
    ("more-than-window-clips", 900.0, True),
]


@pytest.mark.parametrize(("throttled", "starved"), [c[1:] for c in THRESHOLD], ids=[c[0] for c in THRESHOLD])
def test_theta_threshold(throttled: float, starved: bool) -> None:
    snap = node_snapshot(*greedy_node(), batch_resident("b", cpu=1, usage={"cpu": 0.05}), cpu=8)
    dec = plan_anti_starvation(snap, {"default/b": throttled}, WINDOW, CFG, NOW)
    assert bool(dec.starved) is starved
    assert bool(dec.caps) is starved
    if starved:
        assert dec.starved[0].throttled_fraction == min(1.0, throttled / WINDOW)


def test_only_services_above_their_reservation_are_capped_in_proportion_to_excess() -> None:
    snap = node_snapshot(
        *greedy_node(), batch_resident("b1", cpu=1, usage={"cpu": 0.05}), batch_resident("b2", cpu=1), cpu=8
    )
    dec = plan_anti_starvation(snap, {"default/b1": 200.0, "default/b2": 250.0}, WINDOW, CFG, NOW)
    # need = (0.25 - 0.05) + (0.25 - 0) = 0.45, shared equally by two services each 2 cores over
    assert dec.needed == pytest.approx(0.45) and dec.released == pytest.approx(0.45) and dec.shortfall == 0
    caps = {c.workload: c.quota for c in dec.caps}
    assert caps == pytest.approx({"default/greedier": 3 - 0.225, "default/greedy": 4 - 0.225})
    assert all(c.weight is None and c.cause is ThrottleCause.ANTI_STARVATION for c in dec.caps)
    assert dec.caps[0].reason.code is ReasonCode.ANTI_STARVATION
    assert dict(dec.floors) == {"default/b1": 0.25, "default/b2": 0.25}


def test_caps_never_go_below_reservation_and_shortfall_is_reported() -> None:
    snap = node_snapshot(
        resident("greedy", cpu=2, usage={"cpu": 2.1}),
        resident("modest", cpu=4, usage={"cpu": 1}),
        batch_resident("b1", cpu=1),
        batch_resident("b2", cpu=1),
        cpu=8,
    )
    dec = plan_anti_starvation(snap, {"default/b1": 300.0, "default/b2": 300.0}, WINDOW, CFG, NOW)
    (cap,) = dec.caps
    assert cap.workload == "default/greedy" and cap.quota == pytest.approx(2.0)
    assert dec.released == pytest.approx(0.1) and dec.shortfall == pytest.approx(0.4)


def test_no_greedy_service_means_no_caps() -> None:
    snap = node_snapshot(resident("modest", cpu=4, usage={"cpu": 4}), batch_resident("b", cpu=1), cpu=4)
    dec = plan_anti_starvation(snap, {"default/b": 300.0}, WINDOW, CFG, NOW)
    assert dec.caps == () and dec.shortfall == pytest.approx(0.25)


def test_allocation_bounded_by_own_cap_and_usage() -> None:
    snap = node_snapshot(
        resident("greedy", cpu=1, usage={"cpu": 5}),
        batch_resident(
            "denied", cpu=0.1, slack_cpu=False, usage={"cpu": 0.1}
        ),  # throttled at its own request
        batch_resident("busy", cpu=1, usage={"cpu": 0.3}),  # already above the minimum
        cpu=8,
    )
    dec = plan_anti_starvation(snap, {"default/denied": 300.0, "default/busy": 300.0}, WINDOW, CFG, NOW)
    assert {s.workload: (s.allocation, s.need) for s in dec.starved} == {
        "default/denied": (0.1, 0.0),
        "default/busy": (0.25, 0.0),
    }
    assert dec.caps == () and dec.needed == 0.0


def test_unknown_and_service_ids_are_ignored() -> None:
    snap = node_snapshot(resident("greedy", cpu=1, usage={"cpu": 5}), cpu=8)
    dec = plan_anti_starvation(snap, {"default/greedy": 300.0, "default/gone": 300.0}, WINDOW, CFG, NOW)
    assert dec.starved == () and dec.caps == ()


@pytest.mark.parametrize(
    ("throttled", "window", "match"),
    [
        ({"b": -1.0}, WINDOW, "throttled_s"),
        ({"b": math.nan}, WINDOW, "throttled_s"),
        ({}, 0.0, "window_s"),
        ({}, math.inf, "window_s"),
    ],
    ids=["negative-time", "nan-time", "zero-window", "infinite-window"],
)
def test_bad_inputs_raise(throttled: dict, window: float, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        plan_anti_starvation(node_snapshot(cpu=8), throttled, window, CFG, NOW)


def test_floors_feed_the_throttle() -> None:
    snap = node_snapshot(*greedy_node(), batch_resident("b", cpu=1), cpu=8)
    dec = plan_anti_starvation(snap, {"default/b": 300.0}, WINDOW, CFG, NOW)
    plan = plan_throttle(snap, ThrottleConfig(), NOW, floors=dec.floors)
    (d,) = plan.decisions
    assert d.quota == 0.25 and d.cause is ThrottleCause.ANTI_STARVATION
