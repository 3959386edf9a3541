"""PolicyConfig: one validated bundle of the core configs, its plain-mapping form and make_estimator."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kalena.core.config import ESTIMATORS, SECTIONS, PolicyConfig, make_estimator
from kalena.core.enforcement import (
    EscalationConfig,
    EvictionConfig,
    PairingConfig,
    StarvationConfig,
    ThrottleConfig,
)
from kalena.core.estimators import (
    DecayEstimator,
    DecayingHistogram,
    DecayParams,
    HistogramParams,
    PeakParams,
    PeakWithMargin,
)
from kalena.core.placement import PlacementConfig
from kalena.core.resources import DIMS, NDIM


def test_defaults_are_the_parts_defaults() -> None:
    c = PolicyConfig()
    assert c.estimator == "decay" and c.throttle == ThrottleConfig() and c.placement == PlacementConfig()
    assert set(SECTIONS) == {f for f in PolicyConfig.__dataclass_fields__ if f != "estimator"}


BAD_BUILD = [
    ("unknown-estimator", {"estimator": "oracle"}, "PolicyConfig.estimator must be one of 'decay', 'peak'"),
    ("dict-for-a-config", {"throttle": {"a": 1}}, "PolicyConfig.throttle must be a ThrottleConfig"),
    ("wrong-config", {"eviction": PairingConfig()}, "PolicyConfig.eviction must be a EvictionConfig"),
]  # fmt: skip


@pytest.mark.parametrize(("kw", "msg"), [c[1:] for c in BAD_BUILD], ids=[c[0] for c in BAD_BUILD])
def test_bad_fields_fail_when_built(kw: dict[str, Any], msg: str) -> None:
    with pytest.raises(ValueError) as info:
        PolicyConfig(**kw)
    assert str(info.value).startswith(msg)


BAD_MAPPING = [
    ("typo", {"throttle": {"grwoth_fraction": 0.1}}, "throttle.grwoth_fraction: unknown key"),
    ("unknown-section", {"throtle": {}}, "throtle: unknown key"),
    ("bad-value", {"throttle": {"growth_fraction": 0}}, "throttle.growth_fraction: must be in (0, 1], got 0"),
    ("bool-number", {"decay": {"margin": True}}, "decay.margin: must be a finite number >= 1, got True"),
    ("nan", {"peak": {"quantile": math.nan}}, "peak.quantile: must be in [0, 1], got nan"),
    ("cross-field", {"eviction": {"grace_period_s": 5, "acute_grace_period_s": 10}},
     "eviction.acute_grace_period_s: must be <= grace_period_s (5; acute pressure only shortens the grace), "
     "got 10"),
    ("item", {"placement": {"bucket_width": [1, 1, 0, 1, 1, 1, 1, 1]}},
     "placement.bucket_width[2]: must be a finite number > 0, got 0"),
    ("section-not-mapping", {"pairing": 3}, "pairing: must be a mapping, got 3"),
    ("top-not-mapping", [("estimator", "decay")], "policy: must be a mapping, got [('estimator', 'decay')]"),
    ("estimator", {"estimator": "oracle"},
     "estimator: must be one of 'decay', 'peak', 'histogram', got 'oracle'"),
]  # fmt: skip


@pytest.mark.parametrize(("data", "msg"), [c[1:] for c in BAD_MAPPING], ids=[c[0] for c in BAD_MAPPING])
def test_from_mapping_names_the_dotted_key(data: Any, msg: str) -> None:
    with pytest.raises(ValueError) as info:
        PolicyConfig.from_mapping(data)
    assert str(info.value) == msg


def test_from_mapping_keeps_defaults_and_reads_yaml_lists() -> None:
    c = PolicyConfig.from_mapping(
        {"estimator": "peak", "throttle": {"growth_fraction": 0.1}, "placement": {"stranded_dims": ["cpu"]}}
    )
    assert c.estimator == "peak" and c.throttle == ThrottleConfig(growth_fraction=0.1)
    assert c.placement.stranded_dims == ("cpu",) and c.eviction == EvictionConfig()
    assert PolicyConfig.from_mapping({}) == PolicyConfig()


@pytest.mark.parametrize(
    ("name", "cls"), [("decay", DecayEstimator), ("peak", PeakWithMargin), ("histogram", DecayingHistogram)]
)
def test_make_estimator_builds_the_named_estimator_with_its_params(name: str, cls: type) -> None:
    parts = {"decay": {"margin": 1.5}, "peak": {"window": 7}, "histogram": {"n_buckets": 9}}
    c = PolicyConfig.from_mapping({"estimator": name, **parts})
    est = make_estimator(c)
    assert type(est) is cls and est.params == getattr(c, name)  # type: ignore[attr-defined]


# Valid values of every field; the ranges are the configs' own rules.
def _floats(lo: float, hi: float, *, lo_open: bool = False, hi_open: bool = False) -> st.SearchStrategy:
    return st.floats(lo, hi, exclude_min=lo_open, exclude_max=hi_open, allow_nan=False)


SECONDS = _floats(0.0, 1e6)
POSITIVE = _floats(0.0, 1e6, lo_open=True)
MARGIN = _floats(1.0, 10.0)

eviction = st.builds(
    lambda run, grace, acute, cool: EvictionConfig(run, grace, min(acute, grace), cool),
    SECONDS, SECONDS, SECONDS, SECONDS,
)  # fmt: skip
sections = st.fixed_dictionaries(
    {
        "decay": st.builds(DecayParams, margin=MARGIN, half_life_s=POSITIVE),
        "peak": st.builds(
            PeakParams, window=st.integers(1, 1000), quantile=_floats(0.0, 1.0), margin_service=MARGIN,
            margin_batch=MARGIN, margin_best_effort=MARGIN,
        ),
        "histogram": st.builds(
            HistogramParams, target_percentile=_floats(0.0, 1.0, lo_open=True, hi_open=True), margin=MARGIN,
            half_life_s=POSITIVE, bucket_ratio=_floats(1.0, 2.0, lo_open=True), first_bucket=POSITIVE,
            n_buckets=st.integers(2, 200),
        ),
        "eviction": eviction,
        "throttle": st.builds(
            ThrottleConfig, headroom_fraction=_floats(0.0, 0.5),
            growth_fraction=_floats(0.0, 1.0, lo_open=True), pressure_cut=_floats(0.0, 1.0),
            psi_some_threshold=_floats(0.0, 1.0, lo_open=True),
            batch_weight=st.integers(1, 10000), min_quota_cores=_floats(0.0, 1.0, lo_open=True),
        ),
        "starvation": st.builds(StarvationConfig, theta=_floats(0.0, 1.0), min_allocation_cores=POSITIVE),
        "escalation": st.builds(
            EscalationConfig, rounds=st.integers(1, 100), persist_s=POSITIVE, cooldown_s=SECONDS,
            drain_grace_period_s=SECONDS,
        ),
        "pairing": st.builds(PairingConfig, max_evictions=st.integers(1, 100), window_s=POSITIVE),
        "placement": st.builds(
            PlacementConfig, stranded_weight=SECONDS, image_weight=SECONDS,
            bucket_width=st.lists(POSITIVE, min_size=NDIM, max_size=NDIM).map(tuple),
            stranded_dims=st.lists(st.sampled_from([d for d in DIMS if d != "gpu"]), max_size=4).map(tuple),
            equivalence_reuse=st.booleans(), sample_feasible=st.integers(1, 1000),
        ),
    }
)  # fmt: skip
policies = st.builds(lambda name, parts: PolicyConfig(name, **parts), st.sampled_from(ESTIMATORS), sections)


@settings(max_examples=200, deadline=None)
@given(policies)
def test_mapping_round_trip(config: PolicyConfig) -> None:
    data = config.to_mapping()
    assert PolicyConfig.from_mapping(data) == config
    assert PolicyConfig.from_mapping(json.loads(json.dumps(data))) == config  # plain JSON data
    assert PolicyConfig.from_mapping(data).to_mapping() == data
