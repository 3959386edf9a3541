"""One verdict type for every policy: a stable code, reasons with numbers in fields, the plugin.

Reason codes are stable strings so that "why pending", "why evicted" and "why throttled"
group cleanly in metrics and render the same way in every shell. Numbers are never baked
into the text: :func:`render_reasons` builds the human sentence from the data.
"""

from __future__ import annotations

import enum
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass


class Code(enum.Enum):
    """What a filter or policy concluded."""

    SUCCESS = "success"
    UNSCHEDULABLE = "unschedulable"  # expected infeasibility: data, not an exception
    SKIP = "skip"  # the plugin does not apply to this workload


class ReasonCode(enum.Enum):
    """Stable reason codes. Add new ones at the end; never rename."""

    # placement filters
    INSUFFICIENT_RESOURCE = "insufficient-resource"
    NODE_SELECTOR_MISMATCH = "node-selector-mismatch"
    UNTOLERATED_TAINT = "untolerated-taint"
    PRODUCTION_ANTI_AFFINITY = "production-anti-affinity"
    OWN_ANTI_AFFINITY = "own-anti-affinity"
    SPREAD_SKEW = "spread-skew"
    NODE_SLACK_INELIGIBLE = "node-slack-ineligible"
    EVICTION_COOLDOWN = "eviction-cooldown"
    HARMFUL_PAIRING = "harmful-pairing"
    NAMESPACE_CAP = "namespace-cap"
    GPU_REQUESTED = "gpu-requested"
    # enforcement
    LIMIT_BREACH = "limit-breach"
    RESERVATION_LEDGER_BREACH = "reservation-ledger-breach"
    COMPRESSIBLE_PRESSURE = "compressible-pressure"
    ANTI_STARVATION = "anti-starvation"
    MITIGATION_NOT_CONVERGING = "mitigation-not-converging"
    # ledger
    STALE_EPOCH = "stale-epoch"
    RESTORATION_VIOLATION = "restoration-violation"
    # placement filters, later
    EXISTING_ANTI_AFFINITY = "existing-anti-affinity"  # a placed batch pod's required term selects it
    POD_AFFINITY = "pod-affinity"  # no pod its required affinity terms select in the domain


@dataclass(frozen=True, slots=True)
class Reason:
    """One reason. ``dimension`` and the numbers are set where they mean something.

    ``requested``, ``used`` and ``capacity`` are quantities of ``dimension`` in IR units; times are
    never put there: ``seconds`` is how long something lasted or still lasts (pressure persisted,
    a cooldown's remaining time) and ``limit_s`` the duration it is measured against.
    """

    code: ReasonCode
    dimension: str = ""
    requested: float = 0.0
    used: float = 0.0
    capacity: float = 0.0
    detail: str = ""
    seconds: float = 0.0
    limit_s: float = 0.0

    @property
    def shortfall(self) -> float:
        """By how much ``used + requested`` exceeds ``capacity``."""
        return self.used + self.requested - self.capacity

    def phrase(self) -> str:
        """A short grouping phrase, kube-scheduler style: "Insufficient cpu"."""
        if self.code is ReasonCode.INSUFFICIENT_RESOURCE:
            return f"Insufficient {self.dimension}"
        text = self.code.value.replace("-", " ")
        return text[0].upper() + text[1:] + (f" ({self.detail})" if self.detail else "")


@dataclass(frozen=True, slots=True)
class Status:
    """A plugin's answer for one (workload, node): the runner stamps ``plugin``."""

    code: Code
    reasons: tuple[Reason, ...] = ()
    plugin: str = ""

    @property
    def ok(self) -> bool:
        return self.code is not Code.UNSCHEDULABLE


SUCCESS = Status(Code.SUCCESS)


def render_reasons(total_nodes: int, available: int, reasons: Iterable[Reason]) -> str:
    """``"0/186 nodes are available: 3 Insufficient ram, 183 Node selector mismatch."``"""
    # Count the (frozen, hashable) reasons first and phrase each distinct one once: a why-pending
    # answer on a 5,000-node cluster holds thousands of identical reasons.
    counts: Counter[str] = Counter()
    for reason, n in Counter((r.code, r.dimension, r.detail) for r in reasons).items():
        counts[Reason(reason[0], reason[1], detail=reason[2]).phrase()] += n
    parts = ", ".join(f"{n} {p}" for p, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))
    return f"{available}/{total_nodes} nodes are available" + (f": {parts}." if parts else ".")
