"""Checkpoints of a simulated run: what compaction packs batch with (issue 14).

A checkpoint is the cluster's state at one moment as the reservation ledger sees it: every
production workload's reservation, and every batch pod in the ledger with its reservation. Taken
every hour of a run (:func:`run_with_checkpoints`), the **worst** is the one whose total
reservation takes the largest share of the cluster's capacity on its most used dimension: the
moment reclamation has the least room, which is the fair one to compact at.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from kalena.core.cluster import Cluster
from kalena.core.compaction import BatchLoad
from kalena.core.model import WorkloadSpec
from kalena.core.resources import NDIM
from kalena.sim.engine import Simulation

HOUR_S = 3600.0


@dataclass(frozen=True, slots=True)
class Checkpoint:
    time: float
    load: BatchLoad

    def share(self, cluster: Cluster) -> float:
        """Total reservation over total capacity on the most used dimension (finite ones)."""
        cap = cluster.capacity_matrix().sum(axis=0)
        used = self.load.production_reservation.sum(axis=0) + self.load.batch_reservation.sum(axis=0)
        ok = np.isfinite(cap) & (cap > 0)
        return float((used[ok] / cap[ok]).max()) if ok.any() else 0.0


def take(sim: Simulation, cluster: Cluster) -> Checkpoint:
    """The ledger's reservations now: production's aligned to ``cluster.workloads`` (a workload the
    ledger does not hold counts its request), and the batch pods it holds."""
    rs = sim.ledger.row_arrays()
    live = rs.live_rows()
    prod: dict[str, np.ndarray] = {}
    batch: list[WorkloadSpec] = []
    batch_res: list[np.ndarray] = []
    for row in live.tolist():
        spec = rs.specs[row]
        assert spec is not None
        if rs.is_batch[row]:
            batch.append(spec)
            batch_res.append(rs.reservation[row])
        else:
            prod[spec.id] = rs.reservation[row]
    production = np.array([prod.get(w.id, w.requests.array()) for w in cluster.workloads]).reshape(-1, NDIM)
    return Checkpoint(
        sim.now,
        BatchLoad(
            batch=tuple(batch),
            batch_reservation=np.array(batch_res).reshape(-1, NDIM),
            production_reservation=production,
        ),
    )


def run_with_checkpoints(
    sim: Simulation,
    cluster: Cluster,
    every_s: float = HOUR_S,
    progress: Callable[[int, int], None] | None = None,
    taken: Callable[[Checkpoint], None] | None = None,
) -> list[Checkpoint]:
    """Run ``sim`` to its end, taking a checkpoint every ``every_s`` simulated seconds (each
    handed to ``taken`` as it is taken)."""
    out: list[Checkpoint] = []
    every = sim.cfg.every(every_s)

    def tick(k: int, total: int) -> None:
        if k % every == 0:
            out.append(take(sim, cluster))
            if taken is not None:
                taken(out[-1])
        if progress is not None:
            progress(k, total)

    sim.run(tick, progress_every=1)
    return out


def worst(checkpoints: list[Checkpoint], cluster: Cluster) -> Checkpoint:
    """The checkpoint with the largest :meth:`Checkpoint.share` (the earliest among equals)."""
    if not checkpoints:
        raise ValueError("no checkpoint was taken (the run is shorter than the checkpoint interval)")
    return max(checkpoints, key=lambda c: (c.share(cluster), -c.time))
