"""PeakWithMargin (seed 002): p99 of a usage window x margin by class, with hand-computed numbers."""

from __future__ import annotations

import math

import numpy as np
import pytest

from kalena.core.estimators import MarginClass, PeakParams, PeakWithMargin, margin_class
from kalena.core.estimators.peak import window_quantile
from kalena.core.model import Tier
from kalena.core.resources import CPU, GPU, NDIM

NAN = math.nan


def row(cpu: float, gpu: float = 0.0) -> list[float]:
    v = [0.0] * NDIM
    v[CPU], v[GPU] = cpu, gpu
    return v


def feed(est: PeakWithMargin, state, samples: list[float], t0: float = 0.0) -> list[float]:
    out = []
    for k, u in enumerate(samples):
        r = est.update_in_place(state, np.array([row(u, 0.0)] * state.n), t0 + 10.0 * k, 10.0)
        out.append(float(r[0, CPU]))
    return out


def workload(est: PeakWithMargin, request: float = 2.0, limit: float = 20.0, **kw):
    kw.setdefault("grace", 0.0)
    return est.init([row(request, 1.0)], [row(limit, 1.0)], [0.0], **kw)


@pytest.mark.parametrize(
    ("cls", "expected"),
    [
        # window 1..10: pos = 0.99 * 9 = 8.91, p99 = 9 + 0.91 * (10 - 9) = 9.91
        (MarginClass.SERVICE, 9.91 * 1.30),  # 12.883
        (MarginClass.BATCH, 9.91 * 1.15),  # 11.3965
        (MarginClass.BEST_EFFORT, 9.91 * 1.05),  # 10.4055
    ],
    ids=["service-1.30", "batch-1.15", "best-effort-1.05"],
)
def test_p99_of_a_known_window_times_the_class_margin(cls: MarginClass, expected: float) -> None:
    est = PeakWithMargin(PeakParams(window=10))
    state = workload(est, classes=[cls])
    assert feed(est, state, [float(v) for v in range(10, 0, -1)])[-1] == pytest.approx(expected, rel=1e-9)


def test_default_class_is_service() -> None:
    est = PeakWithMargin()
    assert feed(est, workload(est), [1.0]) == pytest.approx([1.30])


def test_old_samples_leave_the_window() -> None:
    est = PeakWithMargin(PeakParams(window=3, margin_service=1.0))
    # windows: [10] [10 1] [10 1 1] [1 1 1]
    assert feed(est, workload(est), [10.0, 1.0, 1.0, 1.0]) == pytest.approx([10.0, 9.91, 9.82, 1.0])


def test_a_lone_spike_does_not_raise_the_reservation_to_it() -> None:
    est = PeakWithMargin(PeakParams(window=90, margin_service=1.0))
    # 89 zeros then 10: pos = 0.99 * 89 = 88.11, p99 = 0 + 0.11 * 10 = 1.1 (the p99 discounts one spike)
    assert feed(est, workload(est, limit=50.0), [0.0] * 89 + [10.0])[-1] == pytest.approx(1.1)


def test_missing_sample_holds_and_shortens_the_window() -> None:
    est = PeakWithMargin(PeakParams(window=2, margin_service=1.0))
    # [4] -> 4; NaN: hold 4 (window [4 NaN]); 1: window [NaN 1] -> 1
    assert feed(est, workload(est), [4.0, NAN, 1.0]) == [4.0, 4.0, 1.0]


def test_missing_sample_holds_even_when_the_peak_leaves_the_window() -> None:
    est = PeakWithMargin(PeakParams(window=2, margin_service=1.0))
    # [4 1] -> 1 + 0.99 * 3 = 3.97; NaN evicts the 4 (window [NaN 1]) but r holds, it does not drop to 1
    assert feed(est, workload(est), [4.0, 1.0, NAN]) == pytest.approx([4.0, 3.97, 3.97])


def test_no_sample_yet_holds_the_request() -> None:
    est = PeakWithMargin()
    assert feed(est, workload(est, request=2.0), [NAN, NAN]) == [2.0, 2.0]


def test_samples_in_the_grace_period_are_not_recorded() -> None:
    est = PeakWithMargin(PeakParams(window=10, margin_service=1.0))
    state = workload(est, request=2.0, grace=25.0)
    # t = 0, 10, 20 in grace (r = R, the 9s not recorded); t = 30: window [1] -> 1
    assert feed(est, state, [9.0, 9.0, 9.0, 1.0]) == [2.0, 2.0, 2.0, 1.0]


