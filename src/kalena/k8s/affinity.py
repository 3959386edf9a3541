"""A production pod's required pod anti-affinity binds Kalena's batch, as it binds kube-scheduler.

Kubernetes keeps a pod off every node in the domain of a running pod whose required
anti-affinity term selects it (the symmetric half of InterPodAffinity), whoever schedules it.
Kalena's scheduler places batch with the core, whose production anti-affinity filter
(:mod:`kalena.core.placement.topology`) takes the pods a term names. So each pass, every bound
production pod's terms are resolved against that pass's batch pods (bound and pending) by their
labels and the term's namespace scope, the reader's own rules (:mod:`kalena.deployability.labels`),
into terms naming them.

A term scoped by a ``namespaceSelector`` is taken to reach every namespace (the cache does not
watch Namespaces, so their labels are unknown): it may keep batch off more nodes than
Kubernetes would, never off fewer.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from kalena.core.model import PodTerm, Selector, Tier, WorkloadSpec
from kalena.deployability import labels as lb
from kalena.deployability.model import PodAffinityTerm


def _in_scope(term: PodAffinityTerm, owner_ns: str, pod_ns: str) -> bool:
    if term.namespace_selector is not None:
        return True  # every namespace (module docstring)
    return lb.term_namespaces_match(term, owner_ns, pod_ns, lambda ns: {})


def bind_batch(
    residents: Sequence[tuple[WorkloadSpec, str]],
    pending: Sequence[WorkloadSpec],
    terms: Mapping[str, tuple[PodAffinityTerm, ...]],
) -> list[tuple[WorkloadSpec, str]]:
    """``residents`` with each production pod's ``terms`` (by pod id) resolved to the batch pods
    among ``residents`` and ``pending`` they select; a term selecting none is left out."""
    batch: dict[tuple[str, frozenset[tuple[str, str]]], list[str]] = {}  # one test per label set
    for w in (*(w for w, _ in residents if w.tier is not Tier.SERVICE), *pending):
        batch.setdefault((w.namespace, frozenset(w.labels.items())), []).append(w.id)
    out = []
    for w, node in residents:
        own = terms.get(w.id) if w.tier is Tier.SERVICE else None
        if own:
            resolved = []
            for term in own:
                names = [
                    x
                    for (ns, labels), ids in batch.items()
                    if _in_scope(term, w.namespace, ns) and lb.selector_matches(term.selector, dict(labels))
                    for x in ids
                ]
                if names:
                    resolved.append(PodTerm(Selector(frozenset(names)), term.topology_key))
            if resolved:
                w = dataclasses.replace(w, required_anti_affinity=tuple(resolved))
        out.append((w, node))
    return out
