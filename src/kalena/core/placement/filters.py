"""Filter plugins for batch placement, kube-scheduler style: one small class per rule.

A plugin's ``prepare(pod, state)`` (kube-scheduler's PreFilter) returns a :class:`NodeCheck`
(vectorised over node indices) or ``None`` when the rule cannot reject any node for this pod.
``passes(nodes)`` is the hot path; ``reasons(nodes)`` (only for failing nodes) feeds why-pending.
The runner stamps the plugin name into each :class:`~kalena.core.verdict.Status`.

``per_class = True`` marks rules whose answer depends only on what an equivalence class shares
(requests, nodeSelector, tolerations, equivalence key) and on the pass context, so the scheduler
evaluates them once per class per pass. Such a rule may also give ``class_key(pod, state)``, a
hashable value: two pods with equal keys are admitted by the rule on the same nodes in the pass
(most batch classes differ in nothing these rules read). When every per-class rule gives one, the
scheduler works out their nodes once per distinct combination of keys, not once per class.
``monotone = True`` marks rules whose admitted nodes a placement in the pass can only shrink (the
ledger's room, a namespace's cap, anti-affinity); when every rule that applies is, a class that
found no node finds none for the rest of the pass.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from kalena.core.ledger.fit import fits_mask, insufficient_resources_rows
from kalena.core.model import Selector, SpreadConstraint, WorkloadSpec
from kalena.core.placement.state import PassState
from kalena.core.placement.topology import required_affinity_ok, spread_ok
from kalena.core.resources import GPU
from kalena.core.verdict import Reason, ReasonCode


class NodeCheck(Protocol):
    def passes(self, nodes: np.ndarray) -> np.ndarray: ...

    def reasons(self, nodes: np.ndarray) -> Sequence[tuple[Reason, ...]]: ...


class Filter(Protocol):
    name: str
    per_class: bool

    def prepare(self, pod: WorkloadSpec, state: PassState) -> NodeCheck | None: ...


class KeyedFilter(Filter, Protocol):
    """A per-class rule that says which pods it treats alike (module docstring)."""

    def class_key(self, pod: WorkloadSpec, state: PassState) -> Hashable: ...


@dataclass(frozen=True, slots=True, eq=False)
class MaskCheck:
    """``ok`` over all nodes; every failing node has the same reasons."""

    ok: np.ndarray
    why: tuple[Reason, ...]

    def passes(self, nodes: np.ndarray) -> np.ndarray:
        return self.ok[nodes]

    def reasons(self, nodes: np.ndarray) -> Sequence[tuple[Reason, ...]]:
        return [self.why] * len(nodes)


@dataclass(frozen=True, slots=True, eq=False)
class TableCheck:
    """``ok`` over all nodes; a failing node's reasons come from a per-node table row."""

    ok: np.ndarray
    row: np.ndarray  # (N,) index into ``whys``
    whys: tuple[tuple[Reason, ...], ...]

    def passes(self, nodes: np.ndarray) -> np.ndarray:
        return self.ok[nodes]

    def reasons(self, nodes: np.ndarray) -> Sequence[tuple[Reason, ...]]:
        return [self.whys[r] for r in self.row[nodes]]


def _all_fail(state: PassState, why: Reason) -> MaskCheck:
    return MaskCheck(state.none, (why,))


class GpuRequested:
    """GPU is non-reclaimable: a batch workload requesting one is never placed (SPEC: Resources)."""

    name = "GpuRequested"
    per_class = True
    monotone = True

    def prepare(self, pod: WorkloadSpec, state: PassState) -> NodeCheck | None:
        gpu = pod.requests.values[GPU]
        if gpu <= 0:
            return None
        return _all_fail(state, Reason(ReasonCode.GPU_REQUESTED, "gpu", requested=gpu))

    def class_key(self, pod: WorkloadSpec, state: PassState) -> Hashable:
        return pod.requests.values[GPU] > 0


class PodCount:
    """A node takes at most its ``max_pods`` pods (Kubernetes' ``pods`` allocatable): every pod
    the ledger holds there counts, and this pass's."""

    name = "PodCount"
    per_class = False
    monotone = True

    def prepare(self, pod: WorkloadSpec, state: PassState) -> NodeCheck | None:
        limit = state.nodes.max_pods
        if limit is None:
            return None
        room = state.service_count + state.batch_count < limit
        return MaskCheck(room, (Reason(ReasonCode.INSUFFICIENT_RESOURCE, "pods"),))


