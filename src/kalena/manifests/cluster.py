"""Kubernetes manifests into the core's :class:`~kalena.core.cluster.Cluster` (``kalena pack
--manifests``, ``kalena compact --manifests``).

The files are read by :func:`kalena.manifests.load.read_workloads`, the reader the deployability
verifier uses, so a manifest means the same to both. Then:

* **nodes**: allocatable in the core's units (:data:`DIMENSIONS`), labels, taints (a cordoned
  node also carries ``node.kubernetes.io/unschedulable:NoSchedule``, as the node controller adds
  it), and ``max_pods`` from the ``pods`` allocatable less one per DaemonSet pod on the node;
* **DaemonSets**: each runs on the nodes whose labels, taints and its node affinity admit it
  (the DaemonSet controller's tolerations included), resolved to node names; its requests come
  off those nodes' capacity (Kuberina's Phase 0), clipped at 0 where they ask more than the node
  has, which :attr:`ManifestCluster.daemonset_overflow` lists;
* **every other pod type**: ``replicas`` workloads (a Job's ``parallelism``), named as IR v1
  §3.1 unrolls a declaration (``ns/name-0``, or ``ns/name-0000`` ... for more), the declaration
  being the type's id; tier and priority by the SPEC's classification of the template's labels
  (a Job's or CronJob's pods are batch); tolerations matched as kube-scheduler matches them; the
  required node affinity resolved to the nodes it admits; the required pod (anti-)affinity terms
  and hard spread constraints with their label selectors and namespace scopes resolved, by
  :mod:`kalena.deployability.labels`, to the declarations they match. The soft rules
  (``preferred...`` terms, ``ScheduleAnyway`` spread) are not modelled: they are counted per pod
  type (:meth:`ManifestCluster.unweighed`), and ``kalena pack`` says how many it did not weigh.

A pod requesting a resource the core does not model (anything but cpu, memory,
ephemeral-storage, ``nvidia.com/gpu`` and ``pods``) is refused, naming its file and key: a pack
that ignored it could promise a node the scheduler would refuse.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from kalena.core.classify import classify
from kalena.core.cluster import Cluster
from kalena.core.model import (
    DaemonSetSpec,
    NodeSpec,
    PodTerm,
    Selector,
    SpreadConstraint,
    Taint,
    Toleration,
    WorkloadSpec,
    daemonset_requests,
)
from kalena.core.resources import DIMS, Resources
from kalena.core.tolerance import REL_TOL
from kalena.deployability import labels as lb
from kalena.deployability.answer import Op, Step
from kalena.deployability.model import (
    PODS,
    Instance,
    LabelSelector,
    Node,
    PodAffinityTerm,
    PodType,
    Semantics,
)
from kalena.ir.document import replica_names
from kalena.ir.errors import IRError, Problem, key_path
from kalena.manifests.load import MAX_REPLICAS, Manifests, read_workloads
from kalena.manifests.podspec import SOFT_KINDS

GIB = float(2**30)
#: Kubernetes resource name -> (core dimension, scale from the reader's integer units)
DIMENSIONS: Mapping[str, tuple[str, float]] = {
    "cpu": ("cpu", 1e-3),  # millicores
    "memory": ("ram", 1 / GIB),
    "ephemeral-storage": ("storage", 1 / GIB),
    "nvidia.com/gpu": ("gpu", 1.0),
}
ZONE = "topology.kubernetes.io/zone"
_SEMANTICS = Semantics.KUBERNETES


def core_resources(
    raw: Mapping[str, int], default: float, absent: Mapping[str, float] | None = None
) -> Resources:
    """Integer Kubernetes quantities (the readers' units) as core resources; names outside
    :data:`DIMENSIONS` are left out (the caller decides whether that is allowed)."""
    vals = {
        **(absent or {}),
        **{DIMENSIONS[k][0]: v * DIMENSIONS[k][1] for k, v in raw.items() if k in DIMENSIONS},
    }
    return Resources.from_mapping(vals, default=default)


@dataclass(frozen=True, slots=True)
class DaemonSetOverflow:
    """A node whose DaemonSets request more of a dimension than it has: some of their pods would
    stay Pending there, and the packer counts the node with none of it left (Phase 0 clips at 0)."""

    node: str
    dimension: str  # a core dimension, or "pods"
    requested: float
    allocatable: float

    def describe(self) -> str:
        unit = " GiB" if self.dimension in ("ram", "storage") else ""
        return (
            f"node {self.node}: its DaemonSets request {self.dimension} {self.requested:g}{unit}, it has "
            f"{self.allocatable:g}{unit}: some of their pods would stay Pending; counted with none left"
        )


@dataclass(frozen=True)
class ManifestCluster:
    """The cluster the manifests describe, and what ties it back to them: the deployability
    :class:`Instance` of the same files (for :func:`replay_steps`) and each workload's pod type."""

    cluster: Cluster
    instance: Instance
    pod_type: Mapping[str, str]  # workload id -> pod type id
    daemonset_nodes: Mapping[str, frozenset[str]]  # DaemonSet pod type id -> its nodes
    #: the soft rules of the packed pod types, which the packer does not weigh: pod type id ->
    #: kind (``kalena.manifests.podspec.SOFT_KINDS``) -> terms
    soft: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    #: where the DaemonSets ask more than a node has (node order, then dimension order)
    daemonset_overflow: tuple[DaemonSetOverflow, ...] = ()

    def unweighed(self) -> dict[str, dict[str, int]]:
        """Per soft rule kind with any term: ``{"terms": n, "pod_types": k}``, in SOFT_KINDS order."""
        out: dict[str, dict[str, int]] = {}
        for kind in SOFT_KINDS:
            counts = [c[kind] for c in self.soft.values() if kind in c]
            if counts:
                out[kind] = {"terms": sum(counts), "pod_types": len(counts)}
        return out


def read_cluster(paths: Sequence[str | Path]) -> ManifestCluster:
    """Read the files (folders: their ``*.yaml`` and ``*.yml``) into a cluster with no placement;
    raises :class:`IRError` with every problem found."""
    return to_cluster(read_workloads(paths))


def _selector(decls: Sequence[str]) -> Selector:
    return Selector(names=frozenset(decls))


class _Resolver:
    """Selectors and node rules resolved against the instance's pod types and nodes."""

    def __init__(self, instance: Instance) -> None:
        self.instance = instance
        self.types = instance.types

    def ns_labels(self, ns: str) -> Mapping[str, str]:
        return self.instance.ns_labels(ns)

    def term(self, term: PodAffinityTerm, owner: PodType) -> PodTerm:
        hit = [u.id for u in self.types if lb.term_matches(term, owner, u, _SEMANTICS, self.ns_labels)]
        return PodTerm(_selector(hit), term.topology_key)

    def spread_targets(self, owner: PodType, sel: LabelSelector | None) -> Selector:
        return _selector([u.id for u in self.types if lb.spread_selects(owner, sel, u, _SEMANTICS)])

    def nodes_for(self, t: PodType) -> frozenset[str] | None:
        if t.node_affinity is None:
            return None
        return frozenset(n.name for n in self.instance.nodes if lb.node_affinity_matches(t, n))

    def runs_on(self, t: PodType) -> frozenset[str]:
        """The nodes a DaemonSet's pod goes to: labels, node affinity and taints."""
        return frozenset(n.name for n in self.instance.nodes if lb.static_ok(t, n))


def _taints(n: Node) -> tuple[Taint, ...]:
    taints = tuple(Taint(t.key, t.value, t.effect) for t in n.taints)
    if n.unschedulable:
        u = lb.UNSCHEDULABLE_TAINT
        taints += (Taint(u.key, u.value, u.effect),)
    return taints


def _unmodelled(m: Manifests) -> list[Problem]:
    out = []
    for t in m.instance.types:
        extra = sorted(d for d, v in t.requests.items() if v and d not in DIMENSIONS and d != PODS)
        if extra:
            file, loc = m.spec_at[t.id]
            out.append(
                Problem(
                    file,
                    key_path((*loc, "containers")),
                    f"requests {', '.join(extra)}, which Kalena's packer does not model "
                    "(it knows cpu, memory, ephemeral-storage, nvidia.com/gpu and pods)",
                    t.id,
                )
            )
    return out


def _too_many(m: Manifests) -> list[Problem]:
    """More pods in all than a Kubernetes cluster runs (each is a row in memory), named at the
    largest workload."""
    total = sum(m.replicas.values())
    if total <= MAX_REPLICAS:
        return []
    big = max(m.replicas, key=lambda t: m.replicas[t])
    file, loc = m.spec_at[big]
    return [
        Problem(
            file,
            key_path(loc),
            f"its {m.replicas[big]:,} pods bring the manifests to {total:,} pods in all, more than "
            f"{MAX_REPLICAS:,} (a Kubernetes cluster's own limit)",
            big,
        )
    ]


def to_cluster(m: Manifests) -> ManifestCluster:
    """The cluster of already-read manifests (module docstring)."""
    problems = _unmodelled(m) + _too_many(m)
    if problems:
        raise IRError(problems)
    inst = m.instance
    res = _Resolver(inst)
    ds_types = [t for t in inst.types if t.kind == "DaemonSet"]
    ds_nodes = {t.id: res.runs_on(t) for t in ds_types}
    daemonsets = [
        DaemonSetSpec(t.id, core_resources(t.requests, 0.0), nodes=ds_nodes[t.id]) for t in ds_types
    ]
    nodes: list[NodeSpec] = []
    overflow: list[DaemonSetOverflow] = []
    for n in inst.nodes:
        pods = n.allocatable.get(PODS)
        on_node = [ds for ds in daemonsets if n.name in ds_nodes[ds.name]]
        spec = NodeSpec(
            n.name,
            # no GPU unless the node lists one (as kalena.k8s reads a Node)
            allocatable=core_resources(n.allocatable, float("inf"), absent={"gpu": 0.0}),
            labels=dict(n.labels),
            taints=_taints(n),
            zone=n.labels.get(ZONE, ""),
            max_pods=None if pods is None else max(pods - len(on_node), 0),
        )
        nodes.append(spec)
        overflow += _overflow(spec, on_node, pods)
    workloads: list[WorkloadSpec] = []
    pod_type: dict[str, str] = {}
    for t in inst.types:
        if t.kind == "DaemonSet":
            continue
        c = classify(t.id, t.labels, owner_kind=t.kind, infer_batch=True)
        base = WorkloadSpec(
            id=t.id,
            requests=core_resources(t.requests, 0.0),
            tier=c.tier,
            priority=c.priority,
            namespace=t.namespace,
            declaration=t.id,
            labels=dict(t.labels),
            node_selector=dict(t.node_selector),
            tolerations=tuple(
                Toleration(x.key, x.operator, x.value, x.effect, exact=True) for x in t.tolerations
            ),
            required_affinity=tuple(res.term(x, t) for x in t.affinity),
            required_anti_affinity=tuple(res.term(x, t) for x in t.anti_affinity),
            spread=tuple(
                SpreadConstraint(
                    c_.max_skew,
                    c_.topology_key,
                    res.spread_targets(t, c_.selector),
                    c_.min_domains,
                    c_.node_affinity_policy,
                    c_.node_taints_policy,
                )
                for c_ in t.spread
            ),
            node_names=res.nodes_for(t),
            owner=t.id,
            slack_cpu=c.slack_cpu,
            slack_memory=c.slack_memory,
            reclaim_disabled=c.reclaim_disabled,
            startup_grace_s=c.startup_grace_s,
        )
        count = m.replicas.get(t.id, 1)
        for name in replica_names(t.id, count) if count else ():  # distinct: "-0" or "-dddd" after the id
            workloads.append(replace(base, id=name))
            pod_type[name] = t.id
    cluster = Cluster.build(nodes, daemonsets, workloads)
    packed = set(pod_type.values())  # a DaemonSet's soft rules never meet the packer
    soft = {t: kinds for t, kinds in m.soft.items() if t in packed}
    return ManifestCluster(cluster, inst, pod_type, ds_nodes, soft, tuple(overflow))


def _overflow(node: NodeSpec, on: list[DaemonSetSpec], pods: int | None) -> list[DaemonSetOverflow]:
    """Where the DaemonSets ``on`` the node request more than its allocatable (Phase 0 clips there)."""
    if not on:
        return []
    want = daemonset_requests(node, on).array()
    have = node.allocatable.array()
    over = want > have + REL_TOL * np.maximum(1.0, have)  # the ledger's own tolerance
    out = [
        DaemonSetOverflow(node.name, DIMS[d], float(want[d]), float(have[d])) for d in np.flatnonzero(over)
    ]
    if pods is not None and len(on) > pods:
        out.append(DaemonSetOverflow(node.name, "pods", float(len(on)), float(pods)))
    return out


def replay_steps(mc: ManifestCluster, order: Sequence[str], placement: Mapping[str, str]) -> list[Step]:
    """The pack as deployability steps from an empty cluster: every DaemonSet pod first, then each
    workload in ``order`` on its node (what :func:`kalena.deployability.checker.replay` checks)."""
    steps = [
        Step(Op.DEPLOY, tid, n.name)
        for tid, on in mc.daemonset_nodes.items()
        for n in mc.instance.nodes
        if n.name in on
    ]
    steps += [Step(Op.DEPLOY, mc.pod_type[w], placement[w]) for w in order]
    return steps
