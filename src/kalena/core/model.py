"""Plain data for nodes, DaemonSets and workloads, shared by every policy and every shell.

Everything here is a frozen dataclass: shells build these from IR documents, Kubernetes
objects or Docker labels, and the policies read them. Nothing here does I/O.
"""

from __future__ import annotations

import enum
from collections.abc import Container, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from kalena.core.resources import Resources

_EMPTY: Mapping[str, str] = MappingProxyType({})


class Tier(enum.Enum):
    """Isolation class (seed 000 §2.6). Service is the safe default."""

    SERVICE = "service"
    BATCH = "batch"


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str = ""
    effect: str = ""


@dataclass(frozen=True, slots=True)
class Toleration:
    """Matched on ``key`` only, as IR v1 says; an empty key with ``Exists`` tolerates every taint.

    ``exact`` (a toleration read from Kubernetes): matched as kube-scheduler does, on the effect
    (empty: every effect), the key and, for ``Equal``, the value.
    """

    key: str
    operator: str = "Equal"
    value: str = ""
    effect: str = ""
    exact: bool = False

    def tolerates(self, taint: Taint) -> bool:
        if not self.key:
            return self.operator == "Exists" and (not self.exact or self.effect in ("", taint.effect))
        if self.key != taint.key:
            return False
        if not self.exact:
            return True
        if self.effect and self.effect != taint.effect:
            return False
        return self.operator == "Exists" or self.value == taint.value


def tolerates_all(tolerations: tuple[Toleration, ...], taints: tuple[Taint, ...]) -> bool:
    """True when every taint that repels scheduling is tolerated (``PreferNoSchedule`` never repels)."""
    return all(
        taint.effect == "PreferNoSchedule" or any(t.tolerates(taint) for t in tolerations) for taint in taints
    )


def selector_matches(selector: Mapping[str, str], labels: Mapping[str, str]) -> bool:
    """A nodeSelector (or matchLabels) holds when every key is present with the same value."""
    return all(labels.get(k) == v for k, v in selector.items())


@dataclass(frozen=True, slots=True)
class Selector:
    """Which workloads a term targets: by identity (IR style) or by labels (Kubernetes style).

    ``names`` may hold full identities (``ns/pod-0001``), bare pod names (legacy Irina files)
    or declaration names (``ns/decl`` or bare ``decl``, which target every replica). An empty
    selector matches nothing.
    """

    names: frozenset[str] = frozenset()
    match_labels: Mapping[str, str] = field(default_factory=lambda: _EMPTY)

    def matches(self, w: WorkloadSpec) -> bool:
        if self.names and not self.names.isdisjoint(w.identities()):
            return True
        return bool(self.match_labels) and selector_matches(self.match_labels, w.labels)

    def is_empty(self) -> bool:
        return not self.names and not self.match_labels

    def key(self) -> tuple[frozenset[str], frozenset[tuple[str, str]]]:
        """What the selector matches by, hashable (a dict key for indexes and memos)."""
        return self.names, frozenset(self.match_labels.items())


@dataclass(frozen=True, slots=True)
class SpreadConstraint:
    """A hard topology-spread constraint (``whenUnsatisfiable: DoNotSchedule``).

    The policies say which nodes' domains count (kube-scheduler's defaults): ``Honor`` the pod's
    nodeSelector and required node affinity, ``Ignore`` taints.
    """

    max_skew: int
    topology_key: str
    selector: Selector
    min_domains: int = 1
    node_affinity_policy: str = "Honor"
    node_taints_policy: str = "Ignore"


@dataclass(frozen=True, slots=True)
class PodTerm:
    """A required pod (anti-)affinity term: the workloads ``selector`` names (a shell resolves a
    Kubernetes label selector and its namespaces to their ids), in the same ``topology_key``
    domain (a node label) as the workload (affinity) or never in it (anti-affinity)."""

    selector: Selector
    topology_key: str


@dataclass(frozen=True, slots=True)
class NodeSpec:
    name: str
    allocatable: Resources = field(default_factory=Resources.unconstrained)
    labels: Mapping[str, str] = field(default_factory=lambda: _EMPTY)
    taints: tuple[Taint, ...] = ()
    zone: str = ""
    rack: str = ""
    #: the most pods the node takes (Kubernetes' ``pods`` allocatable; None: no such bound)
    max_pods: int | None = None

    def topology_value(self, key: str) -> str | None:
        """The node's domain for a topology key; ``zone``/``rack`` fall back to the IR fields."""
        if key in self.labels:
            return self.labels[key]
        if key in ("zone", "topology.kubernetes.io/zone") and self.zone:
            return self.zone
        if key == "rack" and self.rack:
            return self.rack
        if key in ("kubernetes.io/hostname", "hostname", ""):
            return self.name
        return None


