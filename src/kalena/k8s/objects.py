"""Kubernetes Nodes and Pods (as the API's JSON) into the core's ``NodeSpec`` and ``WorkloadSpec``.

The quantities, requests (``max(sum of containers, max of init containers) + overhead``, a limit
standing for a missing request) and tolerations are read by :mod:`kalena.manifests.podspec`, the
reader the deployability verifier uses, so a pod means the same to both. Units are the core's:
cpu in cores, memory and ephemeral storage in GiB, ``nvidia.com/gpu`` in devices.

A pod's classification is the SPEC's (:func:`kalena.core.classify.classify`): the label
``kalena.naughtian.io/tier`` and the annotations; a malformed value is reported and the pod is
production with the defaults (never evictable by mistake).

A pod's declaration (:func:`declaration_of`: the Kuberina workload it is a replica of) follows
the manifests reader's rule for a bound pod's type: the annotation ``kalena.naughtian.io/pod-type``,
else its controller (a ReplicaSet ``<deployment>-<pod-template-hash>`` stands for its
Deployment), else the pod itself without an IR unrolling suffix (``api-0`` is of ``api``).

A pod's required node affinity, pod affinity and anti-affinity and hard spread are kept as read
and resolved each pass against the pass's pods and nodes (:mod:`kalena.k8s.affinity`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kalena.core.classify import classify
from kalena.core.model import NodeSpec, Taint, Tier, Toleration, WorkloadSpec
from kalena.deployability.model import PODS, NodeSelectorTerm, PodAffinityTerm
from kalena.deployability.model import SpreadConstraint as KubeSpread
from kalena.ir.errors import ProblemLog
from kalena.manifests import fields as f
from kalena.manifests.cluster import DIMENSIONS, ZONE, core_resources
from kalena.manifests.load import POD_TYPE_ANNOTATION
from kalena.manifests.podspec import pod_spec


def node_spec(node: Mapping[str, Any]) -> tuple[NodeSpec, list[str]]:
    """A Node as the core sees it (``status.allocatable``, else ``capacity``; omitted cpu, memory
    and storage unbounded, an omitted GPU none; ``pods`` as the most pods it takes), and its
    problems."""
    meta = node.get("metadata") or {}
    name = str(meta.get("name") or "")
    log = ProblemLog(f"node {name}")
    status = node.get("status") or {}
    alloc = status.get("allocatable") or status.get("capacity") or {}
    units = {}
    for k, raw in dict(alloc).items():
        if k in DIMENSIONS or k == PODS:
            v = f.units(k, raw, ("status", "allocatable", k), log)
            if v is not None:
                units[k] = v
    res = core_resources(units, default=float("inf"), absent={"gpu": 0.0})  # no GPU unless it says so
    labels = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
    taints = tuple(
        Taint(str(t.get("key") or ""), str(t.get("value") or ""), str(t.get("effect") or ""))
        for t in ((node.get("spec") or {}).get("taints") or [])
    )
    spec = NodeSpec(
        name,
        allocatable=res,
        labels=labels,
        taints=taints,
        zone=labels.get(ZONE, ""),
        max_pods=units.get(PODS),
    )
    return spec, [p.render() for p in log.problems]


def node_ready(node: Mapping[str, Any]) -> bool:
    """Schedulable and Ready (a cordoned or NotReady node takes no new batch)."""
    if (node.get("spec") or {}).get("unschedulable"):
        return False
    conds = (node.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conds)


@dataclass(frozen=True, slots=True)
class PodView:
    """A pod as the scheduler keeps it: its spec for the core, where it is, and its Kubernetes
    rules as read."""

    spec: WorkloadSpec
    uid: str
    namespace: str
    name: str
    node: str  # "" while unbound
    scheduler: str
    phase: str
    problems: tuple[str, ...] = ()
    #: its Kubernetes rules as read, resolved against each pass's pods and nodes
    #: (:mod:`kalena.k8s.affinity`): required pod affinity and anti-affinity (a bound pod's
    #: anti-affinity binds Kalena's batch too), hard topology spread and required node affinity
    affinity: tuple[PodAffinityTerm, ...] = ()
    anti_affinity: tuple[PodAffinityTerm, ...] = ()
    spread: tuple[KubeSpread, ...] = ()
    node_affinity: tuple[NodeSelectorTerm, ...] | None = None

    @property
    def finished(self) -> bool:
        return self.phase in ("Succeeded", "Failed")


def pod_view(
    pod: Mapping[str, Any], *, infer_batch: bool = False, batch_scheduler: str | None = None
) -> PodView:
    """The pod as the scheduler keeps it; a pod of ``batch_scheduler`` (Kalena's name: the opt-in)
    is batch whatever its labels say."""
    meta = pod.get("metadata") or {}
    ns, name = str(meta.get("namespace") or "default"), str(meta.get("name") or "")
    wid = f"{ns}/{name}"
    log = ProblemLog(f"pod {wid}")
    labels = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
    annotations = {str(k): str(v) for k, v in (meta.get("annotations") or {}).items()}
    raw_spec = dict(pod.get("spec") or {})
    parts = pod_spec(raw_spec, ("spec",), log, labels)
    owners = meta.get("ownerReferences") or []
    owner = next((o for o in owners if o.get("controller")), owners[0] if owners else None)
    owner_kind = str(owner.get("kind") or "") if owner else ""
    c = classify(wid, labels, annotations, owner_kind=owner_kind, infer_batch=infer_batch)
    tolerations = tuple(
        Toleration(t.key, t.operator, t.value, t.effect, exact=True) for t in parts.tolerations
    )
    scheduler = str(raw_spec.get("schedulerName") or "default-scheduler")
    tier = Tier.BATCH if batch_scheduler is not None and scheduler == batch_scheduler else c.tier
    spec = WorkloadSpec(
        id=wid,
        requests=core_resources(parts.requests, default=0.0),
        tier=tier,
        priority=c.priority,
        namespace=ns,
        labels=labels,
        node_selector=dict(parts.node_selector),
        tolerations=tolerations,
        image=_first_image(raw_spec),
        owner=f"{ns}/{owner_kind}/{owner.get('name')}" if owner else wid,
        slack_cpu=c.slack_cpu,
        slack_memory=c.slack_memory,
        reclaim_disabled=c.reclaim_disabled,
        startup_grace_s=c.startup_grace_s,
        is_daemonset=owner_kind == "DaemonSet",
    )
    problems = [p.render() for p in log.problems] + [str(p) for p in c.problems]
    return PodView(
        spec,
        str(meta.get("uid") or ""),
        ns,
        name,
        str(raw_spec.get("nodeName") or ""),
        scheduler,
        str((pod.get("status") or {}).get("phase") or "Pending"),
        tuple(problems),
        parts.affinity,
        parts.anti_affinity,
        parts.spread,
        parts.node_affinity,
    )


def _first_image(spec: Mapping[str, Any]) -> str:
    """The first container's image; "" when the spec does not say (an extender reads any body)."""
    containers = spec.get("containers")
    first = containers[0] if isinstance(containers, list) and containers else None
    return str(first.get("image") or "") if isinstance(first, Mapping) else ""


_UNROLLED = re.compile(r"-\d+$")  # IR v1 §3.1: name-0 for one replica, name-0000... for more


def declaration_of(pod: Mapping[str, Any]) -> str:
    """``namespace/name`` of the declaration ``pod`` is a replica of (module docstring)."""
    meta = pod.get("metadata") or {}
    ns = str(meta.get("namespace") or "default")
    named = str((meta.get("annotations") or {}).get(POD_TYPE_ANNOTATION) or "")
    if named:
        return named if "/" in named else f"{ns}/{named}"
    owners = meta.get("ownerReferences") or []
    owner = next((o for o in owners if o.get("controller")), owners[0] if owners else None)
    if owner and owner.get("name"):
        name = str(owner["name"])
        suffix = "-" + str((meta.get("labels") or {}).get("pod-template-hash") or "")
        if owner.get("kind") == "ReplicaSet" and len(suffix) > 1 and name.endswith(suffix):
            name = name[: -len(suffix)]
        return f"{ns}/{name}"
    return f"{ns}/{_UNROLLED.sub('', str(meta.get('name') or ''))}"


def pod_limits(pod: Mapping[str, Any]) -> dict[str, float]:
    """The pod's limits in core units, for the dimensions where it has one: every container
    limits it (one without a limit leaves the pod unlimited there), summed, at least each init
    container's, plus the overhead: the kubelet's pod-level limit. Unreadable values are the
    requests reader's to report; here they leave the dimension unlimited."""
    spec = pod.get("spec") or {}
    log = ProblemLog("pod limits")

    def limits_of(c: Any) -> dict[str, int]:
        res = (c.get("resources") or {}) if isinstance(c, Mapping) else {}
        block = res.get("limits") or {} if isinstance(res, Mapping) else {}
        out = {}
        for k, raw in dict(block).items() if isinstance(block, Mapping) else ():
            if k in DIMENSIONS:
                v = f.units(k, raw, ("limits", k), log)
                if v is not None:
                    out[k] = v
        return out

    containers = [limits_of(c) for c in spec.get("containers") or []]
    if not containers:
        return {}
    total: dict[str, int] = {}
    for k in DIMENSIONS:
        if all(k in c for c in containers):
            total[k] = sum(c[k] for c in containers)
    for c in (limits_of(c) for c in spec.get("initContainers") or []):
        for k in list(total):
            total[k] = max(total[k], c.get(k, 0))
    for k, raw in dict(spec.get("overhead") or {}).items():
        v = f.units(k, raw, ("overhead", k), log) if k in total else None
        if v is not None:
            total[k] += v
    return {DIMENSIONS[k][0]: v * DIMENSIONS[k][1] for k, v in total.items() if v > 0}
