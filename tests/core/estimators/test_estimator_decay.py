"""DecayEstimator: every formula pinned with hand-computed numbers (SPEC "The reservation")."""

from __future__ import annotations

import math

import numpy as np
import pytest

from kalena.core.estimators import DecayEstimator, DecayParams
from kalena.core.resources import CPU, GPU, NDIM, RAM

#: The settings the hand-computed figures below use (m = 1.15, h = 900 s), not the shipped
#: defaults, which are the calibration's to move (kalena/core/estimators/calibrated.py).
HAND = DecayParams(margin=1.15, half_life_s=900.0)

NAN = math.nan


def row(cpu: float, ram: float = 0.0, gpu: float = 0.0) -> list[float]:
    """An 8-vector with cpu, ram and gpu set and the other dimensions 0."""
    v = [0.0] * NDIM
    v[CPU], v[RAM], v[GPU] = cpu, ram, gpu
    return v


def one(est: DecayEstimator, request: float = 2.0, limit: float = 4.0, **kw):
    """A single workload whose cpu has the given request and limit, past its grace by default."""
    kw.setdefault("grace", 0.0)
    return est.init([row(request, 1.0, 1.0)], [row(limit, 8.0, 1.0)], [0.0], **kw)


def cpu_after(
    est: DecayEstimator, state, samples: list[float], dt: float = 10.0, t0: float = 0.0
) -> list[float]:
    out = []
    for k, u in enumerate(samples):
        r = est.update_in_place(state, np.array([row(u, 0.5, 0.0)]), t0 + k * dt, dt)
        out.append(float(r[0, CPU]))
    return out


@pytest.mark.parametrize(
    ("dt", "h", "alpha"),
    [
        # 0.5 ** (10 / 900) = exp(-ln 2 / 90) = exp(-0.00770164) = 0.99232795
        (10.0, 900.0, 0.9923279462629435),
        (900.0, 900.0, 0.5),  # one half-life
        (1800.0, 900.0, 0.25),  # two half-lives
        (0.0, 900.0, 1.0),  # no time, no decay
    ],
    ids=["dt10-h900", "one-half-life", "two-half-lives", "dt0"],
)
def test_alpha(dt: float, h: float, alpha: float) -> None:
    assert DecayParams(half_life_s=h).alpha(dt) == pytest.approx(alpha, rel=1e-12)


def test_three_step_sequence_by_hand() -> None:
    # R = 2, L = 4, m = 1.15, alpha = 0.99232795 (dt = 10 s, h = 900 s)
    # t1: u = 1   -> m*u = 1.15 < r0 = 2: r1 = alpha*2 + (1 - alpha)*1.15 = 1.99347875
    # t2: u = 3   -> m*u = 3.45 > r1:      r2 = 3.45 (rises at once)
    # t3: u = 0.5 -> m*u = 0.575:          r3 = alpha*3.45 + (1 - alpha)*0.575 = 3.42794285
    est = DecayEstimator(HAND)
    assert cpu_after(est, one(est), [1.0, 3.0, 0.5]) == pytest.approx(
        [1.99347875, 3.45, 3.42794285], rel=1e-8
    )


def test_first_reservation_is_the_request_and_the_first_sample_decays_from_it() -> None:
    est = DecayEstimator(DecayParams(margin=1.0, half_life_s=10.0))
    state = one(est, request=2.0)
    np.testing.assert_array_equal(state.reservation, state.requests)  # r_0 = R
    # alpha = 0.5 (dt = h): r1 = 0.5*2 + 0.5*0 = 1
    assert cpu_after(est, state, [0.0]) == [1.0]


def test_half_life_halves_the_reservation_over_h_seconds_of_zero_usage() -> None:
    est = DecayEstimator()  # the shipped h, dt = 10 s: h / 10 steps
    steps = round(est.params.half_life_s / 10.0)
    assert cpu_after(est, one(est, request=2.0), [0.0] * steps)[-1] == pytest.approx(1.0, rel=1e-9)


def test_a_sample_above_the_reservation_raises_it_at_once() -> None:
    est = DecayEstimator(DecayParams(margin=1.2))
    assert cpu_after(est, one(est, request=1.0, limit=10.0), [2.0]) == pytest.approx([2.4])


def test_reservation_is_capped_at_the_limit() -> None:
    est = DecayEstimator(HAND)  # m*u = 5.75 > L = 4
    assert cpu_after(est, one(est, request=2.0, limit=4.0), [5.0]) == [4.0]


def test_missing_sample_holds_the_reservation() -> None:
    est = DecayEstimator(HAND)
    state = one(est)
    before = cpu_after(est, state, [1.0])[0]
    assert cpu_after(est, state, [NAN, NAN], t0=10.0) == [before, before]  # never decays on missing data


@pytest.mark.parametrize(
    ("now", "expected"),
    [(0.0, 2.0), (299.0, 2.0), (300.0, 1.99347875)],
    ids=["at-start", "one-second-before-grace-ends", "grace-over"],
)
def test_startup_grace_holds_the_request(now: float, expected: float) -> None:
    est = DecayEstimator(HAND)
    state = one(est, grace=300.0)
    assert cpu_after(est, state, [1.0], t0=now) == pytest.approx([expected], rel=1e-8)


def test_startup_grace_is_per_workload() -> None:
    est = DecayEstimator(HAND)
    state = est.init([row(2.0)] * 2, [row(4.0)] * 2, [0.0, 0.0], grace=[0.0, 600.0])
    r = est.update_in_place(state, np.array([row(1.0)] * 2), 300.0, 10.0)
    assert r[:, CPU] == pytest.approx([1.99347875, 2.0], rel=1e-8)


def test_reclaim_disabled_pins_the_request_forever() -> None:
    est = DecayEstimator(HAND)
    state = one(est, pinned=[True])
    assert cpu_after(est, state, [0.0, 10.0, 0.5], t0=1e6) == [2.0, 2.0, 2.0]


def test_gpu_reservation_always_equals_the_request() -> None:
    est = DecayEstimator(HAND)
    state = one(est)
    for k, u in enumerate([0.0, 5.0, NAN]):
        r = est.update_in_place(state, np.array([row(1.0, 1.0, u)]), 10.0 * k, 10.0)
        assert r[0, GPU] == 1.0


def test_update_is_pure_and_matches_the_in_place_path() -> None:
    est = DecayEstimator(HAND)
    state = one(est)
    usage = np.array([row(1.0, 0.5)])
    new, r = est.update(state, usage, 0.0, 10.0)
    np.testing.assert_array_equal(state.reservation, state.requests)  # the input state is untouched
    np.testing.assert_array_equal(r, new.reservation)
    np.testing.assert_array_equal(r, est.update_in_place(state, usage, 0.0, 10.0))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"margin": 0.9}, "DecayParams.margin must be a finite number >= 1, got 0.9"),
        ({"margin": math.inf}, "DecayParams.margin must be a finite number >= 1, got inf"),
        ({"margin": True}, "DecayParams.margin must be a finite number >= 1, got True"),
        ({"half_life_s": 0.0}, "DecayParams.half_life_s must be a finite number > 0, got 0.0"),
        ({"half_life_s": -5.0}, "DecayParams.half_life_s must be a finite number > 0, got -5.0"),
        ({"half_life_s": math.nan}, "DecayParams.half_life_s must be a finite number > 0, got nan"),
    ],
    ids=["margin-below-1", "margin-inf", "margin-bool", "half-life-0", "half-life-negative", "half-life-nan"],
)
def test_bad_params_name_key_and_value(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        DecayParams(**kwargs)