class NamespaceCap:
    """At most ``cap`` running batch workloads per namespace (seed 000 §4.5); counts include this pass."""

    name = "NamespaceCap"
    per_class = False
    monotone = True

    def prepare(self, pod: WorkloadSpec, state: PassState) -> NodeCheck | None:
        cap = state.ctx.namespace_caps.get(pod.namespace)
        if cap is None:
            return None
        running = state.ns_running.get(pod.namespace, 0)
        if running < cap:
            return None
        why = Reason(
            ReasonCode.NAMESPACE_CAP,
            requested=1.0,
            used=float(running),
            capacity=float(cap),
            detail=pod.namespace,
        )
        return _all_fail(state, why)


class SlackEligible:
    """Nodes escalation marked slack-ineligible take no new batch during their cooldown."""

    name = "SlackEligible"
    per_class = True
    monotone = True

    def prepare(self, pod: WorkloadSpec, state: PassState) -> NodeCheck | None:
        if state.ctx.eligible is None:
            return None
        return MaskCheck(state.eligible, (Reason(ReasonCode.NODE_SLACK_INELIGIBLE),))

    def class_key(self, pod: WorkloadSpec, state: PassState) -> Hashable:
        return None  # the same nodes for every pod


class NodeSelector:
    name = "NodeSelector"
    per_class = True
    monotone = True

    def prepare(self, pod: WorkloadSpec, state: PassState) -> NodeCheck | None:
        if not pod.node_selector and pod.node_names is None:
            return None
        return MaskCheck(node_rule_mask(pod, state), (Reason(ReasonCode.NODE_SELECTOR_MISMATCH),))

    def class_key(self, pod: WorkloadSpec, state: PassState) -> Hashable:
        return (tuple(sorted(pod.node_selector.items())) if pod.node_selector else (), pod.node_names)


def node_rule_mask(pod: WorkloadSpec, state: PassState) -> np.ndarray:
    """Where the pod's nodeSelector and its required node affinity (resolved to names) hold."""
    mask = state.nodes.selector_mask(pod.node_selector)
    return mask if pod.node_names is None else mask & state.nodes.names_mask(pod.node_names)


class TaintToleration:
    """``tolerates_all`` per distinct taint set; the reason names the first untolerated taint key."""

    name = "TaintToleration"
    per_class = True
    monotone = True

    def prepare(self, pod: WorkloadSpec, state: PassState) -> NodeCheck | None:
        idx = state.nodes
        if len(idx.taint_sets) == 1 and not idx.taint_sets[0]:
            return None
        whys: list[tuple[Reason, ...]] = []
        for taints in idx.taint_sets:
            bad = next(
                (
                    t.key
                    for t in taints
                    if t.effect != "PreferNoSchedule" and not any(tol.tolerates(t) for tol in pod.tolerations)
                ),
                "",
            )
            whys.append((Reason(ReasonCode.UNTOLERATED_TAINT, detail=bad),))
        return TableCheck(idx.toleration_mask(pod.tolerations), idx.taint_group, tuple(whys))

    def class_key(self, pod: WorkloadSpec, state: PassState) -> Hashable:
        return pod.tolerations


class EvictionCooldown:
    """An evicted class may not return to the node it was evicted from before ``until``."""

    name = "EvictionCooldown"
    per_class = True
    monotone = True

    def prepare(self, pod: WorkloadSpec, state: PassState) -> NodeCheck | None:
        nodes = state.cooling.get(pod.equivalence_key)
        if nodes is None:
            return None
        ok = np.ones(state.n, dtype=bool)
        ok[nodes] = False
        row = np.zeros(state.n, dtype=np.int64)
        row[nodes] = np.arange(1, len(nodes) + 1)
        now = state.ctx.now
        until = state.cooling_until
        whys = (
            (),
            *(
                (Reason(ReasonCode.EVICTION_COOLDOWN, seconds=until[(pod.equivalence_key, int(n))] - now),)
                for n in nodes
            ),
        )
        return TableCheck(ok, row, whys)

    def class_key(self, pod: WorkloadSpec, state: PassState) -> Hashable:
        return pod.equivalence_key if pod.equivalence_key in state.cooling else None


class HarmfulPairing:
    """Pairings of (equivalence key, node) known to crash or thrash are never repeated (Borg)."""

    name = "HarmfulPairing"
    per_class = True
    monotone = True

    def prepare(self, pod: WorkloadSpec, state: PassState) -> NodeCheck | None:
        nodes = state.blacklisted.get(pod.equivalence_key)
        if nodes is None:
            return None
        ok = np.ones(state.n, dtype=bool)
        ok[nodes] = False
        return MaskCheck(ok, (Reason(ReasonCode.HARMFUL_PAIRING),))

    def class_key(self, pod: WorkloadSpec, state: PassState) -> Hashable:
        return pod.equivalence_key if pod.equivalence_key in state.blacklisted else None


