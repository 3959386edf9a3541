"""The node agent's feed of the usage archive (:mod:`kalena.archive`): the one place where its
estimates and action-log records become archive samples and events, whichever state store it
keeps. On Kalena's store (:mod:`.dbstate`) they go into the store's own file, in the save's
transaction; with the state file (:class:`~.state.StateStore`, the Kubernetes DaemonSet's) an
:class:`ArchiveTap` writes them to an archive of their own, each in its own transaction."""

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

#: One estimate: each workload's usage (by dimension name) and reservation (DIMS order, or None).
Series = Mapping[str, tuple[Mapping[str, float], list[float] | None]]


def series_of(
    usage: Mapping[str, Mapping[str, float]], reservations: Mapping[str, list[float]]
) -> dict[str, tuple[Mapping[str, float], list[float] | None]]:
    """The agent's estimate (``usage`` and ``reservations`` by workload) as one :data:`Series`."""
    ids = set(usage) | set(reservations)
    return {w: (usage.get(w, {}), reservations.get(w)) for w in sorted(ids)}


def series_rows(node: str, at: float, series: Series) -> list[tuple[Any, ...]]:
    """One estimate as archive sample rows (non-finite values become NULL)."""
    ids = list(series)
    usage = np.array([[series[w][0].get(d, np.nan) for d in DIMS] for w in ids], dtype=np.float64)
    res = np.array([r if r is not None else [np.nan] * NDIM for _, r in series.values()], dtype=np.float64)
    return sample_rows(at, node, ids, usage.reshape(len(ids), NDIM), res.reshape(len(ids), NDIM))


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
        self, now: float, usage: Mapping[str, Mapping[str, float]], reservations: Mapping[str, list[float]]
    ) -> None:
        rows = series_rows(self.node, now, series_of(usage, reservations))
        self.archive.record_rows(rows)
        self.rollups.due(now)

    def event(self, rec: Mapping[str, Any]) -> None:
        event = archived_event(self.node, rec)
        if event is not None:
            self.archive.record_events([event])
