"""The estimation tick: the core's estimator over the ledger's rows, applied as one commitment.

    r_t = DecayEstimator.update_in_place(R, L, started_at, grace, opt-out; u_t, now, dt)

with ``L`` the core's rule (``estimator_limits``: ``max(min(limit, C), R)``, written once for
every shell), ``u_t`` NaN where telemetry is missing (the estimator then holds ``r``), and the
previous ``r`` taken from the ledger, so the estimator keeps no state of its own between ticks
and a restarted agent continues from the reservations saved in its state file.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from kalena.core.controller import estimator_limits, spec_limits
from kalena.core.estimators import DecayEstimator
from kalena.core.ledger import CommitResult, Ledger, ReservationUpdate
from kalena.core.resources import DIM_INDEX, NDIM


def estimate(
    ledger: Ledger,
    estimator: DecayEstimator,
    usage: Mapping[str, Mapping[str, float]],
    started_at: Mapping[str, float],
    now: float,
    dt: float,
) -> tuple[dict[str, list[float]], CommitResult | None]:
    """New reservations per workload id (for the state file) and the ledger's answer."""
    rows = ledger.rows()
    if not len(rows.rows):
        return {}, None
    cap = ledger.capacity[0]
    w = len(rows.ids)
    u = np.full((w, NDIM), np.nan, order="F")  # the estimator's rows' layout
    limits = np.empty((w, NDIM), order="F")
    started = np.empty(w)
    grace = np.empty(w)
    pinned = np.zeros(w, dtype=bool)
    for k, wid in enumerate(rows.ids):
        spec = ledger.spec(wid)
        for dim, v in usage.get(wid, {}).items():
            u[k, DIM_INDEX[dim]] = v
        limits[k] = spec_limits(spec)
        started[k] = started_at.get(wid, now)
        grace[k] = spec.startup_grace_s
        pinned[k] = spec.reclaim_disabled
    limits = estimator_limits(limits, cap, rows.requests)
    state = estimator.init(rows.requests, limits, started, grace=grace, pinned=pinned)
    state.reservation[:] = rows.reservations
    r = estimator.update_in_place(state, u, now, dt).copy()
    result = ledger.apply(ReservationUpdate(rows.rows, r, rows.global_epoch))
    return {wid: [float(x) for x in r[k]] for k, wid in enumerate(rows.ids)}, result
