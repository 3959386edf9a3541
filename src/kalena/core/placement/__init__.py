"""Batch placement into reclaimed capacity: filters, scores, caches, the scheduler, one pod's
evaluation and why-pending."""

from kalena.core.placement.cache import PlacementCache, ScoreCache
from kalena.core.placement.config import PlacementConfig, SchedulingContext
from kalena.core.placement.context import ContextKeeper
from kalena.core.placement.evaluate import Evaluation, evaluate
from kalena.core.placement.filters import DEFAULT_FILTERS, Filter, KeyedFilter, NodeCheck
from kalena.core.placement.nodeindex import NodeIndex
from kalena.core.placement.scheduler import (
    ScheduleStats,
    SchedulingDecision,
    candidate_sort_key,
    pending_sort_key,
    same_class,
    schedule,
    why_pending,
)
from kalena.core.placement.score import (
    DEFAULT_SCORES,
    Score,
    bucket_key,
    colocation,
    image_masks,
    reservation_volatility,
    stability,
    stranded_balance,
)
from kalena.core.placement.state import PassState
from kalena.core.placement.topology import ProductionAntiAffinity, domain_counts, spread_ok
from kalena.core.placement.why import BindingDimension, WhyPending, binding_dimension, binding_sort_key

__all__ = [
    "DEFAULT_FILTERS",
    "DEFAULT_SCORES",
    "BindingDimension",
    "ContextKeeper",
    "Evaluation",
    "Filter",
    "KeyedFilter",
    "NodeCheck",
    "NodeIndex",
    "PassState",
    "PlacementCache",
    "PlacementConfig",
    "ProductionAntiAffinity",
    "ScheduleStats",
    "SchedulingContext",
    "SchedulingDecision",
    "Score",
    "ScoreCache",
    "WhyPending",
    "binding_dimension",
    "binding_sort_key",
    "bucket_key",
    "candidate_sort_key",
    "colocation",
    "domain_counts",
    "evaluate",
    "image_masks",
    "pending_sort_key",
    "reservation_volatility",
    "same_class",
    "schedule",
    "spread_ok",
    "stability",
    "stranded_balance",
    "why_pending",
]
