"""The pod-deployability model of seed 003 §2 as plain frozen data.

Pod types, nodes, labels, integer resources, static filters (nodeSelector, required node
affinity, taints and tolerations, ``spec.unschedulable``), required inter-pod affinity and
anti-affinity terms with topology keys and namespaces, hard topology-spread constraints, and
an initial configuration (how many instances of each type run on each node).

Nothing here decides anything: matching lives in :mod:`.labels`, the feasibility predicate in
:mod:`.semantics`, and the independent replay checker keeps its own copy of both. Bad values
fail when the object is built, with a message naming the field and the value.

Resources are integers in Kubernetes base units so that ``used + request <= capacity`` is exact:
``cpu`` in millicores, ``memory`` / ``ephemeral-storage`` / ``hugepages-*`` in bytes, ``pods``
and extended resources in units. A node dimension that is absent is unbounded.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

_EMPTY: Mapping[str, str] = MappingProxyType({})

#: Every pod consumes one unit of this dimension (kubelet's ``maxPods``, node allocatable ``pods``).
PODS = "pods"

HOSTNAME = "kubernetes.io/hostname"

#: Operators of label selectors (pods, namespaces) and of node selector requirements.
SELECTOR_OPERATORS = frozenset({"In", "NotIn", "Exists", "DoesNotExist"})
NODE_OPERATORS = SELECTOR_OPERATORS | {"Gt", "Lt"}
TAINT_EFFECTS = frozenset({"NoSchedule", "PreferNoSchedule", "NoExecute"})


class Semantics(enum.Enum):
    """Which feasibility predicate a question is asked under (see ``docs/deployability.md``)."""

    KUBERNETES = "kubernetes"  # what kube-scheduler's filters do
    PAPER = "paper"  # seed 003 Definition 1


def frozen_map(m: Mapping[str, str] | None) -> Mapping[str, str]:
    """A read-only copy (``MappingProxyType``) so that frozen objects stay frozen."""
    return MappingProxyType(dict(m)) if m else _EMPTY


@dataclass(frozen=True, slots=True)
class Requirement:
    """``key operator values``: one matchExpressions entry (label or node-field selector)."""

    key: str
    operator: str
    values: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.operator not in NODE_OPERATORS:
            raise ValueError(f"operator must be one of {sorted(NODE_OPERATORS)}, got {self.operator!r}")
        if self.operator in ("In", "NotIn") and not self.values:
            raise ValueError(f"operator {self.operator} needs at least one value (key {self.key!r})")
        if self.operator in ("Exists", "DoesNotExist") and self.values:
            raise ValueError(f"operator {self.operator} takes no values (key {self.key!r})")
        if self.operator in ("Gt", "Lt"):
            if len(self.values) != 1:
                raise ValueError(f"operator {self.operator} needs exactly one value (key {self.key!r})")
            try:
                int(self.values[0])
            except ValueError:
                raise ValueError(
                    f"operator {self.operator} needs an integer, got {self.values[0]!r}"
                ) from None


@dataclass(frozen=True, slots=True)
class LabelSelector:
    """A non-null ``metav1.LabelSelector``: matchLabels AND every expression. Empty matches all.

    A *null* selector (absent ``labelSelector``) matches nothing; callers model it as ``None``.
    """

    match_labels: Mapping[str, str] = field(default_factory=lambda: _EMPTY)
    match_expressions: tuple[Requirement, ...] = ()

    def __post_init__(self) -> None:
        for r in self.match_expressions:
            if r.operator not in SELECTOR_OPERATORS:
                raise ValueError(f"a label selector does not accept operator {r.operator!r}")


@dataclass(frozen=True, slots=True)
class PodAffinityTerm:
    """A required (anti-)affinity term ``(s, tau)`` with its namespace scope.

    ``namespaces`` empty and ``namespace_selector`` None mean "the owning pod's namespace" (as
    kube-scheduler's ``getNamespacesFromPodAffinityTerm``). The paper semantics ignores namespaces.
    """

    selector: LabelSelector | None
    topology_key: str
    namespaces: tuple[str, ...] = ()
    namespace_selector: LabelSelector | None = None

    def __post_init__(self) -> None:
        if not self.topology_key:
            raise ValueError("a required pod (anti-)affinity term needs a non-empty topologyKey")


@dataclass(frozen=True, slots=True)
class SpreadConstraint:
    """A hard topology-spread constraint ``h = (s, tau, k, l, E)`` (``whenUnsatisfiable: DoNotSchedule``).

    ``E`` is not stored: it is derived from the owning pod (nodes that carry every topology key of
    the pod's constraints and pass the node-inclusion policies), as PodTopologySpread does.
    """

    max_skew: int
    topology_key: str
    selector: LabelSelector | None
    min_domains: int = 1
    node_affinity_policy: str = "Honor"  # kube-scheduler default
    node_taints_policy: str = "Ignore"  # kube-scheduler default

    def __post_init__(self) -> None:
        if self.max_skew < 1:
            raise ValueError(f"maxSkew must be at least 1, got {self.max_skew}")
        if self.min_domains < 1:
            raise ValueError(f"minDomains must be at least 1, got {self.min_domains}")
        if not self.topology_key:
            raise ValueError("a topology spread constraint needs a non-empty topologyKey")
        for name, v in (
            ("nodeAffinityPolicy", self.node_affinity_policy),
            ("nodeTaintsPolicy", self.node_taints_policy),
        ):
            if v not in ("Honor", "Ignore"):
                raise ValueError(f"{name} must be Honor or Ignore, got {v!r}")


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str = ""
    effect: str = "NoSchedule"

    def __post_init__(self) -> None:
        if self.effect not in TAINT_EFFECTS:
            raise ValueError(f"taint effect must be one of {sorted(TAINT_EFFECTS)}, got {self.effect!r}")


@dataclass(frozen=True, slots=True)
class Toleration:
    """A Kubernetes toleration.

    An empty ``key`` with ``Exists`` tolerates every taint; an empty ``effect`` every effect.
    """

    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""

    def __post_init__(self) -> None:
        if self.operator not in ("Equal", "Exists"):
            raise ValueError(f"toleration operator must be Equal or Exists, got {self.operator!r}")
        if self.operator == "Exists" and self.value:
            raise ValueError(f"a toleration with operator Exists takes no value, got {self.value!r}")
        if not self.key and self.operator != "Exists":
            raise ValueError("a toleration with an empty key needs operator Exists")
        if self.effect and self.effect not in TAINT_EFFECTS:
            raise ValueError(f"toleration effect must be empty or one of {sorted(TAINT_EFFECTS)}")


@dataclass(frozen=True, slots=True)
class NodeSelectorTerm:
    """One required nodeAffinity term: every expression on labels and every field (``metadata.name``)."""

    match_expressions: tuple[Requirement, ...] = ()
    match_fields: tuple[Requirement, ...] = ()

    def __post_init__(self) -> None:
        for r in self.match_fields:
            if r.key != "metadata.name":
                raise ValueError(f"matchFields supports only metadata.name, got {r.key!r}")
            if r.operator not in ("In", "NotIn"):
                raise ValueError(f"matchFields supports only In and NotIn, got {r.operator!r}")


@dataclass(frozen=True, slots=True)
class PodType:
    """A pod type ``t``: what every instance created from one template shares (seed 003 §2.1).

    ``id`` is ``namespace/name``. ``requests`` holds positive integer requests (``pods`` is
    added by :func:`pod_type` helpers and the manifest reader: every pod takes one pod slot).
    ``node_affinity`` None means no required node affinity; otherwise the terms are ORed.
    """

    id: str
    namespace: str = "default"
    kind: str = "Pod"
    labels: Mapping[str, str] = field(default_factory=lambda: _EMPTY)
    requests: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({PODS: 1}))
    node_selector: Mapping[str, str] = field(default_factory=lambda: _EMPTY)
    node_affinity: tuple[NodeSelectorTerm, ...] | None = None
    tolerations: tuple[Toleration, ...] = ()
    affinity: tuple[PodAffinityTerm, ...] = ()
    anti_affinity: tuple[PodAffinityTerm, ...] = ()
    spread: tuple[SpreadConstraint, ...] = ()

    def __post_init__(self) -> None:
        if not self.id or "/" not in self.id:
            raise ValueError(f"a pod type id is namespace/name, got {self.id!r}")
        for dim, v in self.requests.items():
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise ValueError(f"request {dim} must be a non-negative integer, got {v!r}")
        if self.node_affinity is not None and not self.node_affinity:
            raise ValueError("required node affinity needs at least one nodeSelectorTerm")
        keys = [c.topology_key for c in self.spread]
        if len(keys) != len(set(keys)):
            raise ValueError(f"two spread constraints share a topologyKey: {keys}")

    @property
    def name(self) -> str:
        return self.id.split("/", 1)[1]


@dataclass(frozen=True, slots=True)
class Node:
    """A node ``n``: labels, taints, allocatable capacity (absent dimension = unbounded)."""

    name: str
    labels: Mapping[str, str] = field(default_factory=lambda: _EMPTY)
    taints: tuple[Taint, ...] = ()
    allocatable: Mapping[str, int] = field(default_factory=lambda: _EMPTY)
    unschedulable: bool = False

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("a node needs a name")
        for dim, v in self.allocatable.items():
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise ValueError(f"allocatable {dim} must be a non-negative integer, got {v!r}")


@dataclass(frozen=True, slots=True)
class Instance:
    """A cluster: nodes, pod types, namespace labels and the initial configuration ``sigma_0``.

    ``initial`` maps ``(type id, node name)`` to a positive instance count. Namespaces not listed
    in ``namespace_labels`` carry only ``kubernetes.io/metadata.name`` (as the API server sets).
    """

    nodes: tuple[Node, ...]
    types: tuple[PodType, ...]
    initial: Mapping[tuple[str, str], int] = field(default_factory=lambda: MappingProxyType({}))
    namespace_labels: Mapping[str, Mapping[str, str]] = field(default_factory=lambda: MappingProxyType({}))

    def __post_init__(self) -> None:
        names = [n.name for n in self.nodes]
        if len(names) != len(set(names)):
            raise ValueError("two nodes share a name")
        ids = [t.id for t in self.types]
        if len(ids) != len(set(ids)):
            raise ValueError("two pod types share an id")
        known_t, known_n = set(ids), set(names)
        for (tid, node), count in self.initial.items():
            if tid not in known_t:
                raise ValueError(f"initial configuration names an unknown pod type {tid!r}")
            if node not in known_n:
                raise ValueError(f"initial configuration names an unknown node {node!r}")
            if not isinstance(count, int) or count < 1:
                raise ValueError(
                    f"initial count of {tid} on {node} must be a positive integer, got {count!r}"
                )

    def type_index(self) -> dict[str, int]:
        return {t.id: i for i, t in enumerate(self.types)}

    def node_index(self) -> dict[str, int]:
        return {n.name: i for i, n in enumerate(self.nodes)}

    def ns_labels(self, namespace: str) -> Mapping[str, str]:
        """Labels of a namespace, always including ``kubernetes.io/metadata.name``."""
        base = dict(self.namespace_labels.get(namespace, {}))
        base.setdefault("kubernetes.io/metadata.name", namespace)
        return base


@dataclass(frozen=True, slots=True)
class Query:
    """Can ``pod`` (and ``co_occur``, at the same time) ever run on ``node``?"""

    pod: str
    node: str
    co_occur: str | None = None

    def __post_init__(self) -> None:
        if self.co_occur is not None and self.co_occur == self.pod:
            raise ValueError("co-occurrence needs two different pod types")

    def targets(self) -> tuple[tuple[str, str], ...]:
        """The type-node coordinates that must all be covered."""
        if self.co_occur is None:
            return ((self.pod, self.node),)
        return ((self.pod, self.node), (self.co_occur, self.node))
