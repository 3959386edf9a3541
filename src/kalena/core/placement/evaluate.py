"""``evaluate``: one batch pod against every node of a ledger, by the filters and scores of ``schedule``.

For a shell that is asked about one pod at a time and does not choose the node itself (a
kube-scheduler extender: kube-scheduler places, Kalena filters and ranks). The pass state is the
one :func:`~kalena.core.placement.schedule` builds, the plugins are the same and in the same
order, and nothing is placed, so:

* ``feasible`` is the set of nodes ``schedule`` could place the pod on (it would sample among
  them above ``sample_above_nodes``), and ``statuses`` says, for every other node, the first
  plugin that rejects it and why (as ``why_pending``);
* ``scores`` are the weighted sums ``schedule`` ranks by: alone in a pass and without sampling,
  ``schedule`` places the pod on the highest-scoring feasible node (ties: the lowest index).

The ledger is only read.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from kalena.core.ledger import Ledger
from kalena.core.model import Tier, WorkloadSpec
from kalena.core.placement.cache import PlacementCache
from kalena.core.placement.config import PlacementConfig, SchedulingContext
from kalena.core.placement.filters import DEFAULT_FILTERS, Filter
from kalena.core.placement.runner import explain, feasible, prepare, reasons_of, weighted_score
from kalena.core.placement.score import DEFAULT_SCORES, Score
from kalena.core.placement.state import PassState
from kalena.core.verdict import Status, render_reasons


@dataclass(frozen=True, slots=True, eq=False)
class Evaluation:
    """One pod against a ledger's nodes (module docstring)."""

    statuses: tuple[Status, ...]  # one per ledger node index: SUCCESS or the first rejecting plugin's
    feasible: np.ndarray  # node indices that pass every filter, ascending
    scores: np.ndarray  # the weighted score of each feasible node, in the same order
    max_score: float  # the largest score a node can get: the sum of the weights
    message: str  # render_reasons(...): "1/3 nodes are available: 2 Insufficient cpu."


def evaluate(
    pod: WorkloadSpec,
    ledger: Ledger,
    context: SchedulingContext,
    config: PlacementConfig,
    *,
    cache: PlacementCache | None = None,
    filters: Sequence[Filter] = DEFAULT_FILTERS,
    scores: Sequence[Score] = DEFAULT_SCORES,
) -> Evaluation:
    """Filter and score ``pod`` on every node of ``ledger`` (module docstring). ``pod`` must be a
    batch workload not already in the ledger (``ValueError`` otherwise, as ``schedule``)."""
    if pod.tier is not Tier.BATCH or pod.is_daemonset:
        raise ValueError(f"{pod.id!r} is not a batch workload: production is placed by the blueprint")
    if pod.id in ledger:
        raise ValueError(f"{pod.id!r} is already placed")
    cache = cache if cache is not None else PlacementCache()
    nodes, prod_aa, score_cache = cache.bind(ledger, config)
    state = PassState(
        ledger, context, config, nodes, prod_aa, score_cache if config.equivalence_reuse else None
    )
    checks = prepare(filters, pod, state)
    statuses = explain(checks, state.n)
    ok = feasible(checks, np.arange(state.n))
    values = weighted_score(scores, config, pod, state, ok)
    top = float(sum(max(config.weight(s.name), 0.0) for s in scores))
    message = render_reasons(state.n, len(ok), reasons_of(statuses))
    return Evaluation(statuses, ok, values, top, message)
