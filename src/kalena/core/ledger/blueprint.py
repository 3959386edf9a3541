"""The blueprint's production placement as arrays: what the restoration invariant compares against.

``Blueprint.of(nodes, workloads, placement)`` keeps, in workload order, every service-tier
workload the placement names: its id, node index and request. A shell builds it once from the
planner's documents and keeps it apart from the ledger, so that a bug that changed the ledger
cannot also change the yardstick.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from kalena.core.model import NodeSpec, Tier, WorkloadSpec
from kalena.core.resources import NDIM, stack


def node_lookup(nodes: Sequence[NodeSpec]) -> dict[str, int]:
    """Node name -> index; duplicate names are a configuration error."""
    index: dict[str, int] = {}
    for i, n in enumerate(nodes):
        if n.name in index:
            raise ValueError(f"node name {n.name!r} appears twice")
        index[n.name] = i
    return index


def resolve_production(
    nodes: Sequence[NodeSpec],
    workloads: Iterable[WorkloadSpec],
    placement: Mapping[str, str | int],
) -> list[tuple[WorkloadSpec, int]]:
    """(spec, node index) for every service-tier workload the placement names, in workload order.

    ``placement`` maps workload id to node name or index. Batch-tier workloads are not
    production and are skipped (Kalena places them); service workloads the placement leaves out
    are not running and are not in the ledger. A placement key that names no workload, a node
    that does not exist and a DaemonSet workload (its requests are already deducted from C_n in
    Phase 0) are errors naming the offender.
    """
    index = node_lookup(nodes)
    specs = list(workloads)
    known = {w.id for w in specs}
    unknown = sorted(k for k in placement if k not in known)
    if unknown:
        raise ValueError(f"placement names unknown workload(s): {', '.join(unknown[:5])}")
    out: list[tuple[WorkloadSpec, int]] = []
    for w in specs:
        if w.id not in placement or w.tier is not Tier.SERVICE:
            continue
        if w.is_daemonset:
            raise ValueError(
                f"workload {w.id!r} is a DaemonSet: it belongs to Phase 0 capacity, not the ledger"
            )
        target = placement[w.id]
        if isinstance(target, str):
            if target not in index:
                raise ValueError(f"placement puts {w.id!r} on unknown node {target!r}")
            n = index[target]
        else:
            n = int(target)
            if not 0 <= n < len(nodes):
                raise ValueError(f"placement puts {w.id!r} on node index {n}, outside 0..{len(nodes) - 1}")
        out.append((w, n))
    return out


def per_node_sum(node: np.ndarray, values: np.ndarray, n_nodes: int) -> np.ndarray:
    """``S[n] = sum of values[i] over rows i with node[i] == n``, shape ``(n_nodes, 8)``."""
    out = np.zeros((n_nodes, NDIM), dtype=np.float64)
    if len(node):
        # One bincount per dimension: ~10x faster than np.add.at for 100k rows.
        for d in range(NDIM):
            out[:, d] = np.bincount(node, weights=values[:, d], minlength=n_nodes)
    return out


@dataclass(frozen=True, eq=False)
class Blueprint:
    """Production ids, node indices ``(P,)`` and requests ``(P, 8)``, plus per-node request sums."""

    ids: tuple[str, ...]
    node: np.ndarray
    requests: np.ndarray
    n_nodes: int
    request_sum: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        node = np.array(self.node, dtype=np.int64).reshape(-1)
        req = np.array(self.requests, dtype=np.float64).reshape(-1, NDIM)
        if not len(self.ids) == len(node) == len(req):
            raise ValueError("blueprint ids, nodes and requests must have the same length")
        total = per_node_sum(node, req, self.n_nodes)
        for arr in (node, req, total):
            arr.setflags(write=False)
        object.__setattr__(self, "node", node)
        object.__setattr__(self, "requests", req)
        object.__setattr__(self, "request_sum", total)

    @classmethod
    def of(
        cls,
        nodes: Sequence[NodeSpec],
        workloads: Iterable[WorkloadSpec],
        placement: Mapping[str, str | int],
    ) -> Blueprint:
        pairs = resolve_production(nodes, workloads, placement)
        return cls(
            ids=tuple(w.id for w, _ in pairs),
            node=np.array([n for _, n in pairs], dtype=np.int64),
            requests=stack(w.requests for w, _ in pairs),
            n_nodes=len(nodes),
        )
