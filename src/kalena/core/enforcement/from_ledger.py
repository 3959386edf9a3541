"""A node snapshot read from the dual ledger: the bridge every shell uses before enforcement.

The ledger knows who is resident on a node, their requests and current reservations, and the
node's epoch; the shell knows what the kernel measured (usage, start times, pressure). This
joins the two so that an eviction plan is computed against the same reservations the ledger
holds and carries the node epoch its ``Eviction`` commitments must present.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import SupportsFloat

from kalena.core.enforcement.records import Victim
from kalena.core.enforcement.snapshot import NodeConditions, NodeSnapshot, snapshot_from_workloads
from kalena.core.ledger import Eviction, Ledger
from kalena.core.resources import Resources


def snapshot_from_ledger(
    ledger: Ledger,
    node: int,
    *,
    usage: Mapping[str, Resources | Mapping[str, SupportsFloat | str]] | None = None,
    started_at: Mapping[str, float] | None = None,
    previous_reservations: Mapping[str, Resources] | None = None,
    conditions: NodeConditions | None = None,
) -> NodeSnapshot:
    """The residents of node index ``node`` with their ledger reservations and the node's epoch.

    DaemonSets are not in the ledger (Phase 0 already deducted them from capacity), so they are
    not in this snapshot either and can never be chosen as victims.
    """
    residents = ledger.workloads_on(node)
    return snapshot_from_workloads(
        ledger.nodes[node].name,
        Resources.from_array(ledger.capacity[node]),
        residents,
        usage=usage,
        reservations={w.id: Resources.from_array(ledger.reservation_of(w.id)) for w in residents},
        previous_reservations=previous_reservations,
        started_at=started_at,
        conditions=conditions,
        epoch=ledger.node_epoch(node),
    )


def eviction_commitments(victims: Sequence[Victim], node: int, node_epoch: int) -> tuple[Eviction, ...]:
    """The ledger commitments that carry out ``victims`` (in plan order) on node index ``node``.

    Every accepted eviction bumps the node's epoch, so the i-th commitment is stamped
    ``node_epoch + i``: if one is rejected as stale, every later one is stale too and the shell
    recomputes the plan from fresh state, exactly as for a scheduling pass.
    """
    return tuple(
        Eviction(
            workload_id=v.workload,
            node=node,
            node_epoch=node_epoch + i,
            limit_breach_override=v.limit_breach_override,
            reasons=v.reasons,
        )
        for i, v in enumerate(victims)
    )
