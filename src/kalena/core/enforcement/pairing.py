"""The harmful-pairing blacklist (seed 000 §4.3, after Borg's task::machine rule).

A pair (equivalence key, node) is harmful when the history holds at least
``max_evictions`` evictions of that key from that node with time in ``(now - window, now]``.
It stays blacklisted until the oldest of the most recent ``max_evictions`` of those events
leaves the window:

    until = t_(n - K + 1) + window,   t_1 <= ... <= t_n the pair's in-window eviction times.

Because the blacklist is recomputed from history, it needs no state of its own and expires by
itself. Placement reads it as a filter (reason code ``harmful-pairing``).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from kalena.core.enforcement.config import PairingConfig


@dataclass(frozen=True, slots=True)
class EvictionEvent:
    """One past eviction: which template (equivalence key), from which node, when."""

    key: str
    node: str
    time: float

    def __post_init__(self) -> None:
        if not math.isfinite(self.time):
            raise ValueError(f"EvictionEvent.time must be finite, got {self.time!r}")


@dataclass(frozen=True, slots=True)
class HarmfulPair:
    """A blacklisted pairing, with the in-window eviction count and when it expires."""

    key: str
    node: str
    evictions: int
    until: float


def harmful_pairs(
    history: Iterable[EvictionEvent], config: PairingConfig, now: float
) -> tuple[HarmfulPair, ...]:
    """Every harmful pair at ``now``, sorted by (key, node). Events after ``now`` are ignored."""
    times: dict[tuple[str, str], list[float]] = defaultdict(list)
    lo = now - config.window_s
    for e in history:
        if lo < e.time <= now:
            times[(e.key, e.node)].append(e.time)
    out = []
    k = config.max_evictions
    for (key, node), ts in sorted(times.items()):
        if len(ts) >= k:
            ts.sort()
            out.append(HarmfulPair(key, node, len(ts), ts[len(ts) - k] + config.window_s))
    return tuple(out)


def blacklisted_pairs(
    history: Iterable[EvictionEvent], config: PairingConfig, now: float
) -> frozenset[tuple[str, str]]:
    """The set of (equivalence key, node) pairs to keep apart at ``now``."""
    return frozenset((p.key, p.node) for p in harmful_pairs(history, config, now))
