"""The node round: one pure function that every shell runs, for one node or for a whole cluster.

``node_round(view, state, config, now) -> RoundDecision``, in order, for every node at once:

1. **Signals.** On ram and storage the pressure is acute where the node's use exceeds
   ``acute_fraction`` of its kill level (its memory limit, else its capacity) or the kernel said so,
   and triggered where it exceeds ``trigger_fraction`` or a kernel notification arrived. The node's
   use is what its own accounting measured (``node_used``) or else the sum of its rows.
2. **Evictions.** A screen over all nodes finds those where a non-compressible dimension is
   breached (``sum r' > C``) or over capacity: each gets the core's ``plan_evictions`` on its
   snapshot. Victims leave the round's view (a service victim stays at ``r = R``). A node only
   signalled is under pressure there with no victim, as the plan would find it.
3. **Anti-starvation and throttle** on what is left: ``starvation_nodes`` (floors for starved
   batch, caps on services above their reservation) feeding ``throttle_nodes`` (the allowance
   ``A`` from the previous one, quotas by water-filling).
4. **Pressure persisted?** The round's pressure is every dimension a plan found pressured, plus
   cpu where it is pressured although every batch quota is already at the kernel minimum (before
   that, the halving allowance is mitigation still converging, not failing). The previous round's
   pressure persisted iff this round has some (``advance_runs``).
5. **Escalation** where the failed run is ``rounds`` long or ``persist_s`` old: drain every batch
   resident still there, in eviction order, and make the node slack-ineligible until
   ``now + cooldown_s``.

The decision lists per node the victims in order with the node epoch the first one's
``Eviction`` commitment carries (each later one +1), the quotas and caps as arrays, and the next
:class:`~kalena.core.controller.state.RoundState`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from kalena.core.controller.config import RoundConfig
from kalena.core.controller.state import RoundState
from kalena.core.enforcement.config import EscalationConfig, EvictionConfig, StarvationConfig, ThrottleConfig
from kalena.core.enforcement.escalation import (
    EscalationDecision,
    EscalationRuns,
    advance_runs,
    drain_decision,
)
from kalena.core.enforcement.eviction import EvictionPlan, can_name_victim, plan_evictions, plan_naming_nobody
from kalena.core.enforcement.nodes import NodesView
from kalena.core.enforcement.records import Victim
from kalena.core.enforcement.snapshot import NodeConditions
from kalena.core.enforcement.starvation import (
    NodesStarvation,
    StarvationDecision,
    decision_of,
    starvation_nodes,
)
from kalena.core.enforcement.throttle import NodesThrottle, ThrottlePlan, decisions_of, throttle_nodes
from kalena.core.resources import CPU, DIMS, NDIM, NON_COMPRESSIBLE_DIMS, RAM
from kalena.core.tolerance import REL_TOL

#: A screen must never miss a node the eviction planner would call pressured; the planner sums in
#: another order, so the screen flags nodes whose sum is within this relative distance of the
#: planner's threshold too (a sum of n non-negative terms is exact to n * 2**-53 of itself).
SCREEN_RTOL = 1e-6


class RoundPolicy(Protocol):
    """The configs the round reads (``kalena.core.config.PolicyConfig`` has them all)."""

    @property
    def eviction(self) -> EvictionConfig: ...
    @property
    def throttle(self) -> ThrottleConfig: ...
    @property
    def starvation(self) -> StarvationConfig: ...
    @property
    def escalation(self) -> EscalationConfig: ...
    @property
    def round(self) -> RoundConfig: ...


@dataclass(frozen=True, slots=True, eq=False)
class NodeActions:
    """What one node must carry out this round, in order: the plan's victims, then the drain."""

    node: int
    name: str
    first_epoch: int
    plan: EvictionPlan | None
    escalation: EscalationDecision | None

    @property
    def victims(self) -> tuple[Victim, ...]:
        out = () if self.plan is None else self.plan.victims
        if self.escalation is not None:
            out = out + self.escalation.drain
        return out


