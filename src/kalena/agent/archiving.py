"""The node agent's feed of the usage archive (:mod:`kalena.archive`): the one place where its
estimates and action-log records become archive samples and events, whichever state store it
keeps. On Kalena's store (:mod:`.dbstate`) they go into the store's own file, in the save's
transaction; with the state file (:class:`~.state.StateStore`, the Kubernetes DaemonSet's) an
:class:`ArchiveTap` writes them to an archive of their own, each in its own transaction.

A sample's throttled seconds are the workload's since its previous sample, from the kernel's
cumulative throttled-time counter of its cgroup (``cpu.stat``; :class:`ThrottledSince`), and
NULL where that is unknown: its first sample, a counter that restarted or could not be read, a
telemetry source without it (cAdvisor, the Docker engine's stats). Never a made-up 0."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from kalena.archive import Archive, ArchiveEvent
from kalena.archive.store import sample_rows
from kalena.core.resources import DIMS, NDIM

#: How often (clock seconds) the agent rolls up and trims its archive.
COMPACT_EVERY_S = 300.0
#: Action-log kinds the archive keeps, under its own names (seed 000 Appendix C: evictions with
#: their cause; throttles and caps for throttled time).
ARCHIVED_KINDS = {"evict": "eviction", "sigkill": "eviction-sigkill", "throttle": "throttle", "cap": "cap"}

#: One estimate: each workload's usage (by dimension name), reservation (DIMS order, or None) and
#: throttled seconds since its previous sample (None: unknown).
Series = Mapping[str, tuple[Mapping[str, float], list[float] | None, float | None]]


def series_of(
    usage: Mapping[str, Mapping[str, float]],
    reservations: Mapping[str, list[float]],
    throttled_s: Mapping[str, float] | None = None,
) -> dict[str, tuple[Mapping[str, float], list[float] | None, float | None]]:
    """The agent's estimate (``usage``, ``reservations`` and ``throttled_s`` by workload) as one
    :data:`Series`; a workload absent from ``throttled_s`` has it unknown."""
    thr = throttled_s or {}
    ids = set(usage) | set(reservations)
    return {w: (usage.get(w, {}), reservations.get(w), thr.get(w)) for w in sorted(ids)}


def series_rows(node: str, at: float, series: Series) -> list[tuple[Any, ...]]:
    """One estimate as archive sample rows (non-finite values, unknown throttled time, become NULL)."""
    ids = list(series)
    usage = np.array([[series[w][0].get(d, np.nan) for d in DIMS] for w in ids], dtype=np.float64)
    res = np.array([r if r is not None else [np.nan] * NDIM for _, r, _ in series.values()], dtype=np.float64)
    thr = np.array([t if t is not None else np.nan for _, _, t in series.values()], dtype=np.float64)
    return sample_rows(at, node, ids, usage.reshape(len(ids), NDIM), res.reshape(len(ids), NDIM), thr)


class ThrottledSince:
    """Each workload's throttled seconds since its previous sample, from the cumulative counter
    (ns) its cgroup's ``cpu.stat`` gives at each sample. Unknown (absent from :meth:`take`'s
    answer) at a workload's first sample, when the counter was not read this time or the last
    time, and when it went backwards (a new cgroup under the same name: what the old one counted
    after the previous sample is lost)."""

    def __init__(self) -> None:
        self._last: dict[str, int] = {}

    def take(self, counters: Mapping[str, int | None]) -> dict[str, float]:
        """``counters``: each sampled workload's counter now (None: not read). Only these are kept
        as the next sample's baseline; a workload missing here starts afresh."""
        out = {}
        for w, ns in counters.items():
            prev = self._last.get(w)
            if ns is not None and prev is not None and ns >= prev:
                out[w] = (ns - prev) / 1e9
        self._last = {w: int(ns) for w, ns in counters.items() if ns is not None}
        return out


def archived_event(node: str | None, rec: Mapping[str, Any]) -> ArchiveEvent | None:
    """The archive's event for an action-log record, or None for a kind it does not keep."""
    kind = ARCHIVED_KINDS.get(str(rec.get("kind")))
    if kind is None:
        return None
    why = rec.get("why") if isinstance(rec.get("why"), Mapping) else {}
    workload = rec.get("workload") or why.get("workload")  # type: ignore[union-attr]
    cause = rec.get("cause") or why.get("cause")  # type: ignore[union-attr]
    data = {k: v for k, v in rec.items() if k not in ("time", "kind")}
    return ArchiveEvent(float(rec["time"]), kind, node, workload if isinstance(workload, str) else None,
                        cause if isinstance(cause, str) else None, data)  # fmt: skip


class Rollups:
    """``archive`` rolled up and trimmed at most every :data:`COMPACT_EVERY_S` of the clock."""

    def __init__(self, archive: Archive) -> None:
        self.archive = archive
        self._last = -float("inf")

    def due(self, now: float) -> None:
        if now - self._last >= COMPACT_EVERY_S:
            self.archive.compact(now)
            self._last = now


class ArchiveTap:
    """Writes one node agent's estimates and archived events to ``archive`` as they come (each
    durable when the call returns), and rolls it up every :data:`COMPACT_EVERY_S`."""

    def __init__(self, archive: Archive, node: str) -> None:
        self.archive, self.node = archive, node
        self.rollups = Rollups(archive)

    def series(
        self,
        now: float,
        usage: Mapping[str, Mapping[str, float]],
        reservations: Mapping[str, list[float]],
        throttled_s: Mapping[str, float] | None = None,
    ) -> None:
        rows = series_rows(self.node, now, series_of(usage, reservations, throttled_s))
        self.archive.record_rows(rows)
        self.rollups.due(now)

    def event(self, rec: Mapping[str, Any]) -> None:
        event = archived_event(self.node, rec)
        if event is not None:
            self.archive.record_events([event])
