"""Throttling batch under compressible pressure (seed 000 §3.2, SPEC: Enforcement on the node).

CPU is enforced; disk and network are accounted and advisory (reported, never throttled) in
the first release. The node's batch CPU allowance ``A`` (cores) follows

    S      = sum over service residents of r'_w[cpu]            (service claim, r' = max(r, u))
    target = clip(C - S - h*C, 0, C)                              (slack, less headroom h)
    target = min(target, (1 - cut) * min(A_prev, U_batch))       (only under PSI cpu pressure)
    A      = target                           if A_prev is None or target <= A_prev   (shrink at once)
           = min(target, A_prev + g*C)        otherwise                               (grow slowly)

and is shared among batch residents by water-filling in proportion to their cpu requests,
each capped at ``min(limit, C)``, or at its own request when slack-cpu is denied. Every quota
is at least the kernel's minimum (``min_quota_cores``) and at most ``C``. Batch also gets the
minimal ``cpu.weight`` (shares express entitlement, the quota a hard ceiling; both are needed,
seed 000 §3.2). The shell feeds ``ThrottlePlan.allowance`` back as the next ``previous_allowance``.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from kalena.core.enforcement.config import ThrottleConfig
from kalena.core.enforcement.snapshot import NodeSnapshot
from kalena.core.resources import COMPRESSIBLE, CPU, DIMS
from kalena.core.verdict import Reason, ReasonCode


class ThrottleCause(enum.Enum):
    """What bound a quota. Stable strings: metrics group by them."""

    SLACK = "slack"  # the allowance is the node's cpu slack
    GROWING = "growing"  # the allowance is still growing back slowly
    PRESSURE = "pressure"  # PSI cpu pressure cut the allowance
    SLACK_CPU_DENIED = "slack-cpu-denied"  # capped at its own request
    LIMIT = "limit"  # capped at its own limit (or the node's capacity)
    ANTI_STARVATION = "anti-starvation"  # a service cap, or a starved batch workload's floor


@dataclass(frozen=True, slots=True)
class ThrottleDecision:
    """Set ``workload``'s ceiling on ``dimension`` to ``quota`` (cores for cpu; ``inf`` = no ceiling).

    The shell writes ``cpu.max`` (v2) or ``cpu.cfs_quota_us`` (v1) as ``quota x period``, and
    ``cpu.weight`` (v2) or ``cpu.shares`` (v1, via :func:`weight_to_shares`) unless ``weight``
    is ``None`` (leave it unchanged).
    """

    workload: str
    dimension: str
    quota: float
    weight: int | None
    cause: ThrottleCause
    reason: Reason


@dataclass(frozen=True, slots=True)
class AdvisoryReport:
    """An accounted-but-advisory compressible dimension (disk, network): reported, not throttled.

    ``batch_users`` lists batch residents by descending usage (ties: id) for scoring and review.
    """

    dimension: str
    used: float
    reserved: float
    capacity: float
    batch_used: float
    pressured: bool
    batch_users: tuple[tuple[str, float], ...]


@dataclass(frozen=True, slots=True)
class ThrottlePlan:
    node: str
    epoch: int
    now: float
    pressured: bool
    service_claim: float
    target: float
    allowance: float
    previous_allowance: float | None
    decisions: tuple[ThrottleDecision, ...]
    advisories: tuple[AdvisoryReport, ...]


def weight_to_shares(weight: int) -> int:
    """cgroup v2 ``cpu.weight`` (1..10000) to v1 ``cpu.shares`` (2..262144), the runc/crun mapping
    inverted: ``shares = 2 + (weight - 1) * 262142 / 9999``."""
    if not 1 <= weight <= 10000:
        raise ValueError(f"cpu.weight must be in [1, 10000], got {weight!r}")
    return 2 + round((weight - 1) * 262142 / 9999)


def batch_cpu_allowance(
    capacity: float,
    service_claim: float,
    batch_used: float | None,
    pressured: bool,
    previous: float | None,
    config: ThrottleConfig,
) -> tuple[float, float]:
    """``(target, allowance)`` in cores by the module formula (``batch_used`` None = unsampled)."""
    if previous is not None and (math.isnan(previous) or previous < 0):
        raise ValueError(f"previous_allowance must be a non-negative number, got {previous!r}")
    if math.isinf(capacity):  # an unconstrained node: inf - h * inf would be NaN
        target = math.inf
    else:
        target = min(max(capacity - service_claim - config.headroom_fraction * capacity, 0.0), capacity)
    if pressured:
        base = min(math.inf if previous is None else previous, math.inf if batch_used is None else batch_used)
        ref, keep = (target if math.isinf(base) else base), 1.0 - config.pressure_cut
        target = min(target, keep * ref if keep > 0 else 0.0)  # keep = 0 would make 0 * inf NaN
    if previous is None or target <= previous:
        return target, target
    return target, min(target, previous + config.growth_fraction * capacity)


def water_fill(total: float, caps: np.ndarray, basis: np.ndarray) -> np.ndarray:
    """Share ``total`` in proportion to ``basis`` (> 0), no share above its cap.

    Finds ``lam`` with ``sum min(cap_i, lam * basis_i) = min(total, sum caps)`` by saturating
    the capped shares one round at a time (at most ``n`` rounds).
    """
    caps = np.asarray(caps, dtype=np.float64)
    if math.isinf(total):
        return caps.copy()
    q = np.zeros_like(caps)
    free = np.ones(caps.shape, dtype=bool)
    rem = max(total, 0.0)
    while free.any() and rem > 0:
        want = rem / basis[free].sum() * basis
        sat = free & (want >= caps)
        if not sat.any():
            q[free] = want[free]
            break
        q[sat] = caps[sat]
        rem -= float(caps[sat].sum())
        free &= ~sat
    return q


def batch_cpu_caps(snap: NodeSnapshot, rows: np.ndarray) -> np.ndarray:
    """Each row's cpu ceiling: ``min(L, C)``, or ``min(L, C, R)`` when slack-cpu is denied."""
    caps = np.minimum(snap.limit[rows, CPU], snap.capacity[CPU])
    return np.where(snap.slack_cpu[rows], caps, np.minimum(caps, snap.request[rows, CPU]))


