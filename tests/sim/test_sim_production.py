"""Production usage: copula marginals, the diurnal profile, bursts, determinism and restarts."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from kalena.core.resources import CPU, DISK_READ, DISK_WRITE, GPU, NDIM, NET_IN, NET_OUT, RAM, STORAGE
from kalena.sim.params import TABLE_LEVELS, default_production
from kalena.sim.production import ProductionUsage, copula_draw, normal_cdf, request_scores


def _requests(n: int) -> np.ndarray:
    r = np.zeros((n, NDIM))
    r[:, CPU], r[:, RAM], r[:, GPU] = 2.0, 8.0, 1.0
    return r


def test_normal_cdf_hand_values():
    assert normal_cdf(np.array([0.0, 1.959964, -1.959964])).tolist() == pytest.approx(
        [0.5, 0.975, 0.025], abs=1e-6
    )


def test_copula_draw_keeps_each_marginal():
    p = default_production()
    x = copula_draw(p.copula_tables, p.copula_corr, 40_000, np.random.default_rng(1))
    for j in range(4):
        for q in (0.25, 0.5, 0.75):
            assert np.quantile(x[:, j], q) == pytest.approx(
                np.interp(q, TABLE_LEVELS, p.copula_tables[j]), rel=0.05
            )
    # cpu mean and cpu peak are strongly rank-correlated in the trace (0.73): so are the draws
    assert np.corrcoef(np.argsort(np.argsort(x[:, 0])), np.argsort(np.argsort(x[:, 1])))[0, 1] > 0.6


def test_same_generators_same_usage_and_gpu_is_the_request():
    a = ProductionUsage(
        _requests(50), default_production(), np.random.default_rng(3), np.random.default_rng(4)
    )
    b = ProductionUsage(
        _requests(50), default_production(), np.random.default_rng(3), np.random.default_rng(4)
    )
    for t in (10.0, 20.0, 30.0):
        ua, ub = a.step(t, 10.0), b.step(t, 10.0)
        assert np.array_equal(ua, ub)
    assert np.all(ua[:, GPU] == 1.0) and np.all(ua[:, CPU] > 0) and np.all(ua[:, RAM] > 0)


def test_mean_cpu_follows_the_diurnal_profile():
    p = dataclasses.replace(default_production(), amplitude_mean=0.5, amplitude_sd=0.0, peak_hour_sd=0.0)
    u = ProductionUsage(_requests(4000), p, np.random.default_rng(0))
    u.burst_rate[:] = 0.0  # no bursts: the base profile only
    peak = u.step(p.peak_hour_mean * 3600.0, 10.0)[:, CPU].mean()
    trough = u.step((p.peak_hour_mean + 12.0) * 3600.0, 10.0)[:, CPU].mean()
    assert peak / trough == pytest.approx(1.5 / 0.5, rel=0.15)


def test_a_burst_raises_usage_to_the_peak_ratio_and_a_restart_ends_it():
    u = ProductionUsage(_requests(200), default_production(), np.random.default_rng(0))
    u.burst_rate[:] = 1e9  # every pod starts a burst this step
    out = u.step(10.0, 10.0)
    assert u.bursting.all()
    assert np.all(out[:, CPU] >= 2.0 * u.pi - 1e-12) and np.all(out[:, RAM] >= 8.0 * u.kappa - 1e-12)
    u.restart(np.arange(200))
    assert not u.bursting.any() and np.all(u.x == 0) and np.all(u.y == 0)


def test_usage_follows_the_request_rank_as_fitted():
    """Usage drawn given the request's rank: with a strong request correlation, bigger pods draw
    higher cpu ratios; with none, the rank carries nothing."""
    p = default_production()
    req = np.repeat(np.arange(1.0, 201.0), 50)  # 200 sizes, 50 pods each
    scores = request_scores(req)
    assert np.all(np.diff(np.unique(scores)) > 0) and abs(scores.mean()) < 1e-9
    strong = copula_draw(p.copula_tables, p.copula_corr, len(req), np.random.default_rng(3), scores,
                         np.array([0.8, 0.6, 0.0, 0.0]))  # fmt: skip
    none = copula_draw(
        p.copula_tables, p.copula_corr, len(req), np.random.default_rng(3), scores, np.zeros(4)
    )
    small, big = req <= 50, req > 150
    assert np.median(strong[big, 0]) > 2 * np.median(strong[small, 0])
    assert 0.7 < np.median(none[big, 0]) / np.median(none[small, 0]) < 1.4


def test_a_request_correlation_that_breaks_the_copula_is_refused():
    p = default_production()
    with pytest.raises(ValueError, match="request_corr"):
        dataclasses.replace(p, request_corr=np.array([0.99, -0.99, 0.0, 0.0]))


def test_drawing_ahead_on_a_thread_gives_the_same_steps_restarts_and_end():
    from concurrent.futures import ThreadPoolExecutor

    from kalena.sim.production import Lookahead

    def make() -> ProductionUsage:
        u = ProductionUsage(
            _requests(300), default_production(), np.random.default_rng(5), np.random.default_rng(6)
        )
        u.burst_rate[:] = 30.0  # bursts begin often: their onsets are compared too
        return u

    plain = make()
    with ThreadPoolExecutor(1) as pool:
        ahead = Lookahead(make(), pool)
        for k in range(1, 40):
            t = 10.0 * k
            got, started = ahead.step(t, 10.0)
            want = plain.step(t, 10.0)
            assert np.array_equal(got, want) and np.array_equal(started, plain.burst_started), k
            if k % 7 == 0:  # a service restarts between two steps
                ahead.restart(np.array([k, k + 1]))
                plain.restart(np.array([k, k + 1]))
        got, _ = ahead.step(1000.0, 10.0)  # not the step drawn ahead (t=400): drawn afresh
        assert np.array_equal(got, plain.step(1000.0, 10.0))
        ahead.close()  # the step drawn ahead for t=1010 is undone
    for name in ("x", "y", "bursting"):
        assert np.array_equal(getattr(ahead.usage, name), getattr(plain, name))
    assert ahead.usage.rng.bit_generator.state == plain.rng.bit_generator.state


def test_every_dimension_follows_its_factor_and_an_unrequested_one_stays_zero():
    """Usage is the request times cpu's factor (cpu, disk, network), ram's (ram, storage) or 1
    (gpu): one factor per pod across its dimensions, and 0 where nothing is requested."""
    r = np.zeros((300, NDIM))
    r[:, CPU], r[:, RAM], r[:, STORAGE], r[:, NET_IN] = 2.0, 8.0, 50.0, 0.5
    r[::2, GPU] = 1.0  # half the pods hold a device
    u = ProductionUsage(r, default_production(), np.random.default_rng(5))
    u.burst_rate[:] = 50.0  # bursts too: the maximum with the peak ratio is per pod, not per column
    for t in (10.0, 20.0, 30.0):
        got = u.step(t, 10.0)
        cpu_f, ram_f = got[:, CPU] / 2.0, got[:, RAM] / 8.0
        assert not np.allclose(cpu_f, ram_f)
        assert np.array_equal(got[:, NET_IN], 0.5 * cpu_f) and np.array_equal(got[:, STORAGE], 50.0 * ram_f)
        assert np.array_equal(got[:, GPU], r[:, GPU])
        assert np.all(got[:, [DISK_READ, DISK_WRITE, NET_OUT]] == 0.0)
    assert u.bursting.any()
