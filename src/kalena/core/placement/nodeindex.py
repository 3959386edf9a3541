"""Static per-node lookups, built once per node list and reused by every pass.

Nodes do not change while a ledger lives, so label tests, taint tests and topology domains are
answered with precomputed ``(N,)`` arrays instead of a Python loop over nodes per pod:

* ``selector_mask(sel)``: AND over the selector's pairs of the cached mask of ``labels[k] == v``;
* ``toleration_mask(tols)``: nodes are grouped by their distinct taint tuples (a cluster has a
  handful); ``tolerates_all`` runs once per group and the answer is broadcast by group id;
* ``domains(key)``: ``(N,)`` integer domain ids of ``NodeSpec.topology_value(key)``, ``-1`` where
  the node has no value for the key (such a node is outside every domain of that key).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from kalena.core.model import NodeSpec, Taint, Toleration, tolerates_all


class NodeIndex:
    """Memoised, read-only answers about a fixed node list."""

    def __init__(self, nodes: Sequence[NodeSpec]) -> None:
        self.nodes = tuple(nodes)
        self.n = len(self.nodes)
        self._all = np.ones(self.n, dtype=bool)
        self._all.setflags(write=False)
        self._label: dict[tuple[str, str], np.ndarray] = {}
        self._selector: dict[frozenset[tuple[str, str]], np.ndarray] = {}
        groups: dict[tuple[Taint, ...], int] = {}
        self.taint_group = np.array(
            [groups.setdefault(n.taints, len(groups)) for n in self.nodes], dtype=np.int64
        )
        self.taint_sets: tuple[tuple[Taint, ...], ...] = tuple(groups)
        self._tolerations: dict[tuple[Toleration, ...], np.ndarray] = {}
        self._domains: dict[str, tuple[np.ndarray, int]] = {}
        self._names: dict[frozenset[str], np.ndarray] = {}
        bound = [n.max_pods for n in self.nodes]
        #: (N,) the most pods each node takes (inf: no bound); None when no node has one
        self.max_pods: np.ndarray | None = (
            None if all(b is None for b in bound) else np.array([np.inf if b is None else b for b in bound])
        )

    @property
    def all(self) -> np.ndarray:
        return self._all

    def label_mask(self, key: str, value: str) -> np.ndarray:
        m = self._label.get((key, value))
        if m is None:
            m = np.fromiter((n.labels.get(key) == value for n in self.nodes), dtype=bool, count=self.n)
            m.setflags(write=False)
            self._label[(key, value)] = m
        return m

    def selector_mask(self, selector: Mapping[str, str]) -> np.ndarray:
        """Nodes whose labels satisfy a nodeSelector (every pair present and equal)."""
        if not selector:
            return self._all
        key = frozenset(selector.items())
        m = self._selector.get(key)
        if m is None:
            m = self._all.copy()
            for k, v in selector.items():
                m &= self.label_mask(k, v)
            m.setflags(write=False)
            self._selector[key] = m
        return m

    def names_mask(self, names: frozenset[str]) -> np.ndarray:
        """Nodes whose name is in ``names`` (a required node affinity a shell resolved)."""
        m = self._names.get(names)
        if m is None:
            m = np.fromiter((n.name in names for n in self.nodes), dtype=bool, count=self.n)
            m.setflags(write=False)
            self._names[names] = m
        return m

    def toleration_mask(self, tolerations: tuple[Toleration, ...]) -> np.ndarray:
        """Nodes whose every repelling taint the tolerations cover (``tolerates_all``)."""
        m = self._tolerations.get(tolerations)
        if m is None:
            ok = np.array([tolerates_all(tolerations, ts) for ts in self.taint_sets], dtype=bool)
            m = ok[self.taint_group] if self.n else np.zeros(0, dtype=bool)
            m.setflags(write=False)
            self._tolerations[tolerations] = m
        return m

    def domains(self, key: str) -> tuple[np.ndarray, int]:
        """``(ids, count)``: each node's domain id for ``key`` (``-1``: none) and how many domains."""
        hit = self._domains.get(key)
        if hit is None:
            names: dict[str, int] = {}
            ids = np.empty(self.n, dtype=np.int64)
            for i, n in enumerate(self.nodes):
                v = n.topology_value(key)
                ids[i] = -1 if v is None else names.setdefault(v, len(names))
            ids.setflags(write=False)
            hit = (ids, len(names))
            self._domains[key] = hit
        return hit

    def same_domain(self, key: str, nodes: np.ndarray) -> np.ndarray:
        """``(N,)`` bool: nodes sharing a ``key`` domain with any of ``nodes`` (key-less nodes never do)."""
        ids, count = self.domains(key)
        hit = np.zeros(count + 1, dtype=bool)  # slot ``count`` absorbs id -1
        d = ids[nodes]
        hit[d[d >= 0]] = True
        return hit[ids]  # ids == -1 reads hit[-1] == hit[count], always False
