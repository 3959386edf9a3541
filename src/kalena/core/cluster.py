"""A planned cluster as plain data: nodes, DaemonSets, Phase 0 capacity, production and its placement.

A :class:`Cluster` is what every shell hands the policies after reading an upstream plan
(a Kuberina blueprint): the nodes, the DaemonSets, each node's capacity after the Phase 0
deduction, the production workloads (service tier), the blueprint's placement and the gangs.
It is frozen: Kalena never mutates a production placement or request (the restoration
invariant), so a cluster is built once and only read.

Formulas (per node n and dimension d, in IR units):

* capacity  C_n = allocatable_n - sum of the requests of the DaemonSets that run on n
  (:func:`kalena.core.model.node_capacity`; unconstrained dimensions stay ``inf``);
* load      P_n = sum of R_p over the production workloads p placed on n;
* request ledger: P_n <= C_n on every dimension (checked with the relative tolerance
  :data:`~kalena.core.tolerance.REL_TOL` = 1e-9, so that sums of decimal fractions such as
  0.1 + 0.2 do not read as a breach);
* utilisation u_n,d = P_n,d / C_n,d, and the mean over the active nodes (nodes with at
  least one placed workload), which is how Kuberina reports "average CPU utilisation".
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

import numpy as np

from kalena.core.model import DaemonSetSpec, NodeSpec, Selector, WorkloadSpec, node_capacity
from kalena.core.resources import DIMS, Resources, dim_index, stack
from kalena.core.tolerance import REL_TOL

_EMPTY: Mapping[str, str] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class Group:
    """A gang: placed all-or-nothing (IR v1 §3.2). ``members`` are workload ids, in file order."""

    name: str
    members: tuple[str, ...]
    min_members: int
    colocate: bool = False
    node_selector: Mapping[str, str] = field(default_factory=lambda: _EMPTY)

    def __post_init__(self) -> None:
        if not 1 <= self.min_members <= len(self.members):
            raise ValueError(
                f"group {self.name!r}: min_members {self.min_members} outside 1..{len(self.members)}"
            )


@dataclass(frozen=True, slots=True)
class ObservedUsage:
    """The IR v1 ``observed:`` block of one workload; an absent percentile stays ``None``."""

    window: str = ""
    p50: Resources | None = None
    p95: Resources | None = None
    p99: Resources | None = None
    peak: Resources | None = None
    exceeded_request_fraction: float = 0.0

    def __post_init__(self) -> None:
        if not 0.0 <= self.exceeded_request_fraction <= 1.0:
            raise ValueError(f"exceeded_request_fraction {self.exceeded_request_fraction!r} outside [0, 1]")


@dataclass(frozen=True, slots=True)
class LedgerBreach:
    """One node and dimension where production requests exceed capacity."""

    node: str
    dimension: str
    load: float
    capacity: float

    @property
    def excess(self) -> float:
        return self.load - self.capacity


@dataclass(frozen=True)
class Cluster:
    """Nodes, DaemonSets, Phase 0 capacity, production workloads, placement and gangs.

    Build with :meth:`Cluster.build`, which computes ``capacity`` and checks consistency.
    ``placement`` maps workload id to node name; it may leave workloads unplaced (a
    workloads document read without a blueprint) but never names an unknown one.
    """

    nodes: tuple[NodeSpec, ...]
    daemonsets: tuple[DaemonSetSpec, ...]
    capacity: Mapping[str, Resources]
    workloads: tuple[WorkloadSpec, ...]
    placement: Mapping[str, str]
    groups: tuple[Group, ...] = ()
    observed: Mapping[str, ObservedUsage] = field(default_factory=lambda: MappingProxyType({}))

    def __post_init__(self) -> None:
        node_pos = {n.name: i for i, n in enumerate(self.nodes)}
        if len(node_pos) != len(self.nodes):
            raise ValueError("duplicate node name in a cluster")
        wl_pos = {w.id: i for i, w in enumerate(self.workloads)}
        if len(wl_pos) != len(self.workloads):
            raise ValueError("duplicate workload id in a cluster")
        if set(self.capacity) != set(node_pos):
            raise ValueError("capacity must name exactly the cluster's nodes")
        for wid, node in self.placement.items():
            if wid not in wl_pos:
                raise ValueError(f"placement names unknown workload {wid!r}")
            if node not in node_pos:
                raise ValueError(f"placement puts {wid!r} on unknown node {node!r}")
        for g in self.groups:
            unknown = [m for m in g.members if m not in wl_pos]
            if unknown:
                raise ValueError(f"group {g.name!r} names unknown workloads {unknown[:3]}")
        # Derived indexes: computed once, never mutated afterwards.
        object.__setattr__(self, "_node_pos", MappingProxyType(node_pos))
        object.__setattr__(self, "_wl_pos", MappingProxyType(wl_pos))
        ident: dict[str, list[str]] = {}
        for w in self.workloads:
            for spelling in w.identities():
                ident.setdefault(spelling, []).append(w.id)
        object.__setattr__(self, "_ident", MappingProxyType({k: tuple(v) for k, v in ident.items()}))

    # construction ---------------------------------------------------------------------------
    @classmethod
    def build(
        cls,
        nodes: Iterable[NodeSpec],
        daemonsets: Iterable[DaemonSetSpec],
        workloads: Iterable[WorkloadSpec],
        placement: Mapping[str, str] | None = None,
        groups: Iterable[Group] = (),
        observed: Mapping[str, ObservedUsage] | None = None,
    ) -> Cluster:
        """Compute each node's Phase 0 capacity and freeze everything."""
        nodes_t = tuple(nodes)
        ds_t = tuple(daemonsets)
        capacity = {n.name: node_capacity(n, ds_t) for n in nodes_t}
        return cls(
            nodes=nodes_t,
            daemonsets=ds_t,
            capacity=MappingProxyType(capacity),
            workloads=tuple(workloads),
            placement=MappingProxyType(dict(placement or {})),
            groups=tuple(groups),
            observed=MappingProxyType(dict(observed or {})),
        )

    def without_empty_nodes(self) -> Cluster:
        """The cluster with only the nodes the placement puts production on (the blueprint's empty
        nodes left out: batch then has only what production's nodes leave)."""
        used = set(self.placement.values())
        nodes = tuple(n for n in self.nodes if n.name in used)
        return Cluster(
            nodes=nodes,
            daemonsets=self.daemonsets,
            capacity=MappingProxyType({n.name: self.capacity[n.name] for n in nodes}),
            workloads=self.workloads,
            placement=self.placement,
            groups=self.groups,
            observed=self.observed,
        )

    # lookups --------------------------------------------------------------------------------
    def node(self, name: str) -> NodeSpec:
        return self.nodes[self._node_pos[name]]  # type: ignore[attr-defined]

    def workload(self, wid: str) -> WorkloadSpec:
        return self.workloads[self._wl_pos[wid]]  # type: ignore[attr-defined]

    def node_names(self) -> tuple[str, ...]:
        return tuple(n.name for n in self.nodes)

    # matrices (rows in node / workload order, columns in DIMS order) -------------------------
    def allocatable_matrix(self) -> np.ndarray:
        return stack(n.allocatable for n in self.nodes)

    def capacity_matrix(self) -> np.ndarray:
        return stack(self.capacity[n.name] for n in self.nodes)

    def phase0_deduction(self) -> np.ndarray:
        """(N, 8): what the DaemonSets take from each node, allocatable - C_n (0 where unconstrained)."""
        alloc = self.allocatable_matrix()
        cap = self.capacity_matrix()
        with np.errstate(invalid="ignore"):
            ded = alloc - cap
        return np.where(np.isinf(alloc), 0.0, ded)

    def requests_matrix(self) -> np.ndarray:
        return stack(w.requests for w in self.workloads)

    def node_load(self) -> np.ndarray:
        """(N, 8): P_n, the summed requests of the workloads placed on each node."""
        load = np.zeros((len(self.nodes), len(DIMS)), dtype=np.float64)
        if not self.placement:
            return load
        wl_rows = np.fromiter((self._wl_pos[w] for w in self.placement), dtype=np.intp)  # type: ignore[attr-defined]
        node_rows = np.fromiter(
            (self._node_pos[n] for n in self.placement.values()),  # type: ignore[attr-defined]
            dtype=np.intp,
        )
        np.add.at(load, node_rows, self.requests_matrix()[wl_rows])
        return load

    # ledger and figures -----------------------------------------------------------------------
    def request_ledger_breaches(self) -> tuple[LedgerBreach, ...]:
        """Every (node, dimension) where P_n > C_n, in node then dimension order."""
        load = self.node_load()
        cap = self.capacity_matrix()
        over = load > cap + REL_TOL * np.maximum(np.abs(cap), 1.0)
        out = []
        for i, d in zip(*np.nonzero(over), strict=True):
            out.append(LedgerBreach(self.nodes[i].name, DIMS[d], float(load[i, d]), float(cap[i, d])))
        return tuple(out)

    def request_ledger_holds(self) -> bool:
        return not self.request_ledger_breaches()

    def active_nodes(self) -> tuple[str, ...]:
        """Nodes with at least one placed workload, in node order."""
        used = set(self.placement.values())
        return tuple(n.name for n in self.nodes if n.name in used)

    def utilisation(self, dim: str = "cpu") -> np.ndarray:
        """u_n = P_n / C_n on one dimension for every node (0 where C_n is 0 or ``inf``)."""
        d = dim_index(dim)
        load = self.node_load()[:, d]
        cap = self.capacity_matrix()[:, d]
        ok = (cap > 0) & np.isfinite(cap)
        out = np.zeros_like(load)
        np.divide(load, cap, out=out, where=ok)
        return out

    def mean_active_utilisation(self, dim: str = "cpu") -> float:
        """Mean of u_n over the active nodes; ``nan`` when no node is active."""
        active = {n for n in self.active_nodes()}
        if not active:
            return math.nan
        mask = np.array([n.name in active for n in self.nodes], dtype=bool)
        return float(self.utilisation(dim)[mask].mean())

    def targets_of(self, selector: Selector) -> frozenset[str]:
        """Ids of the workloads a selector matches, by name index (labels fall back to a scan)."""
        index: Mapping[str, tuple[str, ...]] = self._ident  # type: ignore[attr-defined]
        hit: set[str] = set()
        for name in selector.names:
            hit.update(index.get(name, ()))
        if selector.match_labels:
            hit.update(w.id for w in self.workloads if selector.matches(w))
        return frozenset(hit)
