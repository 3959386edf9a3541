"""What the archive writes back to the planner (seed 000 §5.5, Appendix C; issue 15 item 2).

For each declaration of a Kuberina Workloads document, over a window:

* the IR v1 ``observed:`` block, per replica: ``p50``, ``p95``, ``p99`` and ``peak`` of usage (its
  replicas' samples pooled) and ``exceeded_request_fraction`` (the share of samples above the
  request, the largest over the requested dimensions), written into a copy of the document that
  Kalena's own reader (closed schema) reads back;
* beside it, in a JSON report: the reservation's p50/p95/p99, the burst frequency per dimension,
  limit breaches, evictions by cause, throttled time and blueprint drift D per dimension with the
  re-plan recommendation when D reaches the threshold; per node, its evictions and the slack its
  workloads' reservations yielded (:func:`node_slack`). Kalena never re-plans.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
from collections import Counter
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from kalena.archive.store import Archive, Window
from kalena.core.distribution import Buckets, above_fraction, drift, mixture_quantiles, regroup
from kalena.core.resources import DIMS, NDIM
from kalena.ir.document import ObservedDoc, WorkloadsDoc

#: Drift at or above this share of the requests asks for a re-plan (seed 000 §5.3: the operator's).
DEFAULT_DRIFT_THRESHOLD = 0.25
LEVELS = np.array([0.5, 0.95, 0.99, 1.0])


@dataclass(frozen=True, slots=True)
class Export:
    document: WorkloadsDoc  # the input with an observed block on every declaration seen
    report: dict[str, Any]


def _iso(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _dims(row: np.ndarray, keep: np.ndarray | None = None) -> dict[str, float]:
    """A (D,) vector as IR dims, rounded to 6 significant digits: measured dimensions only, and of
    those only ``keep`` (the requested ones and those ever used) when given."""
    use = np.isfinite(row) if keep is None else np.isfinite(row) & keep
    return {DIMS[d]: float(f"{row[d]:.6g}") for d in np.flatnonzero(use)}


def plan_pods(
    doc: WorkloadsDoc, recorded_as: Mapping[str, str] | None = None
) -> tuple[list[str], np.ndarray]:
    """Every pod of ``doc`` under the id the archive has it by (``recorded_as``: where that differs
    from its v1 name), and the index of its declaration."""
    alias = recorded_as or {}
    pods = [(alias.get(pid, pid), i) for i, d in enumerate(doc.declarations) for pid in d.pod_ids()]
    return [p for p, _ in pods], np.array([i for _, i in pods], dtype=np.int64)


def pooled_quantiles(
    w: Window, decl_of_pod: np.ndarray, levels: np.ndarray, of: str = "usage"
) -> tuple[np.ndarray, np.ndarray, np.ndarray, Buckets]:
    """Per declaration seen: its replicas' samples pooled (a mixture of their distributions).
    Returns the declarations (G,), their quantiles (G, len(levels), D), sample counts (G, D) and
    the pooled buckets themselves (grouped by declaration)."""
    b = w.usage if of == "usage" else w.reservation
    pooled = regroup(b, decl_of_pod[b.group])
    seen, q = mixture_quantiles(pooled.group, pooled.count, pooled.knots, levels)
    counts = np.zeros((len(seen), NDIM), dtype=np.int64)
    np.add.at(counts, np.searchsorted(seen, pooled.group), pooled.count)
    return seen, q, counts, pooled


def node_slack(
    placed: Mapping[str, tuple[str, ...]],
    pods: list[str],
    pod_requests: np.ndarray,
    w: Window,
    also: Collection[str] = (),
) -> dict[str, dict[str, Any]]:
    """Per node, what the reservations of the pods that ran there (``placed``) yielded over the
    window: ``slack_yield``, per dimension, the sum over those pods of (request - mean
    reservation), only dimensions with a request and a reservation recorded; ``requests``, their
    summed requests on the same dimensions; ``slack_yield_fraction``, the one over the other;
    ``workloads``, how many pods ran there. A pod's mean reservation is its whole window's (the
    buckets do not keep the node): one that moved counts whole at every node it ran on. Nodes in
    ``also`` (those with evictions) are there even where none of the pods ran in the window."""
    mean = np.full((len(pods), NDIM), np.nan)
    b = w.reservation
    mean[b.group] = np.where(b.count > 0, b.mean, np.nan)
    index = {p: i for i, p in enumerate(pods)}
    nodes = sorted({n for p in pods for n in placed.get(p, ())} | set(also))
    at = {n: k for k, n in enumerate(nodes)}
    pairs = np.array([(index[p], at[n]) for p in pods for n in placed.get(p, ())], dtype=np.int64)
    pairs = pairs.reshape(-1, 2)
    req = pod_requests[pairs[:, 0]]
    res = mean[pairs[:, 0]]
    ok = np.isfinite(req) & (req > 0) & np.isfinite(res)
    yielded = np.zeros((len(nodes), NDIM))
    summed = np.zeros((len(nodes), NDIM))
    np.add.at(yielded, pairs[:, 1], np.where(ok, req - res, 0.0))
    np.add.at(summed, pairs[:, 1], np.where(ok, req, 0.0))
    count = np.bincount(pairs[:, 1], minlength=len(nodes))
    out = {}
    for k, n in enumerate(nodes):
        asked = summed[k] > 0
        out[n] = {
            "workloads": int(count[k]),
            "requests": _dims(summed[k], asked),
            "slack_yield": _dims(yielded[k], asked),
            "slack_yield_fraction": {
                DIMS[d]: round(float(yielded[k, d] / summed[k, d]), 6) for d in np.flatnonzero(asked)
            },
        }
    return out


def export_observed(
    archive: Archive,
    doc: WorkloadsDoc,
    since: float,
    until: float,
    drift_threshold: float = DEFAULT_DRIFT_THRESHOLD,
    recorded_as: Mapping[str, str] | None = None,
) -> Export:
    """The observed blocks and the report for ``doc``'s declarations over ``[since, until)``.

    ``recorded_as``: the id a pod of ``doc`` has in the archive where it differs (a legacy
    document converted to v1 renames its single pods; the shells recorded the old names)."""
    ids, decl_of_pod = plan_pods(doc, recorded_as)
    n_decl = len(doc.declarations)
    w = archive.window(ids, since, until)
    requests = np.array([[d.requests.get(k, np.nan) for k in DIMS] for d in doc.declarations]).reshape(
        n_decl, NDIM
    )
    out: dict[str, dict[str, Any]] = {}
    decls = list(doc.declarations)
    seen, q, counts, use = pooled_quantiles(w, decl_of_pod, LEVELS)
    if len(seen):
        over = above_fraction(use.group, use.count, use.knots, requests[seen])
        res_seen, rq, _, _ = pooled_quantiles(w, decl_of_pod, LEVELS[:3], of="reservation")
        rq_by = dict(zip(res_seen.tolist(), rq, strict=True))
        for j, i in enumerate(seen.tolist()):
            requested = np.isfinite(requests[i]) & (requests[i] > 0) & np.isfinite(over[j])
            frac = float(over[j][requested].max()) if requested.any() else 0.0
            keep = requested | (np.nan_to_num(q[j, 3]) > 0)  # not the dimensions never asked for nor used
            decls[i] = dataclasses.replace(
                decls[i],
                observed=ObservedDoc(
                    window=f"{_iso(since)}/{_iso(until)}",
                    p50=_dims(q[j, 0], keep),
                    p95=_dims(q[j, 1], keep),
                    p99=_dims(q[j, 2], keep),
                    peak=_dims(q[j, 3], keep),
                    exceeded_request_fraction=round(min(1.0, max(0.0, frac)), 6),
                ),
            )
            r = rq_by.get(i)
            out[decls[i].full_name] = {
                "samples": int(counts[j].max()),
                "reservation_p50": _dims(r[0], keep) if r is not None else {},
                "reservation_p95": _dims(r[1], keep) if r is not None else {},
                "reservation_p99": _dims(r[2], keep) if r is not None else {},
                "burst_frequency": {DIMS[d]: round(float(over[j][d]), 6) for d in np.flatnonzero(requested)},
            }
    # per pod: p95 reservation against the request, for drift (seed 000 §5.3)
    p95 = w.quantiles([0.95], of="reservation")[:, 0, :]
    pod_req = requests[decl_of_pod]
    d_all = drift(pod_req, p95)
    events = archive.events(since, until, ids)
    evictions = Counter((e.workload, e.cause or "") for e in events if e.kind == "eviction")
    breaches = Counter(
        e.workload for e in events if e.kind == "limit-breach" or (e.cause or "").startswith("limit")
    )
    per_node = Counter(e.node for e in events if e.kind == "eviction" and e.node)
    name_of = {p: decls[i].full_name for p, i in zip(ids, decl_of_pod.tolist(), strict=True)}
    for (pod, cause), n in evictions.items():
        by_cause = out.setdefault(name_of[str(pod)], {}).setdefault("evictions", {})
        by_cause[cause] = by_cause.get(cause, 0) + n
    for pod, n in breaches.items():
        entry = out.setdefault(name_of[str(pod)], {})
        entry["exceeded_limit_events"] = entry.get("exceeded_limit_events", 0) + n
    throttled = np.zeros(n_decl)
    np.add.at(throttled, decl_of_pod, w.throttled_s)
    for i in np.flatnonzero(throttled > 0).tolist():
        out.setdefault(decls[i].full_name, {})["throttled_s"] = round(float(throttled[i]), 3)
    for entry in out.values():
        entry.setdefault("evictions", {})
        entry.setdefault("exceeded_limit_events", 0)
    slack = node_slack(archive.placements(ids, since, until), ids, pod_req, w, also=per_node)
    crossed = [DIMS[d] for d in range(NDIM) if math.isfinite(d_all[d]) and d_all[d] >= drift_threshold]
    report = {
        "window": {"since": since, "until": until, "read_from": list(w.levels)},
        "drift": {DIMS[d]: round(float(d_all[d]), 6) for d in range(NDIM) if math.isfinite(d_all[d])},
        "drift_threshold": drift_threshold,
        "replan_recommended": bool(crossed),
        "recommendation": (
            f"re-plan: blueprint drift on {', '.join(crossed)} is at or above {drift_threshold:g} of the "
            "requests; give the observed blocks to Kuberina (Kalena does not re-plan by itself)"
            if crossed
            else None
        ),
        "nodes": {n: {"evictions": per_node.get(n, 0), **slack[n]} for n in sorted(slack)},
        "workloads": dict(sorted(out.items())),
    }
    return Export(dataclasses.replace(doc, declarations=tuple(decls)), report)
