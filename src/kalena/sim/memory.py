"""Memory on the simulated nodes: which nodes the core's eviction policy must see, and the kernel's OOM.

**Screen** (vectorised over nodes, per non-compressible dimension d in ram, storage): with the
core's effective reservation ``r' = max(r, u)`` (``u`` missing -> ``r``),

    breached_n = sum r'_nd > C~_nd        over_n = sum u_nd > C_nd        high_n = sum u_nd > h * C_nd

The core's ``plan_evictions`` is called on every node that is breached or over capacity (the only
nodes where its plan can name a victim or report the ledger unresolved); ``high`` is the
memory.high-like trigger passed in its conditions, and ``over`` marks the pressure acute.

**Kernel OOM.** After the plan is carried out, a node whose remaining memory usage still exceeds
capacity has the kernel's OOM killer pick victims: batch first (Kubernetes gives lower-priority
pods a higher ``oom_score_adj``), larger usage first, then production, larger usage first, until
usage fits. A production pod above its own memory limit is killed by its cgroup (``memory.max``)
if the plan did not stop it first. Each production kill is a production OOM kill in the report.
"""

from __future__ import annotations

import numpy as np

from kalena.core.enforcement import NodeConditions
from kalena.core.resources import NDIM, NON_COMPRESSIBLE

DIMS_NC = np.flatnonzero(NON_COMPRESSIBLE)


def screen(
    live: np.ndarray,
    node: np.ndarray,
    reservation: np.ndarray,
    usage: np.ndarray,
    capacity: np.ndarray,
    capacity_tol: np.ndarray,
    memory_high: float,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(breached | over, over, high), each (N, len(DIMS_NC)) bool: module formula.

    A dimension no node constrains (capacity ``inf`` everywhere, as Irina's storage) cannot be
    pressured and is skipped.
    """
    n = len(capacity)
    on = node[live]
    eff_sum = np.zeros((n, len(DIMS_NC)))
    use_sum = np.zeros((n, len(DIMS_NC)))
    for j, d in enumerate(DIMS_NC):
        if not np.isfinite(capacity[:, d]).any():
            continue
        u = usage[live, d]
        r = reservation[live, d]
        known = ~np.isnan(u)
        eff_sum[:, j] = np.bincount(on, weights=np.where(known, np.fmax(r, u), r), minlength=n)
        use_sum[:, j] = np.bincount(on, weights=np.where(known, u, 0.0), minlength=n)
    cap = capacity[:, DIMS_NC]
    over = use_sum > cap
    breached = eff_sum > capacity_tol[:, DIMS_NC]
    return breached | over, over, use_sum > memory_high * cap


def conditions(over: np.ndarray, high: np.ndarray) -> NodeConditions:
    """Snapshot conditions of one node from its screen rows ((len(DIMS_NC),) bool each)."""
    triggered = np.zeros(NDIM, dtype=bool)
    acute = np.zeros(NDIM, dtype=bool)
    triggered[DIMS_NC] = high | over
    acute[DIMS_NC] = over
    return NodeConditions(triggered=triggered, acute=acute)


def oom_victims(
    rows: np.ndarray, is_batch: np.ndarray, usage: np.ndarray, limit: np.ndarray, capacity: np.ndarray
) -> list[int]:
    """Rows the kernel kills on one node: own-limit breaches, then overflow (module docstring).

    ``rows`` are the node's live rows; ``usage``/``limit`` are indexed by row, ``capacity`` is (8,).
    """
    killed: list[int] = []
    u = np.nan_to_num(usage[rows][:, DIMS_NC], nan=0.0)
    over_limit = np.any(u > limit[rows][:, DIMS_NC], axis=1)
    alive = ~over_limit
    killed.extend(int(r) for r in rows[over_limit])
    total = u[alive].sum(axis=0)
    cap = capacity[DIMS_NC]
    if np.all(total <= cap):
        return killed
    # batch first (group 0), then production; larger usage on the worst dimension first; row tie-break
    worst = int(np.argmax(total - cap))
    order = sorted(np.flatnonzero(alive), key=lambda i: (not is_batch[rows[i]], -u[i, worst], int(rows[i])))
    for i in order:
        if np.all(total <= cap):
            break
        total -= u[i]
        killed.append(int(rows[i]))
    return killed
