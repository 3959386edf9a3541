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


class RowTable:
    """Columns over ``capacity`` rows; ``kind`` says what each row holds now."""

    def __init__(self, capacity: int, window: int) -> None:
        self.window = window
        self.kind = np.zeros(capacity, dtype=np.int8)
        self.task = np.full(capacity, -1, dtype=np.int64)
        self.usage = np.full((capacity, NDIM), np.nan)
        self.limit = np.full((capacity, NDIM), np.inf)  # enforcement limit (inf = none)
        self.demand = np.zeros(capacity)  # cpu cores wanted
        self.quota = np.full(capacity, np.inf)  # batch cpu quota (cores)
        self.floor = np.zeros(capacity)  # anti-starvation quota floor (batch)
        self.cap = np.full(capacity, np.inf)  # anti-starvation cap (service)
        self.weight = np.ones(capacity)  # cgroup v2 cpu.weight
        self.started = np.full(capacity, -np.inf)
        self.slack_cpu = np.ones(capacity, dtype=bool)
        self.ids = np.full(capacity, "", dtype=object)  # workload id (snapshots)
        self.keys = np.full(capacity, "", dtype=object)  # equivalence key (snapshots)
        self.priority = np.zeros(capacity, dtype=np.int64)
        self.work = np.zeros(capacity)  # batch: core-seconds done since its start
        self.work_total = np.full(capacity, np.inf)  # batch: core-seconds it needs
        self.startup_until = np.full(capacity, np.inf)  # batch: no progress before this time
        self.by_reclaim = np.zeros(capacity, dtype=bool)  # batch: placed where requests did not fit
        # throttled time in whole microseconds, as cgroup cpu.stat counts it (throttled_usec): since
        # the resident's start, per tick in a ring over the window, and the ring's row sums
        self.throttled_total = np.zeros(capacity, dtype=np.int64)
        # slot-major: a tick writes one contiguous slot, not a strided column across every row
        self.throttled = np.zeros((window, capacity), dtype=np.int64)
        self.throttled_window = np.zeros(capacity, dtype=np.int64)

    @property
    def capacity(self) -> int:
        return len(self.kind)

    def grow(self, capacity: int) -> None:
        """Extend every column to ``capacity`` rows with free-row values."""
        extra = capacity - self.capacity
        if extra <= 0:
            return
        self.kind = np.concatenate((self.kind, np.zeros(extra, dtype=np.int8)))
        self.task = np.concatenate((self.task, np.full(extra, -1, dtype=np.int64)))
        self.usage = np.concatenate((self.usage, np.full((extra, NDIM), np.nan)))
        self.limit = np.concatenate((self.limit, np.full((extra, NDIM), np.inf)))
        self.demand = np.concatenate((self.demand, np.zeros(extra)))
        self.quota = np.concatenate((self.quota, np.full(extra, np.inf)))
        self.floor = np.concatenate((self.floor, np.zeros(extra)))
        self.cap = np.concatenate((self.cap, np.full(extra, np.inf)))
        self.weight = np.concatenate((self.weight, np.ones(extra)))
        self.started = np.concatenate((self.started, np.full(extra, -np.inf)))
        self.slack_cpu = np.concatenate((self.slack_cpu, np.ones(extra, dtype=bool)))
        self.ids = np.concatenate((self.ids, np.full(extra, "", dtype=object)))
        self.keys = np.concatenate((self.keys, np.full(extra, "", dtype=object)))
        self.priority = np.concatenate((self.priority, np.zeros(extra, dtype=np.int64)))
        self.work = np.concatenate((self.work, np.zeros(extra)))
        self.work_total = np.concatenate((self.work_total, np.full(extra, np.inf)))
        self.startup_until = np.concatenate((self.startup_until, np.full(extra, np.inf)))
        self.by_reclaim = np.concatenate((self.by_reclaim, np.zeros(extra, dtype=bool)))
        self.throttled_total = np.concatenate((self.throttled_total, np.zeros(extra, dtype=np.int64)))
        more = np.zeros((self.window, extra), dtype=np.int64)
        self.throttled = np.concatenate((self.throttled, more), axis=1)
        self.throttled_window = np.concatenate((self.throttled_window, np.zeros(extra, dtype=np.int64)))

    def describe(self, rows: np.ndarray, specs: list) -> None:  # type: ignore[type-arg]
        """Copy what snapshots read from the specs (id, equivalence key, priority, slack-cpu) into rows."""
        self.ids[rows] = [s.id for s in specs]
        self.keys[rows] = [s.equivalence_key for s in specs]
        self.priority[rows] = [s.priority for s in specs]
        self.slack_cpu[rows] = [s.slack_cpu for s in specs]

    def free(self, row: int | np.ndarray) -> None:
        """The row's (or rows') workload left: reset it to free-row values."""
        self.kind[row] = FREE
        self.task[row] = -1
        self.usage[row] = np.nan
        self.limit[row] = np.inf
        self.demand[row] = 0.0
        self.quota[row] = np.inf
        self.floor[row] = 0.0
        self.cap[row] = np.inf
        self.weight[row] = 1.0
        self.started[row] = -np.inf
        self.slack_cpu[row] = True
        self.ids[row] = ""
        self.keys[row] = ""
        self.priority[row] = 0
        self.work[row] = 0.0
        self.work_total[row] = np.inf
        self.startup_until[row] = np.inf
        self.by_reclaim[row] = False
        self.throttled_total[row] = 0
        self.throttled[:, row] = 0
        self.throttled_window[row] = 0

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
