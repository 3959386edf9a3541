"""Memory: which nodes the core's eviction policy sees, and whom the kernel's OOM killer takes."""

from __future__ import annotations

import numpy as np
import pytest

from kalena.core.resources import NDIM, RAM
from kalena.sim import memory

INF = np.inf


def _rows(res, use):
    n = len(res)
    r = np.zeros((n, NDIM))
    u = np.zeros((n, NDIM))
    r[:, RAM], u[:, RAM] = res, use
    return r, u


# (id, reservations, usages, capacity, breached, over, high)
SCREEN = [
    ("calm", [4, 4], [3, 3], 10, False, False, False),
    ("usage-above-reservation-breaches", [4, 4], [6.5, 3.2], 10, True, False, True),
    ("over-capacity", [4, 4], [6, 5], 10, True, True, True),
    ("memory-high-only", [5, 5], [5, 4.6], 10, False, False, True),
    ("missing-sample-counts-reservation", [6, 5], [np.nan, 3], 10, True, False, False),
]


@pytest.mark.parametrize(
    ("res", "use", "cap", "breached", "over", "high"), [c[1:] for c in SCREEN], ids=[c[0] for c in SCREEN]
)
def test_screen_and_node_pressure(res, use, cap, breached, over, high):
    r, u = _rows(res, use)
    capacity = np.full((1, NDIM), INF)
    capacity[0, RAM] = cap
    rows = np.arange(len(res))
    flagged = memory.screen(rows, np.zeros(len(res), dtype=np.int64), r, u, r.sum(axis=0)[None], capacity)
    j = list(memory.DIMS_NC).index(RAM)
    assert flagged[0, j] == breached
    o, h = memory.node_pressure(u, capacity[0], 0.95)
    assert (o[j], h[j]) == (over, high)


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
