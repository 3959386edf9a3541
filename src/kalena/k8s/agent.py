"""The node agent on Kubernetes (``kalena k8s agent``, run by a DaemonSet on every node).

It is the same :class:`~kalena.agent.loop.Agent` as on any Linux host, enforce-only
(``admit = False``: Kalena's secondary scheduler places batch, the kubelet starts it), with the
Kubernetes implementations of its ports:

* :class:`NodePods` (the declaration source and the placed-batch source): this node and its pods
  from the API (a list, then watches, field-selected to the node). Production pods (the default
  scheduler's, not labelled batch) and DaemonSet pods make the node's declaration, each with the
  cgroup the kubelet gave it (:mod:`kalena.k8s.kubelet`); running pods of Kalena's
  ``schedulerName`` (or labelled batch) are the placed batch the agent enforces on;
* :class:`EvictionApi` (the disruptor): an eviction is a ``pods/eviction`` (so
  PodDisruptionBudgets hold), with the victim's grace and the pod's UID as precondition. A
  refusal (HTTP 429: a budget allows no disruption now) is respected and asked again each
  round; only the limit-breach override deletes the pod anyway, and the log says which budget
  it went past;
* :class:`PodRuntime`: the kubelet's pods as the agent's batch runs: it never starts one, a run
  ends when its pod is gone or has finished;
* :class:`ReportPublisher`: after each estimate, this node's ``NodeReservation`` (the core's
  reservation-report message), which Kalena's scheduler and extender read.

Throttling is the agent's own, on the pod cgroups: the kubelet writes a pod's cgroup when it
makes it (and on a resize); Kalena's writer keeps the quota of each batch pod where the core's
round wants it and puts a production pod's back when an anti-starvation cap ends.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import threading
import time
from collections.abc import Callable, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from kubernetes import client as kclient
from kubernetes.client.exceptions import ApiException

from kalena.agent.actionlog import ActionLog
from kalena.agent.build import build_agent, cgroup_tree
from kalena.agent.cgroupfs import FsCgroupReader
from kalena.agent.config import AgentConfig
from kalena.agent.declaration import Adopted, Declaration, DeclarationError, over_capacity
from kalena.agent.layout import CgroupLayout, detect
from kalena.agent.loop import Agent
from kalena.agent.ports import Disruption, PlacedRun
from kalena.agent.state import JobRecord
from kalena.agent.telemetry import host_memory
from kalena.agent.writer import CgroupWriter
from kalena.core.messages import ReservationEntry, ReservationReport
from kalena.core.model import Tier
from kalena.core.resources import DIMS, Resources
from kalena.ir.errors import Problem
from kalena.k8s.cache import SCHEDULER_NAME, ClusterCache
from kalena.k8s.kubelet import Driver, LayoutError, detect_driver, kubepods, pod_cgroup, qos_class
from kalena.k8s.objects import node_spec, pod_limits, pod_view
from kalena.k8s.reports import GROUP, PLURAL, VERSION, report_object

KINDS = ("nodes", "pods")


def _time(raw: Any) -> float | None:
    """An API timestamp (RFC 3339) as epoch seconds."""
    if not raw:
        return None
    try:
        return datetime.fromisoformat(str(raw).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


class NodeCache(ClusterCache):
    """The cluster cache narrowed to one node and its pods (field selectors)."""

    def __init__(self, core: kclient.CoreV1Api, node: str, **kw: Any) -> None:
        super().__init__(core, **kw)
        self.node = node

    def _lister(self, what: str) -> tuple[Callable[..., Any], dict[str, Any]]:
        if what == "nodes":
            return self.core.list_node, {"field_selector": f"metadata.name={self.node}"}
        if what == "pods":
            return self.core.list_pod_for_all_namespaces, {"field_selector": f"spec.nodeName={self.node}"}
        return super()._lister(what)


class NodePods:
    """This node and its pods (module docstring): the agent's declaration and placed batch."""

    def __init__(
        self,
        core: kclient.CoreV1Api,
        node: str,
        *,
        driver: Driver,
        kubelet_root: str = "/",
        name: str = SCHEDULER_NAME,
        infer_batch: bool = False,
        clock: Callable[[], float] = time.time,
        log: Callable[[str], None] | None = None,
    ) -> None:
        self.cache = NodeCache(core, node, name=name, infer_batch=infer_batch, clock=clock, log=log)
        self.node, self.driver, self.kubelet_root = node, driver, kubelet_root
        self.name, self.infer_batch, self.clock = name, infer_batch, clock
        self.current: Declaration | None = None
        self._built_at = -1  # the cache generation the current declaration was built from
        self.listed = False

    @property
    def source(self) -> str:
        return f"node {self.node} (the API)"

    def sync(self) -> None:
        for what in KINDS:
            self.cache._list(what)
        self.listed = True

    def start(self, stop: threading.Event) -> list[threading.Thread]:
        """Follow the node and its pods until ``stop`` (a thread each)."""
        c = self.cache
        threads = [
            threading.Thread(target=c.watch, args=(w, stop), name=f"kalena-agent-{w}", daemon=True)
            for w in KINDS
        ]
        threads.append(threading.Thread(target=c._close_on, args=(stop,), daemon=True))
        for t in threads:
            t.start()
        return threads

    # -- reading pods -----------------------------------------------------------------------------
    def _pods(self) -> list[dict[str, Any]]:
        with self.cache.lock:
            return list(self.cache.pods.values())

    def pod(self, workload: str) -> dict[str, Any] | None:
        """The pod ``namespace/name`` on this node now (``None``: not here)."""
        ns, _, name = workload.partition("/")
        for p in self._pods():
            meta = p.get("metadata") or {}
            if meta.get("name") == name and (meta.get("namespace") or "default") == ns:
                return p
        return None

    def _is_batch(self, v: Any) -> bool:
        return bool(v.spec.tier is Tier.BATCH)  # Kalena's scheduler name included (pod_view)

    def cgroup_of(self, pod: Mapping[str, Any]) -> str:
        uid = str((pod.get("metadata") or {}).get("uid") or "")
        return pod_cgroup(uid, qos_class(pod), self.driver, self.kubelet_root)

    # -- the declaration source -------------------------------------------------------------------
    def build(self) -> Declaration:
        """The node's declaration from the tables now; raises :class:`DeclarationError`."""
        with self.cache.lock:
            raw_node = self.cache.nodes.get(self.node)
        if raw_node is None:
            raise DeclarationError(
                [Problem(self.source, "node", "no Node of this name in the API", self.node)]
            )
        node, problems = node_spec(raw_node)
        if problems:
            raise DeclarationError([Problem(self.source, "node", p, self.node) for p in problems])
        adopted: list[Adopted] = []
        for raw in sorted(self._pods(), key=lambda p: str((p.get("metadata") or {}).get("uid"))):
            v = pod_view(raw, infer_batch=self.infer_batch, batch_scheduler=self.name)
            if v.finished or (self._is_batch(v) and not v.spec.is_daemonset):
                continue
            try:
                cg = self.cgroup_of(raw)
            except LayoutError as e:
                self.cache._say_problems(v.spec.id, [str(e)])
                continue
            limits = pod_limits(raw)
            spec = dataclasses.replace(
                v.spec,
                tier=Tier.SERVICE,
                limits=Resources.from_mapping(limits, default=0.0) if limits else None,
            )
            started = _time((raw.get("status") or {}).get("startTime"))
            adopted.append(Adopted(spec, cg, started_at=started))
        decl = Declaration(node, None, tuple(adopted), self.source)
        over = over_capacity(decl, self.source, "pods", "production requests")
        if over:
            raise DeclarationError(over)
        return decl

    def changed(self) -> Declaration | DeclarationError | None:
        gen = self.cache.generation
        if gen == self._built_at:
            return None
        self._built_at = gen
        try:
            decl = self.build()
        except DeclarationError as e:
            return e
        if decl == self.current:
            return None
        self.current = decl
        return decl

    # -- the placed-batch source ------------------------------------------------------------------
    def placed(self) -> list[PlacedRun] | None:
        if not self.listed:
            return None
        out = []
        for raw in self._pods():
            v = pod_view(raw, infer_batch=self.infer_batch, batch_scheduler=self.name)
            if not self._is_batch(v) or v.spec.is_daemonset or v.phase != "Running":
                continue
            status = raw.get("status") or {}
            started = _time(status.get("startTime"))
            try:
                cg = self.cgroup_of(raw)
            except LayoutError as e:
                self.cache._say_problems(v.spec.id, [str(e)])
                continue
            grace = (raw.get("spec") or {}).get("terminationGracePeriodSeconds")
            out.append(
                PlacedRun(
                    workload_id=v.spec.id,
                    cgroup=cg,
                    requests=_dims(v.spec.requests),
                    limits=pod_limits(raw) or None,
                    priority=v.spec.priority,
                    started_at=started if started is not None else self.clock(),
                    owner=v.spec.owner,
                    grace_s=float(grace) if isinstance(grace, int | float) else None,
                    uid=v.uid,
                )
            )
        return out


