"""Version-neutral documents: what an IR file says, after parsing, in IR units.

The readers turn a v1 or legacy file into these frozen dataclasses; the writer turns them
back into IR v1 text; :mod:`kalena.ir.build` turns a set of them into a core
:class:`~kalena.core.cluster.Cluster`. Resource blocks are ``{dimension: value}`` holding only
the dimensions that were written (so "omitted" survives a round trip: unconstrained for a
node's allocatable, zero for demand, absent for an observed percentile).

Replica unrolling (ir-v1 §3.1): a declaration ``name`` with ``replicas: n`` is the pods
``name-0000`` ... ``name-(n-1)`` (at least four digits) when n > 1 and ``name-0`` when n == 1;
a pod's identity is ``namespace/podname``. A legacy ``pods:`` entry is one pod whose name is
its identity, marked ``pod_entry``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Literal

from kalena.core.cluster import Group
from kalena.core.model import Taint

Kind = Literal["Infrastructure", "Workloads", "Blueprint"]
Dims = Mapping[str, float]
Loc = tuple[str | int, ...]


def replica_names(name: str, replicas: int) -> tuple[str, ...]:
    """Unrolled pod names of a declaration (ir-v1 §3.1)."""
    if replicas == 1:
        return (f"{name}-0",)
    return tuple(f"{name}-{i:04d}" for i in range(replicas))


@dataclass(frozen=True, slots=True)
class NodeDoc:
    name: str
    zone: str = ""
    rack: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    allocatable: Dims = field(default_factory=dict)
    loc: Loc = field(default=(), compare=False)


@dataclass(frozen=True, slots=True)
class DaemonSetDoc:
    name: str
    resources: Dims = field(default_factory=dict)
    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: tuple[str, ...] = ()
    loc: Loc = field(default=(), compare=False)


@dataclass(frozen=True, slots=True)
class TolerationDoc:
    key: str
    operator: str | None = None
    value: str | None = None
    effect: str | None = None


@dataclass(frozen=True, slots=True)
class SpreadDoc:
    max_skew: int
    topology_key: str


@dataclass(frozen=True, slots=True)
class ObservedDoc:
    window: str = ""
    p50: Dims | None = None
    p95: Dims | None = None
    p99: Dims | None = None
    peak: Dims | None = None
    exceeded_request_fraction: float = 0.0


@dataclass(frozen=True, slots=True)
class DeclDoc:
    """A declaration (or, with ``pod_entry``, one legacy pod)."""

    namespace: str
    name: str
    replicas: int = 1
    requests: Dims = field(default_factory=dict)
    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: tuple[TolerationDoc, ...] = ()
    affinity: tuple[str, ...] = ()
    anti_affinity: tuple[str, ...] = ()
    topology_spread: SpreadDoc | None = None
    gang: str | None = None
    observed: ObservedDoc | None = None
    pod_entry: bool = False
    loc: Loc = field(default=(), compare=False)

    @property
    def full_name(self) -> str:
        return f"{self.namespace}/{self.name}"

    def pod_names(self) -> tuple[str, ...]:
        return (self.name,) if self.pod_entry else replica_names(self.name, self.replicas)

    def pod_ids(self) -> tuple[str, ...]:
        return tuple(f"{self.namespace}/{p}" for p in self.pod_names())


@dataclass(frozen=True, slots=True)
class GroupDoc:
    name: str
    members: tuple[str, ...] | None  # None: legacy group whose members come from the pods' gang
    min_members: int | None = None
    colocate: bool | None = None
    node_selector: Mapping[str, str] | None = None
    loc: Loc = field(default=(), compare=False)


@dataclass(frozen=True, slots=True)
class MetaDoc:
    feasible: bool | None = None
    pods: int | None = None
    active_nodes: int | None = None


@dataclass(frozen=True, slots=True)
class InfraDoc:
    file: str
    legacy: bool
    nodes: tuple[NodeDoc, ...] = ()
    daemonsets: tuple[DaemonSetDoc, ...] = ()
    kind: Kind = field(default="Infrastructure", init=False)


@dataclass(frozen=True, slots=True)
class WorkloadsDoc:
    file: str
    legacy: bool
    declarations: tuple[DeclDoc, ...] = ()
    groups: tuple[GroupDoc, ...] = ()
    #: Gangs resolved to pod ids when the document was read (explicit blocks, then inline-only gangs).
    resolved_groups: tuple[Group, ...] = field(default=(), compare=False)
    kind: Kind = field(default="Workloads", init=False)

    def pods(self) -> Iterator[tuple[str, DeclDoc]]:
        """Every unrolled pod id with its declaration, in file order."""
        for d in self.declarations:
            for pid in d.pod_ids():
                yield pid, d


@dataclass(frozen=True, slots=True)
class BlueprintDoc:
    file: str
    legacy: bool
    solution: tuple[tuple[str, str], ...] = ()
    metadata: MetaDoc | None = None
    kind: Kind = field(default="Blueprint", init=False)

    def active_nodes(self) -> int:
        return len({node for _, node in self.solution})


Document = InfraDoc | WorkloadsDoc | BlueprintDoc
