"""Kubernetes' hard pod rules for Kalena's scheduler, resolved each pass to what they name.

The core's placement takes rules by name (which pods a term selects, which nodes an affinity
admits); a pass's pods and nodes are a closed set, so each pass resolves every rule against them
by the reader's own matching (:mod:`kalena.deployability.labels`: label selectors with their
expressions, namespace scopes, node selector terms):

* a pending batch pod's required node affinity becomes the node names it admits, its required
  pod affinity and anti-affinity terms the pods (bound or pending) they select, and its hard
  spread constraints the pods of its namespace their selectors count (:func:`resolve_pending`);
  the core then keeps them (its NodeSelector, RequiredAffinity, OwnAntiAffinity,
  ExistingAntiAffinity and TopologySpread filters);
* a bound pod's required anti-affinity terms become the batch pods they select
  (:func:`bind_batch`): a production pod's as below, a batch pod's for Kubernetes' symmetric
  rule (a placed pod's term keeps the pods it selects out of its domain).

A production pod's required pod anti-affinity binds Kalena's batch, as it binds kube-scheduler.

Kubernetes keeps a pod off every node in the domain of a running pod whose required
anti-affinity term selects it (the symmetric half of InterPodAffinity), whoever schedules it.
Kalena's scheduler places batch with the core, whose production anti-affinity filter
(:mod:`kalena.core.placement.topology`) takes the pods a term names. So each pass, every bound
production pod's terms are resolved against that pass's batch pods (bound and pending) by their
labels and the term's namespace scope, the reader's own rules (:mod:`kalena.deployability.labels`),
into terms naming them.

A term scoped by a ``namespaceSelector`` reaches the namespaces whose labels it selects (the
cache watches Namespaces and hands their labels in; a namespace it has not seen has none).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar

from kalena.core.model import NodeSpec, PodTerm, Selector, SpreadConstraint, Tier, WorkloadSpec
from kalena.deployability import labels as lb
from kalena.deployability.model import LabelSelector, Node, PodAffinityTerm
from kalena.k8s.objects import PodView

T = TypeVar("T")


#: each namespace's labels, by name
NamespaceLabels = Mapping[str, Mapping[str, str]]
_NONE: Mapping[str, str] = {}


def _in_scope(term: PodAffinityTerm, owner_ns: str, pod_ns: str, ns_labels: NamespaceLabels) -> bool:
    return lb.term_namespaces_match(term, owner_ns, pod_ns, lambda ns: ns_labels.get(ns, _NONE))


#: pod ids by (namespace, label set), with the labels as a dict: one selector test a group
Groups = list[tuple[str, dict[str, str], list[str]]]


def _groups(specs: Sequence[WorkloadSpec]) -> Groups:
    by: dict[tuple[str, frozenset[tuple[str, str]]], tuple[str, dict[str, str], list[str]]] = {}
    for w in specs:
        key = (w.namespace, frozenset(w.labels.items()))
        if key not in by:
            by[key] = (w.namespace, dict(w.labels), [])
        by[key][2].append(w.id)
    return list(by.values())


def _term_hits(
    groups: Groups, term: PodAffinityTerm, owner_ns: str, ns_labels: NamespaceLabels
) -> frozenset[str]:
    """The pods a (anti-)affinity term of a pod in ``owner_ns`` selects."""
    return frozenset(
        x
        for ns, labels, ids in groups
        if _in_scope(term, owner_ns, ns, ns_labels) and lb.selector_matches(term.selector, labels)
        for x in ids
    )


def _spread_hits(groups: Groups, selector: LabelSelector | None, ns: str) -> frozenset[str]:
    """The pods a spread constraint counts: its namespace's, by its selector."""
    return frozenset(
        x
        for pod_ns, labels, ids in groups
        if pod_ns == ns and lb.selector_matches(selector, labels)
        for x in ids
    )


def _selector_key(sel: LabelSelector | None) -> object:
    if sel is None:
        return None
    return (tuple(sorted(sel.match_labels.items())), sel.match_expressions)


