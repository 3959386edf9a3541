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
from kalena.core.enforcement.nodes import NodesView
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


def batch_cpu_allowances(
    capacity: np.ndarray,
    service_claim: np.ndarray,
    batch_used: np.ndarray,
    pressured: np.ndarray,
    previous: np.ndarray,
    config: ThrottleConfig,
) -> tuple[np.ndarray, np.ndarray]:
    """``(target, allowance)`` per node, in cores, by the module formula.

    All arguments have shape ``(N,)``; ``batch_used`` NaN = no batch usage sampled, ``previous``
    NaN = the first round. :func:`batch_cpu_allowance` is the one-node case.
    """
    capacity = np.asarray(capacity, dtype=np.float64)
    previous = np.asarray(previous, dtype=np.float64)
    if np.any(previous < 0):
        raise ValueError(f"previous_allowance must be non-negative numbers, got {previous.tolist()!r}")
    with np.errstate(invalid="ignore"):  # inf - h * inf is NaN: an unconstrained node's target is inf
        slack = np.minimum(
            np.maximum(capacity - service_claim - config.headroom_fraction * capacity, 0.0), capacity
        )
    target = np.where(np.isinf(capacity), np.inf, slack)
    base = np.fmin(
        np.where(np.isnan(previous), np.inf, previous), np.where(np.isnan(batch_used), np.inf, batch_used)
    )
    keep = 1.0 - config.pressure_cut
    ref = np.where(np.isinf(base), target, base)
    cut = np.minimum(target, keep * ref) if keep > 0 else np.zeros_like(target)  # 0 * inf would be NaN
    target = np.where(pressured, cut, target)
    first = np.isnan(previous)
    with np.errstate(invalid="ignore"):
        grown = np.minimum(target, previous + config.growth_fraction * capacity)
    shrink = first | (target <= np.where(first, np.inf, previous))
    return target, np.where(shrink, target, grown)


def batch_cpu_allowance(
    capacity: float,
    service_claim: float,
    batch_used: float | None,
    pressured: bool,
    previous: float | None,
    config: ThrottleConfig,
) -> tuple[float, float]:
    """``(target, allowance)`` in cores for one node: :func:`batch_cpu_allowances` with N = 1."""
    if previous is not None and (math.isnan(previous) or previous < 0):
        raise ValueError(f"previous_allowance must be a non-negative number, got {previous!r}")
    target, allowance = batch_cpu_allowances(
        np.array([capacity], dtype=np.float64),
        np.array([service_claim], dtype=np.float64),
        np.array([math.nan if batch_used is None else batch_used]),
        np.array([pressured]),
        np.array([math.nan if previous is None else previous]),
        config,
    )
    return float(target[0]), float(allowance[0])


def start_quota(request_cpu: np.ndarray | float, config: ThrottleConfig) -> np.ndarray:
    """The quota a batch workload starts with, before its first round: its own request (at least the
    kernel minimum). It never runs unthrottled, and the first round's water-fill takes over."""
    return np.maximum(request_cpu, config.min_quota_cores)


def water_fill_groups(
    total: np.ndarray, group: np.ndarray, caps: np.ndarray, basis: np.ndarray
) -> np.ndarray:
    """Share each group's ``total[g]`` among its rows in proportion to ``basis`` (> 0), none above its cap.

    For every group ``g`` finds ``lam`` with ``sum min(cap_i, lam * basis_i) = min(total_g, sum caps)``
    by saturating the capped shares one round at a time (at most the largest group's size rounds,
    each over the rows not yet settled). An infinite total gives every row its cap.
    """
    total = np.asarray(total, dtype=np.float64)
    caps = np.asarray(caps, dtype=np.float64)
    basis = np.asarray(basis, dtype=np.float64)
    n = len(total)
    unbounded = np.isinf(total)
    rem = np.where(unbounded, 0.0, np.maximum(total, 0.0))
    # the rows still to share, ascending (so every group's sums add in row order, whatever else
    # is in the call); each round drops the rows it settled, so later rounds touch only the few
    # groups where caps keep binding
    if unbounded.any():
        free = unbounded[group]
        q = np.where(free, caps, 0.0)
        idx = np.flatnonzero(~free)
    else:
        q = np.zeros(len(group))
        idx = np.arange(len(group))
    every = len(idx) == len(group)  # every row still to share: idx is arange, gathers are no-ops
    while len(idx):
        g = group if every else group[idx]
        left = rem[g]
        live = left > 0  # a group with nothing left to share leaves its free rows at 0
        if not live.all():
            idx, g, left, every = idx[live], g[live], left[live], False
        if not len(idx):
            break
        b, c = (basis, caps) if every else (basis[idx], caps[idx])
        sb = np.bincount(g, weights=b, minlength=n)
        with np.errstate(invalid="ignore", divide="ignore"):
            want = left / sb[g] * b
        sat = want >= c
        if not sat.any():  # no cap binds anywhere: every share stands
            if every:
                return want  # q is all zeros and idx every row
            q[idx] = want
            break
        done = ~(np.bincount(g[sat], minlength=n) > 0)[g]  # no cap binds in this group: shares stand
        q[idx[done]] = want[done]
        q[idx[sat]] = c[sat]
        rem = rem - np.bincount(g[sat], weights=c[sat], minlength=n)
        idx, every = idx[~(done | sat)], False
    return q


