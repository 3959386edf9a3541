"""DecayingHistogram (the VPA recommender's estimator) with hand-computed buckets and percentiles.

Most cases use rho = 2 and f = 1 so the buckets are easy to read: lower edges 0, 1, 3, 7, 15
(b_i = 2**i - 1), upper edges 1, 3, 7, 15 and inf (the overflow bucket).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from kalena.core.estimators import DecayingHistogram, HistogramParams, append_rows, select_rows
from kalena.core.resources import CPU, GPU, NDIM

NAN = math.nan
EASY = {"bucket_ratio": 2.0, "first_bucket": 1.0, "n_buckets": 5, "margin": 1.0}


def row(cpu: float, gpu: float = 0.0) -> list[float]:
    v = [0.0] * NDIM
    v[CPU], v[GPU] = cpu, gpu
    return v


def workload(est: DecayingHistogram, request: float = 1.0, limit: float = 100.0, **kw):
    kw.setdefault("grace", 0.0)
    return est.init([row(request, 1.0)], [row(limit, 1.0)], [0.0], **kw)


def feed(est: DecayingHistogram, state, samples: list[tuple[float, float]]) -> list[float]:
    """``samples`` are (time, cpu usage) pairs."""
    return [float(est.update_in_place(state, np.array([row(u)]), t, 10.0)[0, CPU]) for t, u in samples]


def test_bucket_edges_by_hand() -> None:
    p = HistogramParams(**EASY)
    assert p.lower_edges().tolist() == [0.0, 1.0, 3.0, 7.0, 15.0]
    assert p.upper_edges().tolist() == [1.0, 3.0, 7.0, 15.0, math.inf]
    assert p.top() == 15.0


def test_default_buckets_reach_about_nine_times_the_request() -> None:
    # top = 0.01 * (1.05**79 - 1) / 0.05 = 0.2 * (47.196 - 1) = 9.239
    assert HistogramParams().top() == pytest.approx(9.239, rel=1e-3)


@pytest.mark.parametrize(
    ("usage", "upper_edge"),
    [(0.0, 1.0), (0.5, 1.0), (2.0, 3.0), (5.0, 7.0), (10.0, 15.0), (16.0, math.inf)],
    ids=["zero", "first-bucket", "second", "third", "fourth", "overflow"],
)
def test_one_sample_gives_the_upper_edge_of_its_bucket(usage: float, upper_edge: float) -> None:
    est = DecayingHistogram(HistogramParams(**EASY))
    assert feed(est, workload(est, limit=100.0), [(0.0, usage)]) == [min(100.0, upper_edge)]


def test_percentile_of_a_known_sample_set() -> None:
    # equal weights (same time): buckets [0.5] [2, 2] [5] -> weights 1, 2, 1; total 4
    # p = 0.5: threshold 2, cumulative 1, 3, 4 -> bucket 1 -> upper edge 3; margin 1.2 -> 3.6
    # p = 0.8: threshold 3.2 -> bucket 2 -> upper edge 7 -> 8.4
    for p, expected in ((0.5, 3.6), (0.8, 8.4)):
        est = DecayingHistogram(HistogramParams(**{**EASY, "margin": 1.2}, target_percentile=p))
        r = feed(est, workload(est), [(0.0, 0.5), (0.0, 2.0), (0.0, 2.0), (0.0, 5.0)])
        assert r[-1] == pytest.approx(expected)


@pytest.mark.parametrize(
    ("half_life", "expected"),
    [
        # h = 10 s: weights 1 (5 at t=0), 2 and 4 (0.5 at t=10, 20): bucket 0 holds 6 of 7;
        # p = 0.8: threshold 5.6 <= 6 -> bucket 0 -> 1
        (10.0, 1.0),
        # h = 1e9 s (no decay): weights 1, 1, 1: threshold 2.4, cumulative 2, 2, 3 -> bucket 2 -> 7
        (1e9, 7.0),
    ],
    ids=["decayed", "undecayed"],
)
def test_old_samples_count_less(half_life: float, expected: float) -> None:
    est = DecayingHistogram(HistogramParams(**EASY, half_life_s=half_life, target_percentile=0.8))
    assert feed(est, workload(est), [(0.0, 5.0), (10.0, 0.5), (20.0, 0.5)])[-1] == expected


def test_overflow_bucket_means_the_limit() -> None:
    est = DecayingHistogram(HistogramParams(**EASY))
    assert feed(est, workload(est, request=1.0, limit=40.0), [(0.0, 16.0)]) == [40.0]


def test_no_request_spans_zero_to_the_limit() -> None:
    est = DecayingHistogram(HistogramParams(**EASY))
    state = workload(est, request=0.0, limit=30.0)
    assert state.scale[0, CPU] == 2.0  # L / top = 30 / 15
    # u = 5: 5 / 2 = 2.5 -> bucket 1 -> upper edge 3 * 2 = 6
    assert feed(est, state, [(0.0, 5.0)]) == [6.0]


def test_missing_sample_and_no_sample_hold() -> None:
    est = DecayingHistogram(HistogramParams(**{**EASY, "margin": 1.5}))
    # no sample: R = 1 (not 1.5 * the first edge); u = 2 -> bucket 1 -> 3 * 1.5 = 4.5; missing: hold
    assert feed(est, workload(est), [(0.0, NAN), (10.0, 2.0), (20.0, NAN)]) == [1.0, 4.5, 4.5]


def test_grace_opt_out_and_gpu() -> None:
    est = DecayingHistogram(HistogramParams(**EASY))
    state = est.init(
        [row(2.0, 1.0)] * 3,
        [row(8.0, 1.0)] * 3,
        [0.0] * 3,
        grace=[0.0, 60.0, 0.0],
        pinned=[False, False, True],
    )
    r = est.update_in_place(state, np.array([row(3.0, 0.0)] * 3), 30.0, 10.0)
    assert r[:, CPU].tolist() == [6.0, 2.0, 2.0]  # 3 / 2 -> bucket 1 -> 3 * 2; in grace; opted out
    assert r[:, GPU].tolist() == [1.0, 1.0, 1.0]
    assert state.total[:, CPU].tolist() == [1.0, 0.0, 0.0]  # held rows recorded nothing


def full_percentile_bucket(hist: np.ndarray, q: float) -> np.ndarray:
    """Reference: the first bucket whose cumulative weight reaches q * total."""
    cum = np.cumsum(hist.astype(np.float64), axis=-1)
    return np.argmax(cum >= q * cum[..., -1:], axis=-1)


def test_cached_percentile_matches_a_full_recompute_through_regime_changes_and_renormalisation() -> None:
    rng = np.random.default_rng(7)
    p = HistogramParams(half_life_s=50.0, target_percentile=0.9)
    est = DecayingHistogram(p)
    w = 40
    state = est.init(rng.uniform(0.5, 2, (w, NDIM)), np.full((w, NDIM), 50.0), np.zeros(w), grace=0.0)
    for k in range(400):  # 4000 s = 80 half-lives: renormalises twice
        level = [0.2, 3.0, 1.0, 8.0][(k // 60) % 4]
        u = rng.uniform(0, level, (w, NDIM))
        u[rng.random((w, NDIM)) < 0.2] = np.nan
        est.update_in_place(state, u, 10.0 * k, 10.0)
        np.testing.assert_array_equal(state.bucket, full_percentile_bucket(state.hist, 0.9))
    assert state.t_ref > 0.0  # renormalised
    np.testing.assert_allclose(state.total, state.hist.sum(axis=-1, dtype=np.float64), rtol=1e-5)


def test_appended_rows_start_empty() -> None:
    est = DecayingHistogram(HistogramParams(**EASY))
    state = workload(est, request=2.0)
    feed(est, state, [(0.0, 3.0)])
    state = append_rows(state, workload(est, request=3.0))
    r = est.update_in_place(state, np.array([row(3.0), row(NAN)]), 10.0, 10.0)
    assert r[:, CPU].tolist() == [6.0, 3.0]  # 3 / 2 -> bucket 1 -> 3 * 2; the new row holds R
    assert select_rows(state, [1]).total[0, CPU] == 0.0


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"target_percentile": 1.0}, r"HistogramParams.target_percentile must be in \(0, 1\), got 1.0"),
        ({"target_percentile": 0.0}, r"HistogramParams.target_percentile must be in \(0, 1\), got 0.0"),
        ({"target_percentile": True}, r"HistogramParams.target_percentile must be in \(0, 1\), got True"),
        ({"margin": 0.5}, "HistogramParams.margin must be a finite number >= 1, got 0.5"),
        ({"margin": True}, "HistogramParams.margin must be a finite number >= 1, got True"),
        ({"half_life_s": 0.0}, "HistogramParams.half_life_s must be a finite number > 0, got 0.0"),
        ({"bucket_ratio": 1.0}, "HistogramParams.bucket_ratio must be a finite number > 1, got 1.0"),
        ({"first_bucket": -1.0}, "HistogramParams.first_bucket must be a finite number > 0, got -1.0"),
        ({"n_buckets": 1}, "HistogramParams.n_buckets must be an integer >= 2, got 1"),
        ({"n_buckets": 8.0}, "HistogramParams.n_buckets must be an integer >= 2, got 8.0"),
    ],
    ids=["p-1", "p-0", "p-bool", "margin", "margin-bool", "half-life", "ratio", "first-bucket", "one-bucket",
         "float-buckets"],
)  # fmt: skip
def test_bad_params_name_key_and_value(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        HistogramParams(**kwargs)