def _term_key(term: PodAffinityTerm) -> object:
    """What a term's resolution depends on (the pods of one job share it: resolved once)."""
    ns_sel = None if term.namespace_selector is None else _selector_key(term.namespace_selector)
    return (_selector_key(term.selector), term.topology_key, term.namespaces, ns_sel)


def resolve_pending(
    pending: Sequence[PodView],
    residents: Sequence[tuple[WorkloadSpec, str]],
    nodes: Sequence[NodeSpec],
    ns_labels: NamespaceLabels = _NONE,
) -> list[PodView]:
    """``pending`` with each pod's node affinity, anti-affinity terms and spread constraints
    resolved against this pass's nodes, pods and namespaces' labels (module docstring). Each
    distinct rule is resolved once (a job's pods share theirs)."""
    if not any(v.affinity or v.anti_affinity or v.spread or v.node_affinity is not None for v in pending):
        return list(pending)
    groups = _groups([*(w for w, _ in residents), *(v.spec for v in pending)])
    kube_nodes = [Node(n.name, dict(n.labels)) for n in nodes]
    memo: dict[object, object] = {}

    def once(key: object, work: Callable[[], T]) -> T:
        if key not in memo:
            memo[key] = work()
        return memo[key]  # type: ignore[return-value]

    out = []
    for v in pending:
        w = v.spec
        if not (v.affinity or v.anti_affinity or v.spread or v.node_affinity is not None):
            out.append(v)
            continue
        names = None
        if v.node_affinity is not None:
            terms = v.node_affinity
            names = once(
                ("node", terms),
                lambda terms=terms: frozenset(
                    n.name for n in kube_nodes if any(lb.node_term_matches(t, n) for t in terms)
                ),
            )
        aff, anti = (
            tuple(
                once(
                    ("term", _term_key(t), w.namespace),
                    lambda t=t, ns=w.namespace: PodTerm(
                        Selector(_term_hits(groups, t, ns, ns_labels)), t.topology_key
                    ),
                )
                for t in terms
            )
            for terms in (v.affinity, v.anti_affinity)
        )
        spread = tuple(
            SpreadConstraint(
                c.max_skew,
                c.topology_key,
                once(
                    ("spread", _selector_key(c.selector), w.namespace),
                    lambda c=c, ns=w.namespace: Selector(_spread_hits(groups, c.selector, ns)),
                ),
                c.min_domains,
                c.node_affinity_policy,
                c.node_taints_policy,
            )
            for c in v.spread
        )
        spec = dataclasses.replace(
            w, node_names=names, required_affinity=aff, required_anti_affinity=anti, spread=spread
        )
        out.append(dataclasses.replace(v, spec=spec))
    return out


def bind_batch(
    residents: Sequence[tuple[WorkloadSpec, str]],
    pending: Sequence[WorkloadSpec],
    terms: Mapping[str, tuple[PodAffinityTerm, ...]],
    ns_labels: NamespaceLabels = _NONE,
) -> list[tuple[WorkloadSpec, str]]:
    """``residents`` with each bound pod's ``terms`` (by pod id) resolved to the batch pods among
    ``residents`` and ``pending`` they select (a term selecting none is left out): production's
    for the core's production anti-affinity, a bound batch pod's for Kubernetes' symmetric rule
    (the core's ExistingAntiAffinity)."""
    batch = _groups([*(w for w, _ in residents if w.tier is not Tier.SERVICE), *pending])
    out = []
    memo: dict[object, frozenset[str]] = {}
    for w, node in residents:
        own = terms.get(w.id)
        if own:
            resolved = []
            for term in own:
                key = (_term_key(term), w.namespace)
                if key not in memo:
                    memo[key] = _term_hits(batch, term, w.namespace, ns_labels)
                names = memo[key]
                if names:
                    resolved.append(PodTerm(Selector(names), term.topology_key))
            if resolved:
                w = dataclasses.replace(w, required_anti_affinity=tuple(resolved))
        out.append((w, node))
    return out
