"""plan_evictions: stopping condition, override, DaemonSets, minimum run time, grace, cooldown, records."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kalena.core.enforcement import EvictionCause, EvictionConfig, NodeSnapshot, plan_evictions
from kalena.core.enforcement.eviction import _known_sum
from kalena.core.model import Tier
from kalena.core.verdict import ReasonCode
from kalena.testing.enforcement import Resident, batch_resident, node_snapshot, resident

NOW = 10_000.0
CFG = EvictionConfig()


def victims(snap: NodeSnapshot, config: EvictionConfig = CFG) -> list[str]:
    return [v.workload.split("/")[-1] for v in plan_evictions(snap, config, NOW).victims]


# (id, residents, ram capacity, expected victims in order)
STOPPING: list[tuple[str, list[Resident], float, list[str]]] = [
    ("no-pressure", [resident("s", ram=4), batch_resident("b", ram=2)], 8, []),
    (
        "stops-as-soon-as-ledger-holds",
        [
            resident("s", ram=4),
            batch_resident("p0", ram=2),
            batch_resident("p1", priority=1, ram=3),
            batch_resident("p2", priority=2, ram=1),
        ],
        8,
        ["p0"],
    ),
    (
        "ascending-priority-even-if-a-higher-one-alone-would-do",
        [resident("s", ram=5), batch_resident("low", ram=1), batch_resident("high", priority=5, ram=4)],
        8,
        ["low", "high"],
    ),
    (
        "priority-tie-larger-memory-user-first",
        [
            resident("s", ram=4),
            batch_resident("small", ram=2, usage={"ram": 2}),
            batch_resident("large", ram=2, usage={"ram": 3}),
        ],
        8,
        ["large"],
    ),
    (
        "full-tie-broken-by-id",
        [resident("s", ram=6), batch_resident("b2", ram=2), batch_resident("b1", ram=2)],
        8,
        ["b1"],
    ),
    (
        "usage-above-stale-reservation-is-a-breach",
        [resident("s", ram=4, usage={"ram": 7}), batch_resident("b", ram=2)],
        8,
        ["b"],
    ),
    (
        "batch-with-nothing-reserved-is-not-a-victim",
        [resident("s", ram=7), batch_resident("zero", cpu=1), batch_resident("b", priority=3, ram=2)],
        8,
        ["b"],
    ),
    ("service-only-breach-evicts-nobody", [resident("s", ram=10), resident("t", ram=1)], 8, []),
    ("exhausted-batch", [resident("s", ram=9), batch_resident("b", ram=1)], 8, ["b"]),
]


@pytest.mark.parametrize(
    ("residents", "cap", "expected"), [c[1:] for c in STOPPING], ids=[c[0] for c in STOPPING]
)
def test_stopping_condition(residents: list[Resident], cap: float, expected: list[str]) -> None:
    assert victims(node_snapshot(*residents, ram=cap)) == expected


@pytest.mark.parametrize(
    ("residents", "holds"),
    [
        ([resident("s", ram=10)], False),
        ([resident("s", ram=9), batch_resident("b", ram=1)], False),
        ([resident("s", ram=4), batch_resident("b", ram=6)], True),
    ],
    ids=["service-only", "batch-exhausted", "resolved"],
)
def test_unresolved_is_reported_not_resolved_with_service(residents: list[Resident], holds: bool) -> None:
    plan = plan_evictions(node_snapshot(*residents, ram=8), CFG, NOW)
    assert all(v.tier is Tier.BATCH for v in plan.victims)
    (p,) = plan.pressures
    assert p.holds is holds
    assert bool(plan.unresolved) is (not holds)
    if not holds:
        assert p.reason is not None and p.reason.code is ReasonCode.RESERVATION_LEDGER_BREACH
        assert p.reason.used == p.reserved_after > p.reason.capacity == 8
    else:
        assert p.reason is None


OVERRIDE = [
    (
        "service-over-its-limit-goes-before-batch",
        [resident("leaky", ram=4, limits={"ram": 4}, usage={"ram": 5}), batch_resident("b", ram=2)],
        6,
        ["leaky"],
    ),
    (
        "service-victim-frees-only-its-reservation-above-request",
        [resident("leaky", ram=4, limits={"ram": 4}, usage={"ram": 6}), batch_resident("b", ram=2)],
        5,
        ["leaky", "b"],
    ),
    (
        "larger-excess-first",
        [
            resident("a", ram=2, limits={"ram": 2}, usage={"ram": 3}),
            resident("b", ram=2, limits={"ram": 2}, usage={"ram": 5}),
            batch_resident("c", ram=1),
        ],
        7,
        ["b"],
    ),
    (
        "override-ignores-priority",
        [
            resident("vip", priority=100, ram=2, limits={"ram": 2}, usage={"ram": 4}),
            batch_resident("b", ram=2),
        ],
        5,
        ["vip"],
    ),
    (
        "then-batch-by-priority",
        [
            resident("leaky", ram=1, limits={"ram": 1}, usage={"ram": 2}),
            resident("s", ram=4),
            batch_resident("b1", priority=1, ram=2),
            batch_resident("b0", ram=2),
        ],
        5,
        ["leaky", "b0", "b1"],
    ),
    (
        "daemonset-over-its-limit-is-never-a-victim",
        [
            resident("ds", daemonset=True, ram=1, limits={"ram": 1}, usage={"ram": 3}),
            resident("s", ram=7),
            batch_resident("b", ram=2),
        ],
        8,
        ["b"],
    ),
    (
        "daemonset-of-batch-tier-and-lowest-priority-is-never-a-victim",
        [
            resident("ds", tier="batch", daemonset=True, ram=3, usage={"ram": 3}),
            resident("s", ram=7),
            batch_resident("b", priority=9, ram=2),
        ],
        8,
        ["b"],
    ),
    (
        "service-within-its-limit-is-never-a-victim",
        [resident("s", ram=5, limits={"ram": 6}, usage={"ram": 6}), batch_resident("b", ram=1)],
        5,
        ["b"],
    ),
]


@pytest.mark.parametrize(
    ("residents", "cap", "expected"), [c[1:] for c in OVERRIDE], ids=[c[0] for c in OVERRIDE]
)
def test_limit_breach_override_and_daemonsets(
    residents: list[Resident], cap: float, expected: list[str]
) -> None:
    assert victims(node_snapshot(*residents, ram=cap)) == expected


def test_override_victim_record() -> None:
    snap = node_snapshot(
        resident("leaky", ram=4, limits={"ram": 4}, usage={"ram": 5}), batch_resident("b", ram=2), ram=6
    )
    (v,) = plan_evictions(snap, CFG, NOW).victims
    assert v.cause is EvictionCause.LIMIT_BREACH and v.tier is Tier.SERVICE
    assert v.requeue is None  # production is restarted by its own controller, never re-placed by Kalena
    assert v.why is not None and v.why.limit_breach_override
    assert (v.why.usage, v.why.limit) == (5.0, 4.0)
    assert v.releases["ram"] == 1.0  # its request stays in the ledger: it restarts at r_0 = R
    r = v.why.reason
    assert r.code is ReasonCode.LIMIT_BREACH and r.dimension == "ram" and (r.used, r.capacity) == (5.0, 4.0)


def test_override_on_storage_uses_the_storage_limit_not_the_memory_limit() -> None:
    snap = node_snapshot(
        resident("ram-leak", ram=1, storage=1, limits={"ram": 1}, usage={"ram": 2}),
        resident("disk-hog", ram=1, storage=2, limits={"storage": 2}, usage={"storage": 6}),
        batch_resident("b", storage=1),
        ram=100,
        storage=7,
    )
    plan = plan_evictions(snap, CFG, NOW)
    assert [v.workload for v in plan.victims] == ["default/disk-hog"]
    assert plan.victims[0].dimension == "storage"


# (id, age in seconds, acute, evicted?)
MIN_RUN = [
    ("old-enough", 500.0, False, True),
    ("exactly-min-run-time", 120.0, False, True),
    ("young-spared", 10.0, False, False),
    ("young-evicted-under-acute", 10.0, True, True),
    ("unknown-start-is-old", None, False, True),
]


@pytest.mark.parametrize(("age", "acute", "evicted"), [c[1:] for c in MIN_RUN], ids=[c[0] for c in MIN_RUN])
def test_minimum_run_time(age: float | None, acute: bool, evicted: bool) -> None:
    started = {} if age is None else {"started_at": NOW - age}
    snap = node_snapshot(
        resident("s", ram=6), batch_resident("b", ram=4, **started), ram=8, acute=("ram",) if acute else ()
    )
    plan = plan_evictions(snap, CFG, NOW)
    assert ([v.workload for v in plan.victims] == ["default/b"]) is evicted
    assert plan.pressures[0].skipped_min_run_time == (() if evicted else ("default/b",))
    if not evicted:
        assert not plan.pressures[0].holds


def test_young_batch_spared_and_older_higher_priority_taken_instead() -> None:
    snap = node_snapshot(
        resident("s", ram=6),
        batch_resident("young", ram=2, started_at=NOW - 1),
        batch_resident("old", priority=5, ram=2, started_at=0.0),
        ram=8,
    )
    assert victims(snap) == ["old"]


def test_young_batch_over_its_limit_is_evicted_by_the_override() -> None:
    snap = node_snapshot(
        resident("s", ram=6),
        batch_resident("young", ram=2, limits={"ram": 2}, usage={"ram": 3}, started_at=NOW - 1),
        ram=8,
    )
    assert victims(snap) == ["young"]


@pytest.mark.parametrize(
    ("acute", "config", "grace"),
    [
        (False, CFG, 30.0),
        (True, CFG, 0.0),
        (False, EvictionConfig(grace_period_s=60.0, acute_grace_period_s=5.0), 60.0),
        (True, EvictionConfig(grace_period_s=60.0, acute_grace_period_s=5.0), 5.0),
    ],
    ids=["default", "acute-default", "custom", "acute-custom"],
)
def test_grace_period(acute: bool, config: EvictionConfig, grace: float) -> None:
    snap = node_snapshot(
        resident("s", ram=6), batch_resident("b", ram=4), ram=8, acute=("ram",) if acute else ()
    )
    (v,) = plan_evictions(snap, config, NOW).victims
    assert v.grace_period_s == grace


@pytest.mark.parametrize("cooldown", [0.0, 600.0, 3600.0], ids=["zero", "default", "hour"])
def test_requeue_with_cooldown_on_this_node(cooldown: float) -> None:
    snap = node_snapshot(resident("s", ram=6), batch_resident("b", ram=4, owner="job-7"), ram=8, node="n9")
    (v,) = plan_evictions(snap, EvictionConfig(cooldown_s=cooldown), NOW).victims
    assert v.requeue is not None
    assert (v.requeue.workload, v.requeue.equivalence_key, v.requeue.node) == ("default/b", "job-7", "n9")
    assert v.requeue.cooldown_until == NOW + cooldown


def test_signal_without_ledger_breach_records_pressure_but_evicts_nobody() -> None:
    snap = node_snapshot(resident("s", ram=4), batch_resident("b", ram=2), ram=8, triggered=("ram",))
    plan = plan_evictions(snap, CFG, NOW)
    assert plan.victims == ()
    (p,) = plan.pressures
    assert p.condition.triggered and p.holds and not p.condition.ledger_breached


def test_memory_events_count_as_a_ram_trigger() -> None:
    plan = plan_evictions(node_snapshot(resident("s", ram=4), ram=8, memory_events=3), CFG, NOW)
    assert [p.condition.dimension for p in plan.pressures] == ["ram"] and plan.pressures[
        0
    ].condition.triggered


def test_why_evicted_record_numbers() -> None:
    snap = node_snapshot(
        resident("s", priority=5, ram=4, usage={"ram": 6}),
        batch_resident("b", priority=1, ram=3, usage={"ram": 2}),
        ram=8,
    )
    plan = plan_evictions(snap, CFG, NOW)
    (v,) = plan.victims
    assert v.why is not None
    c = v.why.condition
    assert (c.dimension, c.used, c.reserved, c.capacity) == ("ram", 8.0, 9.0, 8.0)
    assert c.ledger_breached and not c.usage_over_capacity and not c.acute
    assert v.why.reservation_rose is not None
    assert (v.why.reservation_rose.workload, v.why.reservation_rose.basis) == ("default/s", "request")
    assert v.why.reservation_rose.increase == 2.0
    assert (v.why.priority.victim_priority, v.why.priority.highest_protected, v.why.priority.protected) == (
        1,
        5,
        1,
    )
    assert v.why.priority.victim_is_lowest and not v.why.limit_breach_override
    assert v.why.reason.code is ReasonCode.RESERVATION_LEDGER_BREACH
    assert v.releases["ram"] == 3.0 and plan.released["ram"] == 3.0
    assert plan.pressures[0].reserved_after == 6.0


def test_reservation_rise_against_previous_snapshot_counts_newcomers_from_zero() -> None:
    snap = node_snapshot(
        resident("s", ram=4, reservation={"ram": 5}, previous={"ram": 4.5}),
        batch_resident("new", ram=3),  # not resident before: rose from 0 to 3
        batch_resident("old", priority=1, ram=1, previous={"ram": 1}),
        ram=8,
    )
    (v,) = plan_evictions(snap, CFG, NOW).victims
    assert v.why is not None and v.why.reservation_rose is not None
    rise = v.why.reservation_rose
    assert (rise.workload, rise.basis, rise.before, rise.after) == ("default/new", "previous", 0.0, 3.0)


def test_reservation_rise_none_when_nobody_rose() -> None:
    snap = node_snapshot(resident("s", ram=6), batch_resident("b", ram=4), ram=8)
    (v,) = plan_evictions(snap, CFG, NOW).victims
    assert v.why is not None and v.why.reservation_rose is None


def test_ram_victims_can_resolve_storage_too() -> None:
    snap = node_snapshot(
        resident("s", ram=6, storage=6),
        batch_resident("b", ram=4, storage=6),
        batch_resident("c", priority=1, ram=1),
        ram=8,
        storage=10,
    )
    plan = plan_evictions(snap, CFG, NOW)
    assert [(v.workload, v.dimension) for v in plan.victims] == [("default/b", "ram")]
    assert [(p.condition.dimension, p.holds, p.victims) for p in plan.pressures] == [
        ("ram", True, ("default/b",)),
        ("storage", True, ()),
    ]


def test_plan_does_not_depend_on_row_order_and_echoes_epoch() -> None:
    rows = [
        resident("s", ram=5),
        batch_resident("a", ram=1),
        batch_resident("b", ram=1),
        batch_resident("c", priority=2, ram=3),
        batch_resident("d", ram=1, usage={"ram": 1}),
    ]
    one = plan_evictions(node_snapshot(*rows, ram=8, epoch=41), CFG, NOW)
    two = plan_evictions(node_snapshot(*reversed(rows), ram=8, epoch=41), CFG, NOW)
    assert (
        [v.workload for v in one.victims]
        == [v.workload for v in two.victims]
        == ["default/a", "default/b", "default/d"]
    )
    assert one.epoch == 41 and one.node == "n0" and one.now == NOW


def test_victim_carries_what_the_ledger_eviction_commitment_needs() -> None:
    snap = node_snapshot(
        resident("leaky", ram=1, limits={"ram": 1}, usage={"ram": 2}),
        resident("s", ram=4),
        batch_resident("b", ram=3),
        ram=5,
        epoch=7,
    )
    plan = plan_evictions(snap, CFG, NOW)
    assert [(v.workload, v.limit_breach_override) for v in plan.victims] == [
        ("default/leaky", True),
        ("default/b", False),
    ]
    assert [r.code for v in plan.victims for r in v.reasons] == [
        ReasonCode.LIMIT_BREACH,
        ReasonCode.RESERVATION_LEDGER_BREACH,
    ]
    assert plan.epoch == 7


@given(st.lists(st.one_of(st.just(math.nan), st.floats(0, 1e6, allow_nan=False)), min_size=0, max_size=40))
def test_a_conditions_usage_is_numpys_nansum_bit_for_bit(column: list[float]) -> None:
    # the plan sums a column's known usage without nansum's copy; the sum must not move by a bit
    a = np.array(column, dtype=np.float64)
    assert _known_sum(a) == float(np.nansum(a))
