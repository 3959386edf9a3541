"""Memory: whom the kernel's OOM killer takes (which nodes the round must see is the core's)."""

from __future__ import annotations

import numpy as np
import pytest

from kalena.core.resources import NDIM, RAM
from kalena.sim import memory

INF = np.inf


# (id, is_batch, usage, limit, capacity, killed rows in order)
OOM = [
    ("fits", [True, False], [3, 4], [INF, INF], 10, []),
    ("batch-before-production", [False, True, True], [6, 3, 4], [INF, INF, INF], 10, [2]),
    ("then-production-largest-first", [False, False], [6, 7], [INF, INF], 10, [1]),
    ("own-limit-first-whatever-the-node", [False, True], [3, 2], [2.5, INF], 10, [0]),
]


@pytest.mark.parametrize(
    ("batch", "use", "limit", "cap", "killed"), [c[1:] for c in OOM], ids=[c[0] for c in OOM]
)
def test_oom_victims(batch, use, limit, cap, killed):
    n = len(use)
    u = np.zeros((n, NDIM))
    u[:, RAM] = use
    lim = np.full((n, NDIM), INF)
    lim[:, RAM] = limit
    capacity = np.full(NDIM, INF)
    capacity[RAM] = cap
    got = memory.oom_victims(np.arange(n), np.array(batch), u, lim, capacity)
    assert got == killed
