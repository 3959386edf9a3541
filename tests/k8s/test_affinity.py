"""Kubernetes' hard pod rules in Kalena's scheduler, resolved each pass to names: a production
pod's required anti-affinity keeps the batch it selects off its domain; a batch pod's own
anti-affinity, spread and node affinity hold, and so does a bound batch pod's term over later
pods (no control plane here: ``test_scheduler.py`` has the same against a real one)."""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from kalena.core.ledger import Ledger
from kalena.core.ledger.observed import observed_ledger
from kalena.core.model import NodeSpec
from kalena.core.placement import ContextKeeper, PlacementConfig, SchedulingDecision, schedule
from kalena.deployability import Op, Semantics, Step, replay
from kalena.deployability.model import (
    Instance,
    LabelSelector,
    NodeSelectorTerm,
    PodAffinityTerm,
    Requirement,
    Taint,
    Toleration,
)
from kalena.deployability_gen import documents
from kalena.k8s.affinity import bind_batch, resolve_pending
from kalena.k8s.objects import PodView, node_spec, pod_view
from kalena.testing.deployability import random_instance

HOST = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"


def node(name: str, zone: str) -> dict:
    labels = {HOST: name, "topology.kubernetes.io/zone": zone}
    return {
        "metadata": {"name": name, "labels": labels},
        "status": {"allocatable": {"cpu": "8", "memory": "16Gi"}},
    }


def pod(
    name: str,
    labels: dict,
    *,
    ns: str = "web",
    node: str = "",
    anti: list | None = None,
    batch: bool = False,
    **more: object,
) -> dict:
    spec: dict = {
        "containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": "1"}}}],
        **more,
    }
    if node:
        spec["nodeName"] = node
    if not node or batch:
        spec["schedulerName"] = "kalena"
    if anti:
        spec["affinity"] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": anti}}
    return {"metadata": {"name": name, "namespace": ns, "labels": labels}, "spec": spec}


def one_pass(
    nodes: list[NodeSpec], views: list[PodView], ns_labels: Mapping[str, Mapping[str, str]] | None = None
) -> tuple[Ledger, SchedulingDecision]:
    """One pass as the cache and the scheduler make it: the rules resolved (namespace scopes by
    ``ns_labels``), the ledger observed (its left-out nodes ineligible), the core's schedule."""
    ns_labels = ns_labels or {}
    residents = [(v.spec, v.node) for v in views if v.node]
    pending = resolve_pending([v for v in views if not v.node], residents, nodes, ns_labels)
    terms = {v.spec.id: v.anti_affinity for v in views if v.node and v.anti_affinity}
    residents = bind_batch(residents, [v.spec for v in pending], terms, ns_labels)
    ledger, left_out = observed_ledger(nodes, residents)
    specs = [v.spec for v in pending]
    ctx = ContextKeeper(ledger.node_names).context(0.0, specs)
    if left_out:
        ctx = dataclasses.replace(ctx, eligible=np.array([n not in left_out for n in ledger.node_names]))
    return ledger, schedule(specs, ledger, ctx, PlacementConfig(), np.random.default_rng(0))


def decide(
    pods: list[dict], zones: dict[str, str], ns_labels: Mapping[str, Mapping[str, str]] | None = None
) -> tuple[Ledger, SchedulingDecision]:
    nodes = [node_spec(node(n, z))[0] for n, z in zones.items()]
    return one_pass(nodes, [pod_view(p, batch_scheduler="kalena") for p in pods], ns_labels)


def place(
    pods: list[dict], zones: dict[str, str], ns_labels: Mapping[str, Mapping[str, str]] | None = None
) -> dict[str, str]:
    ledger, d = decide(pods, zones, ns_labels)
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