def test_cap_at_limit_opt_out_and_gpu() -> None:
    est = PeakWithMargin()
    state = est.init([row(2.0, 1.0)] * 2, [row(4.0, 1.0)] * 2, [0.0, 0.0], grace=0.0, pinned=[False, True])
    r = est.update_in_place(state, np.array([row(10.0, 0.0)] * 2), 0.0, 10.0)
    assert r[:, CPU].tolist() == [4.0, 2.0]  # capped at L; opted out holds R
    assert r[:, GPU].tolist() == [1.0, 1.0]


@pytest.mark.parametrize("n_valid", [0, 1, 2, 5, 17], ids=lambda n: f"{n}-valid")
def test_window_quantile_matches_numpy_nanpercentile(n_valid: int) -> None:
    rng = np.random.default_rng(n_valid)
    window = np.full((6, 8, 17), np.nan, dtype=np.float32)
    for w in range(6):
        for d in range(8):
            slots = rng.choice(17, size=n_valid, replace=False)
            window[w, d, slots] = rng.uniform(0, 10, n_valid)
    got = window_quantile(window, np.full((6, 8), n_valid), 0.99)
    if n_valid == 0:
        assert np.isnan(got).all()
    else:
        np.testing.assert_allclose(got, np.nanpercentile(window.astype(np.float64), 99, axis=-1), rtol=1e-12)


def test_appended_rows_start_empty_and_selected_rows_keep_their_window() -> None:
    from kalena.core.estimators import append_rows, select_rows

    est = PeakWithMargin(PeakParams(window=4, margin_service=1.0))
    state = workload(est)
    feed(est, state, [3.0])
    state = append_rows(state, workload(est, request=5.0))
    # whatever the shared head (here 1), the new row's sliding top-k is empty, as its window
    assert state.head == 1 and np.isnan(state.prefix[:, 1]).all() and np.isnan(state.suffix[:, :, 1]).all()
    r = est.update_in_place(state, np.array([row(1.0), row(NAN)]), 10.0, 10.0)
    assert r[:, CPU].tolist() == [pytest.approx(2.98), 5.0]  # [3 1]: 1 + 0.99*2; new row: no sample, R
    kept = select_rows(state, [False, True])
    assert kept.n == 1 and kept.window.shape == (4, 1, NDIM) and np.isnan(kept.window[:, 0, CPU]).all()


@pytest.mark.parametrize(
    ("tier", "cls"), [(Tier.SERVICE, MarginClass.SERVICE), (Tier.BATCH, MarginClass.BATCH)]
)
def test_margin_class_of_a_tier(tier: Tier, cls: MarginClass) -> None:
    assert margin_class(tier) is cls


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"window": 0}, "PeakParams.window must be an integer >= 1, got 0"),
        ({"window": 2.5}, "PeakParams.window must be an integer >= 1, got 2.5"),
        ({"window": True}, "PeakParams.window must be an integer >= 1, got True"),
        ({"quantile": 1.5}, "PeakParams.quantile must be in \\[0, 1\\], got 1.5"),
        ({"quantile": True}, "PeakParams.quantile must be in \\[0, 1\\], got True"),
        ({"margin_service": 0.5}, "PeakParams.margin_service must be a finite number >= 1, got 0.5"),
        ({"margin_batch": math.nan}, "PeakParams.margin_batch must be a finite number >= 1, got nan"),
        ({"margin_best_effort": 0.99}, "PeakParams.margin_best_effort must be .* >= 1, got 0.99"),
    ],
    ids=["window-0", "window-float", "window-bool", "quantile-above-1", "quantile-bool", "service-margin",
         "batch-margin-nan", "be-margin"],
)  # fmt: skip
def test_bad_params_name_key_and_value(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        PeakParams(**kwargs)


def test_bad_class_code_names_the_row() -> None:
    with pytest.raises(ValueError, match=r"classes\[1\] must be a MarginClass code 0, 1 or 2, got 7"):
        PeakWithMargin().init([row(1.0)] * 2, [row(2.0)] * 2, [0.0, 0.0], classes=[0, 7])