def _dims(r: Resources) -> dict[str, float]:
    return {d: float(r[d]) for d in DIMS if math.isfinite(r[d]) and r[d] > 0}


def _message(e: ApiException) -> str:
    try:
        return str(json.loads(e.body or "{}").get("message") or e.reason)
    except ValueError:
        return str(e.reason)


class EvictionApi:
    """:class:`~kalena.agent.ports.Disruptor` through ``pods/eviction`` (module docstring)."""

    def __init__(self, core: kclient.CoreV1Api, pods: NodePods) -> None:
        self.core, self.pods = core, pods

    def _target(self, workload: str) -> tuple[str, str, str] | None:
        pod = self.pods.pod(workload)
        if pod is None:
            return None
        meta = pod.get("metadata") or {}
        return str(meta.get("namespace") or "default"), str(meta.get("name")), str(meta.get("uid") or "")

    def evict(self, workload: str, grace_s: float, override: bool, reason: str) -> Disruption:
        target = self._target(workload)
        if target is None:
            return Disruption(True, "gone")
        ns, name, uid = target
        grace = max(0, math.ceil(grace_s))
        options = kclient.V1DeleteOptions(
            grace_period_seconds=grace, preconditions=kclient.V1Preconditions(uid=uid)
        )
        body = kclient.V1Eviction(
            metadata=kclient.V1ObjectMeta(name=name, namespace=ns), delete_options=options
        )
        try:
            self.core.create_namespaced_pod_eviction(name, ns, body)
            return Disruption(True, "accepted")
        except ApiException as e:
            if e.status in (404, 409):  # gone, or another pod of that name now: this one is gone
                return Disruption(True, "gone")
            refusal = f"HTTP {e.status}: {_message(e)}"
            if e.status not in (429, 500) or not override:
                return Disruption(False, refusal)  # a budget's refusal, or the API's: asked again later
        try:  # the limit-breach override: it takes precedence over the budget, and says so
            self.core.delete_namespaced_pod(name, ns, body=options)
        except ApiException as e:
            if e.status not in (404, 409):
                return Disruption(False, f"{refusal}; the override's delete: HTTP {e.status}: {_message(e)}")
        return Disruption(
            True, f"{refusal}: deleted by the limit-breach override ({reason})", overridden=True
        )

    def kill(self, workload: str, reason: str) -> None:
        target = self._target(workload)
        if target is None:
            return
        ns, name, uid = target
        options = kclient.V1DeleteOptions(
            grace_period_seconds=0, preconditions=kclient.V1Preconditions(uid=uid)
        )
        with contextlib.suppress(ApiException):  # gone already, or the API is away: asked again
            self.core.delete_namespaced_pod(name, ns, body=options)


