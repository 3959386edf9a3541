"""Memory on the simulated nodes: the kernel's OOM killer (the evictions are the core round's).

**Kernel OOM.** A node whose memory rose past capacity faster than the node agent can free any
(``Simulation._kernel_first``, before the round), or whose memory usage still exceeds capacity
after the round's evictions, has the kernel's OOM killer pick victims, the highest "badness"
first, until usage fits. The kernel's badness is a process's memory plus ``oom_score_adj / 1000``
of the memory it may use; the kubelet sets ``oom_score_adj`` from the pod's QoS class, and every
simulated pod is Burstable (it requests memory, and the simulator sets no cpu limits), whose
``oom_score_adj`` is ``1000 - 1000 * request / capacity``. So the victim is the pod furthest above
its own request, batch or production: measured so on real cgroups
(``params/contention/memory-512mib.json``: a production process above its request is taken
before a batch process within its own). A production pod above its own memory limit is killed by
its cgroup (``memory.max``) if the plan did not stop it first. Each production kill is a
production OOM kill in the report.
"""

from __future__ import annotations

import numpy as np

from kalena.core.resources import NON_COMPRESSIBLE_DIMS as NC  # ram, storage

#: The kubelet's ``oom_score_adj`` for Guaranteed pods and BestEffort ones (its ``qos/policy.go``);
#: a Burstable pod's lies strictly between, in [3, 999].
GUARANTEED_OOM_SCORE_ADJ = -997
BEST_EFFORT_OOM_SCORE_ADJ = 1000


def kubelet_oom_score_adj(request: np.ndarray | float, capacity: np.ndarray | float = 1.0) -> np.ndarray:
    """The kubelet's ``oom_score_adj`` for a Burstable pod requesting ``request`` of ``capacity`` memory.

    ``1000 - 1000 * request / capacity`` in whole numbers, kept above Guaranteed's and below
    BestEffort's (a request of 0 gives 999).
    """
    adj = 1000.0 - np.floor(1000.0 * np.asarray(request, dtype=np.float64) / capacity)
    adj = np.maximum(adj, 1000.0 + GUARANTEED_OOM_SCORE_ADJ)
    return np.where(adj >= BEST_EFFORT_OOM_SCORE_ADJ, BEST_EFFORT_OOM_SCORE_ADJ - 1.0, adj)


def oom_victims(
    rows: np.ndarray, request: np.ndarray, usage: np.ndarray, limit: np.ndarray, capacity: np.ndarray
) -> list[int]:
    """Rows the kernel kills on one node: own-limit breaches, then overflow (module docstring).

    ``rows`` are the node's live rows; ``request``/``usage``/``limit`` are indexed by row,
    ``capacity`` is (8,). On the dimension most over capacity, each pod's badness is its usage plus
    its ``oom_score_adj`` share of the capacity; the highest goes first (ties: the lower row).
    """
    killed: list[int] = []
    u = np.nan_to_num(usage[rows][:, NC], nan=0.0)
    over_limit = np.any(u > limit[rows][:, NC], axis=1)
    alive = ~over_limit
    killed.extend(int(r) for r in rows[over_limit])
    total = u[alive].sum(axis=0)
    cap = capacity[NC]
    if np.all(total <= cap):
        return killed
    worst = int(np.argmax(total - cap))
    live = np.flatnonzero(alive)
    c = cap[worst]
    badness = u[live, worst] + kubelet_oom_score_adj(request[rows[live], NC[worst]], c) * c / 1000.0
    for i in live[np.lexsort((rows[live], -badness))].tolist():
        if np.all(total <= cap):
            break
        total -= u[i]
        killed.append(int(rows[i]))
    return killed
