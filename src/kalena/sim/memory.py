"""Memory on the simulated nodes: the kernel's OOM killer (the evictions are the core round's).

**Kernel OOM.** A node whose memory rose past capacity faster than the node agent can free any
(``Simulation._kernel_first``, before the round), or whose memory usage still exceeds capacity
after the round's evictions, has the kernel's OOM killer pick victims: batch first (Kubernetes
gives lower-priority pods a higher ``oom_score_adj``), larger usage first, then production, larger
usage first, until usage fits. A production pod above its own memory limit is killed by its
cgroup (``memory.max``) if the plan did not stop it first. Each production kill is a production
OOM kill in the report.
"""

from __future__ import annotations

import numpy as np

from kalena.core.resources import NON_COMPRESSIBLE

DIMS_NC = np.flatnonzero(NON_COMPRESSIBLE)


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
