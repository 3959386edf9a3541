"""Hard(t, n, sigma): may one more pod of type ``t`` be bound to node ``n`` in configuration ``sigma``?

Two predicates, chosen by :class:`Semantics`:

``paper`` (seed 003 Definition 1)
    Resources: ``used(sigma, n) + res(t) <= C(n)`` on every bounded dimension. StaticOK(t, n).
    AffinityOK: for every affinity term ``(s, tau)`` of ``t``, a pod matching ``s`` runs in
    ``D_tau(n)``, or ``t`` matches ``s`` and no pod matching ``s`` runs anywhere (the per-term
    bootstrap exception); for every anti-affinity term of ``t``, no pod matching ``s`` runs in
    ``D_tau(n)``. ``D_tau(n)`` is the set of nodes whose label ``tau`` equals ``n``'s (empty when
    ``n`` has no label ``tau``: the paper is silent, and an absent domain holds nothing).
    Selectors see labels only (no namespaces). SpreadOK below, and ``n`` in ``E``.

``kubernetes`` (kube-scheduler's InterPodAffinity filter)
    A node without some affinity term's topology key fails. An existing pod counts for the
    affinity terms only if it matches *all* of them (namespaces included); every term needs such
    a pod in its domain, else the pod still passes when no pod matching all terms runs on a node
    carrying any of the terms' keys and the pod matches all its own terms (global bootstrap).
    Anti-affinity: the incoming pod's terms (a node without the key passes that term) *and* every
    running pod's anti-affinity terms that select the incoming pod (symmetric).

SpreadOK (both; counts honour namespaces only under ``kubernetes``), per hard constraint:
    ``n`` carries the key; ``E`` = nodes carrying every key of the pod's constraints that pass
    the node-inclusion policies; domains = values of the key on ``E``; ``gmin`` = the least count
    over domains when there are at least ``minDomains`` of them, else 0;
    ``count(D(n)) + [t matches s] - gmin <= maxSkew``.
"""

from __future__ import annotations

import enum
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass

from kalena.core.deployability import labels as lb
from kalena.core.deployability.model import Instance, Node, PodType, Semantics

Config = Mapping[tuple[str, str], int]


class FailureCode(enum.Enum):
    """Stable codes for the constraint that rejects a placement. Add at the end; never rename."""

    UNKNOWN_TYPE = "unknown-type"
    UNKNOWN_NODE = "unknown-node"
    INSUFFICIENT_RESOURCE = "insufficient-resource"
    NODE_AFFINITY = "node-affinity"
    UNTOLERATED_TAINT = "untolerated-taint"
    TOPOLOGY_KEY_MISSING = "topology-key-missing"
    POD_AFFINITY = "pod-affinity"
    POD_ANTI_AFFINITY = "pod-anti-affinity"
    EXISTING_POD_ANTI_AFFINITY = "existing-pod-anti-affinity"
    TOPOLOGY_SPREAD = "topology-spread"
    SPREAD_NOT_ELIGIBLE = "spread-node-not-eligible"


@dataclass(frozen=True, slots=True)
class Failure:
    """Why ``Hard`` is false: the code, which term or dimension, and the numbers where they matter."""

    code: FailureCode
    detail: str = ""
    requested: int = 0
    used: int = 0
    capacity: int = 0

    def render(self) -> str:
        text = self.code.value
        if self.code is FailureCode.INSUFFICIENT_RESOURCE:
            nums = f"requested {self.requested}, used {self.used}, capacity {self.capacity}"
            return f"{text} {self.detail}: {nums}"
        return f"{text} ({self.detail})" if self.detail else text


