"""Between messages and the in-process forms: commitments through a ledger, decisions directly.

A commitment names node indices and ledger rows; a message names nodes and workloads. The
sender's ledger turns indices into names (``placement_msg`` and friends); the receiver's ledger
turns names back (:func:`to_commitment`). An unknown node name raises :class:`MessageError`
naming it; so does a report entry the receiver's ledger cannot place on a row.

**Node epochs pass through unchanged.** ``PlaceBatch``, ``RemoveBatch`` and ``Eviction`` are
judged against the epoch of *their* node, so a message carries the epoch it was computed at and
the receiving ledger rejects it as stale (data, ``STALE_EPOCH``) if that node has moved since.
An eviction or removal of a workload the receiver no longer holds is left to the ledger for the
same reason: it is the expected race (the work finished while the message was on its way) and
the ledger answers it as data, naming the workload; raising would make it an exception.

**A report becomes an update at the receiver's current global epoch.** The report's
``node_epoch`` is a node epoch of the *sender's* ledger, a different counter from the global
epoch a ``ReservationUpdate`` is judged by, and no mapping between them exists: passing it as
the global epoch would call rows stale at random. Rejecting whenever the node's epoch moved
would starve the estimator on a busy node, since every placement there bumps it (the row-version
rule exists to prevent exactly that). Stamping the current epoch is safe because the staleness
it waives cannot happen across processes unnoticed: the node's agent is the only writer of its
node's reservations, the other changes to a covered row are the agent's own evictions (sent
before its next report, in order) and removals, and a removed or moved workload fails the
residency check here. ``node_epoch`` and ``time`` stay in the report for ordering and display.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import overload

import numpy as np

from kalena.core.enforcement.escalation import EscalationDecision
from kalena.core.enforcement.records import EvictionCause, Victim
from kalena.core.enforcement.throttle import ThrottlePlan
from kalena.core.ledger.commitments import Commitment, Eviction, PlaceBatch, RemoveBatch, ReservationUpdate
from kalena.core.ledger.state import Ledger
from kalena.core.messages.records import (
    EscalationMsg,
    EvictionMsg,
    PlacementMsg,
    RemovalMsg,
    ReservationEntry,
    ReservationReport,
    ThrottleMsg,
    WhyPendingMsg,
)
from kalena.core.messages.wire import Path, fail, show
from kalena.core.model import Tier
from kalena.core.placement.why import WhyPending
from kalena.core.resources import GPU, NDIM, Resources


def node_name(ledger: Ledger, node: int, path: Path = ("node",)) -> str:
    if not 0 <= node < ledger.n_nodes:
        fail(path, f"no node index {node} in a ledger of {ledger.n_nodes} nodes")
    return ledger.nodes[node].name


def node_index(ledger: Ledger, name: str, path: Path = ("node",)) -> int:
    n = ledger.node_index.get(name)
    if n is None:
        fail(path, f"unknown node {show(name)}")
    return n


# commitments -> messages -------------------------------------------------------------------------
def placement_msg(c: PlaceBatch, ledger: Ledger) -> PlacementMsg:
    return PlacementMsg(c.workload, node_name(ledger, c.node), c.node_epoch)


def removal_msg(c: RemoveBatch, ledger: Ledger) -> RemovalMsg:
    return RemovalMsg(c.workload_id, node_name(ledger, c.node), c.node_epoch, c.cause)


def eviction_msg(
    c: Eviction,
    ledger: Ledger,
    cause: EvictionCause,
    grace_period_s: float,
    cooldown_until: float | None = None,
) -> EvictionMsg:
    """The commitment plus what the shell carrying it out needs (an Eviction does not hold them)."""
    node = node_name(ledger, c.node)
    return EvictionMsg(
        c.workload_id,
        node,
        c.node_epoch,
        c.limit_breach_override,
        cause,
        grace_period_s,
        cooldown_until,
        c.reasons,
    )


def victim_msgs(victims: Sequence[Victim], node_epoch: int) -> tuple[EvictionMsg, ...]:
    """An eviction plan's victims, in order, stamped ``node_epoch + i`` as ``eviction_commitments`` does."""
    return tuple(
        EvictionMsg(
            v.workload,
            v.node,
            node_epoch + i,
            v.limit_breach_override,
            v.cause,
            v.grace_period_s,
            None if v.requeue is None else v.requeue.cooldown_until,
            v.reasons,
        )
        for i, v in enumerate(victims)
    )