@dataclass(frozen=True, slots=True)
class DaemonSetSpec:
    name: str
    resources: Resources = field(default_factory=Resources.zero)
    node_selector: Mapping[str, str] = field(default_factory=lambda: _EMPTY)
    tolerations: tuple[str, ...] = ()  # taint keys, as IR v1 says
    #: the nodes it runs on, where a shell resolved them (Kubernetes' own rules); None: by the above
    nodes: frozenset[str] | None = None

    def runs_on(self, node: NodeSpec) -> bool:
        """Phase 0 match: the nodeSelector holds and every taint's key is tolerated."""
        if self.nodes is not None:
            return node.name in self.nodes
        if not selector_matches(self.node_selector, node.labels):
            return False
        return all(t.key in self.tolerations for t in node.taints)


def daemonset_requests(
    node: NodeSpec, daemonsets: tuple[DaemonSetSpec, ...] | list[DaemonSetSpec]
) -> Resources:
    """The summed requests of the DaemonSets that run on ``node`` (what Phase 0 takes off it)."""
    used = Resources.zero()
    for ds in daemonsets:
        if ds.runs_on(node):
            used = used + ds.resources
    return used


def node_capacity(node: NodeSpec, daemonsets: tuple[DaemonSetSpec, ...] | list[DaemonSetSpec]) -> Resources:
    """C_n: allocatable minus every matching DaemonSet's requests (Kuberina's Phase 0).

    Unconstrained dimensions stay unconstrained. Clipped at zero: a node whose DaemonSets
    exceed its allocatable has no capacity left, never negative capacity.
    """
    return node.allocatable.minus(daemonset_requests(node, daemonsets))


@dataclass(frozen=True, slots=True)
class WorkloadSpec:
    """One unrolled workload (a pod, a container, a Swarm task) as the policies see it.

    ``limits`` of ``None`` means no limit: the node's capacity is the ceiling. ``owner`` names
    the equivalence class (Job, ReplicaSet, IR declaration): workloads with the same owner
    share requirements and constraints, so placement evaluates them once.
    """

    id: str  # namespace/name
    requests: Resources = field(default_factory=Resources.zero)
    limits: Resources | None = None
    tier: Tier = Tier.SERVICE
    priority: int = 0
    namespace: str = ""
    declaration: str = ""  # namespace/declaration before replica unrolling
    labels: Mapping[str, str] = field(default_factory=lambda: _EMPTY)
    node_selector: Mapping[str, str] = field(default_factory=lambda: _EMPTY)
    tolerations: tuple[Toleration, ...] = ()
    affinity: Selector = field(default_factory=Selector)
    anti_affinity: Selector = field(default_factory=Selector)
    anti_affinity_topology_key: str = ""  # "" means the node itself
    spread: tuple[SpreadConstraint, ...] = ()
    #: hard rules read from Kubernetes (IR v1 states none; the packer keeps them)
    required_affinity: tuple[PodTerm, ...] = ()
    required_anti_affinity: tuple[PodTerm, ...] = ()
    #: required node affinity, resolved to the node names it admits (None: no such rule)
    node_names: frozenset[str] | None = None
    image: str = ""
    owner: str = ""
    slack_cpu: bool = True
    slack_memory: bool = False
    reclaim_disabled: bool = False
    startup_grace_s: float = 300.0
    is_daemonset: bool = False

    @property
    def name(self) -> str:
        return self.id.rsplit("/", 1)[-1]

    def spellings(self) -> tuple[str, ...]:
        """Every spelling a Selector may use for this workload (repeats possible)."""
        name = self.id.rsplit("/", 1)[-1]
        if not self.declaration:
            return (self.id, name)
        return (self.id, name, self.declaration, self.declaration.rsplit("/", 1)[-1])

    def identities(self) -> frozenset[str]:
        """:meth:`spellings` as a set."""
        return frozenset(self.spellings())

    def named_in(self, names: Container[str]) -> bool:
        """Whether ``names`` holds some spelling of this workload (no set built: a hot path)."""
        return any(s in names for s in self.spellings())

    @property
    def equivalence_key(self) -> str:
        return self.owner or self.id
