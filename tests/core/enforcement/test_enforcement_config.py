"""Every enforcement config fails at construction with a message naming the key and the value."""

from __future__ import annotations

import math
from typing import Any

import pytest

from kalena.core.enforcement import (
    EscalationConfig,
    EvictionConfig,
    PairingConfig,
    StarvationConfig,
    ThrottleConfig,
)

BAD: list[tuple[type, dict[str, Any], str]] = [
    (EvictionConfig, {"min_run_time_s": -1.0}, "min_run_time_s"),
    (EvictionConfig, {"grace_period_s": math.nan}, "grace_period_s"),
    (EvictionConfig, {"cooldown_s": math.inf}, "cooldown_s"),
    (EvictionConfig, {"grace_period_s": 5.0, "acute_grace_period_s": 10.0}, "acute_grace_period_s"),
    (EvictionConfig, {"cooldown_s": "600"}, "cooldown_s"),
    (PairingConfig, {"max_evictions": 0}, "max_evictions"),
    (PairingConfig, {"max_evictions": 2.5}, "max_evictions"),
    (PairingConfig, {"max_evictions": True}, "max_evictions"),
    (PairingConfig, {"window_s": 0.0}, "window_s"),
    (ThrottleConfig, {"headroom_fraction": 0.9}, "headroom_fraction"),
    (ThrottleConfig, {"headroom_fraction": True}, "headroom_fraction"),
    (ThrottleConfig, {"growth_fraction": 0.0}, "growth_fraction"),
    (ThrottleConfig, {"pressure_cut": 1.5}, "pressure_cut"),
    (ThrottleConfig, {"psi_some_threshold": 0.0}, "psi_some_threshold"),
    (ThrottleConfig, {"batch_weight": 0}, "batch_weight"),
    (ThrottleConfig, {"batch_weight": 20000}, "batch_weight"),
    (ThrottleConfig, {"min_quota_cores": 0.0}, "min_quota_cores"),
    (StarvationConfig, {"theta": -0.1}, "theta"),
    (StarvationConfig, {"theta": math.nan}, "theta"),
    (StarvationConfig, {"min_allocation_cores": 0.0}, "min_allocation_cores"),
    (EscalationConfig, {"rounds": 0}, "rounds"),
    (EscalationConfig, {"persist_s": 0.0}, "persist_s"),
    (EscalationConfig, {"cooldown_s": -5.0}, "cooldown_s"),
]


@pytest.mark.parametrize(
    ("cls", "kwargs", "key"), BAD, ids=[f"{c.__name__}-{k}={next(iter(kw.values()))!r}" for c, kw, k in BAD]
)
def test_bad_value_names_key_and_value(cls: type, kwargs: dict[str, Any], key: str) -> None:
    with pytest.raises(ValueError, match=key) as info:
        cls(**kwargs)
    assert repr(kwargs[key]) in str(info.value)
    assert cls.__name__ in str(info.value)


def test_message_format() -> None:
    with pytest.raises(ValueError) as info:
        ThrottleConfig(growth_fraction=0)
    assert str(info.value) == "ThrottleConfig.growth_fraction must be in (0, 1], got 0"


@pytest.mark.parametrize(
    "cls",
    [EvictionConfig, PairingConfig, ThrottleConfig, StarvationConfig, EscalationConfig],
    ids=lambda c: c.__name__,
)
def test_defaults_are_valid_and_frozen(cls: type) -> None:
    cfg = cls()
    first = cfg.__dataclass_fields__.__iter__().__next__()
    with pytest.raises(AttributeError):
        setattr(cfg, first, 1)
