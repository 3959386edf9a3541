"""Node snapshots for the core's enforcement policies, built straight from the row arrays.

``NodeSnapshot`` rows are the ledger residents of one node (production and batch; DaemonSets are
outside the ledger, already deducted from capacity in Phase 0, so they never appear): their
request and reservation from the ledger, and the simulator's limit, usage and start time.
"""

from __future__ import annotations

import numpy as np

from kalena.core.enforcement import NodeConditions, NodeSnapshot
from kalena.core.ledger import Ledger
from kalena.sim.rows import RowTable


class NodeRows:
    """The live rows of a node, found on demand and kept until the ledger's rows change.

    One mask over the live rows per node asked for: cheaper than grouping every node when only
    the few nodes under pressure are looked at in a tick.
    """

    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger
        self._live: np.ndarray | None = None
        self._cache: dict[int, np.ndarray] = {}

    def invalidate(self) -> None:
        self._live = None
        self._cache.clear()

    def of(self, node: int) -> np.ndarray:
        rows = self._cache.get(node)
        if rows is None:
            if self._live is None:
                rs = self.ledger.row_arrays()
                self._live = rs.live_rows()
                self._on = rs.node[self._live]
            rows = self._cache[node] = self._live[self._on == node]
        return rows


def snapshot(
    ledger: Ledger, table: RowTable, node: int, rows: np.ndarray, conditions: NodeConditions | None = None
) -> NodeSnapshot:
    """The snapshot of ``node`` holding ``rows`` (its live ledger rows), at the ledger's current epoch."""
    rs = ledger.row_arrays()
    return NodeSnapshot(
        node=ledger.nodes[node].name,
        capacity=ledger.capacity[node],
        ids=tuple(table.ids[rows]),
        is_batch=rs.is_batch[rows],
        priority=table.priority[rows],
        is_daemonset=np.zeros(len(rows), dtype=bool),
        request=rs.request[rows],
        reservation=rs.reservation[rows],
        limit=table.limit[rows],
        usage=table.usage[rows],
        started_at=table.started[rows],
        slack_cpu=table.slack_cpu[rows],
        equivalence_keys=tuple(table.keys[rows]),
        conditions=conditions or NodeConditions(),
        epoch=ledger.node_epoch(node),
    )
