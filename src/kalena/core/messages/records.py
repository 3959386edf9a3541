"""The messages a node agent and a cluster scheduler exchange, keyed by workload id and node name.

Inside one process commitments name ledger rows and node indices; those mean nothing in another
process, whose ledger numbers its rows and nodes its own way. A message names workloads by id and
nodes by name, and :mod:`.convert` turns it into a commitment against the receiver's ledger.
Each type has a ``kind`` (its stable wire name, a class constant) and nothing else beyond the
data; the wire codec is :mod:`.codec`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from kalena.core.enforcement.records import EvictionCause
from kalena.core.enforcement.throttle import ThrottleDecision
from kalena.core.ledger.commitments import RemovalCause
from kalena.core.model import WorkloadSpec
from kalena.core.placement.why import BindingDimension
from kalena.core.resources import Resources
from kalena.core.verdict import Reason

#: The wire format's version. A change a version-1 reader would misread (a renamed or removed key,
#: a new meaning) bumps it; readers refuse versions they do not know rather than guess.
MESSAGE_VERSION = 1


@dataclass(frozen=True, slots=True)
class PlacementMsg:
    """Scheduler -> agent: batch ``workload`` was placed on ``node``, computed at ``node_epoch``."""

    kind: ClassVar[str] = "placement"
    workload: WorkloadSpec
    node: str
    node_epoch: int


@dataclass(frozen=True, slots=True)
class EvictionMsg:
    """Agent -> scheduler: the agent is stopping ``workload_id`` on ``node`` (one plan entry).

    ``cooldown_until`` is when the workload may land on ``node`` again (``None``: not requeued, as
    for a service victim, whose own controller restarts it on its blueprint placement).
    """

    kind: ClassVar[str] = "eviction"
    workload_id: str
    node: str
    node_epoch: int
    limit_breach_override: bool
    cause: EvictionCause
    grace_period_s: float
    cooldown_until: float | None
    reasons: tuple[Reason, ...] = ()


@dataclass(frozen=True, slots=True)
class RemovalMsg:
    """Either way: a batch workload finished, failed or was deleted."""

    kind: ClassVar[str] = "removal"
    workload_id: str
    node: str
    node_epoch: int
    cause: RemovalCause = RemovalCause.FINISHED


@dataclass(frozen=True, slots=True)
class ReservationEntry:
    """One workload's reservation and, when sampled, its usage (8 floats, DIMS order, NaN = missing)."""

    workload_id: str
    reservation: Resources
    usage: tuple[float, ...] | None = None


@dataclass(frozen=True, slots=True)
class ReservationReport:
    """Agent -> scheduler: the estimator's reservations on ``node`` at ``time`` (sender's ``node_epoch``)."""

    kind: ClassVar[str] = "reservation-report"
    node: str
    node_epoch: int
    time: float
    entries: tuple[ReservationEntry, ...]


@dataclass(frozen=True, slots=True)
class ThrottleMsg:
    """Agent -> scheduler: the cpu quotas the agent set on ``node`` at ``time`` ("why throttled")."""

    kind: ClassVar[str] = "throttle"
    node: str
    time: float
    decisions: tuple[ThrottleDecision, ...]


@dataclass(frozen=True, slots=True)
class EscalationMsg:
    """Agent -> scheduler: local mitigation failed (or not); ``drained`` in drain order.

    The drained workloads' own :class:`EvictionMsg` carry the epochs; this message tells the
    scheduler to keep batch off ``node`` until ``slack_ineligible_until``.
    """

    kind: ClassVar[str] = "escalation"
    node: str
    escalate: bool
    slack_ineligible_until: float | None
    drained: tuple[str, ...]
    reason: Reason | None


@dataclass(frozen=True, slots=True)
class WhyPendingMsg:
    """Scheduler -> anyone: why ``workload_id`` is still pending (the per-node statuses stay home:
    they are keyed by node index and one per node)."""

    kind: ClassVar[str] = "why-pending"
    workload_id: str
    total_nodes: int
    available: int
    binding: BindingDimension | None
    message: str


Message = (
    PlacementMsg | EvictionMsg | RemovalMsg | ReservationReport | ThrottleMsg | EscalationMsg | WhyPendingMsg
)
