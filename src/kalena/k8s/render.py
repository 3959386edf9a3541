"""Kalena's Kubernetes objects for a cluster (``kalena k8s render``): least privilege, one place.

Each component gets its own ServiceAccount and exactly the rules it uses; the tests run the
component with those rules and no more (``tests/k8s/test_rbac.py``), and check that one verb
more is refused. The rules, with why:

* **scheduler** (cluster-wide): nodes and pods get/list/watch (its view); ``pods/binding``
  create (the bind); ``pods/status`` patch (``PodScheduled=False``); events create (``Scheduled``,
  ``FailedScheduling``); nodereservations get/list/watch (the agents' reports); and, in its own
  namespace only, leases get/create/update (leader election between its replicas).
* **agent** (the DaemonSet, cluster-wide since a node's pods are in every namespace): nodes
  list/watch (its own Node, field-selected: RBAC cannot narrow by field); pods list/watch (its
  node's) and delete (the end of an accepted eviction's grace, and the limit-breach override);
  ``pods/eviction`` create (every eviction, so PodDisruptionBudgets hold); nodereservations
  get/create/update (its report). It runs privileged with the host's ``/sys/fs/cgroup``: it
  writes other pods' cgroups.
* **extender** (cluster-wide): nodes, pods and nodereservations list/watch (the same view as the
  scheduler's, read-only). Its Deployment serves HTTPS with client certificates (kube-scheduler's
  extender client sends no token) from the Secret ``kalena-extender-tls`` (``tls.crt``,
  ``tls.key``, ``ca.crt``: the CA of kube-scheduler's client certificate), which the operator
  makes; :func:`scheduler_config` is the KubeSchedulerConfiguration that calls it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from kalena.k8s.recommend import recommender_rules
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
    {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["list", "watch"]},  # namespaceSelector
]
SCHEDULER_LEASE_RULES: list[dict[str, Any]] = [
    {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "create", "update"]},
]
AGENT = "kalena-agent"
AGENT_RULES: list[dict[str, Any]] = [
    {"apiGroups": [""], "resources": ["nodes"], "verbs": ["list", "watch"]},
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "watch", "delete"]},
    {"apiGroups": [""], "resources": ["pods/eviction"], "verbs": ["create"]},
    {"apiGroups": [GROUP], "resources": [PLURAL], "verbs": ["get", "create", "update"]},
]
EXTENDER = "kalena-extender"
EXTENDER_RULES: list[dict[str, Any]] = [
    {"apiGroups": [""], "resources": ["nodes", "pods"], "verbs": ["list", "watch"]},
    {"apiGroups": [GROUP], "resources": [PLURAL], "verbs": ["list", "watch"]},
    {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["list", "watch"]},  # namespaceSelector
]
EXTENDER_PORT = 8471
EXTENDER_SECRET = "kalena-extender-tls"
COMPONENTS = ("scheduler", "agent", "extender", "recommender")
DEFAULT_COMPONENTS = ("scheduler", "agent")


RBAC = "rbac.authorization.k8s.io"
#: The scheduler's and the extender's containers: they only talk to the apiserver (and serve).
RESTRICTED: dict[str, Any] = {
    "allowPrivilegeEscalation": False,
    "readOnlyRootFilesystem": True,
    "runAsNonRoot": True,
    "capabilities": {"drop": ["ALL"]},
}


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


def _account(name: str, namespace: str, rules: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A component's ServiceAccount, its ClusterRole of exactly ``rules`` and the binding."""
    sa = {"kind": "ServiceAccount", "name": name, "namespace": namespace}
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(name, namespace)},
        _role("ClusterRole", name, rules),
        _binding("ClusterRoleBinding", name, sa),
    ]


def _labels(name: str) -> dict[str, str]:
    return {"app.kubernetes.io/name": name, "app.kubernetes.io/part-of": "kalena"}


