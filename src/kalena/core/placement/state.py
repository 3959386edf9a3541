"""One scheduling pass's view: the ledger's numbers plus the placements this pass has made.

The pass never writes to the ledger. It copies the per-node reservation sums, counts and epochs
(``(N, 8)`` and ``(N,)`` arrays: cheap), and records its own placements in an overlay so that
later pods in the same pass see them (fit, anti-affinity, spread, namespace caps). Each placement
bumps the copied node epoch, which is the epoch the next placement on that node is stamped with,
and is logged in ``placed_nodes`` (the per-class fit refreshes exactly those nodes). The overlay's
identity and label index is built only when a selector asks (most passes have none).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from kalena.core.ledger import Ledger
from kalena.core.ledger.index import ResidentIndex
from kalena.core.model import Selector, WorkloadSpec
from kalena.core.placement.cache import ScoreCache
from kalena.core.placement.config import PlacementConfig, SchedulingContext
from kalena.core.placement.nodeindex import NodeIndex
from kalena.core.placement.score import bucket_key, colocation, stability, stranded_balance
from kalena.core.placement.topology import ProductionAntiAffinity
from kalena.core.resources import GPU


def _index_pairs(pairs: Mapping[tuple[str, int], float] | frozenset[tuple[str, int]], now: float | None):
    """equivalence key -> array of nodes (for cooldowns: only those still cooling at ``now``)."""
    out: dict[str, list[int]] = {}
    items = pairs.items() if isinstance(pairs, Mapping) else ((p, None) for p in pairs)
    for (key, node), until in items:
        if now is None or until is None or until > now:
            out.setdefault(key, []).append(int(node))
    return {k: np.asarray(v, dtype=np.int64) for k, v in out.items()}


class PassState:
    """Everything a filter or score reads during one pass (a typed kube-scheduler CycleState)."""

    def __init__(
        self,
        ledger: Ledger,
        ctx: SchedulingContext,
        config: PlacementConfig,
        nodes: NodeIndex,
        prod_aa: ProductionAntiAffinity,
        scores: ScoreCache | None,
    ) -> None:
        n = ledger.n_nodes
        ctx.validate(n)
        self.ledger, self.ctx, self.config = ledger, ctx, config
        self.n = n
        self.nodes, self.prod_aa, self.scores = nodes, prod_aa, scores
        self.capacity = ledger.capacity
        self.capacity_tol = ledger.capacity_tol
        self.reservation = ledger.reservation_sum.copy()
        self.batch_count = ledger.batch_count.copy()
        self.service_count = ledger.service_count
        self.node_epoch = ledger.node_epochs.copy()
        self.ns_running = dict(ledger.namespace_running())
        self.placed = 0  # placements made in this pass: a version for "nothing changed since"
        self.placed_nodes: list[int] = []  # the node of each placement of this pass, in order
        self._placed_specs: list[WorkloadSpec] = []
        self._overlay = ResidentIndex()  # this pass's placements by identity and label, built on demand
        self._indexed = 0  # placements already in the overlay
        self._ledger_matches: dict[tuple[object, ...], np.ndarray] = {}
        #: placed batch pods' anti-affinity terms, built when first asked
        self._anti: _AntiIndex | None = None
        self.colocation = colocation(self.service_count, self.batch_count)  # the term, kept per placement
        self.eligible = nodes.all if ctx.eligible is None else np.asarray(ctx.eligible, dtype=bool)
        self.stability = (
            np.ones(n)
            if ctx.volatility is None
            else stability(np.asarray(ctx.volatility), config.volatility_scale)
        )
        self.images = ctx.images
        self.cooling = _index_pairs(ctx.cooldowns, ctx.now)
        self.cooling_until = dict(ctx.cooldowns)
        self.blacklisted = _index_pairs(ctx.blacklist, None)
        self.none = np.zeros(n, dtype=bool)
        self.none.setflags(write=False)
        self._dims = config.stranded_mask
        self._dim_idx = np.flatnonzero(self._dims)
        self._dim_width = config.width_array[self._dims]
        if scores is not None:
            s = self.capacity - self.reservation  # slack() of every node, without gathering them
            s[:, GPU] = 0.0
            scores.sync(s)

    def slack(self, nodes: np.ndarray) -> np.ndarray:
        """``C - U`` for ``nodes`` as this pass sees it, gpu column 0."""
        s = self.capacity[nodes] - self.reservation[nodes]
        s[:, GPU] = 0.0
        return s

    def stranded(self, pod: WorkloadSpec, nodes: np.ndarray) -> np.ndarray:
        req = pod.requests.array()
        if self.scores is not None:
            return self.scores.stranded(pod.requests, req, self.capacity, nodes)
        # Same numbers as the cache: floor(S / w) * w on the stranded dimensions, 0 elsewhere.
        d, w = self._dim_idx, self._dim_width
        cap = self.capacity[nodes]
        q = np.zeros((len(nodes), len(req)))
        q[:, d] = bucket_key(cap[:, d] - self.reservation[nodes][:, d], w) * w
        return stranded_balance(q, req, cap, self._dims)

    def matching_nodes(self, selector: Selector) -> np.ndarray:
        """Node of every resident (ledger or this pass) that ``selector`` matches, with repeats."""
        key = selector.key()
        base = self._ledger_matches.get(key)
        if base is None:  # the ledger does not change during a pass: asked once per selector
            base = self._ledger_matches[key] = self.ledger.matching_nodes(selector)
        if not self.placed_nodes:
            return base
        while self._indexed < len(self._placed_specs):  # index the placements made since last asked
            self._overlay.add(self._indexed, self._placed_specs[self._indexed])
            self._indexed += 1
        extra = self._overlay.match(selector)
        if not extra:
            return base
        # only the matches' nodes (the whole list each time made a long pass quadratic)
        placed = self.placed_nodes
        mine = np.fromiter((placed[i] for i in extra), dtype=np.int64, count=len(extra))
        return np.concatenate([base, mine])

    def batch_anti_blocking(self, pod: WorkloadSpec) -> list[tuple[str, list[int]]]:
        """``(topology key, nodes)`` of the placed batch pods' required anti-affinity terms that
        select ``pod`` (the ledger's and this pass's), found through the names the terms give (a
        Kubernetes shell resolves its selectors to names) and a scan of any by labels. A job's
        pods share one term: it is indexed once, its nodes gathered."""
        anti = self._anti
        if anti is None:
            anti = self._anti = _AntiIndex()
            for node, sel, key in self.ledger.batch_anti_terms():
                anti.add(node, sel, key)
            for placed, node in zip(self._placed_specs, self.placed_nodes, strict=True):
                for t in placed.required_anti_affinity:
                    anti.add(node, t.selector, t.topology_key)
        return anti.selecting(pod)

    def place(self, pod: WorkloadSpec, node: int) -> int:
        """Record a placement in the pass; returns the node epoch the commitment is computed against."""
        epoch = int(self.node_epoch[node])
        self.reservation[node] += pod.requests.array()
        self.batch_count[node] += 1
        self.node_epoch[node] = epoch + 1
        self.ns_running[pod.namespace] = self.ns_running.get(pod.namespace, 0) + 1
        self._placed_specs.append(pod)
        self.placed_nodes.append(node)
        if pod.required_anti_affinity and self._anti is not None:  # (else indexed when first asked)
            for t in pod.required_anti_affinity:
                self._anti.add(node, t.selector, t.topology_key)
        self.placed += 1
        # colocation() of the node's new counts: batch is now resident there
        self.colocation[node] = 1.0 if self.service_count[node] > 0 else 0.0
        if self.scores is not None:
            s = self.capacity[node] - self.reservation[node]
            s[GPU] = 0.0
            self.scores.sync_node(node, s)
        return epoch


class _AntiIndex:
    """Placed pods' anti-affinity terms: each distinct (selector, key) once with the nodes of the
    pods that carry it, found by the names it gives (and a scan of those by labels)."""

    def __init__(self) -> None:
        self.terms: list[tuple[Selector, str, list[int]]] = []
        self._id: dict[tuple[object, ...], int] = {}
        self._by_name: dict[str, list[int]] = {}
        self._by_labels: list[int] = []

    def add(self, node: int, sel: Selector, key: str) -> None:
        k = (*sel.key(), key)
        t = self._id.get(k)
        if t is None:
            t = self._id[k] = len(self.terms)
            self.terms.append((sel, key, []))
            for name in sel.names:
                self._by_name.setdefault(name, []).append(t)
            if sel.match_labels:
                self._by_labels.append(t)
        self.terms[t][2].append(node)

    def selecting(self, pod: WorkloadSpec) -> list[tuple[str, list[int]]]:
        if not self.terms:  # (no placed pod carries a term: the pod's spellings need no look-up)
            return []
        hits: dict[int, None] = {}
        for spelling in pod.spellings():
            hits.update(dict.fromkeys(self._by_name.get(spelling, ())))
        for t in self._by_labels:
            if self.terms[t][0].matches(pod):
                hits[t] = None
        return [(self.terms[t][1], self.terms[t][2]) for t in hits]
