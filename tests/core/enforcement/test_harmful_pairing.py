"""The harmful-pairing blacklist: K evictions of one key from one node within the window."""

from __future__ import annotations

import math

import pytest

from kalena.core.enforcement import (
    EvictionEvent,
    HarmfulPair,
    PairingConfig,
    blacklisted_pairs,
    harmful_pairs,
)

CFG = PairingConfig(max_evictions=3, window_s=100.0)
NOW = 1000.0


def ev(key: str, node: str, *times: float) -> list[EvictionEvent]:
    return [EvictionEvent(key, node, t) for t in times]


# (id, history, expected blacklisted pairs)
CASES: list[tuple[str, list[EvictionEvent], set[tuple[str, str]]]] = [
    ("empty", [], set()),
    ("two-strikes", ev("job", "n1", 950, 990), set()),
    ("three-strikes", ev("job", "n1", 950, 960, 990), {("job", "n1")}),
    ("one-aged-out", ev("job", "n1", 900, 960, 990), set()),  # 900 is exactly now - window: outside
    ("future-ignored", ev("job", "n1", 950, 960, 1001), set()),
    ("spread-over-nodes", ev("job", "n1", 950, 960) + ev("job", "n2", 970), set()),
    ("spread-over-keys", ev("a", "n1", 950, 960) + ev("b", "n1", 970), set()),
    (
        "two-pairs",
        ev("a", "n1", 910, 920, 930) + ev("b", "n2", 940, 950, 960, 970),
        {("a", "n1"), ("b", "n2")},
    ),
    ("unordered-history", ev("job", "n1", 990, 950, 960), {("job", "n1")}),
]


@pytest.mark.parametrize(("history", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_blacklisted_pairs(history: list[EvictionEvent], expected: set[tuple[str, str]]) -> None:
    assert blacklisted_pairs(history, CFG, NOW) == expected


def test_harmful_pair_counts_and_expiry() -> None:
    history = ev("job", "n1", 920, 950, 960, 990)
    (pair,) = harmful_pairs(history, CFG, NOW)
    # the last three events are 950, 960, 990: the pair expires when 950 leaves the window
    assert pair == HarmfulPair("job", "n1", 4, 1050.0)
    assert blacklisted_pairs(history, CFG, pair.until - 1) == {("job", "n1")}
    assert blacklisted_pairs(history, CFG, pair.until) == set()


def test_threshold_one_blacklists_after_a_single_eviction() -> None:
    assert blacklisted_pairs(ev("job", "n1", 999), PairingConfig(max_evictions=1, window_s=10), NOW) == {
        ("job", "n1")
    }


def test_output_is_sorted_by_key_then_node() -> None:
    history = ev("b", "n1", 990, 991, 992) + ev("a", "n2", 990, 991, 992) + ev("a", "n1", 990, 991, 992)
    assert [(p.key, p.node) for p in harmful_pairs(history, CFG, NOW)] == [
        ("a", "n1"),
        ("a", "n2"),
        ("b", "n1"),
    ]


def test_event_time_must_be_finite() -> None:
    with pytest.raises(ValueError, match="time"):
        EvictionEvent("job", "n1", math.nan)
