"""The simulator's constants: the generated fit loads, and bad parameter sets fail when built."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from kalena.sim.params import (
    FITTED,
    TABLE_LEVELS,
    default_batch,
    default_production,
    table_mean,
)


def test_the_generated_fit_has_every_section_and_its_sources_agree_with_the_paper_anchors():
    assert set(FITTED) == {"production", "dynamics", "batch"}
    b = FITTED["batch"]
    # Google 2011 at the trace start: production requests ~73 % of capacity (Borg: "~70 % allocated")
    assert 0.65 < b["production_fraction_of_capacity"] < 0.8
    assert 0.3 < b["offered_fraction_of_capacity"] < 0.5
    assert sum(b["priority_weights"].values()) == pytest.approx(1.0, abs=1e-3)


def test_table_mean_is_the_mean_of_the_piecewise_linear_inverse_cdf():
    uniform = np.linspace(0.0, 4.0, len(TABLE_LEVELS))  # U(0, 4): mean 2
    assert table_mean(uniform) == pytest.approx(2.0)
    u = np.random.default_rng(0).random(200_000)
    sampled = np.interp(u, TABLE_LEVELS, default_batch().cpu_table).mean()
    assert table_mean(default_batch().cpu_table) == pytest.approx(sampled, rel=0.01)


def test_mean_cpu_request_hand_computed():
    p = dataclasses.replace(default_batch(), small_share=0.5, cpu_table=np.full(len(TABLE_LEVELS), 1.0))
    small = (0.1 - 0.01) / math.log(10.0)  # mean of log-uniform on [0.01, 0.1)
    assert p.mean_cpu_request() == pytest.approx(0.5 * small + 0.5 * 1.0)


def test_duration_log_mu_keeps_the_mean():
    p = default_batch()
    assert math.exp(p.duration_log_mu + p.duration_log_sd**2 / 2) == pytest.approx(p.mean_duration_s)


BAD_BATCH = [
    ("offered-zero", {"offered_fraction": 0.0}, "offered_fraction"),
    ("negative-duration", {"mean_duration_s": -1.0}, "durations"),
    ("small-share-one", {"small_share": 1.0}, "small_share"),
    ("priorities-not-summing", {"priority_weights": {0: 0.5}}, "priority_weights"),
    ("profile-23-hours", {"arrival_hour_profile": np.ones(23)}, "arrival_hour_profile"),
]


@pytest.mark.parametrize(("change", "key"), [c[1:] for c in BAD_BATCH], ids=[c[0] for c in BAD_BATCH])
def test_bad_batch_parameters_fail_naming_the_key(change, key):
    with pytest.raises(ValueError, match=key):
        dataclasses.replace(default_batch(), **change)


BAD_PRODUCTION = [
    ("corr-not-unit-diagonal", {"copula_corr": np.eye(4) * 2}, "copula_corr"),
    (
        "tables-decreasing",
        {"copula_tables": np.tile(np.linspace(1, 0, len(TABLE_LEVELS)), (4, 1))},
        "copula_tables",
    ),
    ("zero-burst-duration", {"burst_duration_s": 0.0}, "burst_duration_s"),
    ("memory-profile-below-zero", {"ram_amplitude": 1.2}, "ram_amplitude"),
]


@pytest.mark.parametrize(
    ("change", "key"), [c[1:] for c in BAD_PRODUCTION], ids=[c[0] for c in BAD_PRODUCTION]
)
def test_bad_production_parameters_fail_naming_the_key(change, key):
    with pytest.raises(ValueError, match=key):
        dataclasses.replace(default_production(), **change)