def reservation_reports(
    c: ReservationUpdate, ledger: Ledger, time: float, usage: np.ndarray | None = None
) -> tuple[ReservationReport, ...]:
    """One report per node ``c`` covers (node index order), rows in ``c``'s order within each.

    ``usage`` is ``(W, 8)`` aligned with ``c.rows`` (NaN = missing). Call it before applying
    ``c``: each report carries its node's epoch as ``c`` was computed against it.
    """
    u = None if usage is None else np.asarray(usage, dtype=np.float64)
    if u is not None and u.shape != (len(c.rows), NDIM):
        raise ValueError(f"usage must have shape ({len(c.rows)}, {NDIM}), got {u.shape}")
    rs = ledger.row_arrays()
    by_node: dict[int, list[ReservationEntry]] = {}
    for i, row in enumerate(c.rows.tolist()):
        spec = rs.specs[row] if 0 <= row < rs.high and rs.alive[row] else None
        if spec is None:
            fail(("rows", i), f"row {row} holds no workload")
        usage_i = None if u is None else tuple(u[i].tolist())
        entry = ReservationEntry(spec.id, Resources.from_array(c.reservations[i]), usage_i)
        by_node.setdefault(int(rs.node[row]), []).append(entry)
    return tuple(
        ReservationReport(ledger.nodes[n].name, ledger.node_epoch(n), time, tuple(entries))
        for n, entries in sorted(by_node.items())
    )


# decisions -> messages ---------------------------------------------------------------------------
def throttle_msg(plan: ThrottlePlan) -> ThrottleMsg:
    return ThrottleMsg(plan.node, plan.now, plan.decisions)


def escalation_msg(d: EscalationDecision) -> EscalationMsg:
    return EscalationMsg(
        d.node, d.escalate, d.slack_ineligible_until, tuple(v.workload for v in d.drain), d.reason
    )


def why_pending_msg(w: WhyPending) -> WhyPendingMsg:
    return WhyPendingMsg(w.workload_id, w.total_nodes, w.available, w.binding, w.message)


# messages -> commitments -------------------------------------------------------------------------
@overload
def to_commitment(msg: PlacementMsg, ledger: Ledger) -> PlaceBatch: ...
@overload
def to_commitment(msg: EvictionMsg, ledger: Ledger) -> Eviction: ...
@overload
def to_commitment(msg: RemovalMsg, ledger: Ledger) -> RemoveBatch: ...
@overload
def to_commitment(msg: ReservationReport, ledger: Ledger) -> ReservationUpdate: ...
def to_commitment(
    msg: PlacementMsg | EvictionMsg | RemovalMsg | ReservationReport, ledger: Ledger
) -> Commitment:
    """The commitment ``msg`` stands for in ``ledger`` (see the module docstring for epochs)."""
    match msg:
        case PlacementMsg():
            w = msg.workload
            # The ledger raises on these (a caller bug in-process); from a peer they are bad input.
            if w.tier is not Tier.BATCH:
                fail(("workload", "tier"), f"a placement places batch workloads only, got {w.tier.value!r}")
            if w.is_daemonset:
                fail(("workload", "is_daemonset"), "DaemonSets are never placed (Phase 0 deducts them)")
            return PlaceBatch(w, node_index(ledger, msg.node), msg.node_epoch)
        case EvictionMsg():
            return Eviction(
                msg.workload_id,
                node_index(ledger, msg.node),
                msg.node_epoch,
                msg.limit_breach_override,
                msg.reasons,
            )
        case RemovalMsg():
            return RemoveBatch(msg.workload_id, node_index(ledger, msg.node), msg.node_epoch, msg.cause)
        case ReservationReport():
            return _update(msg, ledger)
    raise TypeError(f"{type(msg).__name__} does not stand for a commitment")


def _update(msg: ReservationReport, ledger: Ledger) -> ReservationUpdate:
    """Rows of the named workloads, each checked resident on the named node, at the current epoch."""
    n = node_index(ledger, msg.node)
    rows = np.empty(len(msg.entries), dtype=np.int64)
    res = np.empty((len(msg.entries), NDIM))
    seen: set[str] = set()
    for i, e in enumerate(msg.entries):
        wid = e.workload_id
        if wid not in ledger:
            fail(("entries", i, "workload_id"), f"unknown workload {show(wid)}")
        if wid in seen:
            fail(("entries", i, "workload_id"), f"names workload {show(wid)} twice")
        seen.add(wid)
        at = ledger.node_of(wid)
        if at != n:
            fail(
                ("entries", i, "workload_id"),
                f"{show(wid)} is on node {ledger.nodes[at].name!r}, not {msg.node!r}",
            )
        r = e.reservation.values
        if not all(math.isfinite(x) for x in r):
            fail(("entries", i, "reservation"), "must be finite")
        want = ledger.spec(wid).requests.values[GPU]
        if r[GPU] != want:
            # The ledger raises on this (an estimator bug in-process); from a peer it is bad input.
            fail(
                ("entries", i, "reservation", "gpu"),
                f"must equal the request {want:g} (gpu is non-reclaimable), got {r[GPU]:g}",
            )
        rows[i] = ledger.row_of(wid)
        res[i] = r
    return ReservationUpdate(rows, res, ledger.global_epoch)
