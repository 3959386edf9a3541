"""Checks every shell runs each tick: the restoration invariant and the sum bookkeeping.

Restoration invariant (seed 000 §2.3): removing every batch workload from every node leaves
exactly the blueprint's production set and requests. In ledger terms:

1. rows ``0..P-1`` are the blueprint's production workloads, in order, alive, service tier, on
   the blueprint's node, with the blueprint's request (exact equality: nothing may rewrite them);
2. no other row is a service workload (batch commitments cannot create production);
3. the request ledger Q equals the blueprint's per-node request sums, both as maintained and
   recomputed from the rows, and still satisfies ``Q <= C``.

Each check is a handful of whole-array comparisons: O(P + N) vectorised, cheap enough per tick.
Where 1 and 2 hold, the recomputed Q of 3 adds exactly the blueprint's rows in the blueprint's
order, so it is the blueprint's sum and is not built; an equal Q skips the tolerance comparison.
A violation is a bug; it is returned as data so that the shell can log and alarm with details.
"""

from __future__ import annotations

import numpy as np

from kalena.core.ledger.blueprint import Blueprint, per_node_sum
from kalena.core.ledger.rows import all_per_row
from kalena.core.ledger.state import Ledger
from kalena.core.resources import DIMS
from kalena.core.tolerance import REL_TOL
from kalena.core.verdict import Reason, ReasonCode

#: Per-node sums of identical rows added in the same order are bitwise equal; the tolerance only
#: covers a blueprint whose sums were formed in a different order.
SUM_RTOL = 1e-12

_MAX_LISTED = 5  # name at most this many offenders per check, then count the rest


def _violation(detail: str, dimension: str = "") -> Reason:
    return Reason(ReasonCode.RESTORATION_VIOLATION, dimension=dimension, detail=detail)


def _listed(names: list[str], total: int) -> str:
    more = f" (+{total - len(names)} more)" if total > len(names) else ""
    return ", ".join(names) + more


def restoration_violations(ledger: Ledger, blueprint: Blueprint) -> tuple[Reason, ...]:
    """Every way the ledger's production state differs from ``blueprint`` (empty when it holds)."""
    out: list[Reason] = []
    rs = ledger.row_arrays()
    p = len(blueprint.ids)
    if ledger.production_count != p or rs.high < p:
        return (_violation(f"ledger holds {ledger.production_count} production rows, blueprint {p}"),)
    ids = ledger.production_ids()
    if ids != blueprint.ids:
        bad = [b for a, b in zip(ids, blueprint.ids, strict=False) if a != b] or list(
            blueprint.ids[len(ids) :]
        )
        out.append(_violation(f"production set differs: {_listed(bad[:_MAX_LISTED], len(bad))}"))
    ok = rs.alive[:p] & ~rs.is_batch[:p] & (rs.node[:p] == blueprint.node)
    same = np.equal(rs.request[:p], blueprint.requests, out=np.empty((p, rs.request.shape[1]), dtype=bool))
    ok &= all_per_row(same)
    rows_hold = bool(ok.all())
    if not rows_hold:
        bad_rows = np.flatnonzero(~ok)
        names = [blueprint.ids[i] for i in bad_rows[:_MAX_LISTED]]
        out.append(_violation(f"production placement or request changed: {_listed(names, len(bad_rows))}"))
    extra = rs.alive[p : rs.high] & ~rs.is_batch[p : rs.high]
    has_extra = bool(extra.any())
    if has_extra:
        rows = np.flatnonzero(extra)[:_MAX_LISTED] + p
        names = [rs.specs[r].id for r in rows]  # type: ignore[union-attr]
        out.append(
            _violation(f"service workload(s) outside the blueprint: {_listed(names, int(extra.sum()))}")
        )
    # From scratch, over every row; requests only. When rows 0..P-1 are exactly the blueprint's
    # (alive, service, same node, equal request) and no other row is service, that sum adds the
    # blueprint's rows in its order: it is its request_sum, so it is not built.
    scratch: np.ndarray | None = None
    if has_extra or not rows_hold:
        live = rs.alive[: rs.high] & ~rs.is_batch[: rs.high]
        scratch = per_node_sum(
            np.compress(live, rs.node[: rs.high]),
            np.compress(live, rs.request[: rs.high], axis=0),
            ledger.n_nodes,
        )
    for label, q in (("maintained", ledger.request_sum), ("recomputed", scratch)):
        if q is None or np.array_equal(q, blueprint.request_sum):
            continue  # equal is close (isclose is ``|x - y| <= tol or x == y``): nothing to report
        diff = ~np.isclose(q, blueprint.request_sum, rtol=SUM_RTOL, atol=SUM_RTOL)
        for d in np.flatnonzero(diff.any(axis=0)):
            n = int(np.flatnonzero(diff[:, d])[0])
            out.append(
                _violation(
                    f"{label} request ledger on node {ledger.nodes[n].name} is {q[n, d]:g}, "
                    f"blueprint {blueprint.request_sum[n, d]:g}",
                    DIMS[d],
                )
            )
    over = ledger.request_sum > ledger.capacity_tol
    for d in np.flatnonzero(over.any(axis=0)):
        n = int(np.flatnonzero(over[:, d])[0])
        out.append(_violation(f"request ledger exceeds capacity on node {ledger.nodes[n].name}", DIMS[d]))
    return tuple(out)


def sum_violations(ledger: Ledger) -> tuple[Reason, ...]:
    """Where the incrementally kept sums and counts differ from a from-scratch recomputation."""
    inc, scratch = ledger.incremental(), ledger.recompute()
    out: list[Reason] = []
    for name in ("request", "reservation"):
        a, b = getattr(inc, name), getattr(scratch, name)
        bad = ~np.isclose(a, b, rtol=REL_TOL, atol=REL_TOL)
        for d in np.flatnonzero(bad.any(axis=0)):
            out.append(_violation(f"incremental {name} sum drifted from scratch", DIMS[d]))
    for name in ("batch_count", "service_count"):
        if not np.array_equal(getattr(inc, name), getattr(scratch, name)):
            out.append(_violation(f"incremental {name} differs from scratch"))
    return tuple(out)
