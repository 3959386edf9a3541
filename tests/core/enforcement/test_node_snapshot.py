"""NodeSnapshot: validation, immutability, the effective reservation and the WorkloadSpec builder."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from kalena.core.enforcement import NodeConditions, NodeSnapshot, ledger_holds, snapshot_from_workloads
from kalena.core.resources import NDIM, RAM, STORAGE
from kalena.testing.builders import batch, res, workload
from kalena.testing.enforcement import batch_resident, node_snapshot, resident


def _arrays(w: int = 1, **over: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "node": "n0",
        "capacity": np.full(NDIM, 10.0),
        "ids": tuple(f"w{i}" for i in range(w)),
        "is_batch": np.zeros(w, bool),
        "priority": np.zeros(w, int),
        "is_daemonset": np.zeros(w, bool),
        "request": np.ones((w, NDIM)),
        "reservation": np.ones((w, NDIM)),
        "limit": np.full((w, NDIM), np.inf),
        "usage": np.full((w, NDIM), np.nan),
        "started_at": np.zeros(w),
    }
    base.update(over)
    return base


BAD = [
    ("duplicate-ids", {"ids": ("a", "a")}, "unique"),
    ("capacity-shape", {"capacity": np.ones(3)}, "capacity"),
    ("capacity-negative", {"capacity": np.full(NDIM, -1.0)}, "capacity"),
    ("request-nan", {"request": np.full((2, NDIM), np.nan)}, "request"),
    ("reservation-inf", {"reservation": np.full((2, NDIM), np.inf)}, "reservation"),
    ("usage-negative", {"usage": np.full((2, NDIM), -1.0)}, "usage"),
    ("usage-inf", {"usage": np.full((2, NDIM), np.inf)}, "usage"),
    ("limit-shape", {"limit": np.ones((3, NDIM))}, "limit"),
    ("priority-shape", {"priority": np.zeros(3)}, "priority"),
    ("started-nan", {"started_at": np.array([0.0, np.nan])}, "started_at"),
    ("started-plus-inf", {"started_at": np.array([0.0, np.inf])}, "started_at"),
    ("keys-length", {"equivalence_keys": ("k",)}, "equivalence_keys"),
]


@pytest.mark.parametrize(("over", "key"), [(o, k) for _, o, k in BAD], ids=[b[0] for b in BAD])
def test_snapshot_rejects_bad_arrays(over: dict[str, Any], key: str) -> None:
    with pytest.raises(ValueError, match=key):
        NodeSnapshot(**_arrays(2, **over))


def test_snapshot_accepts_inf_limit_nan_usage_and_unknown_start() -> None:
    s = NodeSnapshot(**_arrays(2, started_at=np.array([-np.inf, 5.0])))
    assert len(s) == 2
    assert s.age(10.0).tolist() == [math.inf, 5.0]


def test_snapshot_arrays_are_private_and_read_only() -> None:
    usage = np.zeros((1, NDIM))
    s = NodeSnapshot(**_arrays(1, usage=usage))
    usage[0, 0] = 99.0
    assert s.usage[0, 0] == 0.0
    with pytest.raises(ValueError):
        s.usage[0, 0] = 1.0


def test_effective_reservation_takes_usage_above_reservation_and_ignores_missing() -> None:
    s = node_snapshot(
        resident("a", ram=4, usage={"ram": 6}),
        resident("b", ram=4, usage={"ram": 1}),
        resident("c", ram=4),
        ram=100,
    )
    assert s.effective_reservation[:, RAM].tolist() == [6.0, 4.0, 4.0]


def test_daemonsets_are_outside_the_ledger() -> None:
    s = node_snapshot(resident("ds", daemonset=True, ram=4), resident("a", ram=4), ram=100)
    assert s.in_ledger.tolist() == [False, True]


def test_builder_maps_specs_limits_and_defaults() -> None:
    ws = [
        workload("a", ram=2, limits={"ram": 3}, owner="rs-a"),
        batch("b", ram=1, priority=7, slack_cpu=False),
    ]
    s = snapshot_from_workloads(
        "n1",
        res(cpu=4, ram=8),
        ws,
        usage={"default/a": {"ram": "2Gi"}},
        started_at={"default/b": 50.0},
        epoch=3,
    )
    assert s.ids == ("default/a", "default/b")
    assert s.equivalence_keys == ("rs-a", "default/b")
    assert s.limit[0, RAM] == 3.0
    assert math.isinf(s.limit[0, STORAGE])  # a limit of 0 (unspecified) means no limit
    assert math.isinf(s.limit[1, RAM])
    assert s.usage[0, RAM] == 2.0 and math.isnan(s.usage[0, STORAGE]) and np.isnan(s.usage[1]).all()
    assert s.reservation.tolist() == s.request.tolist()
    assert s.is_batch.tolist() == [False, True] and s.priority.tolist() == [0, 7]
    assert s.slack_cpu.tolist() == [True, False]
    assert s.started_at[0] == -math.inf and s.started_at[1] == 50.0
    assert s.previous_reservation is None and s.epoch == 3


def test_builder_previous_reservation_newcomer_is_nan() -> None:
    s = node_snapshot(resident("a", ram=2, previous={"ram": 1}), batch_resident("b", ram=1), ram=8)
    assert s.previous_reservation is not None
    assert s.previous_reservation[0, RAM] == 1.0
    assert np.isnan(s.previous_reservation[1]).all()


def test_empty_snapshot() -> None:
    s = node_snapshot(ram=8)
    assert len(s) == 0 and s.effective_reservation.shape == (0, NDIM)


@pytest.mark.parametrize(
    ("kwargs", "key"),
    [
        ({"triggered": np.zeros(3, bool)}, "triggered"),
        ({"psi_some": np.full(NDIM, 2.0)}, "psi_some"),
        ({"memory_events": -1}, "memory_events"),
    ],
    ids=["triggered-shape", "psi-above-one", "memory-events-negative"],
)
def test_conditions_reject_bad_values(kwargs: dict[str, Any], key: str) -> None:
    with pytest.raises(ValueError, match=key):
        NodeConditions(**kwargs)


@pytest.mark.parametrize(
    ("conditions", "dim", "expected"),
    [
        (NodeConditions.of(), RAM, False),
        (NodeConditions.of(triggered=("ram",)), RAM, True),
        (NodeConditions.of(acute=("storage",)), STORAGE, True),
        (NodeConditions.of(memory_events=2), RAM, True),
        (NodeConditions.of(memory_events=2), STORAGE, False),
        (NodeConditions.of(psi_some={"ram": 0.9}), RAM, False),  # averages are not signals
    ],
    ids=["quiet", "ram-trigger", "storage-acute", "memory-event", "memory-event-not-storage", "psi-avg-only"],
)
def test_signalled(conditions: NodeConditions, dim: int, expected: bool) -> None:
    assert conditions.signalled(dim) is expected


@pytest.mark.parametrize(
    ("total", "capacity", "holds"),
    [
        (8.0, 8.0, True),
        (8.0 + 1e-12, 8.0, True),
        (8.001, 8.0, False),
        (1e9, math.inf, True),
        (0.0, 0.0, True),
    ],
    ids=["equal", "rounding-noise", "over", "unconstrained", "zero"],
)
def test_ledger_holds(total: float, capacity: float, holds: bool) -> None:
    assert ledger_holds(total, capacity) is holds
