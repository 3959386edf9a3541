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

from kalena.deployability import labels as lb
from kalena.deployability.model import Instance, Node, PodType, Semantics

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


class Running:
    """A configuration indexed by node: ``(type, node, count)`` rows, all of them and per node."""

    def __init__(self, ev: Evaluator, config: Config) -> None:
        self.all = [(ev.types[tid], ev.nodes[m], c) for (tid, m), c in config.items() if c > 0]
        self.by_node: dict[str, list[tuple[PodType, Node, int]]] = defaultdict(list)
        self.cache: dict[tuple, dict[str, int]] = {}  # derived counts (the configuration never changes)
        for row in self.all:
            self.by_node[row[1].name].append(row)


class Evaluator:
    """Hard(t, n, sigma) over one instance; indexes types, nodes and domains once.

    Checks look only at the pods in the domain they concern (the node for capacity, ``D_tau(n)``
    for a term), so a question about one node in a large cluster costs what that node's domains
    hold, plus a full scan only for the bootstrap exception and spread minima.
    """

    def __init__(self, instance: Instance, semantics: Semantics) -> None:
        self.instance = instance
        self.semantics = semantics
        self.types: dict[str, PodType] = {t.id: t for t in instance.types}
        self.nodes: dict[str, Node] = {n.name: n for n in instance.nodes}
        self._ns_cache: dict[str, Mapping[str, str]] = {}
        self._domains: dict[str, dict[str, list[str]]] = {}
        self._anti_keys = sorted({a.topology_key for t in instance.types for a in t.anti_affinity})
        self._initial: Running | None = None
        self._eligible: dict[tuple[str, int], frozenset[str]] = {}

    def ns_labels(self, ns: str) -> Mapping[str, str]:
        if ns not in self._ns_cache:
            self._ns_cache[ns] = self.instance.ns_labels(ns)
        return self._ns_cache[ns]

    def running(self, config: Config) -> Running:
        """The index of ``config`` (the instance's own initial configuration is indexed once)."""
        if config is self.instance.initial:
            if self._initial is None:
                self._initial = Running(self, config)
            return self._initial
        return Running(self, config)

    def domain(self, key: str, n: Node) -> list[str]:
        """``D_key(n)`` as node names (empty when ``n`` has no label ``key``)."""
        if key not in n.labels:
            return []
        if key not in self._domains:
            acc: dict[str, list[str]] = defaultdict(list)
            for node in self.instance.nodes:
                if key in node.labels:
                    acc[node.labels[key]].append(node.name)
            self._domains[key] = acc
        return self._domains[key][n.labels[key]]

    def _eligible_nodes(self, t: PodType, i: int) -> frozenset[str]:
        if (t.id, i) not in self._eligible:
            self._eligible[(t.id, i)] = frozenset(
                m.name for m in self.instance.nodes if lb.constraint_eligible(t, i, m)
            )
        return self._eligible[(t.id, i)]

    def near(self, running: Running, key: str, n: Node):
        """Running rows on ``D_key(n)``."""
        for m in self.domain(key, n):
            yield from running.by_node.get(m, ())

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
        running = self.running(config)
        out: list[Failure] = []
        for check in (self._resources, self._static, self._affinity, self._anti, self._spread):
            out.extend(check(t, n, running))
            if first and out:
                return (out[0],)
        return tuple(out)

    def ok(self, type_id: str, node_name: str, config: Config) -> bool:
        return not self.hard(type_id, node_name, config, first=True)

    # ------------------------------------------------------------------------------------------
    def _resources(self, t: PodType, n: Node, running: Running) -> list[Failure]:
        used: dict[str, int] = defaultdict(int)
        for u, _, c in running.by_node.get(n.name, ()):
            for dim, v in u.requests.items():
                used[dim] += c * v
        out = []
        for dim, cap in sorted(n.allocatable.items()):
            req = t.requests.get(dim, 0)
            if req and used[dim] + req > cap:
                out.append(Failure(FailureCode.INSUFFICIENT_RESOURCE, dim, req, used[dim], cap))
        return out

    def _static(self, t: PodType, n: Node, running: Running) -> list[Failure]:
        out = []
        if not lb.node_affinity_matches(t, n):
            out.append(Failure(FailureCode.NODE_AFFINITY, "nodeSelector / required nodeAffinity"))
        taint = lb.untolerated_taint(t, n)
        if taint is not None:
            out.append(Failure(FailureCode.UNTOLERATED_TAINT, f"{taint.key}={taint.value}:{taint.effect}"))
        return out

    def _matches(self, term, owner: PodType, pod: PodType) -> bool:
        return lb.term_matches(term, owner, pod, self.semantics, self.ns_labels)

    def _affinity(self, t: PodType, n: Node, running: Running) -> list[Failure]:
        terms = t.affinity
        if not terms:
            return []
        if self.semantics is Semantics.PAPER:
            out = []
            for i, term in enumerate(terms):
                if any(self._matches(term, t, u) for u, _, _ in self.near(running, term.topology_key, n)):
                    continue
                if self._matches(term, t, t) and not any(
                    self._matches(term, t, u) for u, _, _ in running.all
                ):
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

        def witness(u: PodType) -> bool:
            return all(self._matches(term, t, u) for term in terms)

        if all(any(witness(u) for u, _, _ in self.near(running, term.topology_key, n)) for term in terms):
            return []
        keys = {term.topology_key for term in terms}
        counted = any(witness(u) and any(k in m.labels for k in keys) for u, m, _ in running.all)
        if not counted and witness(t):
            return []  # global all-terms bootstrap
        return [Failure(FailureCode.POD_AFFINITY, "no running pod matching all affinity terms in the domain")]

    def _anti(self, t: PodType, n: Node, running: Running) -> list[Failure]:
        out = []
        for i, term in enumerate(t.anti_affinity):
            if any(self._matches(term, t, u) for u, _, _ in self.near(running, term.topology_key, n)):
                out.append(Failure(FailureCode.POD_ANTI_AFFINITY, f"term {i} ({term.topology_key})"))
        if self.semantics is Semantics.KUBERNETES:
            for key in self._anti_keys:
                for u, m, _ in self.near(running, key, n):
                    if any(
                        term.topology_key == key and self._matches(term, u, t) for term in u.anti_affinity
                    ):
                        out.append(
                            Failure(FailureCode.EXISTING_POD_ANTI_AFFINITY, f"{u.id} on {m.name} ({key})")
                        )
                        break
        return out

    def _spread(self, t: PodType, n: Node, running: Running) -> list[Failure]:
        out = []
        for i, c in enumerate(t.spread):
            key = c.topology_key
            if key not in n.labels:
                out.append(Failure(FailureCode.TOPOLOGY_KEY_MISSING, f"node has no label {key}"))
                continue
            eligible = self._eligible_nodes(t, i)
            if self.semantics is Semantics.PAPER and n.name not in eligible:
                out.append(Failure(FailureCode.SPREAD_NOT_ELIGIBLE, key))
                continue
            counts = running.cache.get(("spread", t.id, i))
            if counts is None:
                counts = {self.nodes[m].labels[key]: 0 for m in eligible}
                for u, m, cnt in running.all:
                    if m.name in eligible and lb.spread_selects(t, c.selector, u, self.semantics):
                        counts[m.labels[key]] += cnt
                running.cache[("spread", t.id, i)] = counts
            gmin = min(counts.values()) if len(counts) >= c.min_domains else 0
            own = counts.get(n.labels[key], 0)
            self_match = 1 if lb.selector_matches(c.selector, t.labels) else 0
            skew = own + self_match - gmin
            if skew > c.max_skew:
                out.append(Failure(FailureCode.TOPOLOGY_SPREAD, f"{key}: skew {skew} > maxSkew {c.max_skew}"))
        return out
