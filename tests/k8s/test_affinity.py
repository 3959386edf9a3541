"""A production pod's required anti-affinity keeps Kalena's batch off its domain, as it keeps
kube-scheduler's pods (the core's filter with the shell's resolved names; no control plane here:
``test_scheduler.py`` has the same against a real one)."""

from __future__ import annotations

import numpy as np

from kalena.core.ledger.observed import observed_ledger
from kalena.core.placement import ContextKeeper, PlacementConfig, schedule
from kalena.k8s.affinity import bind_batch
from kalena.k8s.objects import node_spec, pod_view

HOST = "kubernetes.io/hostname"


def node(name: str, zone: str) -> dict:
    labels = {HOST: name, "topology.kubernetes.io/zone": zone}
    return {
        "metadata": {"name": name, "labels": labels},
        "status": {"allocatable": {"cpu": "8", "memory": "16Gi"}},
    }


def pod(name: str, labels: dict, *, ns: str = "web", node: str = "", anti: list | None = None) -> dict:
    spec: dict = {"containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": "1"}}}]}
    if node:
        spec["nodeName"] = node
    else:
        spec["schedulerName"] = "kalena"
    if anti:
        spec["affinity"] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": anti}}
    return {"metadata": {"name": name, "namespace": ns, "labels": labels}, "spec": spec}


def place(pods: list[dict], zones: dict[str, str]) -> dict[str, str]:
    nodes = [node_spec(node(n, z))[0] for n, z in zones.items()]
    views = [pod_view(p, batch_scheduler="kalena") for p in pods]
    residents = [(v.spec, v.node) for v in views if v.node]
    pending = [v.spec for v in views if not v.node]
    residents = bind_batch(
        residents, pending, {v.spec.id: v.anti_affinity for v in views if v.node and v.anti_affinity}
    )
    ledger, _ = observed_ledger(nodes, residents)
    ctx = ContextKeeper(ledger.node_names).context(0.0, pending)
    d = schedule(pending, ledger, ctx, PlacementConfig(), np.random.default_rng(0))
    return {p.workload.id: ledger.node_names[p.node] for p in d.placements}


def test_production_anti_affinity_keeps_the_batch_it_selects_off_its_domain():
    term = {"labelSelector": {"matchExpressions": [{"key": "app", "operator": "In", "values": ["noisy"]}]},
            "topologyKey": "topology.kubernetes.io/zone", "namespaces": ["jobs"]}  # fmt: skip
    pods = [
        pod("db", {"app": "db"}, node="a1", anti=[term]),
        pod("noisy-1", {"app": "noisy"}, ns="jobs"),
        pod("quiet-1", {"app": "quiet"}, ns="jobs"),
        pod("noisy-2", {"app": "noisy"}, ns="other"),  # outside the term's namespaces
    ]
    where = place(pods, {"a1": "a", "a2": "a", "b1": "b"})
    assert where["jobs/noisy-1"] == "b1"  # zone a holds db
    assert set(where) == {"jobs/noisy-1", "jobs/quiet-1", "other/noisy-2"}
    # without the term, the co-location score puts noisy-1 beside production in zone a
    plain = place([pod("db", {"app": "db"}, node="a1"), *pods[1:]], {"a1": "a", "a2": "a", "b1": "b"})
    assert plain["jobs/noisy-1"] != "b1"


def test_a_namespace_selector_is_taken_to_reach_every_namespace():
    term = {"labelSelector": {"matchLabels": {"app": "noisy"}}, "topologyKey": HOST, "namespaceSelector": {}}
    where = place([pod("db", {"app": "db"}, node="a1", anti=[term]), pod("n", {"app": "noisy"}, ns="x")],
                  {"a1": "a", "a2": "a"})  # fmt: skip
    assert where == {"x/n": "a2"}
