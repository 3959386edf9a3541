"""Many nodes at one instant, as whole arrays: the input of the vectorised enforcement policies.

A :class:`NodesView` is the ``(nodes, ...)`` form of :class:`~.snapshot.NodeSnapshot`: per node
(``N`` of them) the capacity, the ledger epoch and the kernel's signals; per resident row (``W``
rows over all nodes, in any order) the node it is on and the same columns a snapshot has. The
simulator builds one for its whole cluster every tick; the node agent builds one with a single
node. Every policy over a view treats each node independently, so a view of ``N`` nodes gives the
same answers as ``N`` one-node views (the property tests check it).

Two columns exist only here, because every shell needs the same rule for them:

* ``evicting``: an eviction in flight (SIGTERM sent, grace running). Its usage is left out
  (``u`` = NaN, so ``r' = r``): what it is about to release is not counted twice, and it is never
  chosen again.
* ``throttled_s``: throttled seconds within the anti-starvation window (batch rows).

DaemonSet rows are carried so that the policies can protect them, but they are outside the
ledger (Phase 0 already deducted them from ``C``), as in a snapshot.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from kalena.core.enforcement.snapshot import NodeConditions, NodeSnapshot
from kalena.core.resources import NDIM


def _col(a: object, dtype: type | np.dtype, shape: tuple[int, ...], name: str) -> np.ndarray:
    out = np.asarray(a, dtype=dtype)
    if out.shape != shape:
        raise ValueError(f"NodesView.{name} must have shape {shape}, got {out.shape}")
    return out


@dataclass(frozen=True, slots=True, eq=False)
class NodesView:
    """``N`` nodes and their ``W`` resident rows (module docstring).

    Per node: ``names`` (N,), ``capacity`` (N, 8), ``epoch`` (N,), the kernel signals
    ``triggered``/``acute`` (N, 8) bool, ``psi_some`` (N, 8) (NaN unknown), ``memory_events``
    (N,), and what the node's own accounting measured: ``node_used`` (N, 8) (NaN: sum the rows)
    and ``node_limit`` (N, 8), the level at which the kernel kills (NaN: the capacity).

    Per row: ``node`` (W,) node index, ``ids`` and ``keys`` (W,) workload id and equivalence key,
    ``is_batch``, ``is_daemonset``, ``slack_cpu``, ``evicting`` (W,) bool, ``priority`` (W,),
    ``request``, ``reservation``, ``limit`` (inf = none), ``usage`` (NaN = no sample) (W, 8),
    ``started_at`` (W,) (-inf unknown), ``throttled_s`` (W,), ``slot`` (W,): a key the shell
    keeps stable while the workload stays (its ledger row), for state carried between rounds.

    ``present`` (W,), optional: rows that hold a workload. A shell whose rows are slots of a
    store with holes (the ledger's free list) passes every slot and this mask instead of gathering
    the live rows; an absent row (any node index, NaN usage) is ignored by every policy.

    ``serial`` (W,), optional: a number the shell never gives two workloads (the ledger's row
    serial). With it, the round recognises a row it saw before by this number, instead of keeping
    a copy of every workload id from one round to the next.

    Arrays are taken as given (no copies: the simulator builds one per tick); :meth:`check`
    validates shapes and values and the tests call it. Treat the arrays as read-only.
    """

    names: tuple[str, ...]
    capacity: np.ndarray
    epoch: np.ndarray
    node: np.ndarray
    ids: np.ndarray
    keys: np.ndarray
    is_batch: np.ndarray
    is_daemonset: np.ndarray
    priority: np.ndarray
    request: np.ndarray
    reservation: np.ndarray
    limit: np.ndarray
    usage: np.ndarray
    started_at: np.ndarray
    slack_cpu: np.ndarray
    evicting: np.ndarray
    throttled_s: np.ndarray
    slot: np.ndarray
    triggered: np.ndarray
    acute: np.ndarray
    psi_some: np.ndarray
    memory_events: np.ndarray
    node_used: np.ndarray | None = None
    node_limit: np.ndarray | None = None
    present: np.ndarray | None = None
    serial: np.ndarray | None = None
    _cache: dict[str, np.ndarray] = field(default_factory=dict, init=False, repr=False)
    _grouped: dict[int, np.ndarray] = field(default_factory=dict, init=False, repr=False)  # group_rows

    @property
    def n_nodes(self) -> int:
        return len(self.names)

    def __len__(self) -> int:
        return len(self.node)

    def check(self) -> NodesView:
        """Raise ``ValueError`` naming the column if a shape or value is off; return self."""
        n, w = self.n_nodes, len(self.node)
        cap = _col(self.capacity, np.float64, (n, NDIM), "capacity")
        if np.any(np.isnan(cap)) or np.any(cap < 0):
            raise ValueError("NodesView.capacity must be non-negative, never NaN")
        _col(self.epoch, np.int64, (n,), "epoch")
        node = _col(self.node, np.int64, (w,), "node")
        if w and (node.min() < 0 or node.max() >= n):
            raise ValueError(f"NodesView.node must index the {n} nodes")
        for name in ("ids", "keys"):
            _col(getattr(self, name), object, (w,), name)
        here = self.live
        if len(set(np.asarray(self.ids, dtype=object)[here].tolist())) != int(here.sum()):
            raise ValueError("NodesView.ids must be unique")
        for name in ("is_batch", "is_daemonset", "slack_cpu", "evicting"):
            _col(getattr(self, name), bool, (w,), name)
        if self.present is not None:
            _col(self.present, bool, (w,), "present")
        if self.serial is not None:
            serial = _col(self.serial, np.int64, (w,), "serial")[here]
            if np.any(serial < 0) or len(np.unique(serial)) != len(serial):
                raise ValueError("NodesView.serial must be distinct non-negative numbers")
        _col(self.priority, np.int64, (w,), "priority")
        _col(self.slot, np.int64, (w,), "slot")
        for name in ("request", "reservation", "limit", "usage"):
            a = _col(getattr(self, name), np.float64, (w, NDIM), name)
            known = a[~np.isnan(a)]
            if np.any(known < 0) or (name != "usage" and np.any(np.isnan(a))):
                raise ValueError(
                    f"NodesView.{name} must be non-negative" + (" (NaN = missing)" if name == "usage" else "")
                )
            if name != "limit" and np.any(np.isinf(known)):
                raise ValueError(f"NodesView.{name} must be finite")
        started = _col(self.started_at, np.float64, (w,), "started_at")
        if np.any(np.isnan(started)) or np.any(np.isposinf(started)):
            raise ValueError("NodesView.started_at must be finite or -inf")
        t = _col(self.throttled_s, np.float64, (w,), "throttled_s")
        if not np.all(t >= 0):
            raise ValueError("NodesView.throttled_s must be non-negative seconds")
        for name in ("triggered", "acute"):
            _col(getattr(self, name), bool, (n, NDIM), name)
        psi = _col(self.psi_some, np.float64, (n, NDIM), "psi_some")
        known = psi[~np.isnan(psi)]
        if np.any((known < 0) | (known > 1)):
            raise ValueError("NodesView.psi_some must be fractions in [0, 1]")
        ev = _col(self.memory_events, np.int64, (n,), "memory_events")
        if np.any(ev < 0):
            raise ValueError("NodesView.memory_events must be non-negative")
        for name in ("node_used", "node_limit"):
            if getattr(self, name) is not None:
                _col(getattr(self, name), np.float64, (n, NDIM), name)
        return self

    # derived columns, computed once per view ------------------------------------------------------
    def _memo(self, key: str, make) -> np.ndarray:  # type: ignore[no-untyped-def]
        a = self._cache.get(key)
        if a is None:
            a = self._cache[key] = make()
        return a

    @property
    def live(self) -> np.ndarray:
        """Rows that hold a workload (all of them unless ``present`` says otherwise)."""
        return self._memo(
            "live",
            lambda: (
                np.ones(len(self.node), dtype=bool)
                if self.present is None
                else np.asarray(self.present, bool)
            ),
        )

    @property
    def in_ledger(self) -> np.ndarray:
        """Rows counted by the ledgers: present, and not a DaemonSet."""
        return self._memo("in_ledger", lambda: self.live & ~np.asarray(self.is_daemonset, dtype=bool))

    @property
    def seen_usage(self) -> np.ndarray:
        """Usage with evictions in flight left out (NaN): what every policy reads."""

        def make() -> np.ndarray:
            ev = np.asarray(self.evicting, dtype=bool)
            return np.where(ev[:, None], np.nan, self.usage) if ev.any() else self.usage

        return self._memo("seen_usage", make)

    @property
    def effective_reservation(self) -> np.ndarray:
        """``r' = max(r, u)`` over :attr:`seen_usage` (``u`` missing -> ``r``), shape (W, 8)."""
        # fmax takes the operand that is not NaN: r where u is missing, max(r, u) elsewhere, bitwise
        return self._memo("effective", lambda: np.fmax(self.reservation, self.seen_usage))

    def ledger_sum(self, values: np.ndarray) -> np.ndarray:
        """(N,) per-node sum of ``values`` (W,) over the ledger rows, in row order (the others in
        :func:`group_sum`'s spare bin: nothing is gathered first)."""
        bins = self._memo("ledger_bins", lambda: np.where(self.in_ledger, self.node, self.n_nodes))
        return group_sum(values, bins, self.n_nodes)

    def used_sum(self, d: int) -> np.ndarray:
        """(N,) per-node sum of :attr:`seen_usage` on dimension ``d`` over the ledger rows, in row
        order, NaN counted as 0 (the screen's and the signals' sum)."""
        # usage is non-negative or NaN: fmax(u, 0) is nan_to_num(u); a +-0.0 term never moves a sum
        return self._memo(f"used_sum_{d}", lambda: self.ledger_sum(np.fmax(self.seen_usage[:, d], 0.0)))

    def rows_of(self, n: int) -> np.ndarray:
        """Row indices of node ``n`` (present rows only), in view order."""
        got = self._grouped.get(n)
        if got is not None:
            return got
        if "order" not in self._cache:
            rows = self._live_rows()
            self._cache["order"], self._cache["bounds"] = rows_by_node(rows, self.node[rows], self.n_nodes)
        o, bounds = self._cache["order"], self._cache["bounds"]
        return o[bounds[n] : bounds[n + 1]]

    def group_rows(self, nodes: np.ndarray) -> None:
        """Make :meth:`rows_of` ready for ``nodes`` (node indices) by grouping only their rows
        (the round asks for the rows of a few screened nodes among thousands)."""
        nodes = np.asarray([k for k in np.asarray(nodes).tolist() if k not in self._grouped], dtype=np.int64)
        if "order" in self._cache or not len(nodes):
            return
        rows = self._live_rows()
        grouped, bounds = rows_by_node(rows, np.take(self.node, rows), self.n_nodes, only=nodes)
        for k in nodes.tolist():
            self._grouped[k] = grouped[bounds[k] : bounds[k + 1]]

    def _live_rows(self) -> np.ndarray:
        return self._memo("live_rows", lambda: np.flatnonzero(self.live))

    def conditions_of(self, n: int, acute: np.ndarray, triggered: np.ndarray) -> NodeConditions:
        return NodeConditions.handed_over(
            triggered[n], acute[n], self.psi_some[n], int(self.memory_events[n])
        )

    def snapshot(
        self,
        n: int,
        rows: np.ndarray | None = None,
        *,
        conditions: NodeConditions | None = None,
        reservation: np.ndarray | None = None,
        previous_reservation: np.ndarray | None = None,
    ) -> NodeSnapshot:
        """Node ``n`` (or the given rows of it) as a :class:`NodeSnapshot` for the per-node plans.

        ``reservation`` (W, 8) overrides the view's (a service evicted this round restarts at its
        request); ``previous_reservation`` (W, 8) is passed through for the why-evicted record.
        """
        rows = self.rows_of(n) if rows is None else rows
        res = self.reservation if reservation is None else reservation
        return NodeSnapshot.handed_over(
            node=self.names[n],
            capacity=self.capacity[n],
            ids=tuple(np.asarray(self.ids, dtype=object)[rows].tolist()),
            is_batch=self.is_batch[rows],
            priority=self.priority[rows],
            is_daemonset=self.is_daemonset[rows],
            request=self.request[rows],
            reservation=res[rows],
            limit=self.limit[rows],
            usage=self.seen_usage[rows],
            started_at=self.started_at[rows],
            slack_cpu=self.slack_cpu[rows],
            equivalence_keys=tuple(np.asarray(self.keys, dtype=object)[rows].tolist()),
            previous_reservation=None if previous_reservation is None else previous_reservation[rows],
            conditions=conditions or NodeConditions(),
            epoch=int(self.epoch[n]),
        )

    @classmethod
    def of_snapshots(
        cls,
        snaps: Sequence[NodeSnapshot],
        *,
        throttled_s: Sequence[dict[str, float]] | None = None,
        evicting: Sequence[Sequence[str]] | None = None,
    ) -> NodesView:
        """One view of several snapshots (node ``k`` = ``snaps[k]``): the one-node wrappers use it."""
        n = len(snaps)
        sizes = [len(s) for s in snaps]
        node = np.repeat(np.arange(n, dtype=np.int64), sizes)

        def cat(name: str, dtype: type | np.dtype) -> np.ndarray:
            parts = [np.asarray(getattr(s, name), dtype=dtype) for s in snaps]
            return np.concatenate(parts) if parts else np.zeros(0, dtype=dtype)

        def cat2(name: str) -> np.ndarray:
            parts = [np.asarray(getattr(s, name), dtype=np.float64).reshape(-1, NDIM) for s in snaps]
            return np.concatenate(parts) if parts else np.zeros((0, NDIM))

        ids = np.array([i for s in snaps for i in s.ids], dtype=object).reshape(-1)
        keys = np.array([k for s in snaps for k in s.equivalence_keys], dtype=object).reshape(-1)
        thr = np.zeros(len(node))
        ev = np.zeros(len(node), dtype=bool)
        k = 0
        for j, s in enumerate(snaps):
            t = throttled_s[j] if throttled_s is not None else {}
            busy = set(evicting[j]) if evicting is not None else set()
            for i, wid in enumerate(s.ids):
                thr[k + i] = float(t.get(wid, 0.0))
                ev[k + i] = wid in busy
            k += len(s)
        return cls(
            names=tuple(s.node for s in snaps),
            capacity=np.array([s.capacity for s in snaps], dtype=np.float64).reshape(n, NDIM),
            epoch=np.array([s.epoch for s in snaps], dtype=np.int64),
            node=node,
            ids=ids,
            keys=keys,
            is_batch=cat("is_batch", bool),
            is_daemonset=cat("is_daemonset", bool),
            priority=cat("priority", np.int64),
            request=cat2("request"),
            reservation=cat2("reservation"),
            limit=cat2("limit"),
            usage=cat2("usage"),
            started_at=cat("started_at", np.float64),
            slack_cpu=cat("slack_cpu", bool),
            evicting=ev,
            throttled_s=thr,
            slot=np.arange(len(node), dtype=np.int64),
            triggered=np.array([s.conditions.triggered for s in snaps], dtype=bool).reshape(n, NDIM),
            acute=np.array([s.conditions.acute for s in snaps], dtype=bool).reshape(n, NDIM),
            psi_some=np.array([s.conditions.psi_some for s in snaps], dtype=np.float64).reshape(n, NDIM),
            memory_events=np.array([s.conditions.memory_events for s in snaps], dtype=np.int64),
        )


def node_sort_keys(node: np.ndarray, n: int) -> np.ndarray:
    """Node indices in ``0..n-1`` as the narrowest unsigned type: NumPy's stable sort is a radix sort
    for 16-bit keys (~9x faster than int64's timsort on 300,000 rows), the same order."""
    return node.astype(np.uint16) if n <= 1 << 16 else node


def rows_by_node(
    rows: np.ndarray, node: np.ndarray, n: int, only: Sequence[int] | np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """``(grouped, bounds)``: ``rows`` stably sorted by their ``node`` (in ``0..n-1``), so node
    ``k``'s rows are ``grouped[bounds[k]:bounds[k + 1]]``, in their order in ``rows``.

    ``only``: node indices whose rows are wanted (the others' come out empty); picking a few
    nodes' rows out first is one pass, where grouping every row is a sort of all of them."""
    if only is not None:
        wanted = np.zeros(n, dtype=bool)
        wanted[np.asarray(only, dtype=np.int64)] = True
        pick = wanted[node]
        rows, node = rows[pick], node[pick]
    o = np.argsort(node_sort_keys(node, n), kind="stable")
    return rows[o], np.searchsorted(node[o], np.arange(n + 1))


def group_sum(values: np.ndarray, group: np.ndarray, n: int) -> np.ndarray:
    """Per-group sums (n,) of ``values`` (W,) by ``group`` (W,) in row order (``np.bincount``).

    Each group's sum is accumulated in row order, so a group's total is bit-for-bit the same
    whether the other groups are present or not: the vectorised round over ``N`` nodes equals
    ``N`` one-node rounds exactly. So rows to leave out need not be gathered away first: put in
    group ``n`` (a spare bin past the last), they are summed there and dropped.
    """
    return np.bincount(group, weights=values, minlength=n + 1)[:n]
