"""How fast a cluster shell requeues the runs of nodes it lost (seed 000 §4.4).

A scheduler cannot tell a large-scale node failure from a network partition: in the second case
the runs it takes as gone are still running, and requeueing all of them at once places a second
copy of every one, a stampede that is self-inflicted damage. So the runs of lost nodes come back
to the queue through a token bucket: ``burst`` at once, then ``rate_per_s``; the rest wait their
turn (still on their lost node in the shell's record), oldest loss first, then highest priority.

Pure: the bucket is plain data, ``now`` comes in.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class LostRequeueConfig:
    """``burst`` runs at once, then ``rate_per_s`` a second (``rate_per_s = inf``: no limit)."""

    rate_per_s: float = 2.0
    burst: int = 20

    def __post_init__(self) -> None:
        if not self.rate_per_s > 0:
            raise ValueError(f"lost requeue rate_per_s must be > 0, got {self.rate_per_s!r}")
        if isinstance(self.burst, bool) or not isinstance(self.burst, int) or self.burst < 1:
            raise ValueError(f"lost requeue burst must be an integer >= 1, got {self.burst!r}")


@dataclass(frozen=True, slots=True)
class RequeueBucket:
    """The tokens left at ``at`` (a new bucket is full)."""

    tokens: float
    at: float

    @classmethod
    def full(cls, config: LostRequeueConfig, now: float) -> RequeueBucket:
        return cls(float(config.burst), now)


def take_lost(
    bucket: RequeueBucket,
    lost: Sequence[tuple[str, float, int]],
    config: LostRequeueConfig,
    now: float,
) -> tuple[list[str], RequeueBucket]:
    """Of ``lost`` (``(run, lost_at, priority)``), the runs to requeue now, in order, and the
    bucket after; a clock that stepped back refills nothing."""
    order = sorted(lost, key=lambda r: (r[1], -r[2], r[0]))
    if math.isinf(config.rate_per_s):
        return [r[0] for r in order], RequeueBucket(float(config.burst), max(now, bucket.at))
    refill = max(0.0, now - bucket.at) * config.rate_per_s
    tokens = min(float(config.burst), bucket.tokens + refill)
    k = min(len(order), int(tokens + 1e-9))  # 0.1 * 10 is a whole token
    return [r[0] for r in order[:k]], RequeueBucket(tokens - k, max(now, bucket.at))