def test_a_namespace_selector_reaches_the_namespaces_whose_labels_it_selects():
    zones, labels = {"a1": "a", "a2": "a"}, {"x": {"team": "ml"}, "y": {"team": "web"}}
    everywhere = {
        "labelSelector": {"matchLabels": {"app": "noisy"}},
        "topologyKey": HOST,
        "namespaceSelector": {},
    }
    ml = {**everywhere, "namespaceSelector": {"matchLabels": {"team": "ml"}}}
    noisy = [pod("n", {"app": "noisy"}, ns="x"), pod("m", {"app": "noisy"}, ns="y")]
    assert place([pod("db", {"app": "db"}, node="a1", anti=[everywhere]), *noisy], zones, labels) == {
        "x/n": "a2",
        "y/m": "a2",
    }
    # the db's term reaches team ml only: y's pod may go beside it (the co-location score takes a1)
    assert place([pod("db", {"app": "db"}, node="a1", anti=[ml]), *noisy], zones, labels) == {
        "x/n": "a2",
        "y/m": "a1",
    }
    # required affinity scoped the same way follows only the pods of the namespaces it selects
    near = {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": HOST,
         "namespaceSelector": {"matchLabels": {"team": "ml"}}}]}}  # fmt: skip
    dbs = [pod("db", {"app": "db"}, ns="y", node="a1"), pod("db", {"app": "db"}, ns="x", node="a2")]
    assert place([*dbs, pod("f", {"app": "f"}, ns="y", affinity=near)], zones, labels) == {"y/f": "a2"}


SELF = {"labelSelector": {"matchLabels": {"app": "shard"}}, "topologyKey": HOST}


def test_a_batch_pods_own_anti_affinity_puts_its_replicas_on_distinct_nodes():
    pods = [pod(f"shard-{i}", {"app": "shard"}, anti=[SELF]) for i in range(3)]
    ledger, d = decide(pods, {"a1": "a", "a2": "a"})
    where = {p.workload.id: ledger.node_names[p.node] for p in d.placements}
    assert sorted(where.values()) == ["a1", "a2"]
    assert [w.workload_id for w in d.pending] == ["web/shard-2"]
    assert "Own anti affinity" in d.pending[0].message


def test_a_bound_batch_pods_anti_affinity_keeps_what_it_selects_away():
    """Kubernetes' symmetric rule: the term of the pod already there decides."""
    bound = pod("guard", {"app": "guard"}, node="a1", batch=True, anti=[SELF])
    assert place([bound, pod("shard-0", {"app": "shard"})], {"a1": "a", "a2": "a"}) == {"web/shard-0": "a2"}
    _, d = decide([bound, pod("shard-0", {"app": "shard"})], {"a1": "a"})
    assert "Existing anti affinity" in d.pending[0].message


ZONES = {"a1": "a", "a2": "a", "b1": "b", "b2": "b"}


def test_a_batch_pods_hard_spread_splits_it_over_zones():
    w = {"matchLabels": {"app": "w"}}
    spread = {"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule", "labelSelector": w}
    prod = pod("db", {"app": "db"}, node="a1")  # the co-location score draws batch to its node
    where = place(
        [prod, *(pod(f"w-{i}", {"app": "w"}, topologySpreadConstraints=[spread]) for i in range(4))], ZONES
    )
    assert sorted(ZONES[n] for n in where.values()) == ["a", "a", "b", "b"]
    plain = place([prod, *(pod(f"w-{i}", {"app": "w"}) for i in range(4))], ZONES)
    assert sorted(ZONES[n] for n in plain.values()) != ["a", "a", "b", "b"]


