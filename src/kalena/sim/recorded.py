"""Measured usage in place of the synthetic model: production replayed from a trace's samples.

:class:`RecordedUsage` has the interface of :class:`~kalena.sim.production.ProductionUsage`
(``step``, ``restart``, ``burst_started``), so the engine runs a trace replay exactly as it runs a
synthetic day. A pod's usage at time ``t`` is its sample in force then: the last one that started
at or before ``t`` (before its first sample, the first; after its last, the last one holds: a
trace's excerpt often ends before the replay does). A pod without samples uses its request times a
ratio the caller gives (the trace's own aggregate usage over request for the tier, in a replay).

A new sample's memory arrives at once, as a burst's onset does in the synthetic model: the rows
whose sample changed to more memory are this step's ``burst_started`` (what the kernel sees before
the node agent can act). A restarted pod keeps its recording: the trace's usage does not depend on
what the simulated kernel did to it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from kalena.core.resources import CPU, GPU, NDIM, RAM


@dataclass(frozen=True, eq=False)
class Samples:
    """Usage samples keyed by pod id: ``t`` (start, seconds), ``cpu`` cores, ``ram`` GiB per pod,
    each sorted by time; ``ratio`` (cpu, ram) is usage over request for pods with none."""

    by_pod: Mapping[str, tuple[np.ndarray, np.ndarray, np.ndarray]]
    ratio: tuple[float, float]


class RecordedUsage:
    """The usage of P production pods (rows in ledger order) from recorded samples."""

    def __init__(self, requests: np.ndarray, ids: Sequence[str], samples: Samples) -> None:
        self.requests = np.asarray(requests, dtype=np.float64)
        n = self.n = len(self.requests)
        ts: list[np.ndarray] = []
        cpus: list[np.ndarray] = []
        rams: list[np.ndarray] = []
        counts = np.zeros(n, dtype=np.int64)
        for i, pid in enumerate(ids):
            got = samples.by_pod.get(pid)
            if got is None or not len(got[0]):
                continue
            ts.append(got[0])
            cpus.append(got[1])
            rams.append(got[2])
            counts[i] = len(got[0])
        self.has = counts > 0
        self.start = np.concatenate(([0], np.cumsum(counts)[:-1]))  # each row's first sample
        self.end = self.start + counts
        self.t = np.concatenate(ts) if ts else np.zeros(0)
        self.cpu = np.concatenate(cpus) if cpus else np.zeros(0)
        self.ram = np.concatenate(rams) if rams else np.zeros(0)
        self.ptr = self.start.copy()  # the sample in force, per row with samples
        self.rows = np.flatnonzero(self.has)
        self.base = np.zeros((n, NDIM), order="F")  # column-major, as the rows it is copied into
        self.base[:, CPU] = self.requests[:, CPU] * samples.ratio[0]
        self.base[:, RAM] = self.requests[:, RAM] * samples.ratio[1]
        self.base[:, GPU] = self.requests[:, GPU]  # devices are held, not shared
        self.burst_started = np.zeros(n, dtype=bool)

    def restart(self, pods: np.ndarray) -> None:
        """A killed pod restarts; its recording goes on (module docstring)."""

    def step(self, t: float, dt: float) -> np.ndarray:
        """Usage at time ``t`` (the step's length does not matter to a recording), shape (P, 8)."""
        rows = self.rows
        before = self.ptr[rows]
        ptr = before.copy()
        while True:  # usually once: a step rarely crosses more than one sample
            nxt = ptr + 1
            move = nxt < self.end[rows]
            move[move] = self.t[nxt[move]] <= t
            if not move.any():
                break
            ptr[move] += 1
        self.ptr[rows] = ptr
        out = np.copy(self.base)  # (np.copy keeps the layout, ndarray.copy makes it row-major)
        out[rows, CPU] = self.cpu[ptr]
        out[rows, RAM] = self.ram[ptr]
        self.burst_started[:] = False
        self.burst_started[rows] = (ptr != before) & (self.ram[ptr] > self.ram[before])
        return out
