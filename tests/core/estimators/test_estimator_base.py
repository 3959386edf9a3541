"""The shared estimator plumbing: input validation, per-call checks and row operations."""

from __future__ import annotations

import math

import numpy as np
import pytest

from kalena.core.estimators import (
    DecayEstimator,
    DecayingHistogram,
    PeakParams,
    PeakWithMargin,
    append_rows,
    assign_rows,
    copy_state,
    select_rows,
)
from kalena.core.estimators.histogram import HistogramState
from kalena.core.estimators.peak import PeakState
from kalena.core.resources import NDIM

ESTIMATORS = [DecayEstimator(), PeakWithMargin(), DecayingHistogram()]
IDS = ["decay", "peak", "histogram"]
ONES = np.ones((2, NDIM))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"requests": np.ones((2, 7))}, r"requests must have shape \(W, 8\), got \(2, 7\)"),
        ({"requests": [[1.0] * NDIM, [1.0, -1.0] + [1.0] * 6]}, r"requests\[1, ram\] must be .* got -1.0"),
        ({"requests": [[math.inf] * NDIM] * 2}, r"requests\[0, cpu\] must be a finite number >= 0, got inf"),
        ({"limits": np.full((2, NDIM), 0.5)}, r"limits\[0, cpu\] must be >= the request .* got 0.5"),
        ({"limits": np.ones((3, NDIM))}, r"limits must have shape \(2, 8\), got \(3, 8\)"),
        ({"started_at": [0.0, math.nan]}, r"started_at\[1\] must be a finite time in seconds, got nan"),
        ({"grace": [-1.0, 0.0]}, r"grace\[0\] must be a finite duration >= 0 s, got -1.0"),
        ({"pinned": [True]}, r"pinned must have shape \(2,\), got \(1,\)"),
    ],
    ids=["request-shape", "negative-request", "inf-request", "limit-below-request", "limit-rows", "nan-start",
         "negative-grace", "pinned-shape"],
)  # fmt: skip
@pytest.mark.parametrize("est", ESTIMATORS, ids=IDS)
def test_bad_input_names_key_and_value(est, kwargs: dict, message: str) -> None:
    args = {"requests": ONES, "limits": ONES * 2, "started_at": [0.0, 0.0], **kwargs}
    with pytest.raises(ValueError, match=message):
        est.init(args.pop("requests"), args.pop("limits"), args.pop("started_at"), **args)


@pytest.mark.parametrize(
    ("usage", "now", "dt", "message"),
    [
        (np.ones((3, NDIM)), 0.0, 10.0, r"usage must have shape \(2, 8\), got \(3, 8\)"),
        (ONES, math.nan, 10.0, "now must be a finite time in seconds, got nan"),
        (ONES, 0.0, -1.0, "dt must be a finite sample spacing >= 0 s, got -1.0"),
    ],
    ids=["usage-shape", "now-nan", "dt-negative"],
)
@pytest.mark.parametrize("est", ESTIMATORS, ids=IDS)
def test_bad_step_is_rejected(est, usage: np.ndarray, now: float, dt: float, message: str) -> None:
    state = est.init(ONES, ONES * 2, [0.0, 0.0])
    with pytest.raises(ValueError, match=message):
        est.update_in_place(state, usage, now, dt)


@pytest.mark.parametrize("est", ESTIMATORS, ids=IDS)
def test_defaults_start_at_the_request_with_a_300s_grace(est) -> None:
    state = est.init(ONES, ONES * 2, [100.0, 0.0])
    np.testing.assert_array_equal(state.reservation, ONES)
    assert state.grace_until.tolist() == [400.0, 300.0]
    assert not state.pinned.any()


@pytest.mark.parametrize("est", ESTIMATORS, ids=IDS)
def test_rows_can_be_appended_selected_and_copied_without_changing_the_other_rows(est) -> None:
    rng = np.random.default_rng(3)
    req = rng.uniform(0.5, 2.0, (5, NDIM))
    full = est.init(req, req * 3, np.zeros(5), grace=0.0)
    part = est.init(req[:3], req[:3] * 3, np.zeros(3), grace=0.0)
    for k in range(6):
        u = rng.uniform(0, 4, (5, NDIM))
        if k == 2:  # rows 3 and 4 join here with no history: feed them only from now on
            part = append_rows(part, est.init(req[3:], req[3:] * 3, np.zeros(2), grace=0.0))
            full = select_rows(full, np.arange(5))
        r_part = est.update_in_place(part, u[: part.n], 10.0 * k, 10.0)
        r_full = est.update_in_place(full, u, 10.0 * k, 10.0)
        np.testing.assert_array_equal(r_part[:3], r_full[:3])  # the old rows never notice
    before = full.reservation.copy()
    snapshot = copy_state(full)
    for now in (60.0, 70.0):  # two steps: the reservation and its spare buffer both get rewritten
        est.update_in_place(full, rng.uniform(0, 4, (5, NDIM)), now, 10.0)
    np.testing.assert_array_equal(snapshot.reservation, before)  # the copy is independent
    picked = select_rows(full, np.array([False, True, False, True, False]))
    np.testing.assert_array_equal(picked.reservation, full.reservation[[1, 3]])
    assert picked.n == 2