class Evaluator:
    """Hard(t, n, sigma) over one instance; indexes types and nodes once."""

    def __init__(self, instance: Instance, semantics: Semantics) -> None:
        self.instance = instance
        self.semantics = semantics
        self.types: dict[str, PodType] = {t.id: t for t in instance.types}
        self.nodes: dict[str, Node] = {n.name: n for n in instance.nodes}
        self._ns_cache: dict[str, Mapping[str, str]] = {}

    def ns_labels(self, ns: str) -> Mapping[str, str]:
        if ns not in self._ns_cache:
            self._ns_cache[ns] = self.instance.ns_labels(ns)
        return self._ns_cache[ns]

    # ------------------------------------------------------------------------------------------
    def hard(
        self, type_id: str, node_name: str, config: Config, *, first: bool = False
    ) -> tuple[Failure, ...]:
        """Every failing constraint (empty when the placement is legal); ``first`` stops at one."""
        t = self.types.get(type_id)
        if t is None:
            return (Failure(FailureCode.UNKNOWN_TYPE, type_id),)
        n = self.nodes.get(node_name)
        if n is None:
            return (Failure(FailureCode.UNKNOWN_NODE, node_name),)
        present = [(self.types[tid], self.nodes[m], c) for (tid, m), c in config.items() if c > 0]
        out: list[Failure] = []
        for check in (self._resources, self._static, self._affinity, self._anti, self._spread):
            out.extend(check(t, n, present))
            if first and out:
                return (out[0],)
        return tuple(out)

    def ok(self, type_id: str, node_name: str, config: Config) -> bool:
        return not self.hard(type_id, node_name, config, first=True)

    # ------------------------------------------------------------------------------------------
    def _resources(self, t: PodType, n: Node, present: list) -> list[Failure]:
        used: dict[str, int] = defaultdict(int)
        for u, m, c in present:
            if m.name == n.name:
                for dim, v in u.requests.items():
                    used[dim] += c * v
        out = []
        for dim, cap in sorted(n.allocatable.items()):
            req = t.requests.get(dim, 0)
            if req and used[dim] + req > cap:
                out.append(Failure(FailureCode.INSUFFICIENT_RESOURCE, dim, req, used[dim], cap))
        return out

    def _static(self, t: PodType, n: Node, present: list) -> list[Failure]:
        out = []
        if not lb.node_affinity_matches(t, n):
            out.append(Failure(FailureCode.NODE_AFFINITY, "nodeSelector / required nodeAffinity"))
        taint = lb.untolerated_taint(t, n)
        if taint is not None:
            out.append(Failure(FailureCode.UNTOLERATED_TAINT, f"{taint.key}={taint.value}:{taint.effect}"))
        return out

    def _matches(self, term, owner: PodType, pod: PodType) -> bool:
        return lb.term_matches(term, owner, pod, self.semantics, self.ns_labels)

    @staticmethod
    def _same_domain(key: str, a: Node, b: Node) -> bool:
        return key in a.labels and key in b.labels and a.labels[key] == b.labels[key]

    def _affinity(self, t: PodType, n: Node, present: list) -> list[Failure]:
        terms = t.affinity
        if not terms:
            return []
        if self.semantics is Semantics.PAPER:
            out = []
            for i, term in enumerate(terms):
                if any(
                    self._matches(term, t, u) and self._same_domain(term.topology_key, n, m)
                    for u, m, _ in present
                ):
                    continue
                if self._matches(term, t, t) and not any(self._matches(term, t, u) for u, _, _ in present):
                    continue  # per-term bootstrap
                out.append(
                    Failure(
                        FailureCode.POD_AFFINITY, f"term {i}: no matching pod in {term.topology_key} domain"
                    )
                )
            return out
        missing = [term.topology_key for term in terms if term.topology_key not in n.labels]
        if missing:
            return [Failure(FailureCode.TOPOLOGY_KEY_MISSING, f"node has no label {missing[0]}")]
        witnesses = [(u, m) for u, m, _ in present if all(self._matches(term, t, u) for term in terms)]
        if all(any(self._same_domain(term.topology_key, n, m) for _, m in witnesses) for term in terms):
            return []
        keys = {term.topology_key for term in terms}
        counted = any(any(k in m.labels for k in keys) for _, m in witnesses)
        if not counted and all(self._matches(term, t, t) for term in terms):
            return []  # global all-terms bootstrap
        return [Failure(FailureCode.POD_AFFINITY, "no running pod matching all affinity terms in the domain")]

    def _anti(self, t: PodType, n: Node, present: list) -> list[Failure]:
        out = []
        for i, term in enumerate(t.anti_affinity):
            if any(
                self._matches(term, t, u) and self._same_domain(term.topology_key, n, m)
                for u, m, _ in present
            ):
                out.append(Failure(FailureCode.POD_ANTI_AFFINITY, f"term {i} ({term.topology_key})"))
        if self.semantics is Semantics.KUBERNETES:
            for u, m, _ in present:
                for term in u.anti_affinity:
                    if self._matches(term, u, t) and self._same_domain(term.topology_key, n, m):
                        out.append(
                            Failure(
                                FailureCode.EXISTING_POD_ANTI_AFFINITY,
                                f"{u.id} on {m.name} ({term.topology_key})",
                            )
                        )
                        break
        return out

    def _spread(self, t: PodType, n: Node, present: list) -> list[Failure]:
        out = []
        for i, c in enumerate(t.spread):
            key = c.topology_key
            if key not in n.labels:
                out.append(Failure(FailureCode.TOPOLOGY_KEY_MISSING, f"node has no label {key}"))
                continue
            eligible = {m.name for m in self.instance.nodes if lb.constraint_eligible(t, i, m)}
            if self.semantics is Semantics.PAPER and n.name not in eligible:
                out.append(Failure(FailureCode.SPREAD_NOT_ELIGIBLE, key))
                continue
            counts: dict[str, int] = {self.nodes[m].labels[key]: 0 for m in eligible}
            for u, m, cnt in present:
                if m.name in eligible and lb.spread_selects(t, c.selector, u, self.semantics):
                    counts[m.labels[key]] += cnt
            gmin = min(counts.values()) if len(counts) >= c.min_domains else 0
            own = counts.get(n.labels[key], 0)
            self_match = 1 if lb.selector_matches(c.selector, t.labels) else 0
            skew = own + self_match - gmin
            if skew > c.max_skew:
                out.append(Failure(FailureCode.TOPOLOGY_SPREAD, f"{key}: skew {skew} > maxSkew {c.max_skew}"))
        return out