def test_a_batch_pods_required_node_affinity():
    term = {
        "matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "NotIn", "values": ["a"]}]
    }
    aff = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}}
    where = place([pod(f"n-{i}", {"app": "n"}, affinity=aff) for i in range(3)], ZONES)
    assert len(where) == 3 and {ZONES[n] for n in where.values()} == {"b"}


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_every_placement_of_a_random_pass_keeps_kubernetes_rules_as_the_checker_judges(seed: int):
    """Random nodes (zones, some cpu, some tainted), running pods and pending batch pods of random
    types (anti-affinity and spread over hostname or zone, required node affinity by zone,
    namespaces, terms scoped by a namespaceSelector, tolerations, 1-3 replicas), as Kubernetes
    YAML; one pass of Kalena's scheduler;
    every placement, in order, replays in the deployability verifier's independent checker from
    the running pods (node pod counts included)."""
    rng = np.random.default_rng(seed)
    inst = random_instance(
        rng, n_nodes=int(rng.integers(1, 6)), n_types=int(rng.integers(1, 6)), spread_p=0.4
    )
    taint = Taint("t", "v", "NoSchedule")
    nodes = tuple(dataclasses.replace(n, taints=(taint,) if rng.random() < 0.3 else ()) for n in inst.nodes)
    teams = {ns: {"team": str(rng.choice(["ml", "web"]))} for ns in ("default", "other")}
    scoped = LabelSelector({"team": "ml"})

    def scope(terms: tuple[PodAffinityTerm, ...]) -> tuple[PodAffinityTerm, ...]:
        """Some terms reach the namespaces labelled team=ml instead of their pod's own."""
        return tuple(
            dataclasses.replace(t, namespace_selector=scoped) if rng.random() < 0.3 else t for t in terms
        )

    types = tuple(
        dataclasses.replace(
            t,
            tolerations=(Toleration("t", "Equal", "v", "NoSchedule"),) if rng.random() < 0.5 else (),
            node_affinity=(NodeSelectorTerm((Requirement("zone", "In", ("a",)),)),)
            if rng.random() < 0.2
            else None,
            affinity=scope(t.affinity),
            anti_affinity=scope(t.anti_affinity),
        )
        for t in inst.types
    )
    inst = Instance(nodes, types, inst.initial, teams)
    docs = documents(inst)
    node_docs = [d for d in docs if d["kind"] == "Node"]
    running = [d for d in docs if d["kind"] == "Pod" and "nodeName" in d["spec"]]
    pending = []
    for t in inst.types:
        template = next(d for d in docs if d["kind"] == "Pod" and d["metadata"]["name"] == t.name)
        for i in range(int(rng.integers(1, 4))):
            p = copy.deepcopy(template)
            p["metadata"]["name"] = f"{t.name}-{i}"
            p["spec"]["schedulerName"] = "kalena"
            pending.append(p)
    views = [pod_view(p, batch_scheduler="kalena") for p in running + pending]
    ns_labels = {ns: inst.ns_labels(ns) for ns in teams}  # as the apiserver labels them
    ledger, d = one_pass([node_spec(n)[0] for n in node_docs], views, ns_labels)
    steps = [
        Step(Op.DEPLOY, p.workload.id.rsplit("-", 1)[0], ledger.node_names[p.node]) for p in d.placements
    ]
    r = replay(inst, Semantics.KUBERNETES, steps, [])
    assert r.ok, r.message


def test_a_nodes_pods_allocatable_bounds_what_kalena_binds_there():
    """kubelet refuses a pod past ``pods`` (OutOfpods): every pod there counts, this pass's too."""
    small = node("a1", "a")
    small["status"]["allocatable"]["pods"] = "3"
    nodes = [node_spec(small)[0], node_spec(node("a2", "a"))[0]]
    assert nodes[0].max_pods == 3 and nodes[1].max_pods is None
    views = [pod_view(p, batch_scheduler="kalena") for p in [pod("db", {"app": "db"}, node="a1")]]
    views += [pod_view(pod(f"b-{i}", {"app": "b"}), batch_scheduler="kalena") for i in range(4)]
    residents = [(v.spec, v.node) for v in views if v.node]
    ledger, _ = observed_ledger(nodes, residents)
    specs = [v.spec for v in views if not v.node]
    ctx = ContextKeeper(ledger.node_names).context(0.0, specs)
    d = schedule(specs, ledger, ctx, PlacementConfig(), np.random.default_rng(0))
    on = [ledger.node_names[p.node] for p in d.placements]
    assert on.count("a1") == 2 and on.count("a2") == 2  # db and two batch fill a1's three
