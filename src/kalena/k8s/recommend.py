"""The Stationkeeper's recommendations on Kubernetes (issue 15): VPA-style objects, or, when the
operator opts in, the workload's own requests.

A plan's declaration ``ns/name`` is the Deployment ``name`` in namespace ``ns``. Kalena sizes per
pod; a pod of several containers gets the per-pod figure split in proportion to what each
container requests now (evenly where none requests anything).

* **recommend** (the default): one ``VerticalPodAutoscaler`` (``autoscaling.k8s.io/v1``) per
  Deployment, ``kalena-<name>``, with ``updateMode: "Off"`` (a recommendation only: VPA's updater
  leaves the pods alone) and the figures in ``status.recommendation``, where VPA's own recommender
  writes them, so every tool that reads VPA reads Kalena's. The cluster needs VPA's CRDs.
* **apply** (opt-in): the Deployment's containers' ``resources.requests`` patched (a rollout).

The rules this needs, least privilege: :func:`recommender_rules`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kubernetes import client as kclient
from kubernetes.client.exceptions import ApiException

from kalena.core.quantity import QuantityError, parse_quantity

VPA_GROUP = "autoscaling.k8s.io"
VPA_VERSION = "v1"
VPA_PLURAL = "verticalpodautoscalers"
MANAGED_BY = {"app.kubernetes.io/managed-by": "kalena"}


def recommender_rules(apply: bool = False) -> list[dict[str, Any]]:
    """What writing recommendations takes: read Deployments, write VPAs and their status; with
    ``apply``, one verb more: patch Deployments."""
    return [
        {
            "apiGroups": ["apps"],
            "resources": ["deployments"],
            "verbs": ["get", "patch"] if apply else ["get"],
        },
        {"apiGroups": [VPA_GROUP], "resources": [VPA_PLURAL], "verbs": ["get", "create"]},
        {"apiGroups": [VPA_GROUP], "resources": [f"{VPA_PLURAL}/status"], "verbs": ["update"]},
    ]


class RecommendError(Exception):
    """The cluster cannot take the recommendations (no VPA resource, refused by RBAC, ...)."""


@dataclass(frozen=True, slots=True)
class Written:
    """What happened to one declaration's recommendation."""

    workload: str
    outcome: str  # "vpa" (written), "applied", or why not: "no-deployment", ...
    containers: dict[str, dict[str, str]]


def cpu_text(cores: float) -> str:
    return f"{max(1, math.ceil(cores * 1000))}m"


def memory_text(gib: float) -> str:
    return f"{max(1, math.ceil(gib * 1024))}Mi"


def split(per_pod: Mapping[str, float], containers: list[dict[str, Any]]) -> dict[str, dict[str, str]]:
    """``per_pod`` (``cpu`` in cores, ``memory`` in GiB) over the containers, in proportion to
    their current requests of each resource (evenly where none requests it)."""
    out: dict[str, dict[str, str]] = {c["name"]: {} for c in containers}
    for res, dim, text in (("cpu", "cpu", cpu_text), ("memory", "ram", memory_text)):
        if res not in per_pod:
            continue
        now = []
        for c in containers:
            raw = ((c.get("resources") or {}).get("requests") or {}).get(res)
            try:
                now.append(parse_quantity(raw, dim) if raw is not None else 0.0)
            except QuantityError:
                now.append(0.0)
        total = sum(now)
        for c, x in zip(containers, now, strict=True):
            share = x / total if total > 0 else 1.0 / len(containers)
            out[c["name"]][res] = text(per_pod[res] * share)
    return out


def vpa_object(namespace: str, name: str, containers: dict[str, dict[str, str]]) -> dict[str, Any]:
    """The VerticalPodAutoscaler holding Kalena's recommendation for Deployment ``name``."""
    recs = [
        {"containerName": c, "target": r, "lowerBound": r, "upperBound": r, "uncappedTarget": r}
        for c, r in containers.items()
    ]
    return {
        "apiVersion": f"{VPA_GROUP}/{VPA_VERSION}",
        "kind": "VerticalPodAutoscaler",
        "metadata": {"name": f"kalena-{name}", "namespace": namespace, "labels": dict(MANAGED_BY)},
        "spec": {
            "targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
            "updatePolicy": {"updateMode": "Off"},
        },
        "status": {
            "recommendation": {"containerRecommendations": recs},
            "conditions": [{"type": "RecommendationProvided", "status": "True", "reason": "Stationkeeper"}],
        },
    }


def publish(
    api: kclient.ApiClient, settings: Mapping[str, Mapping[str, float]], apply: bool = False
) -> list[Written]:
    """Each declaration's per-pod settings (``{"ns/name": {"cpu": cores, "memory": GiB}}``) as a
    VPA recommendation, or with ``apply`` into its Deployment's requests."""
    apps = kclient.AppsV1Api(api)
    custom = kclient.CustomObjectsApi(api)
    out = []
    for workload, per_pod in settings.items():
        ns, _, name = workload.partition("/")
        try:
            dep = apps.read_namespaced_deployment(name, ns)
        except ApiException as e:
            if e.status == 404:
                out.append(Written(workload, "no-deployment", {}))
                continue
            raise RecommendError(f"deployment {workload}: {e.status} {e.reason}") from None
        containers = [c.to_dict() for c in dep.spec.template.spec.containers]
        parts = split(per_pod, containers)
        if apply:
            _apply(apps, ns, name, parts)
            out.append(Written(workload, "applied", parts))
        else:
            _write_vpa(custom, ns, name, parts)
            out.append(Written(workload, "vpa", parts))
    return out


def _apply(apps: kclient.AppsV1Api, ns: str, name: str, parts: dict[str, dict[str, str]]) -> None:
    patch = {"spec": {"template": {"spec": {"containers": [
        {"name": c, "resources": {"requests": r}} for c, r in parts.items()
    ]}}}}  # fmt: skip
    try:
        apps.patch_namespaced_deployment(name, ns, patch)
    except ApiException as e:
        raise RecommendError(
            f"deployment {ns}/{name}: cannot patch its requests: {e.status} {e.reason}"
        ) from None


def _write_vpa(
    custom: kclient.CustomObjectsApi, ns: str, name: str, parts: dict[str, dict[str, str]]
) -> None:
    body = vpa_object(ns, name, parts)
    args = (VPA_GROUP, VPA_VERSION, ns, VPA_PLURAL)
    try:
        try:
            current = custom.get_namespaced_custom_object(*args, body["metadata"]["name"])
        except ApiException as e:
            if e.status != 404:
                raise
            current = custom.create_namespaced_custom_object(
                *args, {k: v for k, v in body.items() if k != "status"}
            )
        current["status"] = body["status"]
        custom.replace_namespaced_custom_object_status(*args, body["metadata"]["name"], current)
    except ApiException as e:
        if e.status == 404:
            raise RecommendError(
                "the cluster has no VerticalPodAutoscaler resource: install VPA's CRDs, or use --apply"
            ) from None
        raise RecommendError(f"verticalpodautoscaler {ns}/kalena-{name}: {e.status} {e.reason}") from None
