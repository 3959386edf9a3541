"""Kalena's secondary scheduler for Kubernetes (``kalena k8s scheduler``).

Pods with ``spec.schedulerName: kalena`` are Kalena's: batch by that opt-in, whatever their tier
label says. Every pass:

1. **the view**: the nodes (Ready and schedulable; a label selector may narrow them to Kalena's),
   every bound pod that has not finished and the node agents' reservation reports
   (``NodeReservation``, :mod:`kalena.k8s.reports`), from the scheduler's cache of the API (a
   list, then watches; a watch that expires, HTTP 410, is a fresh list);
2. **the ledger**: :func:`kalena.core.ledger.observed_ledger` over them (production as the
   blueprint, each bound batch pod as itself, the fresh reports' reservations in place of the
   requests; a node the ledger cannot hold is left out of placement and said once);
3. **placement**: the core's :func:`~kalena.core.placement.schedule` for the pending pods, with
   image locality from each node's ``status.images``;
4. **binding**: ``pods/binding`` with the pod's UID as precondition. A 409 (the pod was bound by
   someone else, or deleted and made again under its name) is optimistic concurrency doing its
   job: the pod is read again and the next pass decides from the fresh state. A bound pod gets a
   ``Scheduled`` event (the apiserver sets ``PodScheduled=True``); a pod that stays pending gets
   ``FailedScheduling`` with the core's why-pending text and ``PodScheduled=False``
   (``Unschedulable``), once per distinct reason.

A pod whose constraints the core cannot evaluate yet (required node affinity, pod affinity or
anti-affinity, topology spread) stays pending and says so, rather than land where they might
not hold.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

import numpy as np
from kubernetes import client as kclient
from kubernetes.client.exceptions import ApiException

from kalena.core.ledger.observed import observed_ledger
from kalena.core.placement import ContextKeeper, PlacementConfig, schedule
from kalena.k8s.cache import SCHEDULER_NAME, ClusterCache, object_key, read_json
from kalena.k8s.objects import PodView
from kalena.k8s.reports import STALE_AFTER_S

COMPONENT = "kalena-scheduler"


def _now_iso() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class PassResult:
    """What one pass did: pods bound (pod -> node), binds refused by the apiserver (409), pods
    left pending (pod -> why)."""

    bound: dict[str, str] = field(default_factory=dict)
    conflicts: list[str] = field(default_factory=list)
    pending: dict[str, str] = field(default_factory=dict)


class Scheduler(ClusterCache):
    """The passes over the cache of the API (module docstring; the cache is
    :class:`~kalena.k8s.cache.ClusterCache`)."""

    def __init__(
        self,
        core: kclient.CoreV1Api,
        *,
        name: str = SCHEDULER_NAME,
        node_selector: str | None = None,
        placement: PlacementConfig | None = None,
        infer_batch: bool = False,
        clock: Callable[[], float] = time.time,
        log: Callable[[str], None] | None = None,
        stale_after_s: float = STALE_AFTER_S,
    ) -> None:
        super().__init__(
            core, name=name, node_selector=node_selector, infer_batch=infer_batch, clock=clock, log=log,
            stale_after_s=stale_after_s,
        )  # fmt: skip
        self.placement = placement or PlacementConfig()
        self.rng = np.random.default_rng(0)
        self.said: dict[str, str] = {}  # pod uid -> the last why-pending it was told

    # -- one pass -------------------------------------------------------------------------------
    def pass_once(self) -> PassResult:
        """One pass over the cache (module docstring)."""
        out = PassResult()
        nodes, residents, pending, images = self.view()
        if not pending:
            return out
        views = {v.spec.id: v for v in pending}
        ready = []
        for v in pending:
            if v.unsupported:
                self._pending(v, f"Kalena cannot evaluate {', '.join(v.unsupported)} yet", out)
            else:
                ready.append(v)
        if not nodes:
            for v in ready:
                self._pending(v, "0/0 nodes are available: no Ready node for Kalena", out)
            return out
        ledger, left_out = observed_ledger(nodes, residents, self.reservations(residents))
        for n in ledger.node_names:
            self._say_problems(f"{n} (ledger)", [left_out[n]] if n in left_out else [])
        keeper = ContextKeeper(ledger.node_names)
        for k, n in enumerate(ledger.node_names):
            for image in images.get(n, []):
                keeper.started(image, k)
        specs = [v.spec for v in ready]
        ctx = keeper.context(self.clock(), specs)
        if left_out:
            eligible = np.array([n not in left_out for n in ledger.node_names])
            ctx = dataclasses.replace(ctx, eligible=eligible)
        decision = schedule(specs, ledger, ctx, self.placement, self.rng)
        for why in decision.pending:
            self._pending(views[why.workload_id], why.message, out)
        for res in ledger.apply_all(decision.placements):
            c = res.commitment
            if not res.accepted:
                continue
            v = views[c.workload.id]  # type: ignore[union-attr]
            node = ledger.node_names[c.node]  # type: ignore[union-attr]
            self._bind(v, node, out)
        return out

    def _bind(self, v: PodView, node: str, out: PassResult) -> None:
        body = {
            "apiVersion": "v1", "kind": "Binding",
            "metadata": {"name": v.name, "namespace": v.namespace, "uid": v.uid},  # the UID precondition
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }  # fmt: skip
        try:
            self.core.create_namespaced_pod_binding(v.name, v.namespace, body, _preload_content=False)
        except ApiException as e:
            if e.status in (409, 404):  # bound elsewhere, or gone, or another pod under the name now
                out.conflicts.append(v.spec.id)
                self._refresh(v)
                return
            raise
        out.bound[v.spec.id] = node
        with self.lock:  # bound now: the next pass counts it there even before its watch event
            pod = self.pods.get(v.uid)
            if pod is not None:
                pod = {**pod, "spec": {**(pod.get("spec") or {}), "nodeName": node}}
                self.pods[v.uid] = pod
        self.said.pop(v.uid, None)
        self._event(v, "Scheduled", f"Successfully assigned {v.spec.id} to {node}", "Normal")

    def _refresh(self, v: PodView) -> None:
        """Read the pod again after a refused bind: the next pass decides from what is."""
        try:
            raw = read_json(self.core.read_namespaced_pod(v.name, v.namespace, _preload_content=False))
        except ApiException as e:
            if e.status == 404:
                with self.lock:
                    self.pods.pop(v.uid, None)
                return
            raise
        with self.lock:
            if raw.get("metadata", {}).get("uid") != v.uid:
                self.pods.pop(v.uid, None)
            self.pods[object_key("pods", raw)] = raw

    def _pending(self, v: PodView, why: str, out: PassResult) -> None:
        out.pending[v.spec.id] = why
        if self.said.get(v.uid) == why:
            return
        self.said[v.uid] = why
        self._event(v, "FailedScheduling", why, "Warning")
        cond = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": why,
                "lastTransitionTime": _now_iso()}  # fmt: skip
        try:
            self.core.patch_namespaced_pod_status(v.name, v.namespace, {"status": {"conditions": [cond]}})
        except ApiException as e:
            if e.status not in (404, 409):
                raise

    def _event(self, v: PodView, reason: str, message: str, kind: str) -> None:
        now = _now_iso()
        body = {
            "metadata": {"generateName": f"{v.name}.", "namespace": v.namespace},
            "involvedObject": {"apiVersion": "v1", "kind": "Pod", "name": v.name, "namespace": v.namespace,
                               "uid": v.uid},
            "reason": reason, "message": message[:1024], "type": kind,
            "source": {"component": COMPONENT}, "reportingComponent": COMPONENT,
            "firstTimestamp": now, "lastTimestamp": now, "count": 1,
        }  # fmt: skip
        try:
            self.core.create_namespaced_event(v.namespace, body)
        except ApiException as e:
            if e.status not in (403, 404, 409):  # an event is worth less than the pass
                raise

    # -- the loop -------------------------------------------------------------------------------
    def run(self, stop: threading.Event, every_s: float = 1.0) -> None:
        """Watch nodes and pods, and pass when something changed (at most every ``every_s``)."""
        self.sync()
        threads = self.watch_all(stop)
        while not stop.is_set():
            self.changed.wait(every_s)
            self.changed.clear()
            try:
                self.pass_once()
            except ApiException:
                stop.wait(every_s)  # the apiserver is away: the next pass tries again
        for t in threads:
            t.join(timeout=5)
