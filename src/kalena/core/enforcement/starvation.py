"""Anti-starvation (seed 000 §3.4): batch may be starved by production demand, not by its greed.

A batch resident ``b`` is starved when its throttled time over the rolling window exceeds
``theta`` of the window. It is owed ``a_b = min(min_allocation_cores, cap_b)`` cores (``cap_b``
its throttle cap: its limit or capacity, its request when slack-cpu is denied) and needs

    need_b = max(0, a_b - u_b)                      (u_b unsampled -> 0)

The release ``N = sum need_b`` comes only from service residents running above their own
reservation (``u_s > r_s``; they run on slack themselves), in proportion to their excess:

    e_s = u_s - r_s,   take_s = e_s * min(1, N / sum e),   cap_s = u_s - take_s >= r_s

so a service within its reservation (or unsampled) is never capped, and no cap ever falls
below a reservation. If the greedy services cannot release ``N``, the rest is the
``shortfall``. The floors ``a_b`` go to :func:`~kalena.core.enforcement.throttle.plan_throttle`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

import numpy as np

from kalena.core.enforcement.config import StarvationConfig
from kalena.core.enforcement.snapshot import NodeSnapshot
from kalena.core.enforcement.throttle import ThrottleCause, ThrottleDecision, batch_cpu_caps
from kalena.core.resources import CPU
from kalena.core.verdict import Reason, ReasonCode


@dataclass(frozen=True, slots=True)
class StarvedBatch:
    workload: str
    throttled_fraction: float
    allocation: float  # cores it is guaranteed (its quota floor)
    need: float  # cores to release for it: allocation less what it uses now


@dataclass(frozen=True, slots=True)
class StarvationDecision:
    """Service caps (``ThrottleDecision`` with ``weight=None``) and the starved batch's floors."""

    node: str
    epoch: int
    now: float
    window_s: float
    starved: tuple[StarvedBatch, ...]
    caps: tuple[ThrottleDecision, ...]
    needed: float
    released: float

    @property
    def shortfall(self) -> float:
        return max(0.0, self.needed - self.released)

    @property
    def floors(self) -> Mapping[str, float]:
        """Quota floors per starved batch workload, for ``plan_throttle(floors=...)``."""
        return MappingProxyType({s.workload: s.allocation for s in self.starved})


def plan_anti_starvation(
    snap: NodeSnapshot,
    throttled_s: Mapping[str, float],
    window_s: float,
    config: StarvationConfig,
    now: float,
) -> StarvationDecision:
    """The caps that release a minimum CPU allocation to each starved batch resident.

    ``throttled_s`` maps batch ids to their throttled seconds within the last ``window_s``;
    ids that are not batch residents of this node are ignored (they may have just left).
    """
    if (
        isinstance(window_s, bool)
        or not (isinstance(window_s, int | float) and math.isfinite(window_s))
        or (window_s <= 0)
    ):
        raise ValueError(f"window_s must be a positive finite number of seconds, got {window_s!r}")
    for wid, t in throttled_s.items():
        if not (isinstance(t, int | float) and t >= 0):  # NaN fails too
            raise ValueError(f"throttled_s[{wid!r}] must be a non-negative number of seconds, got {t!r}")
    batch = np.flatnonzero(snap.in_ledger & snap.is_batch)
    starved = []
    for i, cap in zip(batch, batch_cpu_caps(snap, batch), strict=True):
        wid = snap.ids[i]
        fraction = min(1.0, float(throttled_s.get(wid, 0.0)) / window_s)
        if fraction <= config.theta:
            continue
        alloc = min(config.min_allocation_cores, float(cap))
        used = 0.0 if math.isnan(snap.usage[i, CPU]) else float(snap.usage[i, CPU])
        starved.append(StarvedBatch(wid, fraction, alloc, max(0.0, alloc - used)))
    needed = float(sum(s.need for s in starved))

    caps: list[ThrottleDecision] = []
    released = 0.0
    if needed > 0:
        u, r = snap.usage[:, CPU], snap.reservation[:, CPU]
        greedy = np.flatnonzero(snap.in_ledger & ~snap.is_batch & ~np.isnan(u) & (u > r))
        total_excess = float((u[greedy] - r[greedy]).sum())
        share = min(1.0, needed / total_excess) if total_excess > 0 else 0.0
        for i in sorted(greedy, key=lambda k: snap.ids[k]):
            take = (float(u[i]) - float(r[i])) * share
            if take <= 0:
                continue
            quota = max(float(r[i]), float(u[i]) - take)  # never below its own reservation
            if quota >= u[i]:  # a take lost to rounding releases nothing: no cap
                continue
            released += float(u[i]) - quota
            reason = Reason(
                ReasonCode.ANTI_STARVATION,
                "cpu",
                requested=quota,
                used=float(u[i]),
                capacity=float(r[i]),
                detail="service above its reservation capped for starved batch",
            )
            caps.append(
                ThrottleDecision(snap.ids[i], "cpu", quota, None, ThrottleCause.ANTI_STARVATION, reason)
            )
    return StarvationDecision(
        snap.node, snap.epoch, now, float(window_s), tuple(starved), tuple(caps), needed, released
    )
