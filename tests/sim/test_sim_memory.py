"""Memory: whom the kernel's OOM killer takes (which nodes the round must see is the core's)."""

from __future__ import annotations

import numpy as np
import pytest

from kalena.core.resources import NDIM, RAM
from kalena.sim import memory

INF = np.inf


# (id, memory request, usage, limit, capacity, killed rows in order)
OOM = [
    ("fits", [3, 4], [3, 4], [INF, INF], 10, []),
    ("furthest-above-its-request-first", [6, 2, 1], [6, 3, 4], [INF, INF, INF], 10, [2]),
    ("production-above-its-request-before-batch-within-its-own", [4, 5], [7, 4], [INF, INF], 10, [0]),
    ("until-it-fits", [1, 1, 1], [4, 5, 7], [INF, INF, INF], 8, [2, 1]),
    ("ties-to-the-lower-row", [1, 1], [6, 6], [INF, INF], 10, [0]),
    ("own-limit-first-whatever-the-node", [3, 2], [3, 2], [2.5, INF], 10, [0]),
]


@pytest.mark.parametrize(
    ("request_", "use", "limit", "cap", "killed"), [c[1:] for c in OOM], ids=[c[0] for c in OOM]
)
def test_oom_victims(request_, use, limit, cap, killed):
    n = len(use)
    u = np.zeros((n, NDIM))
    u[:, RAM] = use
    req = np.zeros((n, NDIM))
    req[:, RAM] = request_
    lim = np.full((n, NDIM), INF)
    lim[:, RAM] = limit
    capacity = np.full(NDIM, INF)
    capacity[RAM] = cap
    got = memory.oom_victims(np.arange(n), req, u, lim, capacity)
    assert got == killed


@pytest.mark.parametrize(
    ("share", "adj"),
    [(0.0, 999), (0.1, 900), (0.5, 500), (0.9995, 3), (1.0, 3), (2.0, 3), (0.1234, 877)],
)
def test_kubelet_oom_score_adj_is_the_burstable_formula_kept_between_guaranteed_and_best_effort(share, adj):
    assert int(memory.kubelet_oom_score_adj(share)) == adj
    assert int(memory.kubelet_oom_score_adj(share * 64.0, 64.0)) == adj
