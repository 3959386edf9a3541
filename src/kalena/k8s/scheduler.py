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
import json
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import numpy as np
from kubernetes import client as kclient
from kubernetes import watch as kwatch
from kubernetes.client.exceptions import ApiException

from kalena.core.ledger import Ledger
from kalena.core.ledger.observed import observed_ledger
from kalena.core.model import NodeSpec, Tier, WorkloadSpec
from kalena.core.placement import ContextKeeper, PlacementConfig, schedule
from kalena.core.resources import Resources
from kalena.k8s.objects import PodView, node_ready, node_spec, pod_view
from kalena.k8s.reports import GROUP, PLURAL, STALE_AFTER_S, VERSION, reservations_from

SCHEDULER_NAME = "kalena"
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


class Scheduler:
    """The cache of the API and the passes over it (module docstring)."""

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
        self.core, self.name, self.node_selector = core, name, node_selector
        self.log = log or (lambda _line: None)
        self.placement = placement or PlacementConfig()
        self.infer_batch, self.clock = infer_batch, clock
        self.rng = np.random.default_rng(0)
        self.nodes: dict[str, dict[str, Any]] = {}
        self.pods: dict[str, dict[str, Any]] = {}  # uid -> pod
        self.reports: dict[str, dict[str, Any]] = {}  # node -> its NodeReservation
        self.custom = kclient.CustomObjectsApi(core.api_client)
        self.stale_after_s = stale_after_s
        self.versions: dict[str, str] = {}  # "nodes" / "pods" -> the list's resourceVersion
        self.said: dict[str, str] = {}  # pod uid -> the last why-pending it was told
        self.problems: dict[str, str] = {}  # node or pod -> the problem last said of it
        self.changed = threading.Event()
        self.lock = threading.Lock()

    # -- the cache ------------------------------------------------------------------------------
    def _lister(self, what: str) -> tuple[Callable[..., Any], dict[str, Any]]:
        if what == "nodes":
            return self.core.list_node, {"label_selector": self.node_selector}
        if what == "pods":
            return self.core.list_pod_for_all_namespaces, {}
        return self.custom.list_cluster_custom_object, {"group": GROUP, "version": VERSION, "plural": PLURAL}

    def _list(self, what: str) -> None:
        fn, kw = self._lister(what)
        try:
            data = _json(fn(_preload_content=False, **kw))
        except ApiException as e:
            if what != "reports" or e.status != 404:
                raise
            # no NodeReservation resource (the CRD is not installed): every pod at its requests
            self._say_problems("reports", ["the NodeReservation resource is not installed: requests only"])
            data = {"items": [], "metadata": {}}
        items = {(_key(what, o)): o for o in data.get("items") or []}
        with self.lock:
            setattr(self, what, items)
            self.versions[what] = str((data.get("metadata") or {}).get("resourceVersion") or "")
        self.changed.set()

    def sync(self) -> None:
        """List nodes, pods and the agents' reports afresh."""
        for what in ("nodes", "pods", "reports"):
            self._list(what)

    def apply_event(self, what: str, kind: str, obj: Mapping[str, Any]) -> None:
        """One watch event (ADDED, MODIFIED, DELETED, BOOKMARK) into the cache."""
        rv = str((obj.get("metadata") or {}).get("resourceVersion") or "")
        with self.lock:
            if kind != "BOOKMARK":
                table: dict[str, dict[str, Any]] = getattr(self, what)
                if kind == "DELETED":
                    table.pop(_key(what, obj), None)
                else:
                    table[_key(what, obj)] = dict(obj)
            if rv:
                self.versions[what] = rv
        self.changed.set()

    def watch(self, what: str, stop: threading.Event, timeout_s: int = 60) -> None:
        """Follow ``what`` until ``stop``: a list, then watches from its version; an expired
        version (410) or a broken stream means a fresh list."""
        while not stop.is_set():
            try:
                if not self.versions.get(what):
                    self._list(what)
                if not self.versions.get(what):  # still none (no reports resource): wait, list again
                    stop.wait(30.0)
                    continue
                w = kwatch.Watch()
                fn, kw = self._lister(what)
                for ev in w.stream(
                    fn, resource_version=self.versions[what], timeout_seconds=timeout_s,
                    allow_watch_bookmarks=True, **kw,
                ):  # fmt: skip
                    if stop.is_set():
                        w.stop()
                        break
                    raw = ev.get("raw_object") or {}
                    if ev.get("type") == "ERROR":
                        if raw.get("code") == 410:
                            self.versions[what] = ""  # too old: list again
                        break
                    self.apply_event(what, str(ev.get("type")), raw)
            except ApiException as e:
                if e.status == 410:
                    self.versions[what] = ""
                else:
                    stop.wait(1.0)  # the apiserver restarts, say: try again
            except Exception:  # a broken stream (connection reset, the apiserver went away)
                stop.wait(1.0)

    # -- one pass -------------------------------------------------------------------------------
    def _view(
        self,
    ) -> tuple[list[NodeSpec], list[tuple[WorkloadSpec, str]], list[PodView], dict[str, list[str]]]:
        with self.lock:
            nodes_raw = list(self.nodes.values())
            pods_raw = list(self.pods.values())
        nodes: list[NodeSpec] = []
        images: dict[str, list[str]] = {}
        for raw in nodes_raw:
            spec, problems = node_spec(raw)
            self._say_problems(spec.name, problems)
            if node_ready(raw) and not problems:
                nodes.append(spec)
                imgs = [
                    n for i in (raw.get("status") or {}).get("images") or [] for n in i.get("names") or []
                ]
                images[spec.name] = imgs
        names = {n.name for n in nodes}
        residents: list[tuple[WorkloadSpec, str]] = []
        pending: list[PodView] = []
        for raw in pods_raw:
            v = pod_view(raw, infer_batch=self.infer_batch)
            if v.finished:
                continue
            if v.scheduler == self.name and v.spec.tier is not Tier.BATCH:  # Kalena's: batch, bound or not
                v = dataclasses.replace(v, spec=dataclasses.replace(v.spec, tier=Tier.BATCH))
            if v.node:
                if v.node in names:
                    residents.append((v.spec, v.node))
            elif v.scheduler == self.name and not (raw.get("metadata") or {}).get("deletionTimestamp"):
                pending.append(v)
        return sorted(nodes, key=lambda n: n.name), residents, pending, images

    def _say_problems(self, who: str, problems: list[str]) -> None:
        text = "; ".join(problems)
        if problems and self.problems.get(who) != text:  # said once, and again when it changes
            self.problems[who] = text
            self.log(f"{who} left out: {text}")
        elif not problems:
            self.problems.pop(who, None)

    def ledger(self) -> tuple[Ledger, dict[str, str]]:
        nodes, residents, _, _ = self._view()
        return observed_ledger(nodes, residents, self._reservations(residents))

    def _reservations(self, residents: list[tuple[WorkloadSpec, str]]) -> dict[str, Resources]:
        """The fresh reports' reservations of the pods bound where they say; a report left out
        is said once."""
        with self.lock:
            reports = dict(self.reports)
        got, left = reservations_from(
            reports, {w.id: n for w, n in residents}, self.clock(), self.stale_after_s
        )
        for n in reports:
            self._say_problems(f"report of {n}", [left[n]] if n in left else [])
        return got

    def pass_once(self) -> PassResult:
        """One pass over the cache (module docstring)."""
        out = PassResult()
        nodes, residents, pending, images = self._view()
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
        ledger, left_out = observed_ledger(nodes, residents, self._reservations(residents))
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
            raw = _json(self.core.read_namespaced_pod(v.name, v.namespace, _preload_content=False))
        except ApiException as e:
            if e.status == 404:
                with self.lock:
                    self.pods.pop(v.uid, None)
                return
            raise
        with self.lock:
            if raw.get("metadata", {}).get("uid") != v.uid:
                self.pods.pop(v.uid, None)
            self.pods[_key("pods", raw)] = raw

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
        threads = [
            threading.Thread(target=self.watch, args=(w, stop), name=f"kalena-watch-{w}", daemon=True)
            for w in ("nodes", "pods", "reports")
        ]
        for t in threads:
            t.start()
        while not stop.is_set():
            self.changed.wait(every_s)
            self.changed.clear()
            try:
                self.pass_once()
            except ApiException:
                stop.wait(every_s)  # the apiserver is away: the next pass tries again
        for t in threads:
            t.join(timeout=5)


def _key(what: str, obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return str(meta.get("uid") if what == "pods" else meta.get("name"))


def _json(resp: Any) -> dict[str, Any]:
    return dict(json.loads(resp.data))