def water_fill(total: float, caps: np.ndarray, basis: np.ndarray) -> np.ndarray:
    """Share ``total`` in proportion to ``basis`` (> 0), no share above its cap: one group of
    :func:`water_fill_groups`."""
    caps = np.asarray(caps, dtype=np.float64)
    return water_fill_groups(
        np.array([total], dtype=np.float64), np.zeros(len(caps), dtype=np.int64), caps, basis
    )


def batch_cpu_caps(snap: NodeSnapshot, rows: np.ndarray) -> np.ndarray:
    """Each row's cpu ceiling: ``min(L, C)``, or ``min(L, C, R)`` when slack-cpu is denied."""
    return cpu_caps(snap.limit[rows, CPU], snap.capacity[CPU], snap.request[rows, CPU], snap.slack_cpu[rows])


def cpu_caps(
    limit: np.ndarray, capacity: np.ndarray | float, request: np.ndarray, slack_cpu: np.ndarray
) -> np.ndarray:
    """``min(L, C)``, or ``min(L, C, R)`` where slack-cpu is denied (cores, per row)."""
    caps = np.minimum(limit, capacity)
    return np.where(slack_cpu, caps, np.minimum(caps, request))


def cpu_pressured_nodes(
    triggered: np.ndarray, acute: np.ndarray, psi_some: np.ndarray, config: ThrottleConfig
) -> np.ndarray:
    """(N,) bool: PSI cpu ``some`` at or above the threshold, or a kernel signal on cpu."""
    psi = psi_some[:, CPU]
    return triggered[:, CPU] | acute[:, CPU] | (~np.isnan(psi) & (psi >= config.psi_some_threshold))


#: :class:`ThrottleCause` by code, the order of the ``cause`` column of :class:`NodesThrottle`.
CAUSES: tuple[ThrottleCause, ...] = tuple(ThrottleCause)
_C = {c: k for k, c in enumerate(CAUSES)}


@dataclass(frozen=True, slots=True)
class _CauseInputs:
    """What :attr:`NodesThrottle.cause` is worked out from, per throttled row (``node``: its node)."""

    node: np.ndarray
    share: np.ndarray
    caps: np.ndarray
    lifted: np.ndarray
    slack_cpu: np.ndarray


@dataclass(frozen=True, slots=True, eq=False)
class NodesThrottle:
    """The throttle of every node of a view, as arrays (the form the round and the simulator use).

    ``rows`` are the view rows of the batch residents throttled (ascending); ``quota`` (cores),
    ``request`` (their cpu request) and ``cause`` (codes into :data:`CAUSES`) are per such row.
    Per node: the service ``claim``, the ``target`` and ``allowance`` (feed ``allowance`` back as
    the next ``previous``), ``pressured``.
    """

    rows: np.ndarray
    quota: np.ndarray
    request: np.ndarray
    weight: int
    claim: np.ndarray
    target: np.ndarray
    allowance: np.ndarray
    previous: np.ndarray
    pressured: np.ndarray
    _why: _CauseInputs
    _cause: np.ndarray | None = None

    @property
    def cause(self) -> np.ndarray:
        """(rows,) int8 codes into :data:`CAUSES`: what bound each quota. Worked out when first
        read: the simulator carries out quotas without reading why (about 0.1 ms a round at
        10,000 batch rows), the node agent logs them."""
        cause = self._cause
        if cause is None:
            cause = _causes(self, self._why)
            object.__setattr__(self, "_cause", cause)  # (a memo of a frozen record)
        return cause

    def causes(self) -> list[ThrottleCause]:
        return [CAUSES[c] for c in self.cause.tolist()]


def _causes(t: NodesThrottle, why: _CauseInputs) -> np.ndarray:
    at_cap = ~why.lifted & (why.share >= why.caps * (1 - 1e-12))
    denied = ~why.slack_cpu
    # np.select's rule (the first condition that holds), written straight into the int8 codes
    cause = np.full(len(why.node), _C[ThrottleCause.SLACK], dtype=np.int8)
    for cond, code in (
        ((t.allowance < t.target)[why.node], ThrottleCause.GROWING),
        (t.pressured[why.node], ThrottleCause.PRESSURE),
        (at_cap, ThrottleCause.LIMIT),
        (at_cap & denied & (t.request <= why.caps), ThrottleCause.SLACK_CPU_DENIED),
        (why.lifted, ThrottleCause.ANTI_STARVATION),
    ):
        np.copyto(cause, _C[code], where=cond)
    return cause


