"""The reservation-ledger fit rule, as exported pure functions (kube-scheduler's ``fitsRequest``).

A batch workload with request ``R`` fits node ``n`` when, on every one of the eight dimensions,

    used_n + R <= C_n          (used_n = sum of the reservations of every workload on n)

The placement filter, the ledger's commit-time check and the why-pending explanation all call
these functions, so the three can never disagree about what "fits" means.
"""

from __future__ import annotations

import numpy as np

from kalena.core.ledger.rows import all_per_row
from kalena.core.resources import DIMS
from kalena.core.tolerance import REL_TOL
from kalena.core.verdict import Reason, ReasonCode


def tolerant_capacity(capacity: np.ndarray) -> np.ndarray:
    """``C + REL_TOL * max(1, C)``: the bound ``used + R`` is compared against (``inf`` stays ``inf``)."""
    capacity = np.asarray(capacity, dtype=np.float64)
    return capacity + REL_TOL * np.maximum(1.0, capacity)


def fits_mask(request: np.ndarray, used: np.ndarray, capacity_tol: np.ndarray) -> np.ndarray:
    """Vectorised fit over nodes: ``all_d(used[i, d] + R[d] <= capacity_tol[i, d])``, shape ``(k,)``.

    ``capacity_tol`` is :func:`tolerant_capacity` of the capacity rows (precomputed once per ledger).
    """
    ok = used + request <= capacity_tol
    # per row, one word comparison (all_per_row); one node's (8,) row is a plain all
    return all_per_row(ok) if ok.ndim == 2 else ok.all(axis=-1)


def rank_within(nodes: np.ndarray) -> np.ndarray:
    """Each entry's position among the entries on the same node, in order (0 for a node's first)."""
    nodes = np.asarray(nodes)
    k = len(nodes)
    order = np.argsort(nodes, kind="stable")
    sorted_nodes = nodes[order]
    starts = np.flatnonzero(np.r_[True, sorted_nodes[1:] != sorted_nodes[:-1]]) if k else np.zeros(0, np.intp)
    rank = np.empty(k, dtype=np.int64)
    rank[order] = np.arange(k) - np.repeat(starts, np.diff(np.r_[starts, k]))
    return rank


def running_fit(
    used: np.ndarray, nodes: np.ndarray, requests: np.ndarray, capacity_tol: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Placements one after another: ``requests[i]`` (``(k, D)``) onto ``nodes[i]``, each node
    starting from ``used`` (``(N, D)``). Returns, per placement, the node's use with it and every
    earlier one there added (``(k, D)``, summed in order as a loop would, bit for bit) and whether
    that fits ``capacity_tol`` (``(k,)``). Whether each one is *taken* is the caller's rule."""
    requests = np.asarray(requests, dtype=np.float64)
    nodes = np.asarray(nodes)
    k = len(nodes)
    if k == 0:
        return np.empty_like(requests), np.zeros(0, dtype=bool)
    # One scan for every node at once, exactly as one loop per node: each node's placements in
    # order, after a row holding its ``used``, in a zero-padded (nodes placed on, longest + 1, D)
    # block; a cumsum along axis 1 adds each row's terms in that order, and the padding comes last.
    order = np.argsort(nodes, kind="stable")
    sorted_nodes = nodes[order]
    starts = np.flatnonzero(np.r_[True, sorted_nodes[1:] != sorted_nodes[:-1]])
    sizes = np.diff(np.r_[starts, k])
    if len(starts) * (int(sizes.max()) + 1) > 4 * k + 4096:  # one crowded node would pad them all
        return _running_fit_by_node(used, order, starts, requests, capacity_tol, nodes)
    group = np.repeat(np.arange(len(starts)), sizes)
    pos = np.arange(k) - np.repeat(starts, sizes) + 1  # 1..size within its node; 0 holds used
    block = np.zeros((len(starts), int(sizes.max()) + 1, requests.shape[1]))
    block[:, 0] = used[sorted_nodes[starts]]
    block[group, pos] = requests[order]
    np.cumsum(block, axis=1, out=block)
    running = np.empty_like(requests)
    running[order] = block[group, pos]
    fits = all_per_row(running <= capacity_tol[nodes])
    return running, fits


def _running_fit_by_node(
    used: np.ndarray,
    order: np.ndarray,
    starts: np.ndarray,
    requests: np.ndarray,
    capacity_tol: np.ndarray,
    nodes: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`running_fit` one node at a time (the same sums), where the padded block would be large."""
    running = np.empty_like(requests)
    for group in np.split(order, starts[1:]):
        n = int(nodes[group[0]])
        running[group] = np.cumsum(np.vstack([used[n], requests[group]]), axis=0)[1:]
    fits = all_per_row(running <= capacity_tol[nodes])
    return running, fits


def shortfall(request: np.ndarray, used: np.ndarray, capacity: np.ndarray) -> np.ndarray:
    """``used + R - C`` per node and dimension: positive where the request does not fit."""
    return used + request - capacity


def insufficient_resources(request: np.ndarray, used: np.ndarray, capacity: np.ndarray) -> tuple[Reason, ...]:
    """One ``INSUFFICIENT_RESOURCE`` reason per dimension that does not fit on one node (empty: it fits).

    Arguments are 8-vectors in :data:`kalena.core.resources.DIMS` order. Each reason carries
    ``requested``, ``used`` and ``capacity`` so that the shortfall is ``used + requested - capacity``.
    """
    request = np.asarray(request, dtype=np.float64)
    used = np.asarray(used, dtype=np.float64)
    capacity = np.asarray(capacity, dtype=np.float64)
    over = used + request > tolerant_capacity(capacity)
    return tuple(
        Reason(
            ReasonCode.INSUFFICIENT_RESOURCE,
            dimension=DIMS[d],
            requested=float(request[d]),
            used=float(used[d]),
            capacity=float(capacity[d]),
        )
        for d in np.flatnonzero(over)
    )


def insufficient_resources_rows(
    request: np.ndarray, used: np.ndarray, capacity: np.ndarray
) -> list[tuple[Reason, ...]]:
    """:func:`insufficient_resources` for each row of ``used`` and ``capacity`` ``(k, 8)``, in one pass.

    The same reasons, with the same numbers, as calling it row by row (the comparison is
    element-wise), at a fraction of the cost when a why-pending answer covers many nodes.
    """
    request = np.asarray(request, dtype=np.float64)
    used = np.asarray(used, dtype=np.float64)
    capacity = np.asarray(capacity, dtype=np.float64)
    over = used + request > tolerant_capacity(capacity)
    # only the cells that do not fit, in row-major order (each row's dimensions ascending)
    rows, dims = np.nonzero(over)
    req = request.tolist()
    code = ReasonCode.INSUFFICIENT_RESOURCE
    reasons = [
        Reason(code, DIMS[d], req[d], u, c)
        for d, u, c in zip(
            dims.tolist(), used[rows, dims].tolist(), capacity[rows, dims].tolist(), strict=True
        )
    ]
    out: list[tuple[Reason, ...]] = [()] * len(over)
    counts = np.bincount(rows, minlength=len(over))
    hit = np.flatnonzero(counts)
    start = 0
    for i, k in zip(hit.tolist(), counts[hit].tolist(), strict=True):
        out[i] = tuple(reasons[start : start + k])
        start += k
    return out
