"""Workload rows in growable NumPy arrays, with a free list so that add/remove stay O(1).

One row per workload resident in the ledger. Row ``i`` holds the node index, the request and the
reservation (8-vectors), the tier and a version (the global epoch of the row's last change).
A removed row goes on a free list and is reused by the next add; the arrays double in size when
full, so 100,000 workloads with frequent placements and removals cost amortised O(1) per change.
Row numbers are therefore *not* stable identities: the ledger maps workload ids to rows. A
row's ``serial`` is: a number given to one workload when it is stored, never given again.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from kalena.core.model import WorkloadSpec
from kalena.core.resources import NDIM

#: First allocation. Small clusters never grow; large ones double a handful of times.
INITIAL_ROWS = 1024


class RowStore:
    """Column arrays for workload rows; ``high`` is one past the highest row ever used."""

    __slots__ = (
        "_free",
        "_next_serial",
        "alive",
        "high",
        "ids",
        "is_batch",
        "keys",
        "node",
        "priority",
        "request",
        "reservation",
        "serial",
        "slack_cpu",
        "specs",
        "version",
    )

    def __init__(self, initial: int = INITIAL_ROWS) -> None:
        if initial < 1:
            raise ValueError(f"initial row capacity must be >= 1, got {initial}")
        self.node = np.full(initial, -1, dtype=np.int64)
        # column-major: every round reads a dimension at a time (a column of a row-major (W, 8)
        # array is a strided pass, a cache line per cell)
        self.request = np.zeros((initial, NDIM), dtype=np.float64, order="F")
        self.reservation = np.zeros((initial, NDIM), dtype=np.float64, order="F")
        self.is_batch = np.zeros(initial, dtype=bool)
        self.alive = np.zeros(initial, dtype=bool)
        self.version = np.zeros(initial, dtype=np.int64)
        # a number no other workload ever gets (-1: free): a row's identity across reuse, as an int
        self.serial = np.full(initial, -1, dtype=np.int64)
        self._next_serial = 0
        self.specs: list[WorkloadSpec | None] = [None] * initial
        # the spec fields every node round reads, as columns (no per-row attribute access per round)
        self.ids = np.full(initial, "", dtype=object)
        self.keys = np.full(initial, "", dtype=object)
        self.priority = np.zeros(initial, dtype=np.int64)
        self.slack_cpu = np.ones(initial, dtype=bool)
        self._free: list[int] = []
        self.high = 0

    @property
    def capacity(self) -> int:
        return len(self.node)

    def _grow(self) -> None:
        """Double every column (amortised O(1) per add)."""
        old = self.capacity
        new = 2 * old
        self.node = np.concatenate([self.node, np.full(old, -1, dtype=np.int64)])
        self.request = np.concatenate([self.request, np.zeros((old, NDIM), order="F")])
        self.reservation = np.concatenate([self.reservation, np.zeros((old, NDIM), order="F")])
        self.is_batch = np.concatenate([self.is_batch, np.zeros(old, dtype=bool)])
        self.alive = np.concatenate([self.alive, np.zeros(old, dtype=bool)])
        self.version = np.concatenate([self.version, np.zeros(old, dtype=np.int64)])
        self.serial = np.concatenate([self.serial, np.full(old, -1, dtype=np.int64)])
        self.specs.extend([None] * (new - old))
        self.ids = np.concatenate([self.ids, np.full(old, "", dtype=object)])
        self.keys = np.concatenate([self.keys, np.full(old, "", dtype=object)])
        self.priority = np.concatenate([self.priority, np.zeros(old, dtype=np.int64)])
        self.slack_cpu = np.concatenate([self.slack_cpu, np.ones(old, dtype=bool)])

    def add(
        self,
        spec: WorkloadSpec,
        node: int,
        request: np.ndarray,
        reservation: np.ndarray,
        *,
        is_batch: bool,
        version: int,
    ) -> int:
        """Store one workload; returns its row (a freed row first, else the next new one)."""
        if self._free:
            row = self._free.pop()
        else:
            if self.high == self.capacity:
                self._grow()
            row = self.high
            self.high += 1
        self._fill(row, node, request, reservation, is_batch, version)
        self.serial[row] = self._next_serial
        self._next_serial += 1
        self.specs[row] = spec
        self.ids[row] = spec.id
        self.keys[row] = spec.equivalence_key
        self.priority[row] = spec.priority
        self.slack_cpu[row] = spec.slack_cpu
        return row

    def add_many(
        self,
        specs: Sequence[WorkloadSpec],
        node: np.ndarray,
        request: np.ndarray,
        reservation: np.ndarray,
        *,
        is_batch: bool,
        version: np.ndarray,
    ) -> np.ndarray:
        """Store ``len(specs)`` workloads at once; their rows are the ones :meth:`add` called in
        that order would give (freed rows first, then new ones)."""
        k = len(specs)
        reused = [self._free.pop() for _ in range(min(k, len(self._free)))]
        fresh = k - len(reused)
        while self.high + fresh > self.capacity:
            self._grow()
        rows = np.concatenate(
            [np.array(reused, dtype=np.int64), np.arange(self.high, self.high + fresh, dtype=np.int64)]
        )
        self.high += fresh
        self._fill(rows, node, request, reservation, is_batch, version)
        self.serial[rows] = np.arange(self._next_serial, self._next_serial + k)
        self._next_serial += k
        for row, spec in zip(rows.tolist(), specs, strict=True):
            self.specs[row] = spec
        self.ids[rows] = [w.id for w in specs]
        self.keys[rows] = [w.equivalence_key for w in specs]
        self.priority[rows] = [w.priority for w in specs]
        self.slack_cpu[rows] = [w.slack_cpu for w in specs]
        return rows

    def _fill(
        self,
        rows: int | np.ndarray,
        node: int | np.ndarray,
        request: np.ndarray,
        reservation: np.ndarray,
        is_batch: bool,
        version: int | np.ndarray,
    ) -> None:
        """The numeric columns of a row, or of many at once."""
        self.node[rows] = node
        self.request[rows] = request
        self.reservation[rows] = reservation
        self.is_batch[rows] = is_batch
        self.alive[rows] = True
        self.version[rows] = version

    def remove(self, row: int) -> None:
        """Free one row; its numbers are zeroed so that a from-scratch sum over all rows stays exact."""
        if not self.alive[row]:
            raise KeyError(f"row {row} is not in use")
        self.alive[row] = False
        self.node[row] = -1
        self.request[row] = 0.0
        self.reservation[row] = 0.0
        self.is_batch[row] = False
        self.serial[row] = -1
        self.specs[row] = None
        self.ids[row] = ""
        self.keys[row] = ""
        self.priority[row] = 0
        self.slack_cpu[row] = True
        self._free.append(row)

    def live_rows(self) -> np.ndarray:
        """Indices of rows in use, ascending."""
        return np.flatnonzero(self.alive[: self.high])

    def __len__(self) -> int:
        return self.high - len(self._free)


# whole-row helpers for (k, 8) blocks -------------------------------------------------------------
_WORD = np.dtype(np.uint64)  # NDIM bools in one machine word
_ALL_TRUE = 0x0101010101010101


def _words(mask: np.ndarray) -> np.ndarray | None:
    """``(k,)`` uint64 view of a C-contiguous ``(k, 8)`` bool block (``None`` for any other layout)."""
    if mask.dtype != np.bool_ or mask.ndim != 2 or mask.shape[1] != 8 or not mask.flags.c_contiguous:
        return None
    return mask.view(_WORD).reshape(len(mask))


def any_per_row(mask: np.ndarray) -> np.ndarray:
    """``mask.any(axis=1)`` for ``(k, 8)`` bool: one word comparison per row (~8x faster)."""
    w = _words(mask)
    return mask.any(axis=1) if w is None else w != 0


def all_per_row(mask: np.ndarray) -> np.ndarray:
    """``mask.all(axis=1)`` for ``(k, 8)`` bool (comparisons store True as the byte 1)."""
    w = _words(mask)
    return mask.all(axis=1) if w is None else w == _ALL_TRUE
