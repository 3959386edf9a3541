"""Write a deployability :class:`Instance` as ordinary Kubernetes YAML (Nodes, Pods, Namespaces).

Pod types become ``Pod`` objects without ``nodeName``; each initially running instance becomes
a ``Pod`` with ``spec.nodeName`` and annotation ``kalena.naughtian.io/pod-type`` naming its
type. Reading the output with :func:`kalena.manifests.read_manifests` gives the instance back
(a round-trip test checks it). Quantities: cpu in millicores (``250m``), everything else in base
units.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from kalena.deployability.model import (
    PODS,
    Instance,
    LabelSelector,
    Node,
    PodAffinityTerm,
    PodType,
    Requirement,
    SpreadConstraint,
)
from kalena.manifests.load import POD_TYPE_ANNOTATION

_DUMPER: type = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
IMAGE = "registry.k8s.io/pause:3.9"


def _qty(dim: str, v: int) -> str:
    return f"{v}m" if dim == "cpu" else str(v)


def _req(r: Requirement) -> dict[str, Any]:
    out: dict[str, Any] = {"key": r.key, "operator": r.operator}
    if r.values:
        out["values"] = list(r.values)
    return out


def _selector(s: LabelSelector) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if s.match_labels:
        out["matchLabels"] = dict(s.match_labels)
    if s.match_expressions:
        out["matchExpressions"] = [_req(r) for r in s.match_expressions]
    return out


def _term(t: PodAffinityTerm) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if t.selector is not None:
        out["labelSelector"] = _selector(t.selector)
    out["topologyKey"] = t.topology_key
    if t.namespaces:
        out["namespaces"] = list(t.namespaces)
    if t.namespace_selector is not None:
        out["namespaceSelector"] = _selector(t.namespace_selector)
    return out


def _spread(c: SpreadConstraint) -> dict[str, Any]:
    out: dict[str, Any] = {
        "maxSkew": c.max_skew,
        "topologyKey": c.topology_key,
        "whenUnsatisfiable": "DoNotSchedule",
    }
    if c.selector is not None:
        out["labelSelector"] = _selector(c.selector)
    if c.min_domains != 1:
        out["minDomains"] = c.min_domains
    if c.node_affinity_policy != "Honor":
        out["nodeAffinityPolicy"] = c.node_affinity_policy
    if c.node_taints_policy != "Ignore":
        out["nodeTaintsPolicy"] = c.node_taints_policy
    return out


def _pod_spec(t: PodType) -> dict[str, Any]:
    requests = {d: _qty(d, v) for d, v in sorted(t.requests.items()) if d != PODS and v > 0}
    container: dict[str, Any] = {"name": "main", "image": IMAGE}
    if requests:
        container["resources"] = {"requests": requests}
    spec: dict[str, Any] = {"containers": [container]}
    if t.node_selector:
        spec["nodeSelector"] = dict(t.node_selector)
    affinity: dict[str, Any] = {}
    if t.node_affinity is not None:
        terms = []
        for term in t.node_affinity:
            tm: dict[str, Any] = {}
            if term.match_expressions:
                tm["matchExpressions"] = [_req(r) for r in term.match_expressions]
            if term.match_fields:
                tm["matchFields"] = [_req(r) for r in term.match_fields]
            terms.append(tm)
        affinity["nodeAffinity"] = {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}
        }
    if t.affinity:
        affinity["podAffinity"] = {
            "requiredDuringSchedulingIgnoredDuringExecution": [_term(x) for x in t.affinity]
        }
    if t.anti_affinity:
        affinity["podAntiAffinity"] = {
            "requiredDuringSchedulingIgnoredDuringExecution": [_term(x) for x in t.anti_affinity]
        }
    if affinity:
        spec["affinity"] = affinity
    if t.tolerations:
        spec["tolerations"] = [
            {
                k: v
                for k, v in (
                    ("key", x.key),
                    ("operator", x.operator),
                    ("value", x.value),
                    ("effect", x.effect),
                )
                if v
            }
            for x in t.tolerations
        ]
    if t.spread:
        spec["topologySpreadConstraints"] = [_spread(c) for c in t.spread]
    return spec


def _node(n: Node) -> dict[str, Any]:
    doc: dict[str, Any] = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": n.name}}
    if n.labels:
        doc["metadata"]["labels"] = dict(n.labels)
    spec: dict[str, Any] = {}
    if n.taints:
        spec["taints"] = [
            {k: v for k, v in (("key", x.key), ("value", x.value), ("effect", x.effect)) if v}
            for x in n.taints
        ]
    if n.unschedulable:
        spec["unschedulable"] = True
    if spec:
        doc["spec"] = spec
    if n.allocatable:
        doc["status"] = {"allocatable": {d: _qty(d, v) for d, v in sorted(n.allocatable.items())}}
    return doc


def _meta(t: PodType, name: str) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": t.namespace}
    if t.labels:
        meta["labels"] = dict(t.labels)
    return meta


def documents(inst: Instance) -> list[dict[str, Any]]:
    """Every object of the instance, Namespaces first, then Nodes, pod types and running pods."""
    docs: list[dict[str, Any]] = []
    for ns, labels in sorted(inst.namespace_labels.items()):
        docs.append(
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns, "labels": dict(labels)}}
        )
    docs += [_node(n) for n in inst.nodes]
    for t in inst.types:
        docs.append({"apiVersion": "v1", "kind": "Pod", "metadata": _meta(t, t.name), "spec": _pod_spec(t)})
    by_id = {t.id: t for t in inst.types}
    for (tid, node), count in sorted(inst.initial.items()):
        t = by_id[tid]
        for i in range(count):
            meta = _meta(t, f"{t.name}-on-{node}-{i}")
            meta["annotations"] = {POD_TYPE_ANNOTATION: tid}
            spec = _pod_spec(t)
            spec["nodeName"] = node
            docs.append({"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec})
    return docs


def to_yaml(inst: Instance) -> str:
    return yaml.dump_all(documents(inst), Dumper=_DUMPER, sort_keys=False, default_flow_style=False)


def write_yaml(inst: Instance, path: str | Path) -> Path:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(to_yaml(inst), encoding="utf-8")
    return p
