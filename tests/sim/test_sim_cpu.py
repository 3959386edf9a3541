"""CPU in the simulator: the kernel's contention by weight (the quotas are the core round's)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

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
    # a row wanting w cores runs ceil(w) tasks; with a core per task nobody waits, else someone does
    tasks = sum(np.ceil(want))
    assert (psi[0] == 0.0) if tasks <= cap else (psi[0] > 0.0)


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
    # nodes 0 and 1: twice as many tasks as cores, wanting twice the capacity; node 2: a core to spare
    assert psi[0] > 0.9 and psi[1] > 0.9 and psi[2] == 0.0


def test_pressure_is_zero_with_a_cpu_per_task_and_grows_with_load_and_tasks():
    cap = np.full(6, 8.0)
    psi = cpu.pressure_some(cap, np.array([8.0, 16, 16, 16, 32, 32]), np.array([7.9, 4, 6, 7.9, 6, 7.9]))
    assert psi[0] == 0.0  # a CPU each: nobody queues, however busy
    assert 0.0 < psi[1] < psi[2] < psi[3] < 1.0  # more load, more waiting
    assert psi[4] > psi[2] and psi[5] > psi[3]  # more tasks on the same load, more waiting


def test_pressure_is_the_open_queues_with_many_tasks_and_nearly_all_past_saturation():
    # many tasks per CPU: M/M/1, where someone waits whenever two are in the system, u^2
    psi = cpu.pressure_some(np.array([1.0, 1.0]), np.array([200.0, 200.0]), np.array([0.5, 3.0]))
    assert psi[0] == pytest.approx(0.25, abs=0.01)
    assert psi[1] > 0.97


@given(
    cap=st.floats(0.5, 128.0),
    tasks=st.floats(0.0, 2000.0),
    want=st.floats(0.0, 500.0),
    more=st.floats(0.0, 50.0),
)
def test_pressure_is_a_share_and_never_falls_as_load_rises(cap, tasks, want, more):
    c = np.array([cap, cap])
    psi = cpu.pressure_some(c, np.array([tasks, tasks]), np.array([want, want + more]))
    assert 0.0 <= psi[0] <= psi[1] + 1e-12 <= 1.0 + 1e-12
