"""A cluster scheduler's ledger from what it observes: nodes, the workloads on them, reservations.

A node agent loads its ledger from a declaration; a cluster scheduler (the Docker daemon, the
Kubernetes secondary scheduler) rebuilds its own each pass from what it sees: the nodes, the
production and batch workloads bound to each, and the reservations the nodes' agents reported.
The rules, written once for every such shell:

* production (service tier) is loaded as the blueprint; a node whose production asks for more
  than its capacity (a shrunken allocatable, a report that lies) is **left out**: it keeps what
  runs there, but no new batch goes there, and the reason is returned. Its pods stay in the
  ledger (its capacity there is unbounded), so that the topology rules (anti-affinity, spread)
  still count them; the caller places nothing on it;
* each batch resident is placed as itself (``PlaceBatch``); one the ledger cannot hold leaves its
  node out too (the node has no slack by the ledger's own account);
* reservations, where given, replace the requests as the rows' reservations (a ``ReservationUpdate``
  at the ledger's current epoch), the GPU always at its request (GPU slack is zero); the others
  stay at their requests (fail-safe: a missing report never releases slack).

Pure: plain data in, a ``Ledger`` and the nodes left out (name -> why) back.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from kalena.core.ledger.commitments import ReservationUpdate
from kalena.core.ledger.state import Ledger
from kalena.core.model import NodeSpec, Tier, WorkloadSpec
from kalena.core.resources import DIMS, GPU, Resources
from kalena.core.tolerance import REL_TOL


def observed_ledger(
    nodes: Sequence[NodeSpec],
    residents: Sequence[tuple[WorkloadSpec, str]],
    reservations: Mapping[str, Resources] | None = None,
) -> tuple[Ledger, dict[str, str]]:
    """The ledger of ``nodes`` holding ``residents`` (workload, node name); the nodes left out."""
    index = {n.name: i for i, n in enumerate(nodes)}
    cap = np.array([n.allocatable.array() for n in nodes], dtype=np.float64).reshape(len(nodes), len(DIMS))
    left_out: dict[str, str] = {}
    ledger = _load(nodes, index, cap, residents, reservations, left_out)
    if left_out:
        # Again, with the nodes left out unbounded: every pod there is in the ledger, so the
        # topology rules (anti-affinity, spread) count it; the caller places nothing there.
        wide = cap.copy()
        wide[[index[n] for n in left_out]] = np.inf
        ledger = _load(nodes, index, wide, residents, reservations, {})
    return ledger, left_out


def _load(
    nodes: Sequence[NodeSpec],
    index: Mapping[str, int],
    cap: np.ndarray,
    residents: Sequence[tuple[WorkloadSpec, str]],
    reservations: Mapping[str, Resources] | None,
    left_out: dict[str, str],
) -> Ledger:
    """The ledger at capacities ``cap``; the nodes it cannot hold are added to ``left_out`` (their
    production, or their batch from the first that does not fit, is not loaded)."""
    prod = [(w, n) for w, n in residents if w.tier is Tier.SERVICE and n in index]
    load = np.zeros_like(cap)
    if prod:
        np.add.at(load, [index[n] for _, n in prod], [w.requests.array() for w, _ in prod])
    for k in np.flatnonzero((load > cap * (1 + REL_TOL)).any(axis=1)):
        over = [d for i, d in enumerate(DIMS) if load[k, i] > cap[k, i] * (1 + REL_TOL)]
        left_out[nodes[k].name] = f"production asks for more {', '.join(over)} than the node's capacity"
    kept = [(w, n) for w, n in prod if n not in left_out]
    ledger = Ledger.from_blueprint(list(nodes), cap, [w for w, _ in kept], {w.id: n for w, n in kept})
    _reserve(ledger, reservations)  # production's first: the batch bound there is judged against them
    batch = [
        (w, index[n]) for w, n in residents if w.tier is not Tier.SERVICE and n in index and n not in left_out
    ]
    # each in order; a node's first that does not fit leaves the node out (the rest there untried)
    placed, refused = ledger.place_until_refused(batch)
    for i in refused:
        w, k = batch[i]
        left_out[nodes[k].name] = f"its batch {w.id} does not fit the ledger"
    if reservations and placed.any():  # then the batch's own
        ids = {batch[i][0].id for i in np.flatnonzero(placed)}
        _reserve(ledger, {wid: r for wid, r in reservations.items() if wid in ids})
    return ledger


def _reserve(ledger: Ledger, reservations: Mapping[str, Resources] | None) -> None:
    if not reservations:
        return
    rows = ledger.rows()
    pick = [i for i, wid in enumerate(rows.ids) if wid in reservations]
    if pick:
        values = np.array([reservations[rows.ids[i]].array() for i in pick])
        values[:, GPU] = rows.requests[pick, GPU]  # GPU slack is zero, whatever a report says
        ledger.apply(ReservationUpdate(rows.rows[pick], values, rows.global_epoch))