class PodRuntime:
    """The kubelet's pods as the agent's batch runs (:class:`~kalena.agent.ports.Runtime`)."""

    def __init__(self, pods: NodePods, evictions: EvictionApi, grace_s: float) -> None:
        self.pods, self.evictions, self.grace_s = pods, evictions, grace_s

    def _pod(self, job: JobRecord) -> dict[str, Any] | None:
        pod = self.pods.pod(job.workload_id or "")
        uid = (job.labels or {}).get("kalena.naughtian.io/uid")
        if pod is not None and uid and (pod.get("metadata") or {}).get("uid") != uid:
            return None  # made again under its name: the run the job holds is gone
        return pod

    def start(self, job: JobRecord, reason: str) -> int:
        raise OSError("on Kubernetes the kubelet starts pods, not Kalena's agent")

    def finished(self, job: JobRecord) -> tuple[bool, int | None]:
        """Ended when its pod finished (its first terminated container's exit code) or is gone
        (exit code unknown)."""
        if not self.pods.listed:
            return False, None
        pod = self._pod(job)
        if pod is None:
            return True, None
        phase = (pod.get("status") or {}).get("phase")
        if phase == "Succeeded":
            return True, 0
        if phase == "Failed":
            codes = [t.get("exitCode") for t in _terminated(pod)]
            return True, next((int(c) for c in codes if isinstance(c, int) and c != 0), 1)
        return False, None

    def oom_killed(self, job: JobRecord) -> bool | None:
        pod = self._pod(job)
        if pod is None:
            return None
        return any(t.get("reason") == "OOMKilled" for t in _terminated(pod)) or None

    def terminate(self, job: JobRecord, reason: str) -> None:
        self.evictions.evict(job.workload_id or "", job.grace_s or self.grace_s, False, reason)

    def kill(self, job: JobRecord, reason: str) -> None:
        self.evictions.evict(job.workload_id or "", 0.0, False, reason)

    def release(self, workload_id: str) -> int | None:
        return None

    def cleanup(self, cgroup: str, reason: str) -> None:
        """Nothing: the kubelet removes a pod's cgroup."""

    def sweep(self, keep: Any, reason: str) -> tuple[str, ...]:
        """Nothing: every pod on the node is the kubelet's, and in the ledger."""
        return ()

    def started(self, job: JobRecord) -> bool | None:
        return True