@dataclass(slots=True, eq=False)
class FitCheck:
    """Reservation-ledger fit against the pass's current sums (:func:`fits_mask`)."""

    req: np.ndarray
    state: PassState

    def passes(self, nodes: np.ndarray) -> np.ndarray:
        s = self.state
        return fits_mask(self.req, s.reservation[nodes], s.capacity_tol[nodes])

    def reasons(self, nodes: np.ndarray) -> Sequence[tuple[Reason, ...]]:
        s = self.state
        return insufficient_resources_rows(self.req, s.reservation[nodes], s.capacity[nodes])


@dataclass(slots=True, eq=False)
class CachedFitCheck(FitCheck):
    """Fit for a whole class, kept over every node and recomputed only on the nodes this pass placed on.

    Within a pass only the pass's own placements move a node's sums (the ledger is not written),
    so after the first call the stale nodes are those in ``state.placed_nodes`` since the last one.
    """

    fit: np.ndarray | None = None
    upto: int = 0  # state.placed when ``fit`` was last brought up to date

    def current(self) -> np.ndarray:
        """The fit over every node, brought up to date with the pass's placements."""
        s = self.state
        if self.fit is None:
            self.fit = fits_mask(self.req, s.reservation, s.capacity_tol)
            self.upto = s.placed
        elif self.upto == s.placed - 1:  # one node (a class placing pod after pod): no index to gather
            n = s.placed_nodes[self.upto]
            self.fit[n] = fits_mask(self.req, s.reservation[n], s.capacity_tol[n])
            self.upto = s.placed
        elif self.upto != s.placed:  # (classes taking turns: each catches up on many nodes at once)
            stale = np.array(s.placed_nodes[self.upto : s.placed], dtype=np.intp)
            self.fit[stale] = fits_mask(self.req, s.reservation[stale], s.capacity_tol[stale])
            self.upto = s.placed
        return self.fit

    def passes(self, nodes: np.ndarray) -> np.ndarray:
        return self.current()[nodes]

    def any_fit(self) -> bool:
        """Whether the ledger admits the request on any node at all (else no search can succeed)."""
        return bool(self.current().any())


class ReservationFit:
    """``U_n + R_b <= C_n`` on every dimension (the reservation ledger; seed 000 §2.3)."""

    name = "ReservationFit"
    per_class = False
    monotone = True

    def prepare(self, pod: WorkloadSpec, state: PassState) -> NodeCheck | None:
        return FitCheck(pod.requests.array(), state)

    def prepare_class(self, pod: WorkloadSpec, state: PassState) -> CachedFitCheck:
        """A check valid for the whole pass for every pod with this request vector."""
        return CachedFitCheck(pod.requests.array(), state)


class ProductionAntiAffinityFilter:
    """A resident production workload whose anti-affinity selector matches the pod blocks its domain."""

    name = "ProductionAntiAffinity"
    per_class = False  # name-based selectors can target one replica
    monotone = True

    def prepare(self, pod: WorkloadSpec, state: PassState) -> NodeCheck | None:
        blocked = state.prod_aa.blocked(pod)
        if blocked is None:
            return None
        return MaskCheck(~blocked, (Reason(ReasonCode.PRODUCTION_ANTI_AFFINITY),))


class OwnAntiAffinity:
    """The pod's own anti-affinity: no matching resident (ledger or this pass) in the same domain."""

    name = "OwnAntiAffinity"
    per_class = False
    monotone = True

    def prepare(self, pod: WorkloadSpec, state: PassState) -> NodeCheck | None:
        terms = [(t.selector, t.topology_key) for t in pod.required_anti_affinity]
        if not pod.anti_affinity.is_empty():
            terms.append((pod.anti_affinity, pod.anti_affinity_topology_key))
        blocked = None
        for sel, key in terms:
            hit = state.matching_nodes(sel)
            if len(hit):
                near = state.nodes.same_domain(key, hit)
                blocked = near if blocked is None else blocked | near
        if blocked is None:
            return None
        return MaskCheck(~blocked, (Reason(ReasonCode.OWN_ANTI_AFFINITY),))


