"""The node agents' reservation reports on Kubernetes: one ``NodeReservation`` per node.

Why a small custom resource and not an annotation on the Node: every controller in a cluster
watches Nodes, and a report every few seconds on each would wake all of them with an object
that is large already; a resource of its own is watched only by who needs it (Kalena's
scheduler and extender), and its RBAC is its own (an agent may write reports, never Nodes).
Koordinator made the same choice (NodeMetric).

The object is cluster-scoped, named after its node; ``spec.report`` is the core's
``reservation-report`` message as it is on the wire (:mod:`kalena.core.messages`, versioned and
read back hostile-safe), so the agent and the scheduler agree on one format with the Docker
shell and the simulator.

A report is used only while it is fresh (``time`` within ``stale_after_s`` of the scheduler's
clock) and only for pods bound to the node it names: a missing, stale or unreadable report
leaves that node's pods at their requests (fail-safe: it never releases slack).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from kalena.core.messages import MessageError, ReservationReport, decode, encode
from kalena.core.resources import Resources

GROUP = "kalena.naughtian.io"
VERSION = "v1alpha1"
PLURAL = "nodereservations"
KIND = "NodeReservation"
STALE_AFTER_S = 120.0

#: The CustomResourceDefinition (the chart renders this same object).
CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": f"{PLURAL}.{GROUP}"},
    "spec": {
        "group": GROUP,
        "scope": "Cluster",
        "names": {"plural": PLURAL, "singular": "nodereservation", "kind": KIND, "shortNames": ["nres"]},
        "versions": [
            {
                "name": VERSION,
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {
                                "type": "object",
                                "required": ["report"],
                                "properties": {
                                    # the core's wire message, checked by its own reader
                                    "report": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
                                },
                            }
                        },
                    }
                },
            }
        ],
    },
}


def report_object(report: ReservationReport) -> dict[str, Any]:
    """The ``NodeReservation`` an agent writes for ``report``."""
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": KIND,
        "metadata": {"name": report.node},
        "spec": {"report": encode(report)},
    }


def read_report(obj: Mapping[str, Any]) -> ReservationReport:
    """The report a ``NodeReservation`` holds; :class:`MessageError` (naming the key) otherwise."""
    name = str((obj.get("metadata") or {}).get("name") or "")
    msg = decode((obj.get("spec") or {}).get("report"))
    if not isinstance(msg, ReservationReport):
        raise MessageError("spec.report.kind", f"must be reservation-report, got {msg.kind!r}")
    if msg.node != name:
        raise MessageError("spec.report.node", f"must be the object's name {name!r}, got {msg.node!r}")
    return msg


def reservations_from(
    objects: Mapping[str, Mapping[str, Any]],
    bound: Mapping[str, str],
    now: float,
    stale_after_s: float = STALE_AFTER_S,
    read: Callable[[Mapping[str, Any]], ReservationReport] = read_report,
) -> tuple[dict[str, Resources], dict[str, str]]:
    """The fresh reports' reservations of the pods bound where each report says (``bound``: pod ->
    node), and the reports left out (node -> why). ``read`` is :func:`read_report` or one that
    remembers what it read (a cache reading the same objects pass after pass)."""
    out: dict[str, Resources] = {}
    left: dict[str, str] = {}
    for name, obj in objects.items():
        try:
            report = read(obj)
        except MessageError as e:
            left[name] = f"unreadable: {e}"
            continue
        if now - report.time > stale_after_s:
            left[name] = f"stale: from {now - report.time:.0f} s ago"
            continue
        for e in report.entries:
            if bound.get(e.workload_id) == report.node:
                out[e.workload_id] = e.reservation
    return out, left
