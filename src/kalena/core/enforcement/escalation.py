"""Escalation (seed 000 §3.1): when local mitigation does not converge, drain batch from the node.

From the node's recent mitigation rounds (oldest first), take the trailing run of rounds after
which pressure persisted. Escalate when that run is at least ``rounds`` long, or spans at
least ``persist_s`` seconds (last round's time minus the run's first):

    escalate  <=>  len(run) >= N  or  t_last - t_first >= T

An escalation drains every batch resident (the minimum run time does not apply: the node is
being taken out of the slack pool, not relieved one victim at a time), in eviction order
(ascending priority, larger ram user first, id), and marks the node slack-ineligible until
``now + cooldown_s``. Drained workloads are requeued with the same cooldown on this node.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from kalena.core.enforcement.config import EscalationConfig
from kalena.core.enforcement.eviction import batch_candidate, eviction_sort_key
from kalena.core.enforcement.records import EvictionCause, Requeue, Victim
from kalena.core.enforcement.snapshot import NodeSnapshot
from kalena.core.model import Tier
from kalena.core.resources import RAM, Resources
from kalena.core.verdict import Reason, ReasonCode


@dataclass(frozen=True, slots=True)
class MitigationRound:
    """One mitigation round's outcome: did pressure persist after it, and on which dimensions."""

    time: float
    pressure_persisted: bool
    dimensions: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not math.isfinite(self.time):
            raise ValueError(f"MitigationRound.time must be finite, got {self.time!r}")


@dataclass(frozen=True, slots=True)
class EscalationDecision:
    """``escalate`` with the drain (in order) and the ineligibility deadline, or nothing to do.

    Drain victims carry ``why=None`` and ``dimension`` = the failed rounds' dimensions joined by
    commas; ``reason`` has ``used`` = seconds the pressure persisted, ``capacity`` = ``persist_s``.
    """

    node: str
    epoch: int
    now: float
    escalate: bool
    failed_rounds: int
    persisted_s: float
    slack_ineligible_until: float | None
    drain: tuple[Victim, ...]
    reason: Reason | None


def failed_run(history: Sequence[MitigationRound]) -> tuple[MitigationRound, ...]:
    """The trailing rounds after which pressure persisted (empty if the last round cleared it)."""
    for a, b in itertools.pairwise(history):
        if b.time < a.time:
            raise ValueError(f"mitigation history must be in time order: {b.time} after {a.time}")
    k = len(history)
    while k > 0 and history[k - 1].pressure_persisted:
        k -= 1
    return tuple(history[k:])


def decide_escalation(
    snap: NodeSnapshot, history: Sequence[MitigationRound], config: EscalationConfig, now: float
) -> EscalationDecision:
    """Escalate and drain when the trailing failed run is ``rounds`` long or ``persist_s`` old."""
    run = failed_run(history)
    persisted = run[-1].time - run[0].time if run else 0.0
    escalate = len(run) >= config.rounds or (bool(run) and persisted >= config.persist_s)
    if not escalate:
        return EscalationDecision(snap.node, snap.epoch, now, False, len(run), persisted, None, (), None)
    until = now + config.cooldown_s
    eff = snap.effective_reservation
    rows = np.flatnonzero(snap.in_ledger & snap.is_batch)
    dims = sorted({d for r in run for d in r.dimensions})
    drain = tuple(
        Victim(
            workload=snap.ids[i],
            equivalence_key=snap.equivalence_keys[i],
            node=snap.node,
            tier=Tier.BATCH,
            priority=int(snap.priority[i]),
            dimension=",".join(dims),
            cause=EvictionCause.ESCALATION_DRAIN,
            releases=Resources.from_array(eff[i]),
            grace_period_s=config.drain_grace_period_s,
            requeue=Requeue(snap.ids[i], snap.equivalence_keys[i], snap.node, until),
        )
        for i in sorted(rows, key=lambda i: eviction_sort_key(batch_candidate(snap, i, RAM)))
    )
    reason = Reason(
        ReasonCode.MITIGATION_NOT_CONVERGING,
        ",".join(dims),
        used=persisted,
        capacity=config.persist_s,
        detail="pressure persisted through local mitigation",
    )
    return EscalationDecision(snap.node, snap.epoch, now, True, len(run), persisted, until, drain, reason)