class ExistingAntiAffinity:
    """A placed batch pod (in the ledger or this pass) whose required anti-affinity term selects
    the pod blocks its domain (Kubernetes' symmetric rule; production's is ProductionAntiAffinity)."""

    name = "ExistingAntiAffinity"
    per_class = False
    monotone = True

    def prepare(self, pod: WorkloadSpec, state: PassState) -> NodeCheck | None:
        blocking = state.batch_anti_blocking(pod)
        if not blocking:
            return None
        blocked = np.logical_or.reduce(
            [state.nodes.same_domain(key, np.array(on, dtype=np.int64)) for key, on in blocking]
        )
        return MaskCheck(~blocked, (Reason(ReasonCode.EXISTING_ANTI_AFFINITY),))


class RequiredAffinity:
    """The pod's required pod affinity, as kube-scheduler's InterPodAffinity decides it: the node
    carries every term's key and every term's domain holds a resident (ledger or this pass) that
    all the terms select; else, when no such resident is on a node carrying one of the keys and
    the pod is selected by all its terms itself, any node carrying every key (the first of a
    series). The terms name their targets (a Kubernetes shell resolves its label selectors)."""

    name = "RequiredAffinity"
    per_class = False
    monotone = False  # a placement can satisfy a term on more nodes

    def prepare(self, pod: WorkloadSpec, state: PassState) -> NodeCheck | None:
        terms = pod.required_affinity
        if not terms:
            return None
        witnesses = frozenset.intersection(*(t.selector.names for t in terms))
        hit = state.matching_nodes(Selector(witnesses)) if witnesses else np.zeros(0, dtype=np.int64)
        keys = [t.topology_key for t in terms]
        ok = required_affinity_ok(state.nodes, keys, hit, pod.named_in(witnesses))
        return MaskCheck(ok, (Reason(ReasonCode.POD_AFFINITY),))


@dataclass(frozen=True, slots=True, eq=False)
class SpreadCheck:
    """AND over constraints; a failing node's reason is its first failing constraint, built lazily."""

    ok: np.ndarray
    first: np.ndarray  # (N,) index of the first constraint that rejects the node, -1 if none
    parts: tuple[
        tuple[SpreadConstraint, np.ndarray, np.ndarray, int, bool], ...
    ]  # (c, ids, count, min, self)

    def passes(self, nodes: np.ndarray) -> np.ndarray:
        return self.ok[nodes]

    def reasons(self, nodes: np.ndarray) -> Sequence[tuple[Reason, ...]]:
        out = []
        for n in nodes:
            c, ids, count, gmin, self_match = self.parts[self.first[n]]
            d = ids[n]
            out.append(
                (
                    Reason(
                        ReasonCode.SPREAD_SKEW,
                        requested=float(self_match),
                        used=float(count[d] + self_match) if d >= 0 else 0.0,
                        capacity=float(gmin + c.max_skew),
                        detail=c.topology_key,
                    ),
                )
            )
        return out


class TopologySpread:
    """The batch pod's own DoNotSchedule spread constraints (formula in ``topology``)."""

    name = "TopologySpread"
    per_class = False
    monotone = False  # a placement elsewhere can raise the global minimum and admit a node again

    def prepare(self, pod: WorkloadSpec, state: PassState) -> NodeCheck | None:
        if not pod.spread:
            return None
        ok = np.ones(state.n, dtype=bool)
        first = np.full(state.n, -1, dtype=np.int64)
        parts = []
        for i, c in enumerate(pod.spread):
            ids, n_dom = state.nodes.domains(c.topology_key)
            # the domains counted: kube-scheduler's node inclusion policies (Honor, Ignore by default)
            eligible = node_rule_mask(pod, state) if c.node_affinity_policy == "Honor" else state.nodes.all
            if c.node_taints_policy == "Honor":
                eligible = eligible & state.nodes.toleration_mask(pod.tolerations)
            self_match = c.selector.matches(pod)
            c_ok, count, gmin = spread_ok(
                c, ids, n_dom, eligible, state.matching_nodes(c.selector), self_match
            )
            first[ok & ~c_ok] = i
            ok &= c_ok
            parts.append((c, ids, count, gmin, self_match))
        return SpreadCheck(ok, first, tuple(parts))


DEFAULT_FILTERS: tuple[Filter, ...] = (
    GpuRequested(),
    NamespaceCap(),
    SlackEligible(),
    NodeSelector(),
    TaintToleration(),
    EvictionCooldown(),
    HarmfulPairing(),
    ReservationFit(),
    PodCount(),
    ProductionAntiAffinityFilter(),
    OwnAntiAffinity(),
    ExistingAntiAffinity(),
    RequiredAffinity(),
    TopologySpread(),
)
