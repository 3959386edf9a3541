"""Eviction under non-compressible pressure (seed 000 §3.3, SPEC: Enforcement on the node).

For each non-compressible dimension ``d`` (ram, then storage) under pressure, evict in the
order of :func:`eviction_sort_key` until the reservation ledger holds on ``d``:

    sum over ledger residents of r'_w[d] <= C[d],   r'_w = max(r_w, u_w)

where an evicted batch workload counts 0 (it leaves the ledger) and an evicted service
workload counts ``min(r', R)`` (its placement and request stay; it restarts at ``r_0 = R``).

The loop stops at the first prefix of the order that makes the ledger hold (no extra
victims). Candidates, in order: any non-DaemonSet resident whose usage on ``d`` exceeds its
own limit on ``d`` (the limit-breach override, any tier), then batch by ascending priority.
Service tier is never a candidate otherwise; DaemonSets never are. Batch younger than the
minimum run time is skipped unless ``d`` is acute. A resident with nothing reserved on ``d``
is never a candidate: evicting it cannot help the ledger. The candidate set is finite, so the
loop terminates; if it runs out while the ledger is still breached, the plan says so
(:attr:`EvictionPlan.unresolved`) rather than reaching for service.

Pressure on ``d`` means: the ledger is breached, usage exceeds capacity, or the kernel
signalled (PSI trigger, memory event, acute flag). A signal without a ledger breach yields no
victims: the stopping condition is the ledger (seed 000 §3.3), and pressure that persists
anyway is the escalation tier's to handle (:mod:`.escalation`).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

import numpy as np

from kalena.core.enforcement.config import EvictionConfig
from kalena.core.enforcement.records import (
    EvictionCause,
    NodeCondition,
    PriorityComparison,
    Requeue,
    ReservationRise,
    Victim,
    WhyEvicted,
)
from kalena.core.enforcement.snapshot import NodeConditions, NodeSnapshot, ledger_holds_all
from kalena.core.model import Tier
from kalena.core.resources import DIMS, NON_COMPRESSIBLE_DIMS, Resources
from kalena.core.verdict import Reason, ReasonCode


class CandidateGroup(enum.IntEnum):
    """The two candidate groups, in eviction order."""

    LIMIT_BREACH = 0
    BATCH = 1


@dataclass(frozen=True, slots=True)
class EvictionCandidate:
    """A resident that may be evicted for dimension ``d``.

    ``amount`` is the excess over its limit on ``d`` for the override group, and its usage on
    ``d`` (its reservation where unsampled) for batch.
    """

    workload: str
    group: CandidateGroup
    priority: int
    amount: float


def eviction_sort_key(c: EvictionCandidate) -> tuple[int, int, float, str]:
    """Eviction order, smallest key first.

    1. The limit-breach override before everything else, whatever the tier or priority.
    2. Among limit breachers, priority is ignored (they forfeited its protection);
       among batch, ascending priority.
    3. Larger ``amount`` first: the larger excess over its limit, or the larger user of the
       pressured dimension (it releases the most, so fewer victims are needed).
    4. Workload id: a fixed final tie-break, so the plan never depends on row order.
    """
    priority = 0 if c.group is CandidateGroup.LIMIT_BREACH else c.priority
    return (int(c.group), priority, -c.amount, c.workload)


@dataclass(frozen=True, slots=True)
class DimensionPressure:
    """The outcome for one pressured dimension.

    ``condition`` is the node before any eviction; ``reserved_after`` is the ledger sum once
    every victim of the whole plan is gone (a storage victim frees ram too), and ``holds``
    says whether the ledger then holds on this dimension. ``victims`` are the ones evicted for
    this dimension; ``skipped_min_run_time`` lists batch residents spared as too young.
    """

    condition: NodeCondition
    reserved_after: float
    holds: bool
    victims: tuple[str, ...]
    skipped_min_run_time: tuple[str, ...]

    @property
    def reason(self) -> Reason | None:
        """``None`` when the ledger holds; otherwise why the plan could not restore it."""
        if self.holds:
            return None
        detail = "eviction candidates exhausted: restoration-invariant bug or unresolved limit breach"
        if self.skipped_min_run_time:
            detail += "; some batch spared by the minimum run time"
        return Reason(
            ReasonCode.RESERVATION_LEDGER_BREACH,
            self.condition.dimension,
            used=self.reserved_after,
            capacity=self.condition.capacity,
            detail=detail,
        )


@dataclass(frozen=True, slots=True)
class EvictionPlan:
    """Ordered victims (carry them out in order) and the per-dimension outcome.

    ``epoch`` echoes the snapshot's ledger epoch for the ledger's Eviction commitments.
    """

    node: str
    epoch: int
    now: float
    victims: tuple[Victim, ...]
    pressures: tuple[DimensionPressure, ...]

    @property
    def unresolved(self) -> tuple[DimensionPressure, ...]:
        return tuple(p for p in self.pressures if not p.holds)

    @property
    def released(self) -> Resources:
        """Total effective reservation released (Koordinator's release target, as data)."""
        total = Resources.zero()
        for v in self.victims:
            total = total + v.releases
        return total


def batch_candidate(snap: NodeSnapshot, i: int, d: int) -> EvictionCandidate:
    """Row ``i`` as a batch candidate on ``d``: its usage there, its reservation when unsampled."""
    u = snap.usage[i, d]
    held = snap.reservation[i, d] if np.isnan(u) else u
    return EvictionCandidate(snap.ids[i], CandidateGroup.BATCH, int(snap.priority[i]), float(held))


def release_on_eviction(snap: NodeSnapshot) -> np.ndarray:
    """What evicting each row frees in the reservation ledger, shape ``(W, 8)``.

    A batch workload leaves the ledger: all of ``r'``. A service workload keeps its blueprint
    placement and request (Kalena never mutates production); its controller restarts it at
    ``r_0 = R``, so only ``max(r' - R, 0)`` is freed. DaemonSets are outside the ledger: 0.
    """
    eff = snap.effective_reservation
    kept = np.where(snap.is_batch[:, None], 0.0, snap.request)
    return np.where(snap.in_ledger[:, None], np.maximum(eff - kept, 0.0), 0.0)


def _candidates(
    snap: NodeSnapshot,
    alive: np.ndarray,
    release: np.ndarray,
    d: int,
    acute: bool,
    now: float,
    config: EvictionConfig,
) -> tuple[list[tuple[int, EvictionCandidate]], tuple[str, ...]]:
    """The sorted candidates for ``d`` among ``alive`` rows, and the batch spared as too young."""
    usage, limit = snap.usage[:, d], snap.limit[:, d]
    helps = alive & (release[:, d] > 0)
    over = helps & ~np.isnan(usage) & (usage > limit)
    young = snap.age(now) < config.min_run_time_s
    plain_batch = helps & snap.is_batch & ~over
    spared = plain_batch & young & (not acute)
    breach = [
        (
            i,
            EvictionCandidate(
                snap.ids[i], CandidateGroup.LIMIT_BREACH, int(snap.priority[i]), float(usage[i] - limit[i])
            ),
        )
        for i in np.flatnonzero(over)
    ]
    rows = breach + [(i, batch_candidate(snap, i, d)) for i in np.flatnonzero(plain_batch & ~spared)]
    rows.sort(key=lambda r: eviction_sort_key(r[1]))
    return rows, tuple(sorted(snap.ids[i] for i in np.flatnonzero(spared)))


def reservation_rise(snap: NodeSnapshot, d: int) -> ReservationRise | None:
    """The ledger resident whose effective reservation rose most on ``d`` (ties: workload id).

    Against the previous snapshot's reservation when the shell passed it (a newcomer rose
    from 0), else against the resident's own request. ``None`` when nobody rose.
    """
    rows = np.flatnonzero(snap.in_ledger)
    if rows.size == 0:
        return None
    after = snap.effective_reservation[rows, d]
    if snap.previous_reservation is not None:
        before, basis = np.nan_to_num(snap.previous_reservation[rows, d], nan=0.0), "previous"
    else:
        before, basis = snap.request[rows, d], "request"
    rise = after - before
    best = min(range(rows.size), key=lambda k: (-rise[k], snap.ids[rows[k]]))
    if not rise[best] > 0:
        return None
    return ReservationRise(snap.ids[rows[best]], DIMS[d], float(before[best]), float(after[best]), basis)


def can_name_victim(
    in_ledger: np.ndarray, is_batch: np.ndarray, usage: np.ndarray, limit: np.ndarray
) -> bool:
    """Whether a plan over these rows could name anyone: a batch resident in the ledger, or a
    resident over its own limit on a non-compressible dimension (the two candidate groups).

    ``in_ledger`` and ``is_batch`` are (W,), ``usage`` (NaN: no sample) and ``limit`` (W, 8). When
    it is False the plan names nobody, whatever the pressure (the node round asks it first, to
    leave out what only a victim's record reads).
    """
    if (in_ledger & is_batch).any():
        return True
    nc = NON_COMPRESSIBLE_DIMS
    return bool((in_ledger[:, None] & (usage[:, nc] > limit[:, nc])).any())  # NaN > x is False


def plan_evictions(snap: NodeSnapshot, config: EvictionConfig, now: float) -> EvictionPlan:
    """The eviction plan for ``snap`` at time ``now`` (module docstring has the rules)."""
    eff = snap.effective_reservation
    if not can_name_victim(snap.in_ledger, snap.is_batch, snap.usage, snap.limit):
        nc = NON_COMPRESSIBLE_DIMS
        usage, capacity = snap.usage[:, nc], snap.capacity
        return plan_naming_nobody(
            snap.node, snap.epoch, now, snap.in_ledger, usage, eff[:, nc], capacity, snap.conditions
        )
    return _plan(snap, eff, config, now)


def _plan(snap: NodeSnapshot, eff: np.ndarray, config: EvictionConfig, now: float) -> EvictionPlan:
    """:func:`plan_evictions` in full, candidates and all (``eff``: the snapshot's ``r'``)."""
    release = release_on_eviction(snap)
    held = np.where(snap.in_ledger[:, None], eff, 0.0)  # each row's share of the ledger, as victims go
    alive = snap.in_ledger.copy()
    chosen: list[tuple[int, int, bool, NodeCondition, ReservationRise | None]] = []
    outcomes: list[tuple[int, NodeCondition, tuple[str, ...], tuple[str, ...]]] = []
    for d in NON_COMPRESSIBLE_DIMS:
        condition = _condition(snap, eff, d)
        if condition is None:
            continue
        cap = condition.capacity
        rows, spared = _candidates(snap, alive, release, d, condition.acute, now, config)
        start = float(held[:, d].sum())
        remaining = start - np.cumsum([release[i, d] for i, _ in rows])
        if ledger_holds_all(start, cap):
            take = 0
        else:
            ok = np.flatnonzero(ledger_holds_all(remaining, cap))
            take = int(ok[0]) + 1 if ok.size else len(rows)
        rise = reservation_rise(snap, d) if take else None  # (only a victim's record names it)
        for i, c in rows[:take]:
            alive[i] = False
            held[i] -= release[i]
            chosen.append((i, d, c.group is CandidateGroup.LIMIT_BREACH, condition, rise))
        outcomes.append((d, condition, tuple(c.workload for _, c in rows[:take]), spared))
    # outcomes are judged against the whole plan: a later dimension's victims also free earlier ones
    gone = {snap.ids[i] for i, *_ in chosen}
    pressures = []
    for d, condition, taken, spared in outcomes:
        after = float(held[:, d].sum())
        holds = bool(ledger_holds_all(after, condition.capacity))
        pressures.append(
            DimensionPressure(condition, after, holds, taken, tuple(w for w in spared if w not in gone))
        )
    survivors = np.flatnonzero(alive)
    highest = int(snap.priority[survivors].max()) if survivors.size else None
    victims = tuple(
        _victim(snap, i, d, override, condition, rise, release, highest, survivors.size, config, now)
        for i, d, override, condition, rise in chosen
    )
    return EvictionPlan(snap.node, snap.epoch, now, victims, tuple(pressures))


def _condition(snap: NodeSnapshot, eff: np.ndarray, d: int) -> NodeCondition | None:
    """Dimension ``d`` before any eviction, when it is under pressure (else None)."""
    cap = float(snap.capacity[d])
    return _condition_of(snap.in_ledger, snap.usage[:, d], eff[:, d], cap, snap.conditions, d)


def _condition_of(
    ledger: np.ndarray, usage: np.ndarray, eff: np.ndarray, capacity: float, cond_in: NodeConditions, d: int
) -> NodeCondition | None:
    """:func:`_condition` from the node's columns of ``d`` (``usage`` and ``eff`` (W,))."""
    condition = NodeCondition(
        dimension=DIMS[d],
        used=_known_sum(usage[ledger]),
        reserved=float(eff[ledger].sum()),
        capacity=capacity,
        triggered=cond_in.triggered_on(d),
        acute=bool(cond_in.acute[d]),
    )
    if condition.ledger_breached or condition.usage_over_capacity or cond_in.signalled(d):
        return condition
    return None


def plan_naming_nobody(
    node: str,
    epoch: int,
    now: float,
    ledger: np.ndarray,
    usage: np.ndarray,
    eff: np.ndarray,
    capacity: np.ndarray,
    conditions: NodeConditions,
) -> EvictionPlan:
    """:func:`plan_evictions` where no row is a candidate on any dimension (``can_name_victim`` is
    False): the same pressures, the same sums in the same order, without the candidates'
    bookkeeping (with production's p99 reservations alone breaching a node, the round plans such
    a node nearly every tick). From the node's columns, so that the round needs no snapshot:
    ``ledger`` (W,), ``usage`` and ``eff`` (``r'``) (W, k) on the k non-compressible dimensions
    in ``NON_COMPRESSIBLE_DIMS`` order, ``capacity`` (8,)."""
    pressures = []
    for j, d in enumerate(NON_COMPRESSIBLE_DIMS.tolist()):
        e = eff[:, j]
        condition = _condition_of(ledger, usage[:, j], e, float(capacity[d]), conditions, d)
        if condition is None:
            continue
        after = float(np.where(ledger, e, 0.0).sum())  # the full plan's ``held`` column
        holds = bool(ledger_holds_all(after, condition.capacity))
        pressures.append(DimensionPressure(condition, after, holds, (), ()))
    return EvictionPlan(node, epoch, now, (), tuple(pressures))


def _known_sum(column: np.ndarray) -> float:
    """``np.nansum`` of a 1-D column, bit for bit (NaN counts 0, same order), without its copy when
    nothing is missing (a plan sums two columns a dimension, and most columns are complete)."""
    missing = np.isnan(column)
    return float((np.where(missing, 0.0, column) if missing.any() else column).sum())


def _victim(
    snap: NodeSnapshot,
    i: int,
    d: int,
    override: bool,
    condition: NodeCondition,
    rise: ReservationRise | None,
    release: np.ndarray,
    highest: int | None,
    protected: int,
    config: EvictionConfig,
    now: float,
) -> Victim:
    tier = Tier.BATCH if snap.is_batch[i] else Tier.SERVICE
    wid, key = snap.ids[i], snap.equivalence_keys[i]
    requeue = Requeue(wid, key, snap.node, now + config.cooldown_s) if tier is Tier.BATCH else None
    why = WhyEvicted(
        condition=condition,
        reservation_rose=rise,
        priority=PriorityComparison(int(snap.priority[i]), highest, protected),
        limit_breach_override=override,
        usage=float(snap.usage[i, d]),
        limit=float(snap.limit[i, d]),
    )
    return Victim(
        workload=wid,
        equivalence_key=key,
        node=snap.node,
        tier=tier,
        priority=int(snap.priority[i]),
        dimension=DIMS[d],
        cause=EvictionCause.LIMIT_BREACH if override else EvictionCause.RESERVATION_LEDGER_BREACH,
        releases=Resources.from_array(release[i]),
        grace_period_s=config.acute_grace_period_s if condition.acute else config.grace_period_s,
        requeue=requeue,
        why=why,
    )