def scheduler_objects(
    namespace: str = NAMESPACE, image: str = IMAGE, replicas: int = 2
) -> list[dict[str, Any]]:
    """The scheduler's ServiceAccount, its roles and bindings, and its Deployment (leader-elected)."""
    sa = {"kind": "ServiceAccount", "name": SCHEDULER, "namespace": namespace}
    labels = _labels(SCHEDULER)
    container = {
        "name": "scheduler",
        "image": image,
        "args": ["k8s", "scheduler", "--leader-elect", "--lease-namespace", namespace],
        "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "512Mi"}},
        "securityContext": RESTRICTED,
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
        *_account(SCHEDULER, namespace, SCHEDULER_RULES),
        _role("Role", SCHEDULER, SCHEDULER_LEASE_RULES, namespace),
        _binding("RoleBinding", SCHEDULER, sa, namespace),
        deployment,
    ]


def agent_objects(namespace: str = NAMESPACE, image: str = IMAGE) -> list[dict[str, Any]]:
    """The node agent's ServiceAccount, rules and DaemonSet (one agent per node, every node)."""
    labels = _labels(AGENT)
    container = {
        "name": "agent",
        "image": image,
        "args": ["k8s", "agent", "--state-dir", "/var/lib/kalena"],
        "env": [{"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}],
        "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"memory": "256Mi"}},
        # it writes other pods' cgroups and reads the host's pressure: privileged, the host's tree
        "securityContext": {"privileged": True, "readOnlyRootFilesystem": True},
        "volumeMounts": [
            {"name": "cgroup", "mountPath": "/sys/fs/cgroup"},
            {"name": "state", "mountPath": "/var/lib/kalena"},
        ],
    }
    pod = {
        "serviceAccountName": AGENT,
        "priorityClassName": "system-node-critical",  # it protects the node's production
        "tolerations": [{"operator": "Exists"}],
        "containers": [container],
        "volumes": [
            {"name": "cgroup", "hostPath": {"path": "/sys/fs/cgroup", "type": "Directory"}},
            # its state survives a restart: evictions in flight, capped quotas, the estimator
            {"name": "state", "hostPath": {"path": "/var/lib/kalena", "type": "DirectoryOrCreate"}},
        ],
    }
    daemonset = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": _meta(AGENT, namespace, labels=labels),
        "spec": {
            "selector": {"matchLabels": labels},
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}},
            "template": {"metadata": {"labels": labels}, "spec": pod},
        },
    }
    return [*_account(AGENT, namespace, AGENT_RULES), daemonset]


RECOMMENDER = "kalena-recommender"


def recommender_objects(namespace: str = NAMESPACE, apply: bool = False) -> list[dict[str, Any]]:
    """The account ``kalena recommend --kubernetes`` runs as (a person, or a CronJob the operator
    writes): read Deployments, write VerticalPodAutoscalers and their status; with ``apply``, patch
    Deployments too (:func:`kalena.k8s.recommend.recommender_rules`)."""
    return _account(RECOMMENDER, namespace, recommender_rules(apply))


def extender_objects(namespace: str = NAMESPACE, image: str = IMAGE) -> list[dict[str, Any]]:
    """The extender's ServiceAccount, rules, Deployment and Service (HTTPS, client certificates)."""
    labels = _labels(EXTENDER)
    tls = "/etc/kalena/tls"
    container = {
        "name": "extender",
        "image": image,
        "args": [
            "k8s", "extender", "--listen", f"0.0.0.0:{EXTENDER_PORT}", "--tls-cert", f"{tls}/tls.crt",
            "--tls-key", f"{tls}/tls.key", "--tls-client-ca", f"{tls}/ca.crt",
        ],
        "ports": [{"name": "https", "containerPort": EXTENDER_PORT}],
        "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "512Mi"}},
        "securityContext": RESTRICTED,
        "volumeMounts": [{"name": "tls", "mountPath": tls, "readOnly": True}],
    }  # fmt: skip
    pod = {
        "serviceAccountName": EXTENDER,
        "containers": [container],
        "volumes": [{"name": "tls", "secret": {"secretName": EXTENDER_SECRET}}],
    }
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _meta(EXTENDER, namespace, labels=labels),
        "spec": {
            "replicas": 2,  # both answer: the extender keeps no state of its own
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": pod},
        },
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(EXTENDER, namespace, labels=labels),
        "spec": {
            "selector": labels,
            "ports": [{"name": "https", "port": EXTENDER_PORT, "targetPort": "https"}],
        },
    }
    return [*_account(EXTENDER, namespace, EXTENDER_RULES), deployment, service]


