"""Properties of all three estimators over random usage series (hypothesis).

Which property holds for which estimator (also in the package README):

- every estimator: 0 <= r <= L; r[gpu] = R; r = R on held rows (startup grace, opt-out);
  a missing sample (NaN) leaves r unchanged.
- decay only, one-step rise: on a valid sample of a non-held row and non-gpu dimension,
  r_t >= min(L, m*u_t), and so r_t >= u_t whenever u_t <= L (m >= 1). PeakWithMargin and the
  histogram deliberately discount a lone spike, so it does not hold for them.
- PeakWithMargin: r = min(L, m_class * p99(window)) with the window's p99 from np.nanpercentile
  (an oracle, not only a bound).
- histogram: r lies between min(L, m * v) and min(L, m * (rho * v + f * s)), v the weighted target
  percentile of the recorded samples (weights 2**(t/h)): the bucket's upper edge is at most one
  bucket above the true value, and never below it.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from kalena.core.estimators import (
    DecayEstimator,
    DecayingHistogram,
    DecayParams,
    HistogramParams,
    PeakParams,
    PeakWithMargin,
)
from kalena.core.resources import GPU, NDIM

F32 = {"allow_nan": False, "allow_infinity": False, "width": 32}  # float32-exact: the window stores float32


@dataclass
class Scenario:
    requests: np.ndarray
    limits: np.ndarray
    grace: np.ndarray
    pinned: np.ndarray
    usage: np.ndarray  # (T, W, 8), NaN = missing
    dt: float

    @property
    def times(self) -> np.ndarray:
        return self.dt * np.arange(self.usage.shape[0])


@st.composite
def scenarios(draw: st.DrawFn) -> Scenario:
    w = draw(st.integers(1, 3))
    t = draw(st.integers(1, 12))
    req = draw(arrays(np.float64, (w, NDIM), elements=st.floats(0, 10, **F32)))
    extra = draw(arrays(np.float64, (w, NDIM), elements=st.floats(0, 10, **F32)))
    unlimited = draw(arrays(np.bool_, (w, NDIM)))
    usage = draw(arrays(np.float64, (t, w, NDIM), elements=st.floats(0, 25, **F32)))
    missing = draw(arrays(np.bool_, (t, w, NDIM)))
    usage[missing] = np.nan
    return Scenario(
        requests=req,
        limits=np.where(unlimited, np.inf, req + extra),
        grace=draw(arrays(np.float64, (w,), elements=st.sampled_from([0.0, 15.0, 1000.0]))),
        pinned=draw(arrays(np.bool_, (w,))),
        usage=usage,
        dt=draw(st.sampled_from([1.0, 10.0, 60.0])),
    )


def run(est, sc: Scenario, **init_kw):
    """Yield (now, usage, r_prev, r, held (W,)) for every step."""
    state = est.init(
        sc.requests, sc.limits, np.zeros(len(sc.requests)), grace=sc.grace, pinned=sc.pinned, **init_kw
    )
    for now, u in zip(sc.times, sc.usage, strict=True):
        r_prev = state.reservation.copy()
        r = est.update_in_place(state, u, float(now), sc.dt).copy()
        yield float(now), u, r_prev, r, sc.pinned | (now < sc.grace)


def check_shared_rules(
    sc: Scenario, now: float, u: np.ndarray, r_prev: np.ndarray, r: np.ndarray, held
) -> None:
    assert (r >= 0).all()
    assert (r <= sc.limits).all()
    np.testing.assert_array_equal(r[:, GPU], sc.requests[:, GPU])
    np.testing.assert_array_equal(r[held], sc.requests[held])
    miss = np.isnan(u)
    np.testing.assert_array_equal(r[miss], r_prev[miss])


def estimated(u: np.ndarray, held: np.ndarray) -> np.ndarray:
    """(W, 8) cells whose estimate is live: a valid sample, a row not held, not gpu."""
    live = ~np.isnan(u) & ~held[:, None]
    live[:, GPU] = False
    return live


@settings(max_examples=150, deadline=None)
@given(sc=scenarios(), margin=st.floats(1.0, 2.0), half_life=st.sampled_from([5.0, 900.0, 1e6]))
def test_decay_properties(sc: Scenario, margin: float, half_life: float) -> None:
    est = DecayEstimator(DecayParams(margin=margin, half_life_s=half_life))
    for now, u, r_prev, r, held in run(est, sc):
        check_shared_rules(sc, now, u, r_prev, r, held)
        live = estimated(u, held)
        # one-step rise: a sample above the reservation raises it at once (capped at L)
        assert (r[live] >= np.minimum(sc.limits, margin * u)[live]).all()
        assert (r[live & (u <= sc.limits)] >= u[live & (u <= sc.limits)]).all()


@settings(max_examples=150, deadline=None)
@given(sc=scenarios(), window=st.integers(1, 6), classes=st.lists(st.integers(0, 2), min_size=3, max_size=3))
def test_peak_properties(sc: Scenario, window: int, classes: list[int]) -> None:
    params = PeakParams(window=window)
    est = PeakWithMargin(params)
    cls = np.array(classes[: len(sc.requests)])
    margin = params.margins()[cls][:, None]
    recorded: list[np.ndarray] = []  # the oracle's own window: what each step recorded
    for now, u, r_prev, r, held in run(est, sc, classes=cls):
        check_shared_rules(sc, now, u, r_prev, r, held)
        recorded.append(np.where(held[:, None], np.nan, u))
        win = np.stack(recorded[-window:], axis=-1)
        has = ~np.isnan(win).all(axis=-1)
        live = estimated(u, held) & has
        with warnings.catch_warnings():  # all-NaN windows warn; those cells are not checked
            warnings.simplefilter("ignore", RuntimeWarning)
            p99 = np.nanpercentile(win, 99, axis=-1)
        expect = np.minimum(sc.limits, margin * np.nan_to_num(p99))
        np.testing.assert_allclose(r[live], expect[live], rtol=1e-9)


def weighted_quantile(values: np.ndarray, weights: np.ndarray, q: float) -> float:
    order = np.argsort(values, kind="stable")
    cum = np.cumsum(weights[order])
    return float(values[order][np.argmax(cum >= q * cum[-1])])


@settings(max_examples=150, deadline=None)
@given(sc=scenarios(), q=st.sampled_from([0.5, 0.9, 0.95]), half_life=st.sampled_from([30.0, 3600.0]))
def test_histogram_properties(sc: Scenario, q: float, half_life: float) -> None:
    p = HistogramParams(target_percentile=q, half_life_s=half_life)
    est = DecayingHistogram(p)
    state = est.init(sc.requests, sc.limits, np.zeros(len(sc.requests)), grace=0.0)
    scale = state.scale
    samples: list[tuple[np.ndarray, float]] = []
    for now, u, r_prev, r, held in run(est, sc):
        check_shared_rules(sc, now, u, r_prev, r, held)
        samples.append((np.where(held[:, None], np.nan, u), 2.0 ** (now / half_life)))
        for w, d in zip(*np.nonzero(estimated(u, held)), strict=True):
            vals = np.array([s[w, d] for s, _ in samples])
            wts = np.array([wt for _, wt in samples])
            ok = ~np.isnan(vals)
            # bracket the threshold by 1e-6 so float32 bucket sums cannot flip a tie
            lo = weighted_quantile(vals[ok], wts[ok], q * (1 - 1e-6))
            hi = weighted_quantile(vals[ok], wts[ok], min(q * (1 + 1e-6), 1.0))
            s, lim = scale[w, d], sc.limits[w, d]
            top = p.top() * s
            floor = min(lim, p.margin * lo) * (1 - 1e-9)
            ceiling = (
                lim
                if hi >= top * (1 - 1e-9)
                else min(lim, p.margin * (p.bucket_ratio * hi + p.first_bucket * s))
            )
            assert floor <= r[w, d] <= ceiling * (1 + 1e-9), (w, d, r[w, d], floor, ceiling)


ALL = [DecayEstimator(), PeakWithMargin(PeakParams(window=4)), DecayingHistogram()]
OTHERS = [d for d in range(NDIM) if d != GPU]


@settings(max_examples=100, deadline=None)
@given(sc=scenarios(), which=st.integers(0, 2), dims=st.sets(st.sampled_from(OTHERS), min_size=1))
def test_estimated_dims_are_the_full_answer_on_theirs_and_the_request_elsewhere(
    sc: Scenario, which: int, dims: set[int]
) -> None:
    est, d = ALL[which], tuple(sorted(dims))
    rest = [k for k in range(NDIM) if k not in dims]
    for (_, _, _, full, _), (_, _, _, part, _) in zip(run(est, sc), run(est, sc, dims=d), strict=True):
        assert full[:, d].tobytes() == part[:, d].tobytes()  # each cell is estimated on its own
        np.testing.assert_array_equal(part[:, rest], sc.requests[:, rest])


@settings(max_examples=100, deadline=None)
@given(
    sc=scenarios(), which=st.integers(0, 1), unused=st.sets(st.sampled_from(OTHERS), min_size=1, max_size=6)
)
def test_a_dimension_nobody_requests_or_uses_can_be_left_out_bit_for_bit(
    sc: Scenario, which: int, unused: set[int]
) -> None:
    """``zero_stays_zero``: with R = 0 and samples of 0 (or none) the full estimate there is 0."""
    est = ALL[which]
    assert est.zero_stays_zero
    cols = sorted(unused)
    sc.requests[:, cols] = 0.0
    sc.usage[:, :, cols] = np.where(np.isnan(sc.usage[:, :, cols]), np.nan, 0.0)
    dims = tuple(d for d in OTHERS if d not in unused)
    for (_, _, _, full, _), (_, _, _, part, _) in zip(run(est, sc), run(est, sc, dims=dims), strict=True):
        assert full.tobytes() == part.tobytes()


def test_the_histogram_may_not_leave_an_unused_dimension_out() -> None:
    """Its lowest bucket reports a little above 0 where nobody uses a dimension (VPA's bound)."""
    est = DecayingHistogram()
    assert not est.zero_stays_zero
    req = np.zeros((1, NDIM))
    state = est.init(req, np.full((1, NDIM), 4.0), [0.0], grace=0.0)
    r = est.update_in_place(state, np.zeros((1, NDIM)), 10.0, 10.0)
    assert (r[0, OTHERS] > 0).all()