def throttle_nodes(
    view: NodesView,
    config: ThrottleConfig,
    previous: np.ndarray,
    floors: np.ndarray | None = None,
    *,
    alive: np.ndarray | None = None,
    effective: np.ndarray | None = None,
) -> NodesThrottle:
    """CPU quotas for every batch resident of every node of ``view`` (module formula).

    ``previous`` (N,) is each node's last allowance (NaN: first round); ``floors`` (W,) the
    anti-starvation quota floors (0: none); ``alive`` (W,) leaves out rows already gone this round
    and ``effective`` (W, 8) overrides ``r'`` (both from the round's evictions).
    """
    n = view.n_nodes
    cap_cpu = view.capacity[:, CPU]
    ledger = view.in_ledger if alive is None else (view.in_ledger & alive)
    is_batch = np.asarray(view.is_batch, dtype=bool)
    service = np.flatnonzero(ledger & ~is_batch)
    batch = np.flatnonzero(ledger & is_batch)
    node_s, node_b = np.take(view.node, service), np.take(view.node, batch)
    u = view.seen_usage[:, CPU]
    if effective is None:  # r' = fmax(r, u) (the view's effective_reservation) on the service rows only
        # column views are strided: indexing gathers the rows, np.take would copy the column first
        claim_s = np.fmax(view.reservation[:, CPU][service], u[service])
    else:
        claim_s = effective[:, CPU][service]
    claim = np.bincount(node_s, weights=claim_s, minlength=n)
    bu = u[batch]
    known = ~np.isnan(bu)
    on_known = node_b[known]
    used = np.bincount(on_known, weights=bu[known], minlength=n)
    used = np.where(np.bincount(on_known, minlength=n) > 0, used, np.nan)
    pressured = cpu_pressured_nodes(view.triggered, view.acute, view.psi_some, config)
    target, allowance = batch_cpu_allowances(cap_cpu, claim, used, pressured, previous, config)

    req = view.request[:, CPU][batch]
    cap_b = cap_cpu[node_b]
    slack_b = np.take(np.asarray(view.slack_cpu, dtype=bool), batch)
    caps = cpu_caps(view.limit[:, CPU][batch], cap_b, req, slack_b)
    share = water_fill_groups(allowance, node_b, caps, np.maximum(req, config.min_quota_cores))
    floor = np.zeros(len(batch)) if floors is None else np.minimum(np.take(floors, batch), caps)
    lifted = floor > share
    q = np.minimum(cap_b, np.maximum(config.min_quota_cores, np.where(lifted, floor, share)))
    return NodesThrottle(
        batch,
        q,
        req,
        config.batch_weight,
        claim,
        target,
        allowance,
        np.asarray(previous, np.float64),
        pressured,
        _CauseInputs(node_b, share, caps, lifted, slack_b),
    )


def decisions_of(t: NodesThrottle, view: NodesView, n: int) -> tuple[ThrottleDecision, ...]:
    """Node ``n``'s quotas as :class:`ThrottleDecision` records (for logs and the one-node API)."""
    on = np.flatnonzero(view.node[t.rows] == n)
    cap_cpu, claim = float(view.capacity[n, CPU]), float(t.claim[n])
    out = []
    for k in on.tolist():
        cause = CAUSES[int(t.cause[k])]
        q = float(t.quota[k])
        code = (
            ReasonCode.ANTI_STARVATION
            if cause is ThrottleCause.ANTI_STARVATION
            else ReasonCode.COMPRESSIBLE_PRESSURE
        )
        reason = Reason(code, "cpu", requested=q, used=claim, capacity=cap_cpu, detail=cause.value)
        out.append(ThrottleDecision(str(view.ids[t.rows[k]]), "cpu", q, t.weight, cause, reason))
    return tuple(out)


def plan_throttle(
    snap: NodeSnapshot,
    config: ThrottleConfig,
    now: float,
    previous_allowance: float | None = None,
    floors: Mapping[str, float] | None = None,
) -> ThrottlePlan:
    """CPU quotas for every batch resident, plus advisory reports for disk and network.

    The one-node case of :func:`throttle_nodes`. ``floors`` (from
    :func:`~kalena.core.enforcement.starvation.plan_anti_starvation`) raises a starved batch
    workload's quota to its guaranteed minimum, within its own cap.
    """
    if previous_allowance is not None and (math.isnan(previous_allowance) or previous_allowance < 0):
        raise ValueError(f"previous_allowance must be a non-negative number, got {previous_allowance!r}")
    view = NodesView.of_snapshots([snap])
    floors = floors or {}
    floor_col = np.array([float(floors.get(w, 0.0)) for w in snap.ids])
    prev = np.array([math.nan if previous_allowance is None else previous_allowance])
    t = throttle_nodes(view, config, prev, floor_col)
    return ThrottlePlan(
        snap.node,
        snap.epoch,
        now,
        bool(t.pressured[0]),
        float(t.claim[0]),
        float(t.target[0]),
        float(t.allowance[0]),
        previous_allowance,
        decisions_of(t, view, 0),
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
