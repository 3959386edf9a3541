"""What the Kubernetes tests do to a control plane besides pods and nodes: the NodeReservation
resource installed, and a node agent's report published."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

from kubernetes import client as kclient
from kubernetes.client.exceptions import ApiException

from kalena.core.messages import ReservationEntry, ReservationReport
from kalena.core.resources import Resources
from kalena.k8s.reports import CRD, GROUP, PLURAL, VERSION, report_object
from kalena.testing.k8s import ControlPlane


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
