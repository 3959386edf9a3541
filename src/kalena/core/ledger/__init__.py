"""The dual ledger: request and reservation sums per node, changed only by epoch-stamped commitments."""

from kalena.core.ledger.blueprint import Blueprint, per_node_sum, resolve_production
from kalena.core.ledger.commitments import (
    Commitment,
    CommitResult,
    Eviction,
    OverrideRecord,
    PlaceBatch,
    RemovalCause,
    RemoveBatch,
    ReservationRefresh,
    ReservationUpdate,
)
from kalena.core.ledger.fit import (
    fits_mask,
    insufficient_resources,
    insufficient_resources_rows,
    running_fit,
    shortfall,
    tolerant_capacity,
)
from kalena.core.ledger.invariant import restoration_violations, sum_violations
from kalena.core.ledger.observed import observed_ledger
from kalena.core.ledger.state import Ledger, RowView, Sums, from_blueprint

__all__ = [
    "Blueprint",
    "CommitResult",
    "Commitment",
    "Eviction",
    "Ledger",
    "OverrideRecord",
    "PlaceBatch",
    "RemovalCause",
    "RemoveBatch",
    "ReservationRefresh",
    "ReservationUpdate",
    "RowView",
    "Sums",
    "fits_mask",
    "from_blueprint",
    "insufficient_resources",
    "insufficient_resources_rows",
    "observed_ledger",
    "per_node_sum",
    "resolve_production",
    "restoration_violations",
    "running_fit",
    "shortfall",
    "sum_violations",
    "tolerant_capacity",
]
