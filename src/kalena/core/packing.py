"""Packing production by its requests: nodes + workloads -> a placement (``kalena pack``).

Kuberina packs production before Kalena sees it. An operator without Kuberina, and the
compaction of issue 14 (remove nodes until the workload no longer fits), need the same job, so
this packer places every workload of a :class:`~kalena.core.cluster.Cluster` on its nodes,
under the rules a blueprint must keep (the checks ``kalena ir validate`` runs on one):

* **hard** (never broken; a workload that cannot keep them waits, with the reason):
  - fit: on every node and dimension, the summed requests stay within ``C_n`` (allocatable
    minus the Phase 0 DaemonSets), with the one relative tolerance ``REL_TOL``;
  - the workload's ``nodeSelector`` holds and it tolerates every taint that repels;
  - a gang (IR v1 §3.2) is placed all or nothing, at least ``minMembers`` of it; ``colocate:
    true`` puts its members on one node; a group ``nodeSelector`` holds for every member;
  - the rules only Kubernetes states (IR v1 has none; :mod:`kalena.manifests.cluster` reads them),
    as kube-scheduler's filters decide them (:class:`_Hard`): required node affinity, a node's
    pod count, required pod affinity and anti-affinity (the workload's own terms and the placed
    workloads' anti-affinity terms that name it) and hard topology spread;
* **soft** (``affinity`` and ``antiAffinity`` in IR v1): kept where some feasible node keeps
  them, else broken and counted (:attr:`PackResult.soft_broken`).

**Order.** Gangs first (a colocated gang as one item, its requests summed), then the other
workloads, those without required pod affinity before those with it (their targets placed
first), the most constrained first (the fewest nodes their nodeSelector and taints allow: a
pod that may only go to the scarce nvme or gpu nodes is placed before the ones that may go
anywhere take that room), then by decreasing size, the largest share of the mean node capacity
any dimension of the request takes (first-fit-decreasing's order: the big items placed while the
room is there), ties by id. A workload that a Kubernetes rule left waiting is tried again once
the others are placed (an affinity target or a spread domain may have filled in), until a round
places none.

**Choice**, per workload over the nodes where the hard rules allow it, by these keys in turn:
fewest workloads unable to follow it (those whose required pod affinity names it, where their
own nodeSelector, node affinity and taints keep them out of the node's domain); fewest soft
rules broken; a node already in use before an empty one (the packing: fewer
active nodes); best fit, the least share of the node's capacity left on its fullest-left
dimension after placing it; the lowest node index. Everything here is a pure function of its
arguments: the same cluster and node mask give the same placement.

``allowed`` restricts the nodes (``(N,)`` bool), which is how compaction removes nodes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from kalena.core.cluster import Cluster, Group
from kalena.core.ledger import fits_mask, tolerant_capacity
from kalena.core.model import PodTerm, Selector, WorkloadSpec
from kalena.core.placement.nodeindex import NodeIndex
from kalena.core.placement.topology import required_affinity_ok, spread_ok
from kalena.core.resources import DIMS


@dataclass(frozen=True, slots=True)
class PackResult:
    """Where each workload went (``placement``: id -> node name), and which could not go.

    ``pending``: ``(id, reason)`` for every workload the hard rules left out, in pack order.
    ``soft_broken``: the number of soft rules (one per workload and rule kind) the placement
    breaks, counted as ``kalena.ir.checks.soft_notes`` counts them.
    """

    placement: Mapping[str, str]
    pending: tuple[tuple[str, str], ...]
    soft_broken: int
    active_nodes: int
    #: requests placed on each node, shape (N, 8)
    load: np.ndarray
    #: the placed workloads in the order the packer placed them (each placement kept the hard
    #: rules given the ones before it: a sequence a replay checker can step through)
    order: tuple[str, ...] = ()

    @property
    def complete(self) -> bool:
        return not self.pending


class _Targets:
    """Each workload's soft-rule targets as workload indices (``Cluster.targets_of``, itself
    left out), and the reverse index of the antiAffinity ones."""

    def __init__(self, cluster: Cluster, index: Mapping[str, int], total: int) -> None:
        def resolve(sel: Selector, me: str) -> list[int]:
            return [] if sel.is_empty() else sorted(index[t] for t in cluster.targets_of(sel) if t != me)

        extra: list[list[int]] = [[] for _ in range(total - len(cluster.workloads))]  # (batch: none)
        self.anti = [resolve(w.anti_affinity, w.id) for w in cluster.workloads] + extra
        self.aff = [resolve(w.affinity, w.id) for w in cluster.workloads] + [[] for _ in extra]
        self.anti_of: list[list[int]] = [[] for _ in range(total)]  # who names i in an antiAffinity
        for i, targets in enumerate(self.anti):
            for t in targets:
                self.anti_of[t].append(i)


class _Hard:
    """The Kubernetes rules that depend on where the others went, as kube-scheduler's
    InterPodAffinity and PodTopologySpread filters decide them (``kalena.deployability``'s
    replay checker is the independent reference a test holds this to).

    * **affinity** (the workload's terms ``(S_j, key_j)``; ``W`` = the workloads matching every
      term): the node carries every ``key_j``, and every ``D_key_j(node)`` holds a placed member
      of ``W``; else, when no member of ``W`` is placed on a node carrying one of the keys and the
      workload is in ``W`` itself, it may go anywhere carrying the keys (the first of a series);
    * **anti-affinity**: no placed member of ``S_j`` in ``D_key_j(node)``, and no placed workload
      whose own term ``(S, key)`` names this one in ``D_key(node)`` (a node without ``key`` has
      no such domain);
    * **spread** (``maxSkew``, ``key``, ``S``): the node carries ``key``; over the eligible nodes
      ``E`` (carrying every spread key of the workload; its nodeSelector and node affinity when
      the policy honours them, its tolerations likewise), ``count(D(node)) + [self in S] - gmin
      <= maxSkew``, ``gmin`` the least count over ``E``'s domains (0 with fewer than minDomains).

    Terms are resolved once per selector (replicas of a declaration share them)."""

    def __init__(self, packer: _Packer, cluster: Cluster) -> None:
        self.p = packer
        w = len(packer.workloads)
        ruled = [
            i
            for i, x in enumerate(packer.workloads)
            if x.required_affinity or x.required_anti_affinity or x.spread
        ]
        self._targets: dict[tuple[object, ...], np.ndarray] = {}
        self.cluster = cluster
        #: per anti-affinity term (one per declaration, selector and key): its owners, its targets
        #: as (W,) bool and its key; and per workload, the terms whose targets hold it
        terms: dict[tuple[object, ...], tuple[list[int], Selector, str]] = {}
        for i in ruled:  # (an IR cluster has none: these loops then cost nothing)
            x = packer.workloads[i]
            for term in x.required_anti_affinity:
                k = (x.declaration or x.id, term.selector.key(), term.topology_key)
                terms.setdefault(k, ([], term.selector, term.topology_key))[0].append(i)
        self.anti_terms = [
            (np.array(owners, dtype=np.int64), self.targets(sel), key) for owners, sel, key in terms.values()
        ]
        self.anti_named: dict[int, list[int]] = {}
        for t, (_, targets, _) in enumerate(self.anti_terms):
            for j in np.flatnonzero(targets).tolist():
                self.anti_named.setdefault(j, []).append(t)
        # the affinity terms naming each workload (one per declaration and key), so that a target
        # is placed where the workloads that must follow it can go
        followers: dict[tuple[object, ...], tuple[int, str, np.ndarray]] = {}
        for i in ruled:
            x = packer.workloads[i]
            for term in x.required_affinity:
                k = (x.declaration or x.id, term.topology_key)
                if k not in followers:
                    followers[k] = (i, term.topology_key, self.targets(term.selector))
        self.follow_terms = list(followers.values())
        self.followed_by: dict[int, list[int]] = {}
        for t, (_, _, targets) in enumerate(self.follow_terms):
            for j in np.flatnonzero(targets).tolist():
                self.followed_by.setdefault(j, []).append(t)
        self._follow_cost: dict[int, np.ndarray] = {}
        self._witnesses: dict[tuple[object, ...], np.ndarray] = {}
        self.active = [False] * w
        for i in (*ruled, *self.anti_named, *self.followed_by):
            self.active[i] = True

    def follow_cost(self, members: Sequence[int]) -> np.ndarray:
        """Per node: the affinity terms naming ``members`` whose owner could not follow there (no
        node of the node's domain admits the owner's nodeSelector, node affinity and taints)."""
        cost = np.zeros(len(self.p.nodes), dtype=np.int64)
        for t in {t for i in members for t in self.followed_by.get(i, ())}:
            hit = self._follow_cost.get(t)
            if hit is None:
                owner, key, _ = self.follow_terms[t]
                ids, n_dom = self.p.node_index.domains(key)
                static = self.p.mask_of(owner) & (ids >= 0)
                admits = np.zeros(n_dom + 1, dtype=bool)  # the last slot: nodes without the key
                admits[ids[static]] = True
                hit = self._follow_cost[t] = (~admits[ids]).astype(np.int64)
            cost += hit
        return cost

    def targets(self, sel: Selector) -> np.ndarray:
        """(W,) bool: the workloads ``sel`` names."""
        key = sel.key()
        hit = self._targets.get(key)
        if hit is None:
            hit = np.zeros(len(self.p.workloads), dtype=bool)
            ids = self.cluster.targets_of(sel)
            hit[[self.p.index[x] for x in ids if x in self.p.index]] = True
            self._targets[key] = hit
        return hit

    def placed(self, members: np.ndarray) -> np.ndarray:
        """The nodes (with repeats) of the placed workloads among ``members`` ((W,) bool)."""
        nodes = self.p.where[members]
        return nodes[nodes >= 0]

    def witnesses(self, terms: tuple[PodTerm, ...]) -> np.ndarray:
        key = tuple((t.selector.key(), t.topology_key) for t in terms)
        hit = self._witnesses.get(key)
        if hit is None:
            hit = np.logical_and.reduce([self.targets(t.selector) for t in terms])
            self._witnesses[key] = hit
        return hit

    def mask(self, i: int) -> list[tuple[str, np.ndarray]]:
        """Each rule of workload ``i`` with the (N,) nodes it allows."""
        x = self.p.workloads[i]
        out: list[tuple[str, np.ndarray]] = []
        nodes = self.p.node_index
        if x.required_affinity:
            terms = x.required_affinity
            wit = self.witnesses(terms)
            ok = required_affinity_ok(nodes, [t.topology_key for t in terms], self.placed(wit), bool(wit[i]))
            out.append(("required pod affinity", ok))
        anti = np.ones(len(self.p.nodes), dtype=bool)
        for term in x.required_anti_affinity:
            anti &= ~nodes.same_domain(term.topology_key, self.placed(self.targets(term.selector)))
        for t in self.anti_named.get(i, ()):
            owners, _, key = self.anti_terms[t]
            on = self.p.where[owners]
            anti &= ~nodes.same_domain(key, on[on >= 0])
        if x.required_anti_affinity or i in self.anti_named:
            out.append(("required pod anti-affinity", anti))
        if x.spread:
            keyed = np.logical_and.reduce([nodes.domains(c.topology_key)[0] >= 0 for c in x.spread])
            for c in x.spread:
                ids, n_dom = nodes.domains(c.topology_key)
                eligible = keyed & self.policy_mask(x, c.node_affinity_policy, c.node_taints_policy)
                members = self.targets(c.selector)
                ok, _, _ = spread_ok(c, ids, n_dom, eligible, self.placed(members), bool(members[i]))
                out.append((f"topology spread on {c.topology_key} (maxSkew {c.max_skew})", ok))
        return out

    def policy_mask(self, x: WorkloadSpec, affinity: str, taints: str) -> np.ndarray:
        """The nodes a spread constraint's policies count (every node, less what they honour)."""
        ok = np.ones(len(self.p.nodes), dtype=bool)
        if affinity == "Honor":
            ok &= self.p.selector_mask(x)
        if taints == "Honor":
            ok &= self.p.node_index.toleration_mask(x.tolerations)
        return ok


