"""Why a batch workload stays pending, as data (SPEC: Placement of batch).

Beyond the per-node statuses and the kube-scheduler style sentence, the answer names the
**binding dimension**. Candidate nodes are those that pass every filter except the
reservation-ledger fit. Over them, dimension ``d`` binds on node ``n`` when
``U_n[d] + R[d] > C_n[d]``. The binding dimension is the one that binds on the most candidates
(ties: :data:`~kalena.core.resources.DIMS` order, since margins in different units do not
compare); the answer also gives its **margin** (the smallest shortfall ``U + R - C`` on it over
the nodes where it binds) and the **request that would fit**: the largest value of ``R[d]`` that
fits on some candidate node where every other dimension already fits, ``max (C_n[d] - U_n[d])``
over those nodes (``None`` when there is no such node).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kalena.core.ledger.fit import tolerant_capacity
from kalena.core.resources import DIMS, NDIM
from kalena.core.verdict import Reason, Status


@dataclass(frozen=True, slots=True)
class BindingDimension:
    dimension: str
    nodes: int  # candidate nodes on which this dimension does not fit
    margin: float  # smallest shortfall U + R - C on it, over those nodes
    fits_request: float | None  # largest request on it that fits somewhere else-feasible


@dataclass(frozen=True, slots=True)
class WhyPending:
    workload_id: str
    total_nodes: int
    available: int
    statuses: tuple[Status, ...]  # one per node index; the plugin that rejected it is stamped
    binding: BindingDimension | None  # None: no node passes the non-resource filters
    message: str  # render_reasons(...): "0/186 nodes are available: 3 Insufficient ram, ..."

    @property
    def reasons(self) -> tuple[Reason, ...]:
        return tuple(r for s in self.statuses if not s.ok for r in s.reasons)

    def of(self, workload_id: str) -> WhyPending:
        """The same answer for another pod of the class (``dataclasses.replace``, without its cost)."""
        return WhyPending(
            workload_id, self.total_nodes, self.available, self.statuses, self.binding, self.message
        )


def binding_sort_key(nodes: int, dim: int) -> tuple[int, int]:
    """Most candidate nodes first; then dimension order (a fixed tie-break)."""
    return (-nodes, dim)


def binding_dimension(request: np.ndarray, used: np.ndarray, capacity: np.ndarray) -> BindingDimension | None:
    """The binding dimension over candidate nodes ``used``/``capacity`` ``(k, 8)`` (module docstring)."""
    if not len(used):
        return None
    over = used + request > tolerant_capacity(capacity)
    counts = over.sum(axis=0)
    if not counts.any():
        return None
    d = min((i for i in range(NDIM) if counts[i]), key=lambda i: binding_sort_key(int(counts[i]), i))
    margin = float((used[over[:, d], d] + request[d] - capacity[over[:, d], d]).min())
    others_fit = ~np.delete(over, d, axis=1).any(axis=1)
    fits: float | None = None
    if others_fit.any():
        free = capacity[others_fit, d] - used[others_fit, d]
        room = tolerant_capacity(capacity[others_fit, d]) - used[others_fit, d]
        if (room >= 0).any():
            fits = max(0.0, float(free[room >= 0].max()))
    return BindingDimension(DIMS[d], int(counts[d]), margin, fits)
