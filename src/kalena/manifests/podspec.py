"""A Kubernetes ``PodSpec`` (plus its labels) as the scheduling-relevant parts of a pod type.

Requests (what the scheduler's NodeResourcesFit sums): per dimension
``max(sum over containers, max over init containers) + overhead``; a container that sets a
limit but no request requests its limit (API-server defaulting). Every pod also takes one
``pods`` slot. Only hard constraints are kept: ``preferred...`` terms and
``whenUnsatisfiable: ScheduleAnyway`` spread constraints never make a placement illegal; they
are counted (:attr:`PodSpecParts.soft`), so that a packer that does not weigh them can say so.
``matchLabelKeys`` / ``mismatchLabelKeys`` are merged into the selector as ``key In [value]`` /
``key NotIn [value]`` with the pod's own label value, as kube-apiserver does.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kalena.deployability.model import (
    PODS,
    LabelSelector,
    NodeSelectorTerm,
    PodAffinityTerm,
    Requirement,
    SpreadConstraint,
    Toleration,
)
from kalena.ir.errors import ProblemLog
from kalena.manifests import fields as f
from kalena.manifests.fields import Loc

_REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
_PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"

#: The soft rule kinds :attr:`PodSpecParts.soft` counts, in the order they are reported.
SOFT_KINDS = (
    "preferred node affinity",
    "preferred pod affinity",
    "preferred pod anti-affinity",
    "ScheduleAnyway spread",
)


@dataclass
class PodSpecParts:
    requests: dict[str, int] = field(default_factory=dict)
    node_selector: dict[str, str] = field(default_factory=dict)
    node_affinity: tuple[NodeSelectorTerm, ...] | None = None
    tolerations: tuple[Toleration, ...] = ()
    affinity: tuple[PodAffinityTerm, ...] = ()
    anti_affinity: tuple[PodAffinityTerm, ...] = ()
    spread: tuple[SpreadConstraint, ...] = ()
    node_name: str | None = None
    #: soft rules read but not kept: kind (one of :data:`SOFT_KINDS`) -> how many terms
    soft: dict[str, int] = field(default_factory=dict)


def _preferred(raw: Any, loc: Loc, log: ProblemLog) -> int:
    """How many ``preferred...`` terms a node or pod (anti-)affinity block lists (the block itself
    was checked where its required terms were read)."""
    return len(f.seq(raw.get(_PREFERRED), (*loc, _PREFERRED), log)) if isinstance(raw, dict) else 0


def _container_requests(c: Any, loc: Loc, log: ProblemLog) -> dict[str, int]:
    m = f.mapping(c, loc, log) or {}
    res = f.mapping(m.get("resources"), (*loc, "resources"), log) or {}
    out: dict[str, int] = {}
    for part in ("limits", "requests"):  # requests override the limit default
        block = f.mapping(res.get(part), (*loc, "resources", part), log) or {}
        for dim, raw in block.items():
            v = f.units(str(dim), raw, (*loc, "resources", part, str(dim)), log)
            if v is not None:
                out[str(dim)] = v
    return out


def _requests(spec: dict[str, Any], loc: Loc, log: ProblemLog) -> dict[str, int]:
    total: dict[str, int] = {}
    for i, c in enumerate(f.seq(spec.get("containers"), (*loc, "containers"), log)):
        for d, v in _container_requests(c, (*loc, "containers", i), log).items():
            total[d] = total.get(d, 0) + v
    for i, c in enumerate(f.seq(spec.get("initContainers"), (*loc, "initContainers"), log)):
        for d, v in _container_requests(c, (*loc, "initContainers", i), log).items():
            total[d] = max(total.get(d, 0), v)
    overhead = f.mapping(spec.get("overhead"), (*loc, "overhead"), log) or {}
    for d, raw in overhead.items():
        v = f.units(str(d), raw, (*loc, "overhead", str(d)), log)
        if v is not None:
            total[str(d)] = total.get(str(d), 0) + v
    total = {d: v for d, v in total.items() if v > 0}
    total[PODS] = 1
    return total


def _node_affinity(raw: Any, loc: Loc, log: ProblemLog) -> tuple[NodeSelectorTerm, ...] | None:
    m = f.mapping(raw, loc, log)
    if not m or m.get(_REQUIRED) is None:
        return None
    req = f.mapping(m.get(_REQUIRED), (*loc, _REQUIRED), log) or {}
    tloc = (*loc, _REQUIRED, "nodeSelectorTerms")
    terms = []
    for i, t in enumerate(f.seq(req.get("nodeSelectorTerms"), tloc, log)):
        tm = f.mapping(t, (*tloc, i), log) or {}
        exprs = [
            f.requirement(e, (*tloc, i, "matchExpressions", j), log, node=True)
            for j, e in enumerate(f.seq(tm.get("matchExpressions"), (*tloc, i, "matchExpressions"), log))
        ]
        flds = [
            f.requirement(e, (*tloc, i, "matchFields", j), log, node=True)
            for j, e in enumerate(f.seq(tm.get("matchFields"), (*tloc, i, "matchFields"), log))
        ]
        if any(x is None for x in exprs + flds):
            continue
        term = f.checked(NodeSelectorTerm, (*tloc, i), log, t, tuple(exprs), tuple(flds))
        if term is not None:
            terms.append(term)
    if not terms:
        log.add(
            tloc, "required node affinity needs at least one nodeSelectorTerm", req.get("nodeSelectorTerms")
        )
        return None
    return tuple(terms)


def _with_label_keys(
    sel: LabelSelector | None, match: list[str], mismatch: list[str], labels: dict[str, str]
) -> LabelSelector | None:
    if sel is None or (not match and not mismatch):
        return sel
    extra = [Requirement(k, "In", (labels[k],)) for k in match if k in labels]
    extra += [Requirement(k, "NotIn", (labels[k],)) for k in mismatch if k in labels]
    return LabelSelector(sel.match_labels, sel.match_expressions + tuple(extra))


def _pod_terms(raw: Any, loc: Loc, log: ProblemLog, labels: dict[str, str]) -> tuple[PodAffinityTerm, ...]:
    m = f.mapping(raw, loc, log)
    if not m:
        return ()
    out = []
    for i, t in enumerate(f.seq(m.get(_REQUIRED), (*loc, _REQUIRED), log)):
        tl = (*loc, _REQUIRED, i)
        tm = f.mapping(t, tl, log, optional=False)
        if tm is None:
            continue
        sel = (
            None
            if tm.get("labelSelector") is None
            else f.label_selector(tm["labelSelector"], (*tl, "labelSelector"), log)
        )
        key = f.string(tm.get("topologyKey"), (*tl, "topologyKey"), log, required=True)
        nss = [
            f.string(x, (*tl, "namespaces", j), log)
            for j, x in enumerate(f.seq(tm.get("namespaces"), (*tl, "namespaces"), log))
        ]
        nsel = None
        if tm.get("namespaceSelector") is not None:
            nsel = f.label_selector(tm["namespaceSelector"], (*tl, "namespaceSelector"), log)
        match = [str(x) for x in f.seq(tm.get("matchLabelKeys"), (*tl, "matchLabelKeys"), log)]
        mismatch = [str(x) for x in f.seq(tm.get("mismatchLabelKeys"), (*tl, "mismatchLabelKeys"), log)]
        if key is None:
            continue
        if not key:
            log.add((*tl, "topologyKey"), "must not be empty for a required term", key)
            continue
        sel = _with_label_keys(sel, match, mismatch, labels)
        term = f.checked(PodAffinityTerm, tl, log, t, sel, key, tuple(x for x in nss if x), nsel)
        if term is not None:
            out.append(term)
    return tuple(out)


def _tolerations(raw: Any, loc: Loc, log: ProblemLog) -> tuple[Toleration, ...]:
    out = []
    for i, t in enumerate(f.seq(raw, loc, log)):
        tm = f.mapping(t, (*loc, i), log, optional=False)
        if tm is None:
            continue
        key = f.string(tm.get("key"), (*loc, i, "key"), log)
        op = f.string(tm.get("operator"), (*loc, i, "operator"), log, default="Equal")
        value = f.string(tm.get("value"), (*loc, i, "value"), log)
        effect = f.string(tm.get("effect"), (*loc, i, "effect"), log)
        if None in (key, op, value, effect):
            continue
        tol = f.checked(Toleration, (*loc, i), log, t, key, op, value, effect)
        if tol is not None:
            out.append(tol)
    return tuple(out)


def _spread(
    raw: Any, loc: Loc, log: ProblemLog, labels: dict[str, str]
) -> tuple[tuple[SpreadConstraint, ...], int]:
    """The ``DoNotSchedule`` constraints, and how many ``ScheduleAnyway`` ones were left out."""
    out = []
    soft = 0
    for i, c in enumerate(f.seq(raw, loc, log)):
        cl = (*loc, i)
        cm = f.mapping(c, cl, log, optional=False)
        if cm is None:
            continue
        when = f.string(cm.get("whenUnsatisfiable"), (*cl, "whenUnsatisfiable"), log, required=True)
        if when not in ("DoNotSchedule", "ScheduleAnyway"):
            if when is not None:
                log.add((*cl, "whenUnsatisfiable"), "must be DoNotSchedule or ScheduleAnyway", when)
            continue
        if when == "ScheduleAnyway":
            soft += 1  # soft: scoring only
            continue
        skew = f.integer(cm.get("maxSkew"), (*cl, "maxSkew"), log, minimum=1)
        key = f.string(cm.get("topologyKey"), (*cl, "topologyKey"), log, required=True)
        min_domains = f.integer(cm.get("minDomains"), (*cl, "minDomains"), log, minimum=1, default=1)
        sel = (
            None
            if cm.get("labelSelector") is None
            else f.label_selector(cm["labelSelector"], (*cl, "labelSelector"), log)
        )
        pol = {}
        for name, default in (("nodeAffinityPolicy", "Honor"), ("nodeTaintsPolicy", "Ignore")):
            v = f.string(cm.get(name), (*cl, name), log, default=default)
            if v not in ("Honor", "Ignore"):
                log.add((*cl, name), "must be Honor or Ignore", v)
                v = None
            pol[name] = v
        match = [str(x) for x in f.seq(cm.get("matchLabelKeys"), (*cl, "matchLabelKeys"), log)]
        if None in (skew, key, min_domains) or None in pol.values():
            continue
        sel = _with_label_keys(sel, match, [], labels)
        sc = f.checked(
            SpreadConstraint,
            cl,
            log,
            c,
            skew,
            key,
            sel,
            min_domains,
            pol["nodeAffinityPolicy"],
            pol["nodeTaintsPolicy"],
        )
        if sc is not None:
            out.append(sc)
    keys = [c.topology_key for c in out]
    if len(keys) != len(set(keys)):
        log.add(loc, "two DoNotSchedule constraints share a topologyKey", keys)
    return tuple(out), soft


def pod_spec(spec: dict[str, Any], loc: Loc, log: ProblemLog, labels: dict[str, str]) -> PodSpecParts:
    """Read the scheduling-relevant parts of ``spec`` (located at ``loc``)."""
    parts = PodSpecParts()
    parts.requests = _requests(spec, loc, log)
    parts.node_selector = f.string_map(spec.get("nodeSelector"), (*loc, "nodeSelector"), log)
    aff = f.mapping(spec.get("affinity"), (*loc, "affinity"), log) or {}
    parts.node_affinity = _node_affinity(aff.get("nodeAffinity"), (*loc, "affinity", "nodeAffinity"), log)
    parts.affinity = _pod_terms(aff.get("podAffinity"), (*loc, "affinity", "podAffinity"), log, labels)
    parts.anti_affinity = _pod_terms(
        aff.get("podAntiAffinity"), (*loc, "affinity", "podAntiAffinity"), log, labels
    )
    parts.tolerations = _tolerations(spec.get("tolerations"), (*loc, "tolerations"), log)
    parts.spread, soft_spread = _spread(
        spec.get("topologySpreadConstraints"), (*loc, "topologySpreadConstraints"), log, labels
    )
    counts = (
        _preferred(aff.get("nodeAffinity"), (*loc, "affinity", "nodeAffinity"), log),
        _preferred(aff.get("podAffinity"), (*loc, "affinity", "podAffinity"), log),
        _preferred(aff.get("podAntiAffinity"), (*loc, "affinity", "podAntiAffinity"), log),
        soft_spread,
    )
    parts.soft = {k: c for k, c in zip(SOFT_KINDS, counts, strict=True) if c}
    name = spec.get("nodeName")
    if name is not None:
        parts.node_name = f.string(name, (*loc, "nodeName"), log)
    return parts
