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
from kalena.core.enforcement.nodes import NodesView
from kalena.core.enforcement.snapshot import NodeSnapshot
from kalena.core.enforcement.throttle import ThrottleCause, ThrottleDecision, cpu_caps
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


@dataclass(frozen=True, slots=True, eq=False)
class NodesStarvation:
    """Anti-starvation for every node of a view, as arrays (the form the round uses).

    Per row (W,): ``fraction`` throttled of the window (batch), ``starved``, ``floor`` (the quota
    floor ``a_b``, 0 where not starved), ``need``, and ``cap`` (a service's cap, ``inf`` = none).
    Per node (N,): ``needed`` and ``released`` cores.
    """

    window_s: float
    fraction: np.ndarray
    starved: np.ndarray
    floor: np.ndarray
    need: np.ndarray
    cap: np.ndarray
    needed: np.ndarray
    released: np.ndarray


def starvation_nodes(
    view: NodesView,
    window_s: float,
    config: StarvationConfig,
    *,
    alive: np.ndarray | None = None,
    reservation: np.ndarray | None = None,
) -> NodesStarvation:
    """The module formula for every node at once, from ``view.throttled_s``.

    ``alive`` (W,) leaves out rows gone this round; ``reservation`` (W, 8) overrides the view's
    (a service evicted this round restarts at its request).
    """
    if (
        isinstance(window_s, bool)
        or not (isinstance(window_s, int | float) and math.isfinite(window_s))
        or (window_s <= 0)
    ):
        raise ValueError(f"window_s must be a positive finite number of seconds, got {window_s!r}")
    n, w = view.n_nodes, len(view)
    ledger = view.in_ledger if alive is None else (view.in_ledger & alive)
    is_batch = np.asarray(view.is_batch, dtype=bool)
    batch = ledger & is_batch
    u = view.seen_usage[:, CPU]
    r = (view.reservation if reservation is None else reservation)[:, CPU]
    fraction = np.where(batch, np.minimum(1.0, view.throttled_s / window_s), 0.0)
    starved = batch & (fraction > config.theta)
    # floors and needs on the starved rows only (0 elsewhere)
    s = np.flatnonzero(starved)
    on_s = np.take(view.node, s)
    caps_s = cpu_caps(
        view.limit[:, CPU][s],  # (a strided column: np.take would copy all of it first)
        view.capacity[on_s, CPU],
        view.request[:, CPU][s],
        np.take(view.slack_cpu, s),
    )
    floor = np.zeros(w)
    need = np.zeros(w)
    floor_s = floor[s] = np.minimum(config.min_allocation_cores, caps_s)
    # usage is non-negative or NaN (the view's rule): fmax(u, 0) is nan_to_num(u), at a fraction of its cost
    need_s = need[s] = np.maximum(0.0, floor_s - np.fmax(u[s], 0.0))
    needed = np.bincount(on_s, weights=need_s, minlength=n)

    cap = np.full(w, np.inf)
    released = np.zeros(n)
    with np.errstate(invalid="ignore"):  # a NaN usage is never above its reservation
        greedy = ledger & ~is_batch & (u > r) & (needed > 0)[view.node] if needed.any() else None
    if greedy is not None and greedy.any():
        g = np.flatnonzero(greedy)
        on = view.node[g]
        excess = u[g] - r[g]
        total = np.bincount(on, weights=excess, minlength=n)
        # a tiny total makes needed / total overflow to inf: the share is then 1, as min() says
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            share = np.where(total > 0, np.minimum(1.0, needed / total), 0.0)
        take = excess * share[on]
        quota = np.maximum(r[g], u[g] - take)
        capped = (take > 0) & (quota < u[g])  # a take lost to rounding releases nothing: no cap
        cap[g[capped]] = quota[capped]
        released = np.bincount(on[capped], weights=(u[g] - quota)[capped], minlength=n)
    return NodesStarvation(float(window_s), fraction, starved, floor, need, cap, needed, released)


def plan_anti_starvation(
    snap: NodeSnapshot,
    throttled_s: Mapping[str, float],
    window_s: float,
    config: StarvationConfig,
    now: float,
) -> StarvationDecision:
    """The caps that release a minimum CPU allocation to each starved batch resident.

    The one-node case of :func:`starvation_nodes`. ``throttled_s`` maps batch ids to their
    throttled seconds within the last ``window_s``; ids that are not batch residents of this
    node are ignored (they may have just left).
    """
    for wid, t in throttled_s.items():
        if not (isinstance(t, int | float) and t >= 0):  # NaN fails too
            raise ValueError(f"throttled_s[{wid!r}] must be a non-negative number of seconds, got {t!r}")
    view = NodesView.of_snapshots([snap], throttled_s=[dict(throttled_s)])
    s = starvation_nodes(view, window_s, config)
    return decision_of(s, view, 0, now)


def decision_of(s: NodesStarvation, view: NodesView, n: int, now: float) -> StarvationDecision:
    """Node ``n``'s part of ``s`` as a :class:`StarvationDecision` (caps in workload-id order)."""
    rows = view.rows_of(n)
    ids = [str(view.ids[i]) for i in rows]
    starved = tuple(
        StarvedBatch(wid, float(s.fraction[i]), float(s.floor[i]), float(s.need[i]))
        for wid, i in zip(ids, rows.tolist(), strict=True)
        if s.starved[i]
    )
    caps = []
    u, r = view.seen_usage[:, CPU], view.reservation[:, CPU]
    for wid, i in sorted(zip(ids, rows.tolist(), strict=True)):
        if not math.isfinite(s.cap[i]):
            continue
        quota = float(s.cap[i])
        reason = Reason(
            ReasonCode.ANTI_STARVATION,
            "cpu",
            requested=quota,
            used=float(u[i]),
            capacity=float(r[i]),
            detail="service above its reservation capped for starved batch",
        )
        caps.append(ThrottleDecision(wid, "cpu", quota, None, ThrottleCause.ANTI_STARVATION, reason))
    return StarvationDecision(
        view.names[n],
        int(view.epoch[n]),
        now,
        s.window_s,
        starved,
        tuple(caps),
        float(s.needed[n]),
        float(s.released[n]),
    )