def _size(requests: np.ndarray, mean_capacity: np.ndarray) -> np.ndarray:
    """Each request's largest share of the mean node capacity (0 where a dimension has none)."""
    share = np.divide(
        requests,
        mean_capacity,
        out=np.zeros_like(requests),
        where=np.isfinite(mean_capacity) & (mean_capacity > 0),
    )
    return share.max(axis=1) if share.size else np.zeros(len(requests))


class _Packer:
    #: the shortcuts of :meth:`place_rest` and :meth:`choose` (off only in the test that shows they
    #: change no answer)
    shortcuts = True

    def __init__(
        self,
        cluster: Cluster,
        allowed: np.ndarray | None,
        extra: Sequence[WorkloadSpec],
        ledgers: Sequence[np.ndarray] | None,
        cap_fraction: float = 1.0,
        reasons: bool = True,
    ) -> None:
        self.nodes = cluster.nodes
        self.node_index = NodeIndex(self.nodes)
        self.reasons = reasons
        n = len(self.nodes)
        if not 0.0 < cap_fraction <= 1.0:
            raise ValueError(f"cap_fraction must be in (0, 1], got {cap_fraction!r}")
        self.cap = cluster.capacity_matrix() * cap_fraction  # inf stays inf
        self.cap_tol = tolerant_capacity(self.cap)
        finite = np.isfinite(self.cap) & (self.cap > 0)
        self.divisor = np.where(finite, self.cap, 1.0)
        self.finite = finite
        self.allowed = np.ones(n, dtype=bool) if allowed is None else np.asarray(allowed, dtype=bool)
        if self.allowed.shape != (n,):
            raise ValueError(f"allowed must have shape ({n},), got {self.allowed.shape}")
        self.workloads = (*cluster.workloads, *extra)
        w = len(self.workloads)
        if ledgers is None:
            ledgers = (np.vstack([cluster.requests_matrix(), *(x.requests.array()[None] for x in extra)]),)
        self.req = np.stack([np.asarray(m, dtype=np.float64) for m in ledgers])  # (L, W, 8)
        if self.req.shape[1:] != (w, len(DIMS)):
            raise ValueError(f"each ledger must have shape ({w}, {len(DIMS)}), got {self.req.shape[1:]}")
        self.index = {x.id: i for i, x in enumerate(self.workloads)}
        if len(self.index) != w:
            raise ValueError("an extra workload repeats an id")
        self.load = np.zeros((len(self.req), n, len(DIMS)))
        self.count = np.zeros(n, dtype=np.int64)
        bound = self.node_index.max_pods
        self.pod_bound = bound is not None
        self.max_pods = np.full(n, math.inf) if bound is None else bound
        self.where = np.full(w, -1, dtype=np.int64)
        self.steps: dict[int, None] = {}  # placed workloads in placement order
        self.targets = _Targets(cluster, self.index, w)
        t = self.targets
        self._static: dict[tuple[object, ...], np.ndarray] = {}
        self._key_of: list[tuple[object, ...] | None] = [None] * w
        self.hard = _Hard(self, cluster)
        #: workloads no rule ties to others (batch, most production)
        self.lonely = [not (t.aff[i] or t.anti[i] or t.anti_of[i] or self.hard.active[i]) for i in range(w)]

    # the hard rules that do not depend on the others' placement -----------------------------------
    @staticmethod
    def static_key(w: WorkloadSpec, group_selector: Mapping[str, str]) -> tuple[object, ...]:
        return (
            tuple(sorted(w.node_selector.items())),
            w.tolerations,
            tuple(sorted(group_selector.items())),
            w.node_names,
        )

    def selector_mask(self, w: WorkloadSpec) -> np.ndarray:
        """Where the nodeSelector and the required node affinity hold."""
        mask = self.node_index.selector_mask(w.node_selector)
        if w.node_names is not None:
            mask = mask & np.fromiter((nd.name in w.node_names for nd in self.nodes), bool, len(self.nodes))
        return mask

    def key_of(self, i: int) -> tuple[object, ...]:
        """Workload ``i``'s :meth:`static_key` outside a gang (worked out once per workload)."""
        key = self._key_of[i]
        if key is None:
            key = self._key_of[i] = self.static_key(self.workloads[i], {})
        return key

    def mask_of(self, i: int) -> np.ndarray:
        """:meth:`static_mask` of workload ``i`` outside a gang."""
        return self.static_mask(self.workloads[i], {}, self.key_of(i))

    def static_mask(
        self, w: WorkloadSpec, group_selector: Mapping[str, str], key: tuple[object, ...] | None = None
    ) -> np.ndarray:
        key = self.static_key(w, group_selector) if key is None else key
        mask = self._static.get(key)
        if mask is None:
            mask = (
                self.selector_mask(w)
                & self.node_index.selector_mask(group_selector)
                & self.node_index.toleration_mask(w.tolerations)
            )
            self._static[key] = mask
        return mask & self.allowed

    def fits(self, request: np.ndarray, mask: np.ndarray, pods: int = 1) -> np.ndarray:
        """Where ``request`` (L, 8) keeps every ledger within capacity and ``pods`` more stay within
        the node's pod count."""
        ok = mask & fits_mask(request[:, None, :], self.load, self.cap_tol).all(axis=0)
        return ok & (self.count + pods <= self.max_pods) if self.pod_bound else ok

    # the soft rules ------------------------------------------------------------------------------------
    def soft_cost(self, members: Sequence[int]) -> np.ndarray:
        """Per node: the soft rules placing ``members`` there would break (as soft_notes counts)."""
        n = len(self.nodes)
        cost = np.zeros(n, dtype=np.int64)
        for i in members:
            for targets in (self.targets.anti[i], self.targets.anti_of[i]):
                placed = self.where[targets] if targets else np.zeros(0, dtype=np.int64)
                placed = placed[placed >= 0]
                if placed.size:
                    cost += np.bincount(placed, minlength=n) > 0
            aff = self.targets.aff[i]
            if aff:  # a node with none of its targets breaks it (unplaced ones count as elsewhere)
                placed = self.where[aff]
                cost += np.bincount(placed[placed >= 0], minlength=n) == 0
        return cost

    def left(self, request: np.ndarray, cand: np.ndarray) -> np.ndarray:
        """Per candidate: the share of its capacity left on its fullest-left dimension after
        ``request``, in the tighter ledger (best fit takes the least)."""
        after = (self.cap[cand] - self.load[:, cand] - request[:, None, :]) / self.divisor[cand]
        return np.where(self.finite[cand], after, 0.0).max(axis=2).min(axis=0)

    def choose(self, request: np.ndarray, feasible: np.ndarray, members: Sequence[int]) -> int | None:
        if self.shortcuts and all(self.lonely[i] for i in members):
            # no soft rule: every node's soft cost is 0, so the keys are (closed, left, index): an
            # open node if any, then the least left, the lowest index among equals (argmin's first)
            open_ = feasible & (self.count > 0)
            cand = np.flatnonzero(open_ if open_.any() else feasible)
            return int(cand[np.argmin(self.left(request, cand))]) if cand.size else None
        cand = np.flatnonzero(feasible)
        if not cand.size:
            return None
        soft = self.soft_cost(members)[cand]
        follow = self.hard.follow_cost(members)[cand]
        closed = (self.count[cand] == 0).astype(np.int64)
        order = np.lexsort((cand, self.left(request, cand), closed, soft, follow))  # the last key first
        return int(cand[order[0]])

    def put(self, members: Sequence[int], node: int) -> None:
        for i in members:
            self.load[:, node] += self.req[:, i]
            self.where[i] = node
            self.steps[i] = None
        self.count[node] += len(members)

    def take_back(self, members: Sequence[int]) -> None:
        for i in members:
            node = int(self.where[i])
            if node >= 0:
                self.load[:, node] -= self.req[:, i]
                self.count[node] -= 1
                self.where[i] = -1
                self.steps.pop(i, None)

    def why_not(self, request: np.ndarray, mask: np.ndarray) -> str:
        if not self.reasons:
            return ""
        if not mask.any():
            return "no node keeps its nodeSelector and taints" + (
                "" if self.allowed.all() else " among the nodes allowed"
            )
        room = self.cap_tol[mask] - self.load[:, mask]  # (L, k, 8)
        ok = (room >= request[:, None, :]).all(axis=0)
        short = [DIMS[d] for d in range(len(DIMS)) if not ok[:, d].any()]
        if short:
            return f"no node has room for its requests ({', '.join(short)})"
        if not (mask & (self.count < self.max_pods)).any():
            return "no node takes another pod (its pods allocatable)"
        return "no node has room for its requests on every dimension at once"

    # placing -------------------------------------------------------------------------------------------
    def place_one(self, i: int, group_selector: Mapping[str, str]) -> str | None:
        r = self.req[:, i]
        mask = self.static_mask(self.workloads[i], group_selector) if group_selector else self.mask_of(i)
        fit = feasible = self.fits(r, mask)
        rules = self.hard.mask(i) if self.hard.active[i] else []
        for _, ok in rules:
            feasible = feasible & ok
        node = self.choose(r, feasible, (i,))
        if node is None:
            if not rules or not fit.any():
                return self.why_not(r, mask)
            broken = " and ".join(name for name, ok in rules if not (fit & ok).any())
            return (
                f"no node with room keeps its {broken or 'Kubernetes rules together'}" if self.reasons else ""
            )
        self.put((i,), node)
        return None

    def same_class_key(self, i: int) -> tuple[object, ...] | None:
        """What makes workload ``i`` interchangeable with another for the packer (its hard rules
        and its rows in every ledger), or None when soft rules tie it to others."""
        if not self.lonely[i]:
            return None
        return (self.key_of(i), self.req[:, i].tobytes())

    def place_rest(self, order: list[int], pending: list[tuple[int, str]], limit: float) -> None:
        """The workloads outside gangs, one by one in ``order``, with two shortcuts that change
        no answer: a workload of the class just placed goes where its predecessor went when it
        still fits there (the best-fit choice's minimum can only have tightened on that node:
        ``choose`` would pick it again), and one of a class that found no node finds none (the
        nodes only fill up)."""
        last_key: tuple[object, ...] | None = None
        last_node = -1
        unfit: set[tuple[object, ...]] = set()
        for i in order:
            key = self.same_class_key(i) if self.shortcuts else None
            r = self.req[:, i]
            if key is not None and key == last_key and last_node >= 0:
                row = slice(last_node, last_node + 1)
                room = not self.pod_bound or self.count[last_node] < self.max_pods[last_node]
                if room and fits_mask(r[:, None, :], self.load[:, row], self.cap_tol[row]).all():
                    self.put((i,), last_node)
                    continue
            if key is not None and key in unfit:
                why: str | None = self.why_not(r, self.mask_of(i))
            else:
                why = self.place_one(i, {})
            if why is None:
                last_key, last_node = key, int(self.where[i])
                continue
            if key is not None:
                unfit.add(key)
            last_key, last_node = None, -1
            pending.append((i, why))
            if len(pending) > limit:
                return
        self.retry(pending)

    def retry(self, pending: list[tuple[int, str]]) -> None:
        """Try again the workloads a Kubernetes rule left waiting (an affinity target or a spread
        domain may have been placed since), until a round places none."""
        while True:
            placed = False
            for k, (i, _) in enumerate(pending):
                if self.hard.active[i] and self.where[i] < 0:
                    why = self.place_one(i, {})
                    if why is None:
                        placed = True
                    else:
                        pending[k] = (i, why)
            pending[:] = [(i, why) for i, why in pending if self.where[i] < 0]
            if not placed:
                return

    def place_group(self, g: Group) -> list[tuple[int, str]]:
        """The gang's members placed, or none of them; the reasons of those that could not go."""
        members = [self.index[m] for m in g.members]
        if g.colocate:
            mask = self.allowed.copy()
            for i in members:
                mask &= self.static_mask(self.workloads[i], g.node_selector)
            total = self.req[:, members].sum(axis=1)
            node = self.choose(total, self.fits(total, mask, len(members)), members)
            if node is None:
                why = (
                    f"gang {g.name}: no one node takes all {len(members)} members (colocate), "
                    + self.why_not(total, mask)
                )
                return [(i, why) for i in members]
            self.put(members, node)
            return []
        failed: list[tuple[int, str]] = []
        for i in members:
            why = self.place_one(i, g.node_selector)
            if why is not None:
                failed.append((i, f"gang {g.name}: {why}"))
        if len(members) - len(failed) < g.min_members:
            self.take_back(members)
            fit = len(members) - len(failed)
            lost = (
                f"gang {g.name}: {fit} of {len(members)} members fit, fewer than minMembers {g.min_members}"
            )
            reasons = dict(failed)
            return [(i, reasons.get(i, lost)) for i in members]
        return failed


