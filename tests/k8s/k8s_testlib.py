"""What the Kubernetes tests do to a control plane besides pods and nodes: the NodeReservation
resource installed, a node agent's report published, and a Kuberina IR cluster (read by
:mod:`kalena.ir`) as kwok nodes and bare pods."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client as kclient
from kubernetes.client.exceptions import ApiException

from kalena.core.cluster import Cluster
from kalena.core.messages import ReservationEntry, ReservationReport
from kalena.core.model import WorkloadSpec
from kalena.core.resources import Resources
from kalena.k8s.objects import ZONE
from kalena.k8s.reports import CRD, GROUP, PLURAL, VERSION, report_object
from kalena.testing.k8s import ControlPlane, NodeSpec

GPU_RESOURCE = "nvidia.com/gpu"


def until(check: Callable[[], object], bound_s: float = 60.0, every_s: float = 0.2) -> bool:
    """Whether ``check()`` became true within ``bound_s`` (wide: the machine is loaded)."""
    end = time.monotonic() + bound_s
    while time.monotonic() < end:
        if check():
            return True
        time.sleep(every_s)
    return bool(check())


def install_crd(cp: ControlPlane) -> None:
    """The NodeReservation resource, established and served."""
    ext = kclient.ApiextensionsV1Api(cp.client)
    try:
        ext.create_custom_resource_definition(CRD)
    except ApiException as e:
        if e.status != 409:
            raise

    def established() -> bool:
        got = ext.read_custom_resource_definition(CRD["metadata"]["name"])
        return any(c.type == "Established" and c.status == "True" for c in got.status.conditions or [])

    assert until(established)
    custom = kclient.CustomObjectsApi(cp.client)
    assert until(lambda: custom.list_cluster_custom_object(GROUP, VERSION, PLURAL) is not None)


def publish(cp: ControlPlane, node: str, cpu: Mapping[str, float], at: float | None = None) -> None:
    """What a node agent does: its estimator's cpu reservations of its pods, as a NodeReservation."""
    rows = [ReservationEntry(w, Resources.from_mapping({"cpu": c, "ram": 0.0625})) for w, c in cpu.items()]
    report = ReservationReport(node, 1, time.time() if at is None else at, tuple(rows))
    custom = kclient.CustomObjectsApi(cp.client)
    body = report_object(report)
    try:
        old = custom.get_cluster_custom_object(GROUP, VERSION, PLURAL, node)
        body["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"]
        custom.replace_cluster_custom_object(GROUP, VERSION, PLURAL, node, body)
    except ApiException as e:
        if e.status != 404:
            raise
        custom.create_cluster_custom_object(GROUP, VERSION, PLURAL, body)


# -- a Kuberina IR cluster on kwok ----------------------------------------------------------------
def cpu_quantity(cores: float) -> str:
    return f"{round(cores * 1000)}m"


def memory_quantity(gib: float) -> str:
    return f"{round(gib * 1024)}Mi"  # MiB: exact for any IR value in whole MiB (Irina's are)


def _quantities(res: Resources) -> dict[str, str]:
    """cpu, memory and GPUs of ``res`` as Kubernetes quantities (an unbounded or zero one left out)."""
    out: dict[str, str] = {}
    for dim, name, text in (("cpu", "cpu", cpu_quantity), ("ram", "memory", memory_quantity),
                            ("gpu", GPU_RESOURCE, lambda v: str(round(v)))):  # fmt: skip
        v = res[dim]
        if math.isfinite(v) and v > 0:
            out[name] = text(v)
    return out


@dataclass(frozen=True)
class KwokNode(NodeSpec):
    """A kwok node whose ``status.capacity`` is more than its allocatable (what a kubelet reserves)."""

    capacity: Mapping[str, str] = field(default_factory=dict)

    def manifest(self) -> dict[str, Any]:
        m = super().manifest()
        m["status"]["capacity"] = {**m["status"]["capacity"], **self.capacity}
        return m


def kwok_nodes(cluster: Cluster, labels: Mapping[str, Mapping[str, str]] | None = None) -> list[KwokNode]:
    """The nodes of an IR cluster (:func:`kalena.ir.build_cluster`) as kwok nodes: capacity the
    infra file's allocatable, allocatable what its DaemonSets leave (the IR's Phase 0: there is no
    DaemonSet controller here to run them, so their share is reserved as a kubelet reserves its
    own), its labels and zone, and ``labels[name]`` more."""
    out = []
    for n in cluster.nodes:
        alloc = _quantities(cluster.capacity[n.name])
        extra = {GPU_RESOURCE: alloc.pop(GPU_RESOURCE)} if GPU_RESOURCE in alloc else {}
        node_labels = {**n.labels, **({ZONE: n.zone} if n.zone else {}), **(labels or {}).get(n.name, {})}
        out.append(KwokNode(n.name, cpu=alloc["cpu"], memory=alloc["memory"], labels=node_labels,
                            extra_resources=extra, capacity=_quantities(n.allocatable)))  # fmt: skip
    return out


def ir_pod(
    w: WorkloadSpec, labels: Mapping[str, str] | None = None, image: str = "busybox:1"
) -> dict[str, Any]:
    """An IR workload as a bare pod for the default scheduler: named as the IR unrolls it (so its
    declaration reads back as the IR's), its requests (a GPU's limit too, as the API requires of an
    extended resource) and nodeSelector. Affinity and anti-affinity are not carried (Kuberina's
    are soft, and a pod's own preferred terms are kube-scheduler's business, not Kalena's)."""
    ns, name = w.id.split("/", 1)
    requests = _quantities(w.requests)
    resources: dict[str, Any] = {"requests": requests}
    if GPU_RESOURCE in requests:
        resources["limits"] = {GPU_RESOURCE: requests[GPU_RESOURCE]}
    spec: dict[str, Any] = {"containers": [{"name": "main", "image": image, "resources": resources}]}
    if w.node_selector:
        spec["nodeSelector"] = dict(w.node_selector)
    meta = {"name": name, "namespace": ns, "labels": dict(labels or {})}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}
