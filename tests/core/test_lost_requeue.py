"""The rate at which a cluster shell requeues the runs of lost nodes (seed 000 §4.4): a burst at
once, then a steady rate; oldest loss first, then highest priority; never more than were lost."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kalena.core.lifecycle import LostRequeueConfig, RequeueBucket, take_lost


def test_a_burst_then_the_rate_oldest_loss_and_highest_priority_first():
    cfg = LostRequeueConfig(rate_per_s=0.5, burst=2)
    bucket = RequeueBucket.full(cfg, 100.0)
    lost = [("late", 90.0, 9), ("low", 50.0, 1), ("high", 50.0, 5)]
    go, bucket = take_lost(bucket, lost, cfg, 100.0)
    assert go == ["high", "low"] and bucket.tokens == 0
    go, bucket = take_lost(bucket, [("late", 90.0, 9)], cfg, 101.0)
    assert go == []  # half a token
    go, bucket = take_lost(bucket, [("late", 90.0, 9)], cfg, 102.0)
    assert go == ["late"]
    # a clock stepped back refills nothing; a long quiet spell refills only the burst
    assert take_lost(bucket, lost, cfg, 50.0)[0] == []
    assert len(take_lost(bucket, lost, cfg, 10_000.0)[0]) == 2


def test_no_limit_and_bad_settings():
    cfg = LostRequeueConfig(rate_per_s=math.inf, burst=1)
    go, _ = take_lost(RequeueBucket(0.0, 0.0), [(str(i), 0.0, 0) for i in range(50)], cfg, 0.0)
    assert len(go) == 50
    for bad in ({"rate_per_s": 0.0}, {"burst": 0}, {"burst": True}, {"rate_per_s": math.nan}):
        with pytest.raises(ValueError, match="lost requeue"):
            LostRequeueConfig(**bad)


@given(
    rate=st.floats(0.01, 100.0),
    burst=st.integers(1, 50),
    steps=st.lists(st.tuples(st.floats(0.0, 10.0), st.integers(0, 30)), min_size=1, max_size=20),
)
def test_over_any_spell_no_more_than_the_burst_plus_the_rate_are_requeued(rate, burst, steps):
    cfg = LostRequeueConfig(rate_per_s=rate, burst=burst)
    t = 0.0
    bucket = RequeueBucket.full(cfg, t)
    total = 0
    for dt, n in steps:
        t += dt
        go, bucket = take_lost(bucket, [(f"r{i}", 0.0, 0) for i in range(n)], cfg, t)
        assert len(go) <= n and len(set(go)) == len(go)
        total += len(go)
        assert total <= burst + rate * t + 1e-6