def pack(
    cluster: Cluster,
    allowed: np.ndarray | None = None,
    *,
    extra: Sequence[WorkloadSpec] = (),
    ledgers: Sequence[np.ndarray] | None = None,
    cap_fraction: float = 1.0,
    give_up_after: int | None = None,
    reasons: bool = True,
) -> PackResult:
    """Place every workload of ``cluster`` on its nodes (module docstring); the cluster's own
    placement is ignored. ``allowed`` (N,) bool restricts the nodes.

    ``give_up_after``: stop as soon as more workloads than that are pending (the result then
    lists those only: enough for a caller that asks "does it fit within this many?", as a
    compaction trial does, and most of a failing pack's time saved). ``reasons=False`` leaves
    each pending workload's reason empty (not worked out).

    ``extra`` are more workloads to place after the cluster's (batch pods, say; no soft rules).
    ``ledgers``: what each workload (the cluster's, then ``extra``) counts in each ledger, a
    ``(W, 8)`` array per ledger; a node takes a workload only where every ledger stays within
    capacity (compaction's dual ledger: production's requests in one, every reservation in the
    other). Default: one ledger of requests. :attr:`PackResult.load` is the first ledger's.

    ``cap_fraction`` packs against that share of every node's capacity, as Kuberina does when it
    caps capacity at X % for its Pareto plans (the placement is then valid against the real one)."""
    p = _Packer(cluster, allowed, extra, ledgers, cap_fraction, reasons)
    limit = math.inf if give_up_after is None else give_up_after
    counted = p.finite.sum(axis=0)  # the mean over the nodes that bound a dimension (none: 0)
    mean = np.divide(
        np.where(p.finite, p.cap, 0.0).sum(axis=0), counted, out=np.zeros(len(DIMS)), where=counted > 0
    )

    def sizes(rows: np.ndarray) -> np.ndarray:  # the largest over the ledgers
        return np.max([_size(m[rows], mean) for m in p.req], axis=0)

    def gang_size(g: Group) -> float:
        members = np.array([p.index[m] for m in g.members], dtype=np.int64)
        return float(np.max([_size(m[members].sum(axis=0, keepdims=True), mean)[0] for m in p.req]))

    pending: list[tuple[int, str]] = []
    in_group: set[int] = set()
    for g in sorted(cluster.groups, key=lambda g: (-gang_size(g), g.name)):
        in_group.update(p.index[m] for m in g.members)
        pending.extend(p.place_group(g))
    rest = np.array([i for i in range(len(p.workloads)) if i not in in_group], dtype=np.int64)
    if len(pending) > limit:
        rest = rest[:0]
    if rest.size:
        ids = np.array([p.workloads[i].id for i in rest.tolist()], dtype=object)
        # the most constrained first (fewest nodes their selector and taints allow), then the largest
        rooms: dict[tuple[object, ...], int] = {}
        for i in rest.tolist():
            if p.key_of(i) not in rooms:
                rooms[p.key_of(i)] = int(p.mask_of(i).sum())
        room = np.array([rooms[p.key_of(i)] for i in rest.tolist()])
        follows = np.array([bool(p.workloads[i].required_affinity) for i in rest.tolist()])
        p.place_rest(rest[np.lexsort((ids, -sizes(rest), room, follows))].tolist(), pending, limit)
    names = [nd.name for nd in p.nodes]
    placement = {p.workloads[i].id: names[int(p.where[i])] for i in np.flatnonzero(p.where >= 0).tolist()}
    return PackResult(
        placement=placement,
        pending=tuple((p.workloads[i].id, why) for i, why in pending),
        soft_broken=_soft_broken(p),
        active_nodes=int(np.count_nonzero(p.count)),
        load=p.load[0],
        order=tuple(p.workloads[i].id for i in p.steps),
    )


def _soft_broken(p: _Packer) -> int:
    """Soft rules broken by the final placement: per placed workload, its antiAffinity (a target
    on its node) and its affinity (none of its targets on its node), as soft_notes counts."""
    broken = 0
    for i in np.flatnonzero(p.where >= 0).tolist():
        anti, aff = p.targets.anti[i], p.targets.aff[i]
        if not (anti or aff):  # most workloads: no soft rule of their own
            continue
        node = p.where[i]
        if anti and (p.where[anti] == node).any():
            broken += 1
        if aff and not (p.where[aff] == node).any():
            broken += 1
    return broken
