"""What every trace reader returns: one :class:`Trace`, in Kalena's units, ready to replay.

A trace reader (``kalena.traces.google2011``, ``google2019``, ``alibaba2017``, ``alibaba2018``)
streams a public cluster trace's tables and keeps only what a replay needs, converted to Kalena's
units:

* **seconds** from the start of the replayed window (each trace's own clock shifted so the window
  starts at 0; "before the window" sentinels become 0, "after the window" ones ``inf``);
* **cores** and **GiB** (a normalised trace is multiplied by :class:`Scale`: the cores and GiB of
  the trace's largest machine, an assumption the caller states, since the traces do not);
* **tiers**: production or batch, by each trace's own rule (Google 2011: priority 9-11; Google 2019:
  priority >= 120; Alibaba: online containers vs. batch tasks).

Tables are columns (NumPy arrays of one length each), never a Python object per row: a trace has
millions of rows. ``notes`` says, in a sentence each, every normalisation applied and every row
left out with its count, so an operator can tell what the replay stands on.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class Scale:
    """What one normalised unit of the trace is in real units (the trace's largest machine)."""

    cores: float = 1.0
    gib: float = 1.0


class TraceError(ValueError):
    """A trace file that cannot be read: the message names the file, the line (or key) and the value."""


@dataclass(frozen=True, eq=False)
class Machines:
    """The trace's machines: ``names`` (M,), ``cpu`` cores and ``ram`` GiB (M,)."""

    names: tuple[str, ...]
    cpu: np.ndarray
    ram: np.ndarray

    def __len__(self) -> int:
        return len(self.names)


@dataclass(frozen=True, eq=False)
class Tasks:
    """One row per task (a Google task or instance, an Alibaba container or batch instance).

    * ``ids`` (T,): unique, stable names (``job-index``), safe as a workload id's last part;
    * ``job`` (T,): the job (equivalence class) a task belongs to: tasks of one job with the same
      request are interchangeable (the scheduler's class);
    * ``production`` (T,) bool; ``priority`` (T,) int (the trace's own priority, or 0 without one);
    * ``cpu``, ``ram`` (T,): the request in cores and GiB;
    * ``submit`` (T,): when the task was submitted, 0 for tasks already present at the start;
    * ``duration`` (T,): how long it ran in the trace (first start to its end), ``nan`` when
      unknown (never ran, or still running when the data ends: censored);
    * ``machine`` (T,): index into :class:`Machines` of where the trace ran it, -1 if nowhere.
    """

    ids: tuple[str, ...]
    job: tuple[str, ...]
    production: np.ndarray
    priority: np.ndarray
    cpu: np.ndarray
    ram: np.ndarray
    submit: np.ndarray
    duration: np.ndarray
    machine: np.ndarray

    def __len__(self) -> int:
        return len(self.ids)


@dataclass(frozen=True, eq=False)
class Usage:
    """Measured usage samples, sorted by (task, t): sample ``i`` of task ``task[i]`` covers
    ``[t[i], t[i] + span[i])`` and used ``cpu[i]`` cores (mean over the span) and ``ram[i]`` GiB."""

    task: np.ndarray
    t: np.ndarray
    span: np.ndarray
    cpu: np.ndarray
    ram: np.ndarray

    def __len__(self) -> int:
        return len(self.task)

    @classmethod
    def empty(cls) -> Usage:
        z = np.zeros(0)
        return cls(np.zeros(0, dtype=np.int64), z, z, z, z)


@dataclass(frozen=True, eq=False)
class Trace:
    """A trace window, read: machines, tasks, their usage, and how it was read."""

    source: str  # "google-2011", "google-2019", "alibaba-2017", "alibaba-2018"
    horizon_s: float  # the window's length (seconds of data after 0)
    machines: Machines
    tasks: Tasks
    usage: Usage
    notes: tuple[str, ...] = field(default=())

    def figures(self) -> dict[str, object]:
        """The figures a reader's test checks against its own count of the same file."""
        tk, us = self.tasks, self.usage
        prod = tk.production
        out: dict[str, object] = {
            "source": self.source,
            "horizon_s": self.horizon_s,
            "machines": len(self.machines),
            "machine_cores": float(self.machines.cpu.sum()),
            "tasks": len(tk),
            "production_tasks": int(prod.sum()),
            "batch_tasks": int((~prod).sum()),
            "jobs": len(set(tk.job)),
            "usage_samples": len(us),
            "tasks_with_usage": len(np.unique(us.task)),
        }
        for tier, mask in (("production", prod), ("batch", ~prod)):
            out[f"{tier}_cpu_usage_over_request"] = usage_over_request(self, mask, "cpu")
            out[f"{tier}_ram_usage_over_request"] = usage_over_request(self, mask, "ram")
        return out


def usage_over_request(trace: Trace, mask: np.ndarray, dim: str) -> float:
    """Sum of the time-weighted mean usage over the sum of requests, over the tasks in ``mask``
    that have usage samples (``nan`` if none): the aggregate ratio, each task's mean usage being
    its samples' mean weighted by their spans."""
    us, tk = trace.usage, trace.tasks
    if not len(us):
        return float("nan")
    value = us.cpu if dim == "cpu" else us.ram
    n = len(tk)
    weight = np.bincount(us.task, weights=us.span, minlength=n)
    used = np.bincount(us.task, weights=value * us.span, minlength=n)
    have = mask & (weight > 0)
    request = (tk.cpu if dim == "cpu" else tk.ram)[have]
    if not have.any() or request.sum() <= 0:
        return float("nan")
    return float((used[have] / weight[have]).sum() / request.sum())


def _rank(key: str) -> int:
    """A stable pseudo-random rank of a name (the same on every machine and Python run)."""
    return int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "big")


def pick_machines(names: list[str] | tuple[str, ...], limit: int | None) -> np.ndarray:
    """Which of ``names`` a replay of at most ``limit`` machines keeps (bool mask): those of the
    lowest stable hash, so the pick is a fair sample that does not depend on the file's order."""
    keep = np.ones(len(names), dtype=bool)
    if limit is None or limit >= len(names):
        return keep
    ranks = np.array([_rank(n) for n in names], dtype=np.uint64)
    keep[:] = False
    keep[np.argsort(ranks, kind="stable")[:limit]] = True
    return keep


def keeps_unplaced(job: str, share: float) -> bool:
    """Whether a task the trace never placed stays in a replay that keeps ``share`` of the machines
    (by its job's stable hash: a job's tasks stay or go together)."""
    return share >= 1.0 or _rank(job) < share * 2.0**64