@dataclass(frozen=True, slots=True, eq=False)
class RoundDecision:
    """One round's decision for every node of the view (module docstring).

    ``actions`` (ascending node) covers the nodes with an eviction plan or an escalation. Per row
    (W,): ``gone`` (evicted or drained batch, leaving the ledger) and ``below_request`` (batch whose
    quota is below its cpu request: the lifecycle's ``throttled`` state, the same rule in every
    shell). Per node (N,): ``acute`` and ``triggered`` (N, 8) as the round judged them,
    ``pressure`` (N, 8) its classification, ``escalate`` and ``slack_ineligible_until`` (NaN: no
    change). ``throttle`` holds the batch quotas, ``starvation`` the floors and the service caps
    (``starvation.cap``, ``inf`` = none).
    """

    now: float
    actions: tuple[NodeActions, ...]
    gone: np.ndarray
    throttle: NodesThrottle
    starvation: NodesStarvation
    acute: np.ndarray
    triggered: np.ndarray
    pressure: np.ndarray
    escalate: np.ndarray
    slack_ineligible_until: np.ndarray
    state: RoundState
    view: NodesView
    below_request: np.ndarray

    def actions_of(self, n: int) -> NodeActions | None:
        return next((a for a in self.actions if a.node == n), None)

    # node n's part as the per-node records (logs, reports, the one-node API) -------------------------
    def eviction_plan(self, n: int) -> EvictionPlan:
        a = self.actions_of(n)
        if a is not None and a.plan is not None:
            return a.plan
        return EvictionPlan(self.view.names[n], int(self.view.epoch[n]), self.now, (), ())

    def throttle_plan(self, n: int, previous: float | None) -> ThrottlePlan:
        """Node ``n``'s quotas as a :class:`ThrottlePlan` (no advisories: those are per snapshot)."""
        t = self.throttle
        return ThrottlePlan(
            self.view.names[n],
            int(self.view.epoch[n]),
            self.now,
            bool(t.pressured[n]),
            float(t.claim[n]),
            float(t.target[n]),
            float(t.allowance[n]),
            previous,
            decisions_of(t, self.view, n),
            (),
        )

    def starvation_decision(self, n: int) -> StarvationDecision:
        return decision_of(self.starvation, self.view, n, self.now)

    def escalation_decision(self, n: int) -> EscalationDecision:
        a = self.actions_of(n)
        if a is not None and a.escalation is not None:
            return a.escalation
        runs = self.state.runs
        return EscalationDecision(
            self.view.names[n],
            int(self.view.epoch[n]),
            self.now,
            False,
            int(runs.rounds[n]),
            float(runs.persisted_s[n]),
            None,
            (),
            None,
        )


def node_signals(view: NodesView, config: RoundConfig) -> tuple[np.ndarray, np.ndarray]:
    """``(acute, triggered)`` (N, 8): the kernel's signals plus the rule of step 1."""
    n = view.n_nodes
    level = view.capacity[:, NON_COMPRESSIBLE_DIMS]
    if view.node_limit is not None:
        own = view.node_limit[:, NON_COMPRESSIBLE_DIMS]
        level = np.where(np.isnan(own), level, own)
    acute_at = config.acute_fraction * level
    trigger_at = config.trigger_fraction * level
    own_used = None if view.node_used is None else view.node_used[:, NON_COMPRESSIBLE_DIMS]
    acute = np.array(view.acute, dtype=bool, copy=True)
    triggered = np.array(view.triggered, dtype=bool, copy=True)
    # the rows' sum is the screen's (one sum per view) unless evictions in flight or DaemonSets differ
    shared = view.seen_usage is view.usage and not np.any(view.is_daemonset)
    rows = on = None
    for j, d in enumerate(NON_COMPRESSIBLE_DIMS.tolist()):
        if not ((acute_at[:, j] < np.inf).any() or (trigger_at[:, j] < np.inf).any()):
            continue  # no finite level anywhere (Irina's storage): no use is ever above it
        if shared:
            summed = view.used_sum(d)
        else:
            if rows is None:
                rows = np.flatnonzero(view.live) if view.present is not None else slice(None)
                on = view.node[rows]
            summed = np.bincount(on, weights=np.nan_to_num(view.usage[rows, d]), minlength=n)
        used = summed if own_used is None else np.where(np.isnan(own_used[:, j]), summed, own_used[:, j])
        acute[:, d] |= used > acute_at[:, j]
        triggered[:, d] |= used > trigger_at[:, j]
    return acute, triggered


