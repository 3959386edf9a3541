"""Node enforcement policy (SPEC: Enforcement on the node): pure decisions over a node snapshot.

Eviction under non-compressible pressure, CPU throttling under compressible pressure,
anti-starvation caps, the harmful-pairing blacklist and escalation. Each is a function of
(snapshot or history, config, now) returning frozen-dataclass decisions that a shell (the
simulator, the Linux node agent, the Docker daemon) carries out. See README.md.
"""

from kalena.core.enforcement.config import (
    BATCH_OOM_SCORE_ADJ,
    EscalationConfig,
    EvictionConfig,
    PairingConfig,
    StarvationConfig,
    ThrottleConfig,
)
from kalena.core.enforcement.escalation import (
    EscalationDecision,
    MitigationRound,
    decide_escalation,
    failed_run,
)
from kalena.core.enforcement.eviction import (
    CandidateGroup,
    DimensionPressure,
    EvictionCandidate,
    EvictionPlan,
    batch_candidate,
    eviction_sort_key,
    plan_evictions,
    release_on_eviction,
    reservation_rise,
)
from kalena.core.enforcement.from_ledger import eviction_commitments, snapshot_from_ledger
from kalena.core.enforcement.pairing import EvictionEvent, HarmfulPair, blacklisted_pairs, harmful_pairs
from kalena.core.enforcement.records import (
    EvictionCause,
    NodeCondition,
    PriorityComparison,
    Requeue,
    ReservationRise,
    Victim,
    WhyEvicted,
)
from kalena.core.enforcement.snapshot import (
    NodeConditions,
    NodeSnapshot,
    ledger_holds,
    ledger_holds_all,
    snapshot_from_workloads,
)
from kalena.core.enforcement.starvation import StarvationDecision, StarvedBatch, plan_anti_starvation
from kalena.core.enforcement.throttle import (
    AdvisoryReport,
    ThrottleCause,
    ThrottleDecision,
    ThrottlePlan,
    batch_cpu_allowance,
    batch_cpu_caps,
    plan_throttle,
    start_quota,
    water_fill,
    weight_to_shares,
)

__all__ = [
    "BATCH_OOM_SCORE_ADJ",
    "AdvisoryReport",
    "CandidateGroup",
    "DimensionPressure",
    "EscalationConfig",
    "EscalationDecision",
    "EvictionCandidate",
    "EvictionCause",
    "EvictionConfig",
    "EvictionEvent",
    "EvictionPlan",
    "HarmfulPair",
    "MitigationRound",
    "NodeCondition",
    "NodeConditions",
    "NodeSnapshot",
    "PairingConfig",
    "PriorityComparison",
    "Requeue",
    "ReservationRise",
    "StarvationConfig",
    "StarvationDecision",
    "StarvedBatch",
    "ThrottleCause",
    "ThrottleConfig",
    "ThrottleDecision",
    "ThrottlePlan",
    "Victim",
    "WhyEvicted",
    "batch_candidate",
    "batch_cpu_allowance",
    "batch_cpu_caps",
    "blacklisted_pairs",
    "decide_escalation",
    "eviction_commitments",
    "eviction_sort_key",
    "failed_run",
    "harmful_pairs",
    "ledger_holds",
    "ledger_holds_all",
    "plan_anti_starvation",
    "plan_evictions",
    "plan_throttle",
    "release_on_eviction",
    "reservation_rise",
    "snapshot_from_ledger",
    "snapshot_from_workloads",
    "start_quota",
    "water_fill",
    "weight_to_shares",
]
