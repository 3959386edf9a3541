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
from kalena.core.resources import DIMS, NDIM, RAM, Resources
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
    commas; ``reason`` has ``seconds`` = how long the pressure persisted, ``limit_s`` = ``persist_s``.
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
    dims = tuple(sorted({d for r in run for d in r.dimensions}))
    return drain_decision(snap, len(run), persisted, dims, config, now)


def drain_decision(
    snap: NodeSnapshot,
    failed_rounds: int,
    persisted: float,
    dims: Sequence[str],
    config: EscalationConfig,
    now: float,
) -> EscalationDecision:
    """The escalation of ``snap``'s node: drain every batch resident (eviction order), deadline."""
    until = now + config.cooldown_s
    eff = snap.effective_reservation
    rows = np.flatnonzero(snap.in_ledger & snap.is_batch)
    joined = ",".join(dims)
    drain = tuple(
        Victim(
            workload=snap.ids[i],
            equivalence_key=snap.equivalence_keys[i],
            node=snap.node,
            tier=Tier.BATCH,
            priority=int(snap.priority[i]),
            dimension=joined,
            cause=EvictionCause.ESCALATION_DRAIN,
            releases=Resources.from_array(eff[i]),
            grace_period_s=config.drain_grace_period_s,
            requeue=Requeue(snap.ids[i], snap.equivalence_keys[i], snap.node, until),
        )
        for i in sorted(rows, key=lambda i: eviction_sort_key(batch_candidate(snap, i, RAM)))
    )
    reason = Reason(
        ReasonCode.MITIGATION_NOT_CONVERGING,
        joined,
        seconds=persisted,
        limit_s=config.persist_s,
        detail="pressure persisted through local mitigation",
    )
    return EscalationDecision(
        snap.node, snap.epoch, now, True, failed_rounds, persisted, until, drain, reason
    )


@dataclass(frozen=True, slots=True, eq=False)
class EscalationRuns:
    """The mitigation history of ``N`` nodes in the compact form escalation needs.

    ``open_time`` (N,) is the last round's time if it saw pressure (NaN: it did not), with its
    dimensions ``open_dims`` (N, 8); that round is judged (did pressure persist after it?) by the
    next one. ``rounds`` (N,), ``first`` and ``last`` (N,) and ``dims`` (N, 8) describe the trailing
    run of failed rounds, exactly what :func:`failed_run` returns from the full history.
    """

    open_time: np.ndarray
    open_dims: np.ndarray
    rounds: np.ndarray
    first: np.ndarray
    last: np.ndarray
    dims: np.ndarray

    @classmethod
    def empty(cls, n: int) -> EscalationRuns:
        return cls(
            np.full(n, np.nan),
            np.zeros((n, NDIM), dtype=bool),
            np.zeros(n, dtype=np.int64),
            np.full(n, np.nan),
            np.full(n, np.nan),
            np.zeros((n, NDIM), dtype=bool),
        )

    @property
    def persisted_s(self) -> np.ndarray:
        return np.where(self.rounds > 0, self.last - self.first, 0.0)

    def history(self, n: int) -> tuple[MitigationRound, ...]:
        """Node ``n``'s trailing failed run as rounds (endpoints only: what escalation reads)."""
        if self.rounds[n] == 0:
            return ()
        dims = tuple(DIMS[d] for d in np.flatnonzero(self.dims[n]))
        ends = [float(self.first[n])] * (int(self.rounds[n]) - 1) + [float(self.last[n])]
        return tuple(MitigationRound(t, True, dims) for t in ends)


def advance_runs(
    runs: EscalationRuns, pressure: np.ndarray, now: float, config: EscalationConfig
) -> tuple[EscalationRuns, np.ndarray, EscalationRuns]:
    """``(next runs, escalate (N,), the runs judged)`` after a round at ``now``.

    ``pressure`` (N, 8) bool is what this round saw.

    The previous round's pressure persisted when this round still sees pressure; its record joins
    the failed run, or ends it. Escalate where the run is ``rounds`` long or ``persist_s`` old;
    an escalated node starts afresh (its history is cleared). The third value holds the failed
    runs as this round judged them (before the reset): the escalated nodes' drain reads it.
    """
    opened = ~np.isnan(runs.open_time)
    if np.any(opened & (runs.open_time > now)):
        raise ValueError(f"mitigation rounds must be in time order: {now} after {np.nanmax(runs.open_time)}")
    seen = pressure.any(axis=1)
    grow = opened & seen
    end = opened & ~seen
    start = grow & (runs.rounds == 0)
    rounds = np.where(grow, runs.rounds + 1, np.where(end, 0, runs.rounds))
    first = np.where(start, runs.open_time, np.where(end, np.nan, runs.first))
    last = np.where(grow, runs.open_time, np.where(end, np.nan, runs.last))
    dims = np.where(grow[:, None], runs.dims | runs.open_dims, np.where(end[:, None], False, runs.dims))
    with np.errstate(invalid="ignore"):
        escalate = (rounds >= config.rounds) | ((rounds > 0) & (last - first >= config.persist_s))
    judged = EscalationRuns(runs.open_time, runs.open_dims, rounds, first, last, dims)
    keep = seen & ~escalate
    nxt = EscalationRuns(
        np.where(keep, now, np.nan),
        np.where(keep[:, None], pressure, False),
        np.where(escalate, 0, rounds),
        np.where(escalate, np.nan, first),
        np.where(escalate, np.nan, last),
        np.where(escalate[:, None], False, dims),
    )
    return nxt, escalate, judged
