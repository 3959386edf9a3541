"""Caches that survive across scheduling passes (seed 000 §4.2, "score caching with coarse invalidation").

:class:`ScoreCache` keeps the stranded-slack term per (request vector, node). Each node has a
bucket key ``floor(S_n / w)`` over the stranded dimensions and a generation that is bumped only
when the key changes; a cached value is reused while its generation matches. Because the term
is computed from the quantised slack (see ``score.stranded_balance``), it is a pure function of
the key: the cache never changes a decision, it only skips recomputation. Estimator jitter that
stays inside a bucket invalidates nothing. Entries are per request vector, not per owner, so
different owners with the same request share them; at most ``max_cached_classes`` are kept (LRU).

:class:`PlacementCache` is what a shell holds between passes: the node index, the production
anti-affinity index and the score cache, all bound to one ledger (rebuilt if handed another).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from kalena.core.ledger import Ledger
from kalena.core.placement.config import PlacementConfig
from kalena.core.placement.nodeindex import NodeIndex
from kalena.core.placement.score import StrandedParts, bucket_key
from kalena.core.placement.topology import ProductionAntiAffinity
from kalena.core.resources import Resources


@dataclass(slots=True)
class _Entry:
    value: np.ndarray  # (N,) cached stranded term
    seen: np.ndarray  # (N,) generation each value was computed at (-1: never)
    request: np.ndarray  # (d,) the request on the stranded dimensions


class ScoreCache:
    """Stranded-slack scores keyed on quantised slack; see the module docstring."""

    def __init__(self, n_nodes: int, width: np.ndarray, dims: np.ndarray, max_classes: int) -> None:
        self._width = width[dims]
        self._dims = dims
        self._max = max_classes
        self.key = np.full((n_nodes, int(dims.sum())), np.nan)  # NaN never equals: first sync bumps all
        self.gen = np.zeros(n_nodes, dtype=np.int64)
        self._entries: OrderedDict[Resources, _Entry] = OrderedDict()
        self._parts: StrandedParts | None = None  # the capacity side of the term, per node
        self._parts_of: np.ndarray | None = None  # the (read-only) capacity it was computed from
        self.hits = 0
        self.misses = 0

    def sync(self, slack: np.ndarray) -> None:
        """Whole-cluster resync at pass start: bump the generation of nodes whose bucket moved."""
        key = bucket_key(slack[:, self._dims], self._width)
        self.gen[np.any(key != self.key, axis=1)] += 1
        self.key = key

    def sync_node(self, node: int, slack_row: np.ndarray) -> None:
        key = bucket_key(slack_row[self._dims], self._width)
        if (key != self.key[node]).any():
            self.gen[node] += 1
            self.key[node] = key

    def quantised(self, nodes: np.ndarray, n_dims: int) -> np.ndarray:
        """``(k, 8)`` quantised slack rebuilt from the keys (non-stranded dimensions are 0)."""
        q = np.zeros((len(nodes), n_dims))
        q[:, self._dims] = self.key[nodes] * self._width
        return q

    def stranded(
        self, request: Resources, req: np.ndarray, capacity: np.ndarray, nodes: np.ndarray
    ) -> np.ndarray:
        entry = self._entries.get(request)
        if entry is None:
            n = len(self.gen)
            entry = _Entry(np.zeros(n), np.full(n, -1, dtype=np.int64), req[self._dims])
            self._entries[request] = entry
            if len(self._entries) > self._max:
                self._entries.popitem(last=False)
        else:
            self._entries.move_to_end(request)
        gen = self.gen[nodes]
        stale = entry.seen[nodes] != gen
        n_stale = int(np.count_nonzero(stale))
        if n_stale:
            idx = nodes[stale]
            # stranded_balance of the quantised slack, with the capacity side computed once
            q = self.key[idx] * self._width
            entry.value[idx] = self._capacity_parts(capacity).balance(q, entry.request, idx)
            entry.seen[idx] = gen[stale]
        self.misses += n_stale
        self.hits += len(nodes) - n_stale
        return entry.value[nodes]

    def _capacity_parts(self, capacity: np.ndarray) -> StrandedParts:
        """Kept while the same read-only capacity array comes back (the ledger's); else rebuilt."""
        if self._parts is None or capacity is not self._parts_of:
            self._parts = StrandedParts(capacity, self._dims)
            self._parts_of = None if capacity.flags.writeable else capacity
        return self._parts

    def __len__(self) -> int:
        return len(self._entries)


class PlacementCache:
    """Per-ledger indexes and the score cache, kept by the shell between passes."""

    def __init__(self) -> None:
        self._ledger: Ledger | None = None
        self._config: PlacementConfig | None = None
        self.nodes: NodeIndex | None = None
        self.prod_aa: ProductionAntiAffinity | None = None
        self.scores: ScoreCache | None = None

    def bind(
        self, ledger: Ledger, config: PlacementConfig
    ) -> tuple[NodeIndex, ProductionAntiAffinity, ScoreCache]:
        """Indexes for ``ledger``; rebuilt when the ledger object or the config differs from last time."""
        if ledger is not self._ledger or self.nodes is None:
            self.nodes = NodeIndex(ledger.nodes)
            self.prod_aa = ProductionAntiAffinity(ledger, self.nodes)
            self.scores = None
        if config != self._config or self.scores is None:
            self.scores = ScoreCache(
                ledger.n_nodes, config.width_array, config.stranded_mask, config.max_cached_classes
            )
        self._ledger, self._config = ledger, config
        assert self.prod_aa is not None
        return self.nodes, self.prod_aa, self.scores