def cpu_pressured(snap: NodeSnapshot, config: ThrottleConfig) -> bool:
    """PSI cpu ``some`` at or above the threshold, or a kernel signal on cpu."""
    psi = snap.conditions.psi_some[CPU]
    return snap.conditions.signalled(CPU) or bool(not math.isnan(psi) and psi >= config.psi_some_threshold)


def plan_throttle(
    snap: NodeSnapshot,
    config: ThrottleConfig,
    now: float,
    previous_allowance: float | None = None,
    floors: Mapping[str, float] | None = None,
) -> ThrottlePlan:
    """CPU quotas for every batch resident, plus advisory reports for disk and network.

    ``floors`` (from :func:`~kalena.core.enforcement.starvation.plan_anti_starvation`) raises a
    starved batch workload's quota to its guaranteed minimum, within its own cap.
    """
    floors = floors or {}
    cap_cpu = float(snap.capacity[CPU])
    eff = snap.effective_reservation
    service = snap.in_ledger & ~snap.is_batch
    batch = np.flatnonzero(snap.in_ledger & snap.is_batch)
    claim = float(eff[service, CPU].sum())
    bu = snap.usage[batch, CPU]
    batch_used = float(np.nansum(bu)) if np.any(~np.isnan(bu)) else None
    pressured = cpu_pressured(snap, config)
    target, allowance = batch_cpu_allowance(cap_cpu, claim, batch_used, pressured, previous_allowance, config)

    req = snap.request[batch, CPU]
    denied = ~snap.slack_cpu[batch]
    caps = batch_cpu_caps(snap, batch)
    shares = water_fill(allowance, caps, np.maximum(req, config.min_quota_cores))
    decisions = []
    for k, i in enumerate(batch):
        wid = snap.ids[i]
        q = float(shares[k])
        floor = min(float(floors.get(wid, 0.0)), float(caps[k]))
        if floor > q:
            q, cause = floor, ThrottleCause.ANTI_STARVATION
        elif q >= caps[k] * (1 - 1e-12):
            cause = ThrottleCause.SLACK_CPU_DENIED if denied[k] and req[k] <= caps[k] else ThrottleCause.LIMIT
        elif pressured:
            cause = ThrottleCause.PRESSURE
        elif allowance < target:
            cause = ThrottleCause.GROWING
        else:
            cause = ThrottleCause.SLACK
        q = min(cap_cpu, max(config.min_quota_cores, q))
        code = (
            ReasonCode.ANTI_STARVATION
            if cause is ThrottleCause.ANTI_STARVATION
            else ReasonCode.COMPRESSIBLE_PRESSURE
        )
        reason = Reason(code, "cpu", requested=q, used=claim, capacity=cap_cpu, detail=cause.value)
        decisions.append(ThrottleDecision(wid, "cpu", q, config.batch_weight, cause, reason))
    return ThrottlePlan(
        snap.node,
        snap.epoch,
        now,
        pressured,
        claim,
        target,
        allowance,
        previous_allowance,
        tuple(decisions),
        advisories(snap, config),
    )


def advisories(snap: NodeSnapshot, config: ThrottleConfig) -> tuple[AdvisoryReport, ...]:
    """One report per compressible dimension other than cpu (disk and network)."""
    eff = snap.effective_reservation
    ledger = snap.in_ledger
    batch = np.flatnonzero(ledger & snap.is_batch)
    out = []
    for d in np.flatnonzero(COMPRESSIBLE):
        if d == CPU:
            continue
        cap = float(snap.capacity[d])
        used = float(np.nansum(snap.usage[ledger, d]))
        psi = snap.conditions.psi_some[d]
        pressured = (
            used > cap * (1 - config.headroom_fraction)
            or snap.conditions.signalled(d)
            or bool(not math.isnan(psi) and psi >= config.psi_some_threshold)
        )
        users = sorted(
            ((snap.ids[i], float(snap.usage[i, d])) for i in batch if snap.usage[i, d] > 0),
            key=lambda t: (-t[1], t[0]),
        )
        out.append(
            AdvisoryReport(
                DIMS[d],
                used,
                float(eff[ledger, d].sum()),
                cap,
                float(np.nansum(snap.usage[batch, d])),
                pressured,
                tuple(users),
            )
        )
    return tuple(out)