def eviction_screen(
    view: NodesView, acute: np.ndarray, triggered: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """``(signalled (N, 8), possible (N,))`` on the non-compressible dimensions.

    ``signalled``: a kernel signal (trigger, acute, memory event for ram): the dimension is under
    pressure whatever the sums say. ``possible``: a node where ``sum r' > C`` or ``sum u > C``
    (within ``SCREEN_RTOL``), the only nodes where ``plan_evictions`` can name a victim; it runs
    on those. A node only signalled is under pressure with no victim ("a signal without a breach
    evicts nobody"), which needs no plan.
    """
    n = view.n_nodes
    signalled = np.zeros((n, NDIM), dtype=bool)
    signalled[:, NON_COMPRESSIBLE_DIMS] = (acute | triggered)[:, NON_COMPRESSIBLE_DIMS]
    signalled[:, RAM] |= view.memory_events > 0
    possible = np.zeros(n, dtype=bool)
    for d in NON_COMPRESSIBLE_DIMS.tolist():
        cap = view.capacity[:, d]
        if not np.isfinite(cap).any():
            continue  # no node constrains it (Irina's storage): nothing is ever over
        # r' on this one column only (the view's effective_reservation, column d)
        reserved = view.ledger_sum(np.fmax(view.reservation[:, d], view.seen_usage[:, d]))
        used = view.used_sum(d)
        # the planner: reserved > C + REL_TOL max(1, |C|) (a victim), used > C (pressure); both
        # sums are of non-negative terms, so the screen's sum is within SCREEN_RTOL * sum of it
        breach = cap + REL_TOL * np.maximum(1.0, np.abs(cap))
        possible |= (reserved * (1.0 + SCREEN_RTOL) > breach) | (used * (1.0 + SCREEN_RTOL) > cap)
    return signalled, possible


def _plan_naming_nobody(
    view: NodesView, k: int, rows: np.ndarray, conditions: NodeConditions, now: float
) -> EvictionPlan:
    """:func:`plan_evictions` of node ``k``'s snapshot when it can name nobody: the same columns,
    gathered from the view on the non-compressible dimensions only."""
    at = np.ix_(rows, NON_COMPRESSIBLE_DIMS)
    usage = view.seen_usage[at]
    eff = np.fmax(view.reservation[at], usage)  # the snapshot's r' (fmax: r where u is missing)
    return plan_naming_nobody(
        view.names[k], int(view.epoch[k]), now, view.in_ledger[rows], usage, eff, view.capacity[k], conditions
    )


def _can_name_victim(view: NodesView, rows: np.ndarray) -> bool:
    """:func:`can_name_victim` on rows of the view, as the node's snapshot holds them."""
    return can_name_victim(
        view.in_ledger[rows],
        np.asarray(view.is_batch, dtype=bool)[rows],
        view.seen_usage[rows],
        view.limit[rows],
    )


def node_round(view: NodesView, state: RoundState, config: RoundPolicy, now: float) -> RoundDecision:
    """One round for every node of ``view`` (module docstring)."""
    n, w = view.n_nodes, len(view)
    if state.n_nodes != n:
        raise ValueError(f"round state has {state.n_nodes} nodes, the view {n}")
    rc = config.round
    acute, triggered = node_signals(view, rc)

    # 2. evictions on the screened nodes -----------------------------------------------------------
    signalled, possible = eviction_screen(view, acute, triggered)
    flagged = np.flatnonzero(possible)
    previous = None
    view.group_rows(flagged)
    # the previous reservations (W, 8), NaN elsewhere, of the rows of the flagged nodes whose plan
    # can name a victim: only a victim's record reads them
    naming = [k for k in flagged.tolist() if _can_name_victim(view, view.rows_of(k))]
    if naming:
        on = np.concatenate([view.rows_of(k) for k in naming])
        serial = None if view.serial is None else view.serial[on]
        seen = state.previous_of(view.slot[on], view.ids[on], serial)
        if seen is not None:
            previous = np.full((w, NDIM), np.nan)
            previous[on] = seen
    plans: dict[int, EvictionPlan] = {}
    pressure = signalled.copy()  # where no plan runs, a signal is the pressure (and no victim)
    alive = np.ones(w, dtype=bool)
    res = view.reservation
    row_of: dict[str, int] = {}
    named = set(naming)
    for k in flagged.tolist():
        rows = view.rows_of(k)
        conditions = view.conditions_of(k, acute, triggered)
        if k in named:
            snap = view.snapshot(k, rows, conditions=conditions, previous_reservation=previous)
            plan, ids = plan_evictions(snap, config.eviction, now), snap.ids
        else:  # plan_evictions' answer where nobody can be named, from the columns it reads
            plan, ids = _plan_naming_nobody(view, k, rows, conditions, now), ()
        pressure[k] = False  # the plan's own judgement of the node, as the one-node plan gives it
        for p in plan.pressures:
            pressure[k, DIMS.index(p.condition.dimension)] = True
        if not plan.victims:
            if plan.pressures:
                plans[k] = plan
            continue
        plans[k] = plan
        row_of.update(zip(ids, rows.tolist(), strict=True))  # (a plan naming somebody has a snapshot)
        for v in plan.victims:
            i = row_of[v.workload]
            if view.is_batch[i]:
                alive[i] = False
            else:  # a service keeps its placement and request and restarts at r = R
                if res is view.reservation:
                    res = view.reservation.copy()
                res[i] = view.request[i]
    eff = None  # the view's r' unless a service victim restarts at r = R
    if res is not view.reservation:
        eff = np.fmax(res, view.seen_usage)  # r' (fmax: r where u is missing)
    kept = None if alive.all() else alive  # None: nobody left the view, no mask to apply

    # 3. anti-starvation, then the throttle ---------------------------------------------------------
    starv = starvation_nodes(view, rc.starvation_window_s, config.starvation, alive=kept, reservation=res)
    thr = throttle_nodes(view, config.throttle, state.allowance, starv.floor, alive=kept, effective=eff)

    # 4. did pressure persist? -------------------------------------------------------------------------
    floor = config.throttle.min_quota_cores * (1 + REL_TOL)
    on = view.node[thr.rows]
    with_batch = np.bincount(on, minlength=n) > 0
    above = np.bincount(on[thr.quota > floor], minlength=n) > 0
    pressure[:, CPU] |= thr.pressured & with_batch & ~above
    runs, escalate, judged = advance_runs(state.runs, pressure, now, config.escalation)

    # 5. escalation ----------------------------------------------------------------------------------
    until = np.full(n, np.nan)
    escalations: dict[int, EscalationDecision] = {}
    gone = ~alive
    draining = np.flatnonzero(escalate)
    view.group_rows(draining)
    for k in draining.tolist():
        rows = view.rows_of(k)
        rows = rows[alive[rows]]
        snap = view.snapshot(k, rows, reservation=res)
        dims = tuple(sorted(DIMS[d] for d in np.flatnonzero(judged.dims[k])))
        decision = drain_decision(
            snap, int(judged.rounds[k]), float(judged.persisted_s[k]), dims, config.escalation, now
        )
        escalations[k] = decision
        until[k] = decision.slack_ineligible_until
        gone[rows[np.asarray(view.is_batch, dtype=bool)[rows] & view.in_ledger[rows]]] = True

    actions = tuple(
        NodeActions(k, view.names[k], int(view.epoch[k]), plans.get(k), escalations.get(k))
        for k in sorted(set(plans) | set(escalations))
    )
    nxt = _next_state(view, thr.allowance, runs)
    below = np.zeros(w, dtype=bool)
    below[thr.rows] = thr.quota < thr.request * (1 - REL_TOL)
    return RoundDecision(
        now, actions, gone, thr, starv, acute, triggered, pressure, escalate, until, nxt, view, below
    )


def _next_state(view: NodesView, allowance: np.ndarray, runs: EscalationRuns) -> RoundState:
    """What the next round needs; the row columns are copied (a view may alias the ledger's arrays).

    Free slots are kept too: their id is empty (their serial -1), which no workload has, so they
    never match. With serials, the ids are not kept: copying an object array of every workload id
    (and freeing the last round's) cost more than the rest of the state.
    """
    return RoundState(
        np.asarray(allowance, dtype=np.float64),
        runs,
        np.array(view.slot, dtype=np.int64),
        np.array(view.ids, dtype=object) if view.serial is None else None,
        np.array(view.reservation, dtype=np.float64),
        None if view.serial is None else np.array(view.serial, dtype=np.int64),
    )
