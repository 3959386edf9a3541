"""From documents to core data: NodeSpec, DaemonSetSpec, WorkloadSpec and a checked Cluster.

Mapping (ir-v1 -> kalena.core):

* node allocatable: a written dimension is its value, an omitted one is ``inf`` (unconstrained);
* DaemonSet resources and pod requests: omitted dimensions are 0;
* each unrolled pod becomes a ``WorkloadSpec`` of tier SERVICE (the blueprint is production):
  id ``namespace/pod``, ``declaration`` and ``owner`` ``namespace/<declaration name>`` (the
  equivalence class: replicas share every requirement), affinity and antiAffinity targets as
  ``Selector(names=...)`` exactly as written (full ids, bare pod names or declaration names:
  ``Selector.matches`` understands every spelling), nodeSelector and tolerations carried;
* gangs as resolved when the workloads were read; ``observed:`` per pod id.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

from kalena.core.cluster import Cluster, ObservedUsage
from kalena.core.model import (
    DaemonSetSpec,
    NodeSpec,
    Selector,
    Tier,
    Toleration,
    WorkloadSpec,
)
from kalena.core.resources import DIMS, Resources
from kalena.ir.checks import check_fit, check_groups, check_nodes, ledger_problems, resolve_solution
from kalena.ir.document import (
    BlueprintDoc,
    DaemonSetDoc,
    Dims,
    Document,
    InfraDoc,
    NodeDoc,
    ObservedDoc,
    WorkloadsDoc,
)
from kalena.ir.errors import DOCUMENT, IRError, Problem, ProblemLog
from kalena.ir.load import read_document


def resources(dims: Dims, default: float = 0.0) -> Resources:
    return Resources(tuple(dims.get(d, default) for d in DIMS))


def node_spec(n: NodeDoc) -> NodeSpec:
    return NodeSpec(
        name=n.name,
        allocatable=resources(n.allocatable, math.inf),
        labels=MappingProxyType(dict(n.labels)),
        taints=n.taints,
        zone=n.zone,
        rack=n.rack,
    )


def daemonset_spec(d: DaemonSetDoc) -> DaemonSetSpec:
    return DaemonSetSpec(
        name=d.name,
        resources=resources(d.resources),
        node_selector=MappingProxyType(dict(d.node_selector)),
        tolerations=d.tolerations,
    )


def workload_specs(doc: WorkloadsDoc) -> tuple[WorkloadSpec, ...]:
    out: list[WorkloadSpec] = []
    for d in doc.declarations:
        # Shared by every replica of the declaration: they are one equivalence class.
        requests = resources(d.requests)
        selector = MappingProxyType(dict(d.node_selector))
        tolerations = tuple(
            Toleration(t.key, t.operator or "Equal", t.value or "", t.effect or "") for t in d.tolerations
        )
        affinity = Selector(frozenset(d.affinity))
        anti = Selector(frozenset(d.anti_affinity))
        for pid in d.pod_ids():
            out.append(
                WorkloadSpec(
                    id=pid,
                    requests=requests,
                    tier=Tier.SERVICE,
                    namespace=d.namespace,
                    declaration=d.full_name,
                    node_selector=selector,
                    tolerations=tolerations,
                    affinity=affinity,
                    anti_affinity=anti,
                    owner=d.full_name,
                )
            )
    return tuple(out)


def _usage(o: ObservedDoc) -> ObservedUsage:
    def opt(dims: Dims | None) -> Resources | None:
        return resources(dims) if dims is not None else None

    return ObservedUsage(
        o.window, opt(o.p50), opt(o.p95), opt(o.p99), opt(o.peak), o.exceeded_request_fraction
    )


def observed_usage(doc: WorkloadsDoc) -> dict[str, ObservedUsage]:
    out: dict[str, ObservedUsage] = {}
    for d in doc.declarations:
        if d.observed is not None:
            usage = _usage(d.observed)
            out.update(dict.fromkeys(d.pod_ids(), usage))
    return out


@dataclass(frozen=True, slots=True)
class DocumentSet:
    """At most one document of each kind."""

    infra: InfraDoc | None = None
    workloads: WorkloadsDoc | None = None
    blueprint: BlueprintDoc | None = None

    @classmethod
    def of(cls, docs: Iterable[Document]) -> DocumentSet:
        """Sort documents by kind; two of one kind is an error (which would go with which?)."""
        found: dict[str, Document] = {}
        problems: list[Problem] = []
        for doc in docs:
            if doc.kind in found:
                problems.append(
                    Problem(
                        doc.file, DOCUMENT, f"a second {doc.kind} document (first: {found[doc.kind].file})"
                    )
                )
            else:
                found[doc.kind] = doc
        if problems:
            raise IRError(problems)
        return cls(found.get("Infrastructure"), found.get("Workloads"), found.get("Blueprint"))  # type: ignore[arg-type]

    @property
    def complete(self) -> bool:
        return None not in (self.infra, self.workloads, self.blueprint)


def check_set(docs: DocumentSet) -> tuple[Cluster | None, list[Problem]]:
    """Cross-document checks for whatever kinds are present, and the Cluster when infra is.

    The cluster is returned only when no problem was found; it is placed when the set holds
    workloads and a blueprint.
    """
    infra, wl, bp = docs.infra, docs.workloads, docs.blueprint
    problems: list[Problem] = []
    placement: dict[str, str] = {}
    key_of: dict[str, str] = {}
    log = ProblemLog(bp.file) if bp is not None else None
    if bp is not None and log is not None:
        if wl is not None:
            placement, key_of = resolve_solution(bp, wl, log)
        if infra is not None:
            check_nodes(bp, infra, log)
        problems.extend(log.problems)
    if infra is None or problems:
        return None, problems
    nodes = tuple(node_spec(n) for n in infra.nodes)
    specs = workload_specs(wl) if wl is not None else ()
    if bp is not None and log is not None and wl is not None:
        by_name = {n.name: n for n in nodes}
        check_fit(placement, key_of, by_name, {w.id: w for w in specs}, log)
        check_groups(placement, key_of, by_name, wl.resolved_groups, log)
        if log.problems:
            return None, list(log.problems)
    cluster = Cluster.build(
        nodes=nodes,
        daemonsets=(daemonset_spec(d) for d in infra.daemonsets),
        workloads=specs,
        placement=placement,
        groups=wl.resolved_groups if wl is not None else (),
        observed=observed_usage(wl) if wl is not None else None,
    )
    if bp is not None:
        problems.extend(ledger_problems(bp.file, cluster.request_ledger_breaches()))
    return (None, problems) if problems else (cluster, problems)


def build_cluster(docs: DocumentSet) -> Cluster:
    """The checked Cluster of a document set; raises :class:`IRError` listing every problem."""
    if docs.infra is None:
        file = next((d.file for d in (docs.workloads, docs.blueprint) if d is not None), "<none>")
        raise IRError([Problem(file, DOCUMENT, "a cluster needs an Infrastructure document")])
    if docs.blueprint is not None and docs.workloads is None:
        raise IRError([Problem(docs.blueprint.file, DOCUMENT, "a blueprint needs its Workloads document")])
    cluster, problems = check_set(docs)
    if problems:
        raise IRError(problems)
    assert cluster is not None
    return cluster


def load_cluster(
    infra: str | Path, workloads: str | Path | None = None, blueprint: str | Path | None = None
) -> Cluster:
    """Read the files (each checked against its expected kind) and build the checked Cluster.

    Problems of every file are collected before raising one :class:`IRError`.
    """
    wanted: Sequence[tuple[str | Path | None, str]] = (
        (infra, "Infrastructure"),
        (workloads, "Workloads"),
        (blueprint, "Blueprint"),
    )
    docs: list[Document] = []
    problems: list[Problem] = []
    for path, kind in wanted:
        if path is None:
            continue
        try:
            docs.append(read_document(path, expect=kind))  # type: ignore[arg-type]
        except IRError as e:
            problems.extend(e.problems)
    if problems:
        raise IRError(problems)
    return build_cluster(DocumentSet.of(docs))