def scheduler_config(namespace: str = NAMESPACE, client_cert: str = "/etc/kubernetes/kalena/client.crt",
                     client_key: str = "/etc/kubernetes/kalena/client.key",
                     ca: str = "/etc/kubernetes/kalena/ca.crt") -> dict[str, Any]:  # fmt: skip
    """The KubeSchedulerConfiguration that makes kube-scheduler call the extender: filter and
    prioritize, node-cache capable (names only), and ignorable, so a dead extender never stops
    scheduling; every feasible node scored. Merge it into your scheduler's configuration file."""
    return {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        # from 100 nodes up kube-scheduler stops filtering at a share of the feasible nodes, so
        # the extender would often not be asked about the blueprint's node (tests/k8s/test_irina_e2e.py)
        "percentageOfNodesToScore": 100,
        "extenders": [
            {
                "urlPrefix": f"https://{EXTENDER}.{namespace}.svc:{EXTENDER_PORT}",
                "filterVerb": "filter",
                "prioritizeVerb": "prioritize",
                "weight": 1,
                "nodeCacheCapable": True,
                "ignorable": True,
                "httpTimeout": "5s",
                "enableHTTPS": True,
                "tlsConfig": {"certFile": client_cert, "keyFile": client_key, "caFile": ca},
            }
        ],
    }


def objects(
    namespace: str = NAMESPACE, image: str = IMAGE, components: tuple[str, ...] = DEFAULT_COMPONENTS
) -> list[dict[str, Any]]:
    """Everything, in the order ``kubectl apply`` needs (the namespace and the CRD first)."""
    ns = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
    made = {
        "scheduler": scheduler_objects,
        "agent": agent_objects,
        "extender": extender_objects,
        "recommender": lambda namespace, _image: recommender_objects(namespace),  # an account only
    }
    return [ns, CRD, *(o for c in COMPONENTS if c in components for o in made[c](namespace, image))]


class _Plain(yaml.SafeDumper):
    """Every object written out where it is used: no ``&id001`` anchors for a dict used twice
    (valid YAML, but not what a person reading a manifest expects)."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _dump(docs: list[dict[str, Any]]) -> str:
    return yaml.dump_all(docs, Dumper=_Plain, sort_keys=False)


def render(
    namespace: str = NAMESPACE, image: str = IMAGE, components: tuple[str, ...] = DEFAULT_COMPONENTS
) -> str:
    """The objects as one multi-document YAML stream."""
    return _dump(objects(namespace, image, components))


def write_kustomization(
    folder: Path, namespace: str = NAMESPACE, image: str = IMAGE,
    components: tuple[str, ...] = DEFAULT_COMPONENTS,
) -> list[Path]:  # fmt: skip
    """The objects as a kustomization in ``folder`` (``kubectl apply -k``): one file per object
    kind group, ``kustomization.yaml`` listing them, and, with the extender, the scheduler
    configuration beside them (not a resource: kube-scheduler reads it from its own file)."""
    folder.mkdir(parents=True, exist_ok=True)
    docs = objects(namespace, image, components)
    groups: dict[str, list[dict[str, Any]]] = {"00-namespace.yaml": docs[:1], "01-crd.yaml": docs[1:2]}
    for d in docs[2:]:
        name = str(d["metadata"]["name"])
        groups.setdefault(f"{name}.yaml", []).append(d)
    written = []
    for file, group in groups.items():
        (folder / file).write_text(_dump(group))
        written.append(folder / file)
    kustomization = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": list(groups),
    }
    (folder / "kustomization.yaml").write_text(_dump([kustomization]))
    written.append(folder / "kustomization.yaml")
    if "extender" in components:
        path = folder / "kube-scheduler-config.yaml"
        path.write_text(_dump([scheduler_config(namespace)]))
        written.append(path)
    return written
