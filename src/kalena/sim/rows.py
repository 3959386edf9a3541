"""What the simulator keeps per ledger row, beside the ledger's own row arrays.

The ledger stores each resident workload in a row (``Ledger.row_of``; rows are reused after a
removal). The simulator keeps its own columns indexed by the same row numbers, so that a tick is
whole-array arithmetic: usage, limits, cpu quotas and weights, the batch task a row holds, and the
throttled-time ring of the anti-starvation window. It grows with the ledger's row store.
"""

from __future__ import annotations

import numpy as np

from kalena.core.resources import NDIM

FREE, PRODUCTION, BATCH = 0, 1, 2


#: (name, dtype, free-row value, cells per row): every column but the throttled-time ring
_COLUMNS: tuple[tuple[str, type, object, int], ...] = (
    ("kind", np.int8, FREE, 1),
    ("task", np.int64, -1, 1),
    ("usage", np.float64, np.nan, NDIM),
    ("limit", np.float64, np.inf, NDIM),  # enforcement limit (inf = none)
    ("demand", np.float64, 0.0, 1),  # cpu cores wanted
    ("quota", np.float64, np.inf, 1),  # batch cpu quota (cores)
    ("floor", np.float64, 0.0, 1),  # anti-starvation quota floor (batch)
    ("cap", np.float64, np.inf, 1),  # anti-starvation cap (service)
    ("weight", np.float64, 1.0, 1),  # cgroup v2 cpu.weight
    ("started", np.float64, -np.inf, 1),
    ("slack_cpu", np.bool_, True, 1),
    ("ids", object, "", 1),  # workload id (snapshots)
    ("keys", object, "", 1),  # equivalence key (snapshots)
    ("priority", np.int64, 0, 1),
    ("work", np.float64, 0.0, 1),  # batch: core-seconds done since its start
    ("work_total", np.float64, np.inf, 1),  # batch: core-seconds it needs
    ("startup_until", np.float64, np.inf, 1),  # batch: no progress before this time
    ("by_reclaim", np.bool_, False, 1),  # batch: placed where requests did not fit
    # throttled time in whole microseconds, as cgroup cpu.stat counts it (throttled_usec): since
    # the resident's start, and the sums over the window of the ring below
    ("throttled_total", np.int64, 0, 1),
    ("throttled_window", np.int64, 0, 1),
)
#: Storage grows by at least this factor, so that growing row by row costs O(1) a row: the
#: columns are views of the first ``capacity`` rows of it (a 5,000-node hour grew 13 times,
#: 83 ms a time, copying every column and the ring).
GROWTH = 1.5


class RowTable:
    """Columns over ``capacity`` rows; ``kind`` says what each row holds now.

    Each column is a view of the first ``capacity`` rows of a larger store, whose rows beyond it
    hold free-row values (nothing writes there), so :meth:`grow` mostly only widens the views.
    """

    kind: np.ndarray
    task: np.ndarray
    usage: np.ndarray
    limit: np.ndarray
    demand: np.ndarray
    quota: np.ndarray
    floor: np.ndarray
    cap: np.ndarray
    weight: np.ndarray
    started: np.ndarray
    slack_cpu: np.ndarray
    ids: np.ndarray
    keys: np.ndarray
    priority: np.ndarray
    work: np.ndarray
    work_total: np.ndarray
    startup_until: np.ndarray
    by_reclaim: np.ndarray
    throttled_total: np.ndarray
    throttled_window: np.ndarray
    throttled: np.ndarray  # (window, capacity): slot-major, a tick writes one contiguous slot

    def __init__(self, capacity: int, window: int) -> None:
        self.window = window
        self._store: dict[str, np.ndarray] = {}
        self._rows = 0
        self._allocate(capacity, 0)
        self._view(capacity)

    @property
    def capacity(self) -> int:
        return self._rows

    def grow(self, capacity: int) -> None:
        """Extend every column to ``capacity`` rows with free-row values."""
        if capacity <= self._rows:
            return
        held = len(self._store["kind"])
        if capacity > held:
            self._allocate(max(capacity, int(held * GROWTH)), self._rows)
        self._view(capacity)

    def _allocate(self, size: int, keep: int) -> None:
        """A store of ``size`` rows at free-row values, holding the first ``keep`` rows of the old."""
        old, store = self._store, {}
        for name, dtype, free, cells in _COLUMNS:
            # (rows, 8) column-major, as the ledger's: the round reads a dimension at a time
            store[name] = np.full((size, cells) if cells > 1 else size, free, dtype=dtype, order="F")
        store["throttled"] = np.zeros((self.window, size), dtype=np.int64)
        for name, a in old.items():
            if name == "throttled":
                store[name][:, :keep] = a[:, :keep]
            else:
                store[name][:keep] = a[:keep]
        self._store = store

    def _view(self, rows: int) -> None:
        for name, a in self._store.items():
            setattr(self, name, a[:, :rows] if name == "throttled" else a[:rows])
        self._rows = rows

    # a pickle would copy each view apart from its store: keep the store, and view it again
    def __getstate__(self) -> dict[str, object]:
        return {"window": self.window, "store": self._store, "rows": self._rows}

    def __setstate__(self, state: dict[str, object]) -> None:
        self.window = state["window"]  # type: ignore[assignment]
        self._store = state["store"]  # type: ignore[assignment]
        self._view(state["rows"])  # type: ignore[arg-type]

    def describe(self, rows: np.ndarray, specs: list) -> None:  # type: ignore[type-arg]
        """Copy what snapshots read from the specs (id, equivalence key, priority, slack-cpu) into rows."""
        self.ids[rows] = [s.id for s in specs]
        self.keys[rows] = [s.equivalence_key for s in specs]
        self.priority[rows] = [s.priority for s in specs]
        self.slack_cpu[rows] = [s.slack_cpu for s in specs]

    def free(self, row: int | np.ndarray) -> None:
        """The row's (or rows') workload left: reset it to free-row values."""
        for name, _dtype, free, _cells in _COLUMNS:
            getattr(self, name)[row] = free
        self.throttled[:, row] = 0

    def record_throttled(self, h: int, slot: int, lost_s: np.ndarray) -> None:
        """Rows ``[0, h)`` were throttled ``lost_s`` seconds this tick (ring slot ``slot``).

        The window's sums are kept as the ring turns (add the new slot, take out the one it
        replaces), exactly, since the counts are integers: summing ``(h, window)`` every round
        cost more than the rest of the round's bookkeeping.
        """
        lost = np.rint(lost_s * 1e6).astype(np.int64)
        col = self.throttled[slot, :h]
        self.throttled_window[:h] += lost - col
        col[...] = lost
        self.throttled_total[:h] += lost

    def window_s(self, h: int) -> np.ndarray:
        """Seconds each of rows ``[0, h)`` was throttled within the window."""
        return self.throttled_window[:h] * 1e-6

    def total_s(self, rows: np.ndarray | int) -> np.ndarray:
        """Seconds each row's resident was throttled since it started."""
        return self.throttled_total[rows] * 1e-6


def cpu_weight(request_cores: np.ndarray) -> np.ndarray:
    """Kubernetes' cgroup v2 ``cpu.weight`` of a pod from its cpu request.

    shares = max(2, round(1024 * R)), weight = 1 + (shares - 2) * 9999 // 262142 (kubelet's mapping).
    """
    shares = np.maximum(2, np.rint(1024.0 * np.asarray(request_cores)))
    return 1.0 + np.floor((shares - 2.0) * 9999.0 / 262142.0)
