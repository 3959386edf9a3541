"""CPU on the simulated nodes: contention, the kernel's part (the quotas are the core round's).

**Contention.** Each row wants ``w`` cores: production its demand (under an anti-starvation cap, if
one applies), batch ``min(demand, quota)``. Where a node's wants exceed its capacity ``C``, the CFS
scheduler shares ``C`` in proportion to cgroup ``cpu.weight`` (production from its request, batch at
the core's minimal ``batch_weight``), nobody above its want: weighted max-min fairness, computed by
the core's :func:`~kalena.core.enforcement.throttle.water_fill_groups` for all over-full nodes at
once. Production demand left unmet is recorded.
The node's cpu PSI ``some`` is modelled as the share of wanted cpu time that waited,
``psi = max(0, 1 - C / sum w)``.
"""

from __future__ import annotations

import numpy as np

from kalena.core.enforcement.throttle import water_fill_groups
from kalena.core.tolerance import REL_TOL


def contend(
    live: np.ndarray, node: np.ndarray, want: np.ndarray, weight: np.ndarray, capacity: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(granted cpu per row, psi ``some`` per node): module formula; rows outside ``live`` untouched."""
    n = len(capacity)
    total = np.bincount(node[live], weights=want[live], minlength=n)
    granted = want.copy()
    psi = np.zeros(n)
    over = total > capacity * (1.0 + REL_TOL)
    if over.any():
        psi[over] = 1.0 - capacity[over] / total[over]
        rows = live[over[node[live]]]
        granted[rows] = water_fill_groups(capacity, node[rows], want[rows], weight[rows])
    return granted, psi