@pytest.mark.parametrize("est", ESTIMATORS, ids=IDS)
def test_an_assigned_row_starts_afresh_in_place_and_the_others_do_not_notice(est) -> None:
    rng = np.random.default_rng(5)
    req = rng.uniform(0.5, 2.0, (3, NDIM))
    state = est.init(req, req * 3, np.zeros(3), grace=0.0)
    untouched = est.init(req, req * 3, np.zeros(3), grace=0.0)
    arrival = None
    for k in range(6):
        u = rng.uniform(0, 4, (3, NDIM))
        if k == 3:  # a new workload reuses row 1
            assign_rows(state, [1], est.init(req[[2]], req[[2]] * 3, [30.0], grace=0.0))
            arrival = est.init(req[[2]], req[[2]] * 3, [30.0], grace=0.0)
        r = est.update_in_place(state, u, 10.0 * k, 10.0)
        r_untouched = est.update_in_place(untouched, u, 10.0 * k, 10.0)
        np.testing.assert_array_equal(r[[0, 2]], r_untouched[[0, 2]])
        if arrival is not None:
            np.testing.assert_array_equal(r[1], est.update_in_place(arrival, u[[1]], 10.0 * k, 10.0)[0])


def test_appending_rows_of_another_estimator_is_a_type_error() -> None:
    a = DecayEstimator().init(ONES, ONES, [0.0, 0.0])
    b = PeakWithMargin().init(ONES, ONES, [0.0, 0.0])
    with pytest.raises(TypeError, match="cannot combine PeakState rows with DecayState"):
        append_rows(a, b)


def test_rows_of_another_window_are_rejected_naming_the_field_and_both_shapes() -> None:
    """Peak states of windows 90 and 30: the rows' other axes differ (the ring is axis 0, rows 1)."""
    a = PeakWithMargin().init(ONES, ONES, [0.0, 0.0])
    b = PeakWithMargin(PeakParams(window=30)).init(ONES[:1], ONES[:1], [0.0])
    with pytest.raises(ValueError, match=r"window: rows of shape \(30, 8\) do not match \(90, 8\)"):
        assign_rows(a, [0], b)
    with pytest.raises(ValueError, match=r"window: rows of shape \(30, 8\) do not match \(90, 8\)"):
        append_rows(a, b)


