"""Eviction plans as data: victims, their "why evicted" records and their requeue terms.

A shell carries out a :class:`Victim` (SIGTERM, SIGKILL after ``grace_period_s``) and
reports what was released; the same record becomes the ledger's Eviction commitment
(``workload``, the node's index, the plan's ``epoch``, ``limit_breach_override``,
``reasons``). Nothing here computes anything: the records are built by :mod:`.eviction` and
:mod:`.escalation`.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from kalena.core.enforcement.snapshot import ledger_holds
from kalena.core.model import Tier
from kalena.core.resources import Resources
from kalena.core.verdict import Reason, ReasonCode


class EvictionCause(enum.Enum):
    """Why a workload is on a plan. Stable strings: metrics group by them."""

    LIMIT_BREACH = "limit-breach"  # usage above its own limit on the pressured dimension
    RESERVATION_LEDGER_BREACH = "reservation-ledger-breach"  # batch, by ascending priority
    ESCALATION_DRAIN = "escalation-drain"  # local mitigation did not converge
    # a shell's rebuilt ledger (the node declaration shrank) cannot hold a run it already had:
    # never on a plan, the node agent stops and requeues the run itself (kalena.agent.batch)
    READMISSION_REJECTED = "readmission-rejected"

    @property
    def reason_code(self) -> ReasonCode:
        return {
            EvictionCause.LIMIT_BREACH: ReasonCode.LIMIT_BREACH,
            EvictionCause.RESERVATION_LEDGER_BREACH: ReasonCode.RESERVATION_LEDGER_BREACH,
            EvictionCause.ESCALATION_DRAIN: ReasonCode.MITIGATION_NOT_CONVERGING,
            EvictionCause.READMISSION_REJECTED: ReasonCode.RESERVATION_LEDGER_BREACH,
        }[self]


@dataclass(frozen=True, slots=True)
class NodeCondition:
    """One pressured non-compressible dimension, before any eviction.

    ``used`` sums known usage and ``reserved`` sums effective reservations ``max(r, u)``, both
    over the ledger's residents (DaemonSets excluded). ``triggered`` and ``acute`` are the
    kernel signals on this dimension.
    """

    dimension: str
    used: float
    reserved: float
    capacity: float
    triggered: bool
    acute: bool

    @property
    def ledger_breached(self) -> bool:
        return not ledger_holds(self.reserved, self.capacity)

    @property
    def usage_over_capacity(self) -> bool:
        return self.used > self.capacity


@dataclass(frozen=True, slots=True)
class ReservationRise:
    """The resident whose reservation rose most on the dimension (the likely cause).

    ``basis`` is ``"previous"`` when the shell passed the previous snapshot's reservations
    (a newcomer rose from 0) and ``"request"`` otherwise (rise above its own request).
    """

    workload: str
    dimension: str
    before: float
    after: float
    basis: str

    @property
    def increase(self) -> float:
        return self.after - self.before


@dataclass(frozen=True, slots=True)
class PriorityComparison:
    """The victim's priority against the highest priority among the residents that stay.

    ``highest_protected`` is ``None`` when no ledger resident stays on the node.
    """

    victim_priority: int
    highest_protected: int | None
    protected: int

    @property
    def victim_is_lowest(self) -> bool:
        return self.highest_protected is None or self.victim_priority <= self.highest_protected


@dataclass(frozen=True, slots=True)
class Requeue:
    """The victim returns to the pending queue and may not land on ``node`` before ``cooldown_until``."""

    workload: str
    equivalence_key: str
    node: str
    cooldown_until: float


@dataclass(frozen=True, slots=True)
class WhyEvicted:
    """The "why evicted" record (SPEC: Placement of batch, last paragraph)."""

    condition: NodeCondition
    reservation_rose: ReservationRise | None
    priority: PriorityComparison
    limit_breach_override: bool
    usage: float  # the victim's usage on the dimension (NaN when unsampled)
    limit: float  # the victim's limit on the dimension (inf = none)

    @property
    def reason(self) -> Reason:
        """The verdict reason, numbers in fields: the limit breach or the ledger breach."""
        d = self.condition.dimension
        if self.limit_breach_override:
            return Reason(ReasonCode.LIMIT_BREACH, d, used=self.usage, capacity=self.limit)
        return Reason(
            ReasonCode.RESERVATION_LEDGER_BREACH,
            d,
            used=self.condition.reserved,
            capacity=self.condition.capacity,
        )


@dataclass(frozen=True, slots=True)
class Victim:
    """One entry of an eviction plan, in the order the shell must carry them out.

    ``releases`` is what the reservation ledger loses: all of ``r'`` for batch (it leaves),
    ``max(r' - R, 0)`` for a service victim (its placement and request stay, and it restarts at
    ``r_0 = R``; the ledger's Eviction commitment resets it so). ``requeue`` is ``None`` for a
    service-tier victim: its own controller restarts it on its blueprint placement, and Kalena
    never re-places production. ``why`` is ``None`` only for escalation drains, whose reason
    is on the :class:`~kalena.core.enforcement.escalation.EscalationDecision`.
    """

    workload: str
    equivalence_key: str
    node: str
    tier: Tier
    priority: int
    dimension: str
    cause: EvictionCause
    releases: Resources
    grace_period_s: float
    requeue: Requeue | None
    why: WhyEvicted | None = None

    @property
    def limit_breach_override(self) -> bool:
        return self.cause is EvictionCause.LIMIT_BREACH

    @property
    def reasons(self) -> tuple[Reason, ...]:
        """The verdict reasons for the ledger's Eviction commitment (its ``reasons`` field)."""
        if self.why is not None:
            return (self.why.reason,)
        return (Reason(self.cause.reason_code, self.dimension),)
