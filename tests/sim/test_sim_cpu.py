"""CPU in the simulator: the kernel's contention by weight (the quotas are the core round's)."""

from __future__ import annotations

import numpy as np
import pytest

from kalena.sim import cpu

# (id, capacity, wants, weights, granted)
CONTENTION = [
    ("fits-untouched", 10.0, [2.0, 3.0], [1.0, 1.0], [2.0, 3.0]),
    ("equal-weights-share-evenly", 4.0, [4.0, 4.0], [1.0, 1.0], [2.0, 2.0]),
    ("weights-favour-production", 10.0, [10.0, 10.0], [79.0, 1.0], [9.875, 0.125]),
    ("small-want-keeps-all", 10.0, [1.0, 20.0], [1.0, 1.0], [1.0, 9.0]),
]


@pytest.mark.parametrize(
    ("cap", "want", "weight", "granted"), [c[1:] for c in CONTENTION], ids=[c[0] for c in CONTENTION]
)
def test_contention_is_weighted_max_min_fairness(cap, want, weight, granted):
    live = np.arange(len(want))
    got, psi = cpu.contend(
        live, np.zeros(len(want), dtype=np.int64), np.array(want), np.array(weight), np.array([cap])
    )
    assert got.tolist() == pytest.approx(granted)
    assert psi[0] == pytest.approx(max(0.0, 1 - cap / sum(want)))


def test_contention_leaves_rows_outside_live_alone():
    want = np.array([5.0, 5.0, 7.0])
    got, _ = cpu.contend(np.array([0, 1]), np.zeros(3, dtype=np.int64), want, np.ones(3), np.array([6.0]))
    assert got.tolist() == pytest.approx([3.0, 3.0, 7.0])


def test_contention_shares_every_overfull_node_at_once():
    """Several over-full nodes in one call give each node what it alone would get."""
    want = np.array([4.0, 4.0, 10.0, 10.0, 1.0])
    weight = np.array([1.0, 1.0, 79.0, 1.0, 1.0])
    node = np.array([0, 0, 1, 1, 2])
    got, psi = cpu.contend(np.arange(5), node, want, weight, np.array([4.0, 10.0, 8.0]))
    assert got.tolist() == pytest.approx([2.0, 2.0, 9.875, 0.125, 1.0])
    assert psi.tolist() == pytest.approx([0.5, 0.5, 0.0])
