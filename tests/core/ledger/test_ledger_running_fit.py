"""``running_fit``: one scan for all nodes gives, bit for bit, what a loop placing one pod after
another on each node gives (the ledger's batch admission and the simulator's Borg count rely on it)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from kalena.core.ledger import running_fit


def _loop(used: np.ndarray, nodes: np.ndarray, requests: np.ndarray, cap: np.ndarray):
    now = used.copy()
    running = np.empty_like(requests)
    for i, n in enumerate(nodes.tolist()):
        now[n] = now[n] + requests[i]
        running[i] = now[n]
    return running, (running <= cap[nodes]).all(axis=1)


@settings(max_examples=300, deadline=None)
@given(
    st.integers(1, 12),
    st.integers(0, 60),
    st.integers(1, 3),
    st.integers(0, 2**32 - 1),
)
def test_one_scan_equals_the_loop_bit_for_bit(n_nodes: int, k: int, dims: int, seed: int):
    rng = np.random.default_rng(seed)
    # awkward floats (thirds, tenths, large and small together) so that any other summation
    # order would round differently somewhere
    used = rng.random((n_nodes, dims)) * 10.0 ** rng.integers(-3, 4, (n_nodes, dims))
    requests = rng.integers(1, 30, (k, dims)) / rng.choice([3.0, 7.0, 10.0], (k, dims))
    nodes = rng.integers(0, n_nodes, k)
    cap = used + rng.random((n_nodes, dims)) * 20.0
    cap[rng.random((n_nodes, dims)) < 0.1] = np.inf
    got_running, got_fits = running_fit(used, nodes, requests, cap)
    want_running, want_fits = _loop(used, nodes, requests, cap)
    assert got_running.tobytes() == want_running.tobytes()
    assert np.array_equal(got_fits, want_fits)


def test_no_placement():
    running, fits = running_fit(
        np.zeros((3, 8)), np.zeros(0, dtype=np.int64), np.zeros((0, 8)), np.ones((3, 8))
    )
    assert running.shape == (0, 8) and fits.shape == (0,)


def test_one_crowded_node_takes_the_loop_with_the_same_sums():
    """Thousands of placements on one node and one on each of 2,000 others: a padded block would
    hold 2,001 x 3,001 rows, so the nodes are summed one at a time, bit for bit the same."""
    rng = np.random.default_rng(7)
    nodes = np.concatenate([np.zeros(3000, dtype=np.int64), np.arange(1, 2001)])
    rng.shuffle(nodes)
    requests = rng.integers(1, 30, (len(nodes), 2)) / 7.0
    used = rng.random((2001, 2)) * 10.0
    cap = used + 50.0
    got_running, got_fits = running_fit(used, nodes, requests, cap)
    want_running, want_fits = _loop(used, nodes, requests, cap)
    assert got_running.tobytes() == want_running.tobytes()
    assert np.array_equal(got_fits, want_fits) and not got_fits.all() and got_fits.any()
