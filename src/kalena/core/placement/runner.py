"""The runner: prepares filter plugins, narrows candidate nodes, explains failures, sums scores.

Plugins never build a :class:`~kalena.core.verdict.Status`; the runner does, stamping the plugin
name, so "0/186 nodes are available: ..." is rendered from data in one place. As in
kube-scheduler, a node's status comes from the *first* plugin (in order) that rejects it.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from kalena.core.model import WorkloadSpec
from kalena.core.placement.config import PlacementConfig
from kalena.core.placement.filters import Filter, NodeCheck
from kalena.core.placement.score import Score, ScoreView
from kalena.core.placement.state import PassState
from kalena.core.verdict import SUCCESS, Code, Reason, Status

Prepared = tuple[str, NodeCheck]


def prepare(filters: Sequence[Filter], pod: WorkloadSpec, state: PassState) -> list[Prepared]:
    """``(plugin name, check)`` for every plugin that can reject a node for ``pod``, in order."""
    out: list[Prepared] = []
    for f in filters:
        check = f.prepare(pod, state)
        if check is not None:
            out.append((f.name, check))
    return out


def feasible(checks: Sequence[Prepared], nodes: np.ndarray) -> np.ndarray:
    """The subset of ``nodes`` (order kept) that passes every check; later checks see fewer nodes."""
    for _, check in checks:
        if not len(nodes):
            break
        nodes = nodes[check.passes(nodes)]
    return nodes


def explain(checks: Sequence[Prepared], n_nodes: int) -> tuple[Status, ...]:
    """One status per node: ``SUCCESS``, or the first rejecting plugin's reasons stamped with its name."""
    statuses: list[Status] = [SUCCESS] * n_nodes
    remaining = np.arange(n_nodes)
    for name, check in checks:
        if not len(remaining):
            break
        ok = check.passes(remaining)
        failed = remaining[~ok]
        if len(failed):
            shared: dict[int, Status] = {}  # one Status object per distinct reasons tuple
            why = check.reasons(failed)
            for node, reasons in zip(failed.tolist(), why, strict=True):
                st = shared.get(id(reasons))
                if st is None:
                    st = shared[id(reasons)] = Status(Code.UNSCHEDULABLE, reasons, plugin=name)
                statuses[node] = st
        remaining = remaining[ok]
    return tuple(statuses)


def reasons_of(statuses: Sequence[Status]) -> list[Reason]:
    return [r for s in statuses if not s.ok for r in s.reasons]


def weighted_score(
    scores: Sequence[Score], config: PlacementConfig, pod: WorkloadSpec, view: ScoreView, nodes: np.ndarray
) -> np.ndarray:
    """``sum_i w_i * score_i(nodes)``; a zero weight skips its term."""
    total = np.zeros(len(nodes))
    for s in scores:
        w = config.weight(s.name)
        if w:
            total += w * s.score(pod, view, nodes)
    return total