@pytest.mark.parametrize(
    ("dims", "message"),
    [
        ((), r"dims must be distinct dimension indices 0..7 in ascending order, got \(\)"),
        ((1, 0), r"ascending order, got \(1, 0\)"),
        ((0, 0), r"ascending order, got \(0, 0\)"),
        ((0, 8), r"ascending order, got \(0, 8\)"),
        ((-1, 0), r"ascending order, got \(-1, 0\)"),
        ((0, 2), r"dims must leave out gpu \(2\): rule 4 holds its reservation at the request"),
    ],
    ids=["empty", "unsorted", "repeated", "too-high", "negative", "gpu"],
)
def test_bad_dims_are_rejected(dims: tuple[int, ...], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        DecayEstimator().init(ONES, ONES, [0.0, 0.0], dims=dims)


@pytest.mark.parametrize("est", ESTIMATORS, ids=IDS)
def test_rows_estimating_some_dims_take_and_give_all_eight(est) -> None:
    rng = np.random.default_rng(7)
    req = rng.uniform(0.5, 2.0, (4, NDIM))
    state = est.init(req, req * 3, np.zeros(4), grace=0.0, dims=(0, 3))
    assert state.requests.shape == (4, 2) and state.full.shape == (4, NDIM)
    with pytest.raises(ValueError, match=r"usage must have shape \(4, 8\), got \(4, 2\)"):
        est.update_in_place(state, np.ones((4, 2)), 10.0, 10.0)
    for k in range(3):
        r = est.update_in_place(state, rng.uniform(0, 4, (4, NDIM)), 10.0 * k, 10.0)
        assert r.shape == (4, NDIM)
    kept = r.copy()
    grown = append_rows(state, est.init(req[:1], req[:1], [0.0], dims=(0, 3)))
    np.testing.assert_array_equal(grown.full[:4], kept)
    np.testing.assert_array_equal(grown.full[4], req[0])  # r_0 = R on every dimension
    np.testing.assert_array_equal(select_rows(grown, [4, 1]).full, grown.full[[4, 1]])
    assign_rows(grown, [1], est.init(req[[2]], req[[2]], [0.0], dims=(0, 3)))
    np.testing.assert_array_equal(grown.full[1], req[2])
    with pytest.raises(
        ValueError, match=r"combine rows estimating dims \(0, 1\) with rows estimating \(0, 3\)"
    ):
        append_rows(state, est.init(req[:1], req[:1], [0.0], dims=(0, 1)))
    with pytest.raises(ValueError, match=r"estimating dims None with rows estimating \(0, 3\)"):
        assign_rows(state, [0], est.init(req[:1], req[:1], [0.0]))


def test_select_mask_of_the_wrong_length_is_rejected() -> None:
    state = DecayEstimator().init(ONES, ONES, [0.0, 0.0])
    with pytest.raises(ValueError, match=r"keep mask must have shape \(2,\), got \(3,\)"):
        select_rows(state, [True, False, True])


@pytest.mark.parametrize("est", ESTIMATORS, ids=IDS)
def test_held_rows_are_the_request_whatever_the_state_layout(est) -> None:
    # finalize copies held rows a column at a time on the (column-major) state and through the
    # masked copy on any other layout (row-major, or two layouts mixed): the same reservations,
    # bit for bit.
    rng = np.random.default_rng(11)
    req = rng.uniform(0.5, 2.0, (6, NDIM))
    started = np.array([0.0, 500.0, 0.0, 500.0, 0.0, 0.0])  # rows 1 and 3 are still in their grace
    pinned = np.array([False, False, False, False, True, False])
    f = est.init(req, req * 3, started, grace=300.0, pinned=pinned)
    c, mixed = copy_state(f), copy_state(f)
    for name in ("requests", "spare", "reservation"):
        setattr(c, name, np.ascontiguousarray(getattr(c, name)))
    mixed.requests = np.ascontiguousarray(mixed.requests)
    for k in range(4):
        u = rng.uniform(0, 4, (6, NDIM))
        u[2, 1] = np.nan  # a missing sample holds r
        r_f = est.update_in_place(f, u, 600.0 + 10.0 * k, 10.0)
        for other in (c, mixed):
            r_o = est.update_in_place(other, u, 600.0 + 10.0 * k, 10.0)
            assert np.ascontiguousarray(r_o).tobytes() == np.ascontiguousarray(r_f).tobytes()
        np.testing.assert_array_equal(r_f[[1, 3, 4]], req[[1, 3, 4]])


@pytest.mark.parametrize("est", ESTIMATORS, ids=IDS)
@pytest.mark.parametrize("dims", [None, (0, 1)])
def test_the_rows_stay_column_major_through_copy_select_and_append(est, dims) -> None:
    # every rule works a column at a time: a field that turned row-major would still give the
    # same values, only slower, so the layout is checked here
    req = np.random.default_rng(2).uniform(0.5, 2.0, (5, NDIM))
    state = est.init(req, req * 3, np.zeros(5), grace=0.0, dims=dims)
    grown = append_rows(state, est.init(req[:2], req[:2] * 3, np.zeros(2), grace=0.0, dims=dims))
    for s in (state, copy_state(state), select_rows(state, np.array([0, 2, 4])), grown):
        for name in ("requests", "limits", "reservation", "spare", "missing"):
            assert getattr(s, name).flags.f_contiguous, name
        if isinstance(s, PeakState):  # its ring and top-k: each (W, k) slot column-major too
            for name in ("window", "prefix", "suffix", "merged"):
                a = getattr(s, name)
                assert a[(0,) * (a.ndim - 2)].flags.f_contiguous, name
            assert s.n_valid.flags.f_contiguous
        if isinstance(s, HistogramState):  # its buckets: rows first, a cell's buckets together
            for name in ("hist", "scale", "bucket", "below", "at", "total"):
                assert getattr(s, name).swapaxes(0, 1).flags.c_contiguous, name
    assert grown.n == 7
    # one row selected twice from a one-row state (whose layout says nothing): still updatable,
    # both rows alike
    twice = select_rows(select_rows(state, [1]), [0, 0])
    r = est.update_in_place(twice, np.ones((2, NDIM)), 10.0, 10.0)
    assert np.array_equal(r[0], r[1])
