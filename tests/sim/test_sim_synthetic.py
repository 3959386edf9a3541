"""The scaling run's synthetic cluster: deterministic per seed, feasible, and one requests object
per request shape (the scheduler's class test is then identity, and the build does not make
100,000 of them)."""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import pytest

from kalena.core.resources import CPU, RAM
from kalena.sim.synthetic import IRINA_FILL, REQUEST_MIX, synthetic_cluster


def _layout(seed: int) -> list[tuple[str, str, tuple[float, ...]]]:
    c = synthetic_cluster(40, 600, seed=seed)
    return [(w.id, c.placement[w.id], tuple(w.requests.array().tolist())) for w in c.workloads]


def test_the_same_seed_builds_the_same_cluster_and_another_seed_another() -> None:
    assert _layout(7) == _layout(7)
    assert _layout(7) != _layout(8)


def test_every_pod_fits_its_node_and_the_requests_fill_about_the_asked_share_of_cpu() -> None:
    c = synthetic_cluster(60, 900, seed=1)
    used: dict[str, np.ndarray] = defaultdict(lambda: np.zeros(2))
    for w in c.workloads:
        used[c.placement[w.id]] += w.requests.array()[[CPU, RAM]]
    for node, u in used.items():
        cap = c.capacity[node].array()[[CPU, RAM]]
        assert (u <= cap + 1e-9).all(), node
    total = sum(c.capacity[n.name].array()[CPU] for n in c.nodes)
    placed = sum(u[0] for u in used.values())
    # the requests are scaled to fill IRINA_FILL of cpu; a pod that fits nowhere is left out
    assert placed / total == pytest.approx(IRINA_FILL, abs=0.05)


def test_pods_of_one_request_shape_share_one_requests_object_of_a_mix_shape() -> None:
    c = synthetic_cluster(30, 500, seed=2)
    by_value: dict[tuple[float, ...], set[int]] = defaultdict(set)
    for w in c.workloads:
        by_value[tuple(w.requests.array().tolist())].add(id(w.requests))
    assert all(len(objects) == 1 for objects in by_value.values())
    assert 1 < len(by_value) <= len(REQUEST_MIX)
    # every shape is a mix entry scaled by one common factor (cpu : ram as in the mix)
    ratios = {round(v[RAM] / v[CPU], 9) for v in by_value}
    assert ratios <= {round(ram / cpu, 9) for (cpu, ram), _ in REQUEST_MIX}
