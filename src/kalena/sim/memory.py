"""Memory on the simulated nodes: which nodes the core's eviction policy must see, and the kernel's OOM.

**Screen** (vectorised over nodes, per non-compressible dimension d in ram, storage): with the
core's effective reservation ``r' = max(r, u)`` (``u`` missing -> ``r``),

    breached_n = sum r'_nd > C~_nd        over_n = sum u_nd > C_nd        high_n = sum u_nd > h * C_nd

The core's ``plan_evictions`` is called on every breached node (an over-capacity node is breached
too, and only there can its plan name a victim or report the ledger unresolved); ``high`` is the
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
    reservation_sum: np.ndarray,
    capacity_tol: np.ndarray,
) -> np.ndarray:
    """(N, len(DIMS_NC)) bool: the breached nodes of the module formula.

    ``sum r' = U + sum max(0, u - r)`` with ``U`` the ledger's reservation sums, so only the rows
    using more than their reservation are summed. A node over capacity is breached too
    (``sum u <= sum r'``), so this is every node the eviction policy must see. A dimension no node
    constrains (capacity ``inf`` everywhere, as Irina's storage) is skipped.
    """
    n = len(capacity_tol)
    out = np.zeros((n, len(DIMS_NC)), dtype=bool)
    for j, d in enumerate(DIMS_NC):
        if not np.isfinite(capacity_tol[:, d]).any():
            continue
        u, r = usage[live, d], reservation[live, d]
        above = u > r  # NaN (no sample) compares False: r' = r
        excess = np.bincount(node[live[above]], weights=u[above] - r[above], minlength=n)
        out[:, j] = reservation_sum[:, d] + excess > capacity_tol[:, d]
    return out


def node_pressure(
    usage: np.ndarray, capacity: np.ndarray, memory_high: float
) -> tuple[np.ndarray, np.ndarray]:
    """(over, high) of one node from its rows' usage (W, 8): ``sum u > C`` and ``sum u > h * C``."""
    use = np.nansum(usage[:, DIMS_NC], axis=0)
    cap = capacity[DIMS_NC]
    return use > cap, use > memory_high * cap


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
