"""Kalena's Kubernetes objects for a cluster (``kalena k8s render``): least privilege, one place.

Each component gets its own ServiceAccount and exactly the rules it uses; the tests run the
component with those rules and no more (``tests/k8s/test_rbac.py``), and check that one verb
more is refused. The rules, with why:

* **scheduler** (cluster-wide): nodes and pods get/list/watch (its view); ``pods/binding``
  create (the bind); ``pods/status`` patch (``PodScheduled=False``); events create (``Scheduled``,
  ``FailedScheduling``); nodereservations get/list/watch (the agents' reports); and, in its own
  namespace only, leases get/create/update (leader election between its replicas).
"""

from __future__ import annotations

from typing import Any

import yaml

from kalena.k8s.reports import CRD, GROUP, PLURAL

NAMESPACE = "kalena-system"
IMAGE = "kalena:latest"
SCHEDULER = "kalena-scheduler"
LEASE = "kalena-scheduler"

#: The scheduler's cluster-wide rules (its Lease rule is namespaced: ``SCHEDULER_LEASE_RULES``).
SCHEDULER_RULES: list[dict[str, Any]] = [
    {"apiGroups": [""], "resources": ["nodes", "pods"], "verbs": ["get", "list", "watch"]},
    {"apiGroups": [""], "resources": ["pods/binding"], "verbs": ["create"]},
    {"apiGroups": [""], "resources": ["pods/status"], "verbs": ["patch"]},
    {"apiGroups": [""], "resources": ["events"], "verbs": ["create"]},
    {"apiGroups": [GROUP], "resources": [PLURAL], "verbs": ["get", "list", "watch"]},
]
SCHEDULER_LEASE_RULES: list[dict[str, Any]] = [
    {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "create", "update"]},
]


RBAC = "rbac.authorization.k8s.io"


def _meta(name: str, namespace: str | None = None, **extra: Any) -> dict[str, Any]:
    return {"name": name, **({"namespace": namespace} if namespace else {}), **extra}


def _role(kind: str, name: str, rules: list[dict[str, Any]], namespace: str | None = None) -> dict[str, Any]:
    return {"apiVersion": f"{RBAC}/v1", "kind": kind, "metadata": _meta(name, namespace), "rules": rules}


def _binding(kind: str, role: str, subject: dict[str, Any], namespace: str | None = None) -> dict[str, Any]:
    role_kind = "ClusterRole" if kind == "ClusterRoleBinding" else "Role"
    return {
        "apiVersion": f"{RBAC}/v1",
        "kind": kind,
        "metadata": _meta(role, namespace),
        "roleRef": {"apiGroup": RBAC, "kind": role_kind, "name": role},
        "subjects": [subject],
    }


def scheduler_objects(
    namespace: str = NAMESPACE, image: str = IMAGE, replicas: int = 2
) -> list[dict[str, Any]]:
    """The scheduler's ServiceAccount, its roles and bindings, and its Deployment (leader-elected)."""
    sa = {"kind": "ServiceAccount", "name": SCHEDULER, "namespace": namespace}
    labels = {"app.kubernetes.io/name": SCHEDULER, "app.kubernetes.io/part-of": "kalena"}
    container = {
        "name": "scheduler",
        "image": image,
        "args": ["k8s", "scheduler", "--leader-elect", "--lease-namespace", namespace],
        "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "512Mi"}},
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "runAsNonRoot": True,
            "capabilities": {"drop": ["ALL"]},
        },
    }
    pod = {"serviceAccountName": SCHEDULER, "containers": [container]}
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _meta(SCHEDULER, namespace, labels=labels),
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": pod},
        },
    }
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(SCHEDULER, namespace)},
        _role("ClusterRole", SCHEDULER, SCHEDULER_RULES),
        _binding("ClusterRoleBinding", SCHEDULER, sa),
        _role("Role", SCHEDULER, SCHEDULER_LEASE_RULES, namespace),
        _binding("RoleBinding", SCHEDULER, sa, namespace),
        deployment,
    ]


def objects(namespace: str = NAMESPACE, image: str = IMAGE) -> list[dict[str, Any]]:
    """Everything, in the order ``kubectl apply`` needs (the namespace and the CRD first)."""
    ns = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
    return [ns, CRD, *scheduler_objects(namespace, image)]


def render(namespace: str = NAMESPACE, image: str = IMAGE) -> str:
    """The objects as one multi-document YAML stream."""
    return yaml.safe_dump_all(objects(namespace, image), sort_keys=False)