def _terminated(pod: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    status = pod.get("status") or {}
    out = []
    for c in status.get("containerStatuses") or []:
        for key in ("state", "lastState"):
            t = (c.get(key) or {}).get("terminated")
            if t:
                out.append(t)
    return out


class ReportPublisher:
    """After each estimate, this node's ``NodeReservation`` (module docstring); a failure is said
    once and the next estimate tries again."""

    def __init__(self, core: kclient.CoreV1Api, node: str, log: Callable[[str], None]) -> None:
        self.custom = kclient.CustomObjectsApi(core.api_client)
        self.node, self.log = node, log
        self.published: float | None = None
        self.failing: str | None = None

    def report(self, agent: Agent) -> ReservationReport | None:
        led = agent.ledger
        if led is None or agent.state.last_estimate is None:
            return None
        k = led.node_index[self.node]
        rows = led.rows()
        entries = tuple(
            ReservationEntry(wid, Resources.from_array(rows.reservations[i]))
            for i, wid in enumerate(rows.ids)
            if int(rows.node[i]) == k
        )
        return ReservationReport(self.node, led.node_epoch(k), agent.state.last_estimate, entries)

    def __call__(self, agent: Agent) -> None:
        if agent.state.last_estimate is None or agent.state.last_estimate == self.published:
            return
        report = self.report(agent)
        if report is None:
            return
        try:
            self.put(report)
        except ApiException as e:
            said = f"cannot publish its NodeReservation: HTTP {e.status}: {_message(e)}"
            if said != self.failing:
                self.log(said)
            self.failing = said
            return
        if self.failing is not None:
            self.log("publishes its NodeReservation again")
        self.failing, self.published = None, report.time

    def put(self, report: ReservationReport) -> None:
        body = report_object(report)
        try:
            old = self.custom.get_cluster_custom_object(GROUP, VERSION, PLURAL, self.node)
        except ApiException as e:
            if e.status != 404:
                raise
            self.custom.create_cluster_custom_object(GROUP, VERSION, PLURAL, body)
            return
        body["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"]
        self.custom.replace_cluster_custom_object(GROUP, VERSION, PLURAL, self.node, body)


def build_k8s_agent(
    core: kclient.CoreV1Api,
    node: str,
    state_dir: Path,
    *,
    config: AgentConfig | None = None,
    driver: str = "auto",
    kubelet_root: str = "/",
    layout: CgroupLayout | None = None,
    name: str = SCHEDULER_NAME,
    infer_batch: bool = False,
    clock: Callable[[], float] = time.time,
    log: Callable[[str], None] | None = None,
    archive: str | Path | None = None,
) -> tuple[Agent, NodePods]:
    """An enforce-only agent for the Kubernetes node ``node`` on this host, and its pod source
    (start its watches with :meth:`NodePods.start`). Raises ``LayoutError`` (the kubelet's cgroups
    cannot be found), ``DeclarationError`` (the node is not in the API, or its pods overcommit
    it) or ``ApiException`` (the apiserver refuses or does not answer); nothing is changed then."""
    say = log or (lambda _line: None)
    layout = layout or detect()
    found: Driver = detect_driver(layout, kubelet_root) if driver == "auto" else driver  # type: ignore[assignment]
    tree = cgroup_tree(kubepods(found, kubelet_root), layout)  # the agent's root: every pod's parent
    pods = NodePods(
        core, node, driver=found, kubelet_root=kubelet_root, name=name, infer_batch=infer_batch,
        clock=clock, log=say,
    )  # fmt: skip
    pods.sync()
    first = pods.build()
    pods.current = first
    pods._built_at = pods.cache.generation
    config = dataclasses.replace(config or AgentConfig(), admit=False)
    evictions = EvictionApi(core, pods)

    def make_runtime(_w: CgroupWriter, _r: FsCgroupReader, _log: ActionLog, _dir: Path) -> PodRuntime:
        return PodRuntime(pods, evictions, config.policy.eviction.grace_period_s)

    agent = build_agent(
        first,
        state_dir,
        config=config,
        clock=clock,
        tree=tree,
        runtime=make_runtime,
        declarations=pods,
        node_memory=host_memory,
        placed=pods,
        disruptor=evictions,
        archive_path=archive,
    )
    agent.after_step.append(ReportPublisher(core, node, say))
    return agent, pods
