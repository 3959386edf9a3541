"""PeakWithMargin's incremental top-k (issue 15, item 4) equals the full sort of the window, bit for bit.

The reference is the estimator itself with its cache switched off (``top`` of width 0 makes the
update take the full sort), fed the same stream: random usage with ties (values on a coarse grid),
missing samples, rows in their startup grace, windows shorter and longer than the stream, low and
high quantiles, and rows replaced or appended mid-stream.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from kalena.core.estimators import PeakParams, PeakWithMargin
from kalena.core.estimators.base import append_rows, assign_rows, copy_state
from kalena.core.estimators.peak import SPARE_TOP, PeakState, full_sort, rebuild_top, top_of
from kalena.core.resources import NDIM


def without_cache(state: PeakState) -> PeakState:
    return full_sort(copy_state(state))


@settings(max_examples=60, deadline=None)
@given(
    window=st.integers(1, 40),
    quantile=st.sampled_from([0.99, 0.95, 0.9, 1.0, 0.999]),
    rows=st.integers(1, 12),
    steps=st.integers(1, 120),
    seed=st.integers(0, 2**31 - 1),
    p_missing=st.sampled_from([0.0, 0.1, 0.5]),
)
def test_the_cache_gives_the_full_sort(window, quantile, rows, steps, seed, p_missing):
    params = PeakParams(window=window, quantile=quantile)
    est = PeakWithMargin(params)
    rng = np.random.default_rng(seed)
    req = np.full((rows, NDIM), 4.0)
    grace_until = rng.choice([0.0, 100.0], size=rows)
    fast = est.init(req, np.full((rows, NDIM), np.inf), np.zeros(rows), grace=grace_until)
    assert params.top_needed() <= fast.top.shape[2] <= params.top_needed() + SPARE_TOP
    slow = without_cache(fast)
    for i in range(steps):
        usage = np.round(rng.gamma(2.0, 1.0, size=(rows, NDIM)), 1)  # a coarse grid: many ties
        usage[rng.random((rows, NDIM)) < p_missing] = np.nan
        now = 10.0 * i
        r_fast = est.update_in_place(fast, usage, now, 10.0).copy()
        r_slow = est.update_in_place(slow, usage, now, 10.0)
        assert np.array_equal(r_fast, r_slow, equal_nan=True), i
        if i == steps // 2:  # a departed workload's row reused for an arrival, and one more row
            fresh = est.init(req[:1], np.full((1, NDIM), np.inf), [now])
            assign_rows(fast, [0], fresh)
            assign_rows(slow, [0], without_cache(fresh))
            fast = append_rows(fast, est.init(req[:1], np.full((1, NDIM), np.inf), [now]))
            slow = append_rows(slow, without_cache(est.init(req[:1], np.full((1, NDIM), np.inf), [now])))
            rows += 1


def test_a_low_quantile_keeps_the_full_sort():
    state = PeakWithMargin(PeakParams(window=90, quantile=0.5)).init(np.ones((2, NDIM)), np.inf, [0.0, 0.0])
    assert state.top.shape[2] == 0


def test_top_of_orders_and_pads():
    w = np.array([[3.0, np.nan, 5.0, 1.0], [np.nan, np.nan, np.nan, 2.0]], dtype=np.float32)
    vals, slots = top_of(w, 3)
    assert vals.tolist() == [[5.0, 3.0, 1.0], [2.0, -np.inf, -np.inf]]
    assert slots.tolist() == [[2, 0, 3], [3, -1, -1]]
    vals, slots = top_of(w[:, :2], 3)  # a window shorter than k
    assert vals.tolist() == [[3.0, -np.inf, -np.inf], [-np.inf, -np.inf, -np.inf]]
    assert slots.tolist() == [[0, -1, -1], [-1, -1, -1]]


def test_a_window_written_directly_is_read_again_by_rebuild_top():
    est = PeakWithMargin(PeakParams(window=10))
    state = est.init(np.ones((3, NDIM)), np.inf, np.zeros(3), grace=0.0)
    rng = np.random.default_rng(0)
    state.window[...] = rng.uniform(0, 2, state.window.shape)  # (K, W, 8)
    state.n_valid[...] = 10
    slow = full_sort(copy_state(state))
    rebuild_top(state)
    u = rng.uniform(0, 2, (3, NDIM))
    assert np.array_equal(est.update_in_place(state, u, 0.0, 10.0), est.update_in_place(slow, u, 0.0, 10.0))
