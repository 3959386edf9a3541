"""Escalation: pressure persisting through N rounds or T seconds drains batch and marks the node."""

from __future__ import annotations

import pytest

from kalena.core.enforcement import (
    EscalationConfig,
    EvictionCause,
    MitigationRound,
    decide_escalation,
    failed_run,
)
from kalena.core.verdict import ReasonCode
from kalena.testing.enforcement import batch_resident, node_snapshot, resident

CFG = EscalationConfig(rounds=3, persist_s=30.0, cooldown_s=900.0)
NOW = 1_000.0


def rounds(*spec: tuple[float, bool]) -> list[MitigationRound]:
    return [MitigationRound(t, p, ("ram",) if p else ()) for t, p in spec]


# (id, history, escalate?, failed rounds)
CASES = [
    ("no-history", [], False, 0),
    ("one-failure", rounds((990, True)), False, 1),
    ("two-failures-quick", rounds((990, True), (995, True)), False, 2),
    ("three-failures", rounds((990, True), (992, True), (994, True)), True, 3),
    ("recovered-last-round", rounds((990, True), (992, True), (994, True), (996, False)), False, 0),
    ("run-restarts-after-recovery", rounds((980, True), (982, False), (990, True), (995, True)), False, 2),
    ("two-failures-but-long", rounds((960, True), (990, True)), True, 2),
    ("just-under-persist", rounds((960.5, True), (990, True)), False, 2),
]


@pytest.mark.parametrize(("history", "escalate", "failed"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_when_to_escalate(history: list[MitigationRound], escalate: bool, failed: int) -> None:
    snap = node_snapshot(resident("s", ram=4), batch_resident("b", ram=2), ram=8)
    dec = decide_escalation(snap, history, CFG, NOW)
    assert dec.escalate is escalate and dec.failed_rounds == failed
    if escalate:
        assert dec.slack_ineligible_until == NOW + CFG.cooldown_s
        assert dec.reason is not None and dec.reason.code is ReasonCode.MITIGATION_NOT_CONVERGING
        assert dec.reason.dimension == "ram"
    else:
        assert dec.slack_ineligible_until is None and dec.drain == () and dec.reason is None


def test_drain_takes_all_batch_in_eviction_order_ignoring_min_run_time() -> None:
    snap = node_snapshot(
        resident("s", ram=4),
        resident("ds", tier="batch", daemonset=True, ram=1),
        batch_resident("young", priority=0, ram=1, started_at=NOW - 1),
        batch_resident("big", priority=0, ram=1, usage={"ram": 3}),
        batch_resident("high", priority=9, ram=1),
        ram=8,
        node="n3",
        epoch=12,
    )
    dec = decide_escalation(snap, rounds((990, True), (992, True), (994, True)), CFG, NOW)
    assert [v.workload for v in dec.drain] == ["default/big", "default/young", "default/high"]
    for v in dec.drain:
        assert v.cause is EvictionCause.ESCALATION_DRAIN and v.why is None
        assert v.grace_period_s == CFG.drain_grace_period_s
        assert v.requeue is not None and v.requeue.node == "n3" and v.requeue.cooldown_until == NOW + 900
    assert dec.epoch == 12 and dec.node == "n3"


def test_escalation_with_no_batch_left_still_marks_the_node() -> None:
    snap = node_snapshot(resident("s", ram=10), ram=8)
    dec = decide_escalation(snap, rounds((990, True), (992, True), (994, True)), CFG, NOW)
    assert dec.escalate and dec.drain == () and dec.slack_ineligible_until == NOW + 900


def test_history_must_be_in_time_order() -> None:
    with pytest.raises(ValueError, match="time order"):
        failed_run(rounds((995, True), (990, True)))


def test_failed_run_is_the_trailing_run() -> None:
    h = rounds((1, True), (2, False), (3, True), (4, True))
    assert [r.time for r in failed_run(h)] == [3, 4]
