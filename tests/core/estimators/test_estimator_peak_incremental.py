"""PeakWithMargin's sliding top-k (issue 15, item 4: van Herk/Gil-Werman prefix and suffix) equals the
full sort of the window, bit for bit.

The reference is the estimator itself with the top-k switched off (a state with k = 0 columns makes
the update sort the window), fed the same stream: random usage with ties (values on a coarse grid),
missing samples, rows in their startup grace, windows shorter and longer than the stream (so zero,
one or many flips), low and high quantiles (some beyond the top-k, which keep the full sort), and
rows replaced or appended mid-stream at any head.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kalena.core.estimators import PeakParams, PeakWithMargin
from kalena.core.estimators.base import append_rows, assign_rows, copy_state, select_rows
from kalena.core.estimators.peak import MAX_TOP, PeakState, _insert, _merge, full_sort, rebuild
from kalena.core.resources import NDIM

NAN = np.nan


def without_top(state: PeakState) -> PeakState:
    return full_sort(copy_state(state))


def top_k(values: list[float], k: int) -> list[float]:
    """The reference: the k largest non-NaN values, descending, padded with NaN."""
    kept = sorted((v for v in values if not np.isnan(v)), reverse=True)[:k]
    return kept + [NAN] * (k - len(kept))


def as_top(lists: list[list[float]]) -> np.ndarray:
    """(k, m) float32 from m lists of k values (the layout of ``prefix``, one row per cell)."""
    return np.array(lists, dtype=np.float32).T.copy()


@settings(max_examples=80, deadline=None)
@given(
    window=st.integers(1, 40),
    quantile=st.sampled_from([0.99, 0.95, 0.9, 1.0, 0.999, 0.5, 0.0]),
    rows=st.integers(1, 12),
    steps=st.integers(1, 120),
    seed=st.integers(0, 2**31 - 1),
    p_missing=st.sampled_from([0.0, 0.1, 0.5]),
)
def test_the_sliding_top_k_gives_the_full_sort(window, quantile, rows, steps, seed, p_missing):
    params = PeakParams(window=window, quantile=quantile)
    est = PeakWithMargin(params)
    rng = np.random.default_rng(seed)
    req = np.full((rows, NDIM), 4.0)
    grace_until = rng.choice([0.0, 100.0], size=rows)
    fast = est.init(req, np.full((rows, NDIM), np.inf), np.zeros(rows), grace=grace_until)
    k = params.top_needed()
    assert fast.prefix.shape[0] == (k if k <= MAX_TOP else 0)  # 0: a low quantile keeps the full sort
    slow = without_top(fast)
    swap_at = int(rng.integers(0, steps))
    for i in range(steps):
        usage = np.round(rng.gamma(2.0, 1.0, size=(rows, NDIM)), 1)  # a coarse grid: many ties
        usage[rng.random((rows, NDIM)) < p_missing] = np.nan
        now = 10.0 * i
        r_fast = est.update_in_place(fast, usage, now, 10.0).copy()
        r_slow = est.update_in_place(slow, usage, now, 10.0)
        assert np.array_equal(r_fast, r_slow, equal_nan=True), i
        if i == swap_at:  # a departed workload's row reused for an arrival, and one more row
            fresh = est.init(req[:1], np.full((1, NDIM), np.inf), [now])
            assign_rows(fast, [0], fresh)
            assign_rows(slow, [0], without_top(fresh))
            fast = append_rows(fast, est.init(req[:1], np.full((1, NDIM), np.inf), [now], grace=0.0))
            slow = append_rows(
                slow, without_top(est.init(req[:1], np.full((1, NDIM), np.inf), [now], grace=0.0))
            )
            rows += 1
            req = np.full((rows, NDIM), 4.0)


def test_a_low_quantile_keeps_the_full_sort():
    state = PeakWithMargin(PeakParams(window=90, quantile=0.5)).init(np.ones((2, NDIM)), np.inf, [0.0, 0.0])
    assert state.prefix.shape == (0, 2, NDIM) and state.suffix.shape == (90, 0, 2, NDIM)


def test_the_default_keeps_the_top_two_of_each_slot_suffix():
    state = PeakWithMargin().init(np.ones((3, NDIM)), np.inf, np.zeros(3))
    assert state.window.shape == (90, 3, NDIM)
    assert state.prefix.shape == (2, 3, NDIM) and state.suffix.shape == (90, 2, 3, NDIM)
    assert np.isnan(state.prefix).all() and np.isnan(state.suffix).all()


@pytest.mark.parametrize(
    ("before", "v"),
    [
        ([5.0, 3.0, 1.0], 4.0),  # in the middle
        ([5.0, 3.0, 1.0], 9.0),  # on top
        ([5.0, 3.0, 1.0], 0.5),  # below all: not kept
        ([5.0, 3.0, 3.0], 3.0),  # a tie
        ([5.0, NAN, NAN], 2.0),  # a short list grows
        ([5.0, NAN, NAN], 7.0),
        ([NAN, NAN, NAN], 2.0),  # an empty list
        ([5.0, 3.0, NAN], NAN),  # no sample: unchanged
        ([NAN, NAN, NAN], NAN),
    ],
)
def test_insert_keeps_the_k_largest_with_nan_as_absent(before, v):
    top = as_top([top_k(before, 3), top_k(before, 3)])
    new = np.array([v, NAN], dtype=np.float32)  # the second cell gets no sample: unchanged
    out = np.empty_like(top)
    _insert(top, new, out)  # out of place
    _insert(top, new, top, tmp=np.empty(2, np.float32))  # in place
    want = as_top([top_k([*before, v], 3), top_k(before, 3)])
    assert np.array_equal(out, want, equal_nan=True) and np.array_equal(top, want, equal_nan=True)


@settings(max_examples=200, deadline=None)
@given(
    k=st.integers(1, MAX_TOP),
    a=st.lists(st.sampled_from([0.0, 1.0, 2.0, 2.5, 7.0, NAN]), max_size=12),
    b=st.lists(st.sampled_from([0.0, 1.0, 2.0, 2.5, 7.0, NAN]), max_size=12),
)
def test_merge_is_the_top_k_of_the_union(k, a, b):
    out = np.empty((k, 1), np.float32)
    _merge(as_top([top_k(a, k)]), as_top([top_k(b, k)]), out)
    assert np.array_equal(out, as_top([top_k(a + b, k)]), equal_nan=True)


@pytest.mark.parametrize("head", [0, 1, 6, 9])
def test_a_window_written_directly_is_read_again_by_rebuild(head):
    est = PeakWithMargin(PeakParams(window=10))
    state = est.init(np.ones((3, NDIM)), np.inf, np.zeros(3), grace=0.0)
    rng = np.random.default_rng(head)
    state.window[...] = rng.uniform(0, 2, state.window.shape)  # (K, W, 8)
    state.window[rng.random(state.window.shape) < 0.2] = np.nan
    state.n_valid[...] = (~np.isnan(state.window)).sum(axis=0)
    state.head = head
    slow = without_top(state)
    rebuild(state)
    for t in range(25):  # past the next flip and the one after
        u = rng.uniform(0, 2, (3, NDIM))
        assert np.array_equal(
            est.update_in_place(state, u, t, 10.0), est.update_in_place(slow, u, t, 10.0)
        ), t


def test_selected_rows_keep_their_top_k():
    est = PeakWithMargin(PeakParams(window=5))
    state = est.init(np.ones((4, NDIM)), np.inf, np.zeros(4), grace=0.0)
    rng = np.random.default_rng(1)
    for t in range(7):  # one flip, head at 2
        est.update_in_place(state, rng.uniform(0, 2, (4, NDIM)), t, 10.0)
    kept = select_rows(state, [3, 1])
    assert kept.prefix.shape == (2, 2, NDIM) and kept.suffix.shape == (5, 2, 2, NDIM)
    assert np.array_equal(kept.suffix[:, :, 0], state.suffix[:, :, 3], equal_nan=True)
    slow = without_top(kept)
    for t in range(7, 20):
        u = rng.uniform(0, 2, (2, NDIM))
        assert np.array_equal(est.update_in_place(kept, u, t, 10.0), est.update_in_place(slow, u, t, 10.0))
