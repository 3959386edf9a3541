"""A :class:`NodesView` read from the dual ledger: the bridge every shell uses before a round.

The ledger knows who is resident where, their requests, reservations, identity columns and each
node's epoch; the shell knows what it measured (usage, limits, start times, throttled time,
evictions in flight, the kernel's signals). This joins the two, so that every shell hands the
round the same columns built the same way.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kalena.core.enforcement.nodes import NodesView
from kalena.core.ledger import Ledger
from kalena.core.model import WorkloadSpec
from kalena.core.resources import NDIM


@dataclass(frozen=True, slots=True, eq=False)
class NodeSignals:
    """The kernel's signals per node (N, 8), and the node's own memory accounting (NaN: unknown).

    ``triggered``: a PSI trigger or memory notification since the last round; ``acute``: the
    shell's kernel judged it acute (PSI ``full``); ``psi_some``: avg10 fractions; ``memory_events``:
    ``memory.events`` high/max increments; ``node_used``: what the node's root accounting measured
    (NaN: the round sums the rows); ``node_limit``: where the kernel kills (NaN: the capacity).
    """

    triggered: np.ndarray
    acute: np.ndarray
    psi_some: np.ndarray
    memory_events: np.ndarray
    node_used: np.ndarray | None = None
    node_limit: np.ndarray | None = None

    @classmethod
    def quiet(cls, n: int) -> NodeSignals:
        """No signal anywhere: the state of a node whose kernel said nothing."""
        return cls(
            np.zeros((n, NDIM), dtype=bool),
            np.zeros((n, NDIM), dtype=bool),
            np.full((n, NDIM), np.nan),
            np.zeros(n, dtype=np.int64),
        )


def spec_limits(spec: WorkloadSpec) -> np.ndarray:
    """A workload's limits as the round reads them, (8,): ``inf`` where it has none. A limit of 0
    means no limit (as in Docker, and as ``Resources.of`` fills unspecified dimensions)."""
    if spec.limits is None:
        return np.full(NDIM, np.inf)
    a = spec.limits.array()
    return np.where(a > 0, a, np.inf)


def view_from_ledger(
    ledger: Ledger,
    *,
    usage: np.ndarray,
    limit: np.ndarray,
    started_at: np.ndarray,
    signals: NodeSignals,
    throttled_s: np.ndarray | None = None,
    evicting: np.ndarray | None = None,
    rows: np.ndarray | None = None,
    copy: bool = False,
) -> NodesView:
    """Every live ledger row (or ``rows``) with the shell's columns, which are indexed by ledger row.

    ``usage`` and ``limit`` (R, 8), ``started_at``, ``throttled_s`` and ``evicting`` (R,) with
    ``R`` >= the ledger's highest row; rows the shell has no entry for must hold NaN usage, inf
    limit, -inf start, 0 throttled, False evicting. DaemonSets are outside the ledger: none here.

    By default the view spans every slot up to the ledger's highest row, holes masked by
    ``present``, and its columns are slices of the ledger's and the shell's arrays (no copies): it
    is valid until the next commitment or shell write, which is all a round needs. A shell that
    reads the decision's view after carrying it out passes ``copy`` (the live rows, gathered).
    """
    rs = ledger.row_arrays()
    present = None
    if rows is None and not copy:  # every slot up to the highest, holes masked: slices, no copies
        h = rs.high
        rows = np.arange(h)
        cut = slice(0, h)
        alive = rs.alive[:h]
        if not alive.all():
            present = alive
        node = np.maximum(rs.node[:h], 0) if present is not None else rs.node[:h]

        def col(a: np.ndarray) -> np.ndarray:
            return a[cut]

    else:
        rows = rs.live_rows() if rows is None else rows
        node = np.take(rs.node, rows)

        def col(a: np.ndarray) -> np.ndarray:
            return np.take(a, rows, axis=0)

    w = len(rows)
    return NodesView(
        names=ledger.node_names,
        capacity=ledger.capacity,
        epoch=ledger.node_epochs,
        node=node,
        ids=col(rs.ids),
        keys=col(rs.keys),
        is_batch=col(rs.is_batch),
        is_daemonset=np.zeros(w, dtype=bool),
        priority=col(rs.priority),
        request=col(rs.request),
        reservation=col(rs.reservation),
        limit=col(limit),
        usage=col(usage),
        started_at=col(started_at),
        slack_cpu=col(rs.slack_cpu),
        evicting=np.zeros(w, dtype=bool) if evicting is None else col(evicting),
        throttled_s=np.zeros(w) if throttled_s is None else col(throttled_s),
        slot=rows,
        triggered=signals.triggered,
        acute=signals.acute,
        psi_some=signals.psi_some,
        memory_events=signals.memory_events,
        node_used=signals.node_used,
        node_limit=signals.node_limit,
        present=present,
        serial=col(rs.serial),
    )
