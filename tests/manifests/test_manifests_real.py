"""Real manifests from ``../shared/data/deployability/k8s-manifests/`` and the answers in scenarios.json.

"one_step" questions (which nodes accept the pod in a given configuration) check the semantics
against the Kubernetes documentation's worked examples; "reachable" questions check ``decide``.
All under the kubernetes semantics (these are real kube-scheduler expectations).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from kalena.deployability import (
    HOSTNAME,
    Evaluator,
    Instance,
    Node,
    Op,
    PodType,
    Query,
    Semantics,
    Step,
    Verdict,
    decide,
    replay,
)
from kalena.deployability.model import frozen_map
from kalena.manifests import read_manifests

DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "deployability" / "k8s-manifests"
pytestmark = [
    pytest.mark.realdata,
    pytest.mark.skipif(not DATA.is_dir(), reason=f"shared data not found at {DATA}"),
]
K = Semantics.KUBERNETES


def scenario(sid: str) -> dict:
    data = json.loads((DATA / "scenarios.json").read_text())
    return next(s for s in data["scenarios"] if s["id"] == sid)


def nodes_of(spec: dict, alloc: dict | None = None) -> tuple[Node, ...]:
    out = []
    for name, labels in spec.items():
        labels = {k: v for k, v in labels.items() if k != "allocatable"}
        labels.setdefault(HOSTNAME, name)
        out.append(Node(name, frozen_map(labels), (), frozen_map(alloc or {})))
    return tuple(out)


def with_cluster(inst: Instance, nodes, extra_types=(), initial=None) -> Instance:
    return Instance(tuple(nodes), tuple(inst.types) + tuple(extra_types), frozen_map(initial or {}))


def feasible_nodes(inst: Instance, pod: str, config: dict) -> list[str]:
    ev = Evaluator(inst, K)
    return [n.name for n in inst.nodes if ev.ok(pod, n.name, config)]


FOO = PodType(id="default/existing", labels=frozen_map({"foo": "bar"}))


def _tsc(manifest: str, sid: str, pods=None, mutate=None):
    sc = scenario(sid)
    base = scenario("TSC-one-constraint")
    spec = sc["nodes"] if isinstance(sc["nodes"], dict) else base["nodes"]
    pods = pods or (sc["existing_pods"] if isinstance(sc["existing_pods"], list) else base["existing_pods"])
    inst = read_manifests([DATA / "kubernetes-website" / manifest])
    types = tuple(mutate(t) if mutate else t for t in inst.types)
    inst = Instance(nodes_of(spec), (*types, FOO))
    config: dict = {}
    for p in pods:
        key = ("default/existing", p["node"])
        config[key] = config.get(key, 0) + 1
    return inst, config, sc


def _skew(t: PodType, **kw) -> PodType:
    return dataclasses.replace(t, spread=tuple(dataclasses.replace(c, **kw) for c in t.spread))


TSC_CASES = [
    ("one-constraint", "topology-spread-one-constraint.yaml", "TSC-one-constraint", None, ["node3", "node4"]),
    (
        "one-constraint-key-node",
        "topology-spread-one-constraint.yaml",
        "TSC-one-constraint",
        lambda t: _skew(t, topology_key="node"),
        ["node4"],
    ),
    (
        "one-constraint-skew-2",
        "topology-spread-one-constraint.yaml",
        "TSC-one-constraint",
        lambda t: _skew(t, max_skew=2),
        ["node1", "node2", "node3", "node4"],
    ),
    (
        "one-constraint-no-labels",
        "topology-spread-one-constraint.yaml",
        "TSC-one-constraint",
        lambda t: dataclasses.replace(t, labels=frozen_map({})),
        ["node1", "node2", "node3", "node4"],
    ),
    ("two-constraints", "topology-spread-two-constraints.yaml", "TSC-two-constraints", None, ["node4"]),
    ("conflicting", "topology-spread-two-constraints.yaml", "TSC-conflicting", None, []),
    (
        "with-node-affinity",
        "topology-spread-one-constraint-with-nodeaffinity.yaml",
        "TSC-with-nodeaffinity",
        None,
        ["node3", "node4"],
    ),
    (
        "without-node-affinity",
        "topology-spread-one-constraint.yaml",
        "TSC-with-nodeaffinity",
        None,
        ["node5"],
    ),
]


@pytest.mark.parametrize(
    ("manifest", "sid", "mutate", "expected"), [c[1:] for c in TSC_CASES], ids=[c[0] for c in TSC_CASES]
)
def test_topology_spread_examples_from_the_kubernetes_docs(manifest, sid, mutate, expected):
    inst, config, _ = _tsc(manifest, sid, mutate=mutate)
    assert feasible_nodes(inst, "default/mypod", config) == expected


def test_conflicting_constraints_become_feasible_after_a_deletion():
    inst, config, _ = _tsc("topology-spread-two-constraints.yaml", "TSC-conflicting")
    inst = Instance(inst.nodes, inst.types, frozen_map(config))
    ans = decide(inst, Query("default/mypod", "node2"), K)
    assert ans.verdict is Verdict.DEPLOYABLE and ans.checked
    assert ans.witness[0].op is Op.DELETE and ans.witness[-1] == Step(Op.DEPLOY, "default/mypod", "node2")


def test_redis_web_store_example():
    sc = scenario("AFF-redis-web")
    inst = with_cluster(
        read_manifests([DATA / "kubernetes-website" / "assign-pod-node_redis-cache_web-server.yaml"]),
        nodes_of(sc["nodes"]),
    )
    web, store = "default/web-server", "default/redis-cache"
    assert feasible_nodes(inst, web, {}) == []  # one step from empty: nowhere
    ans = decide(inst, Query(web, "node-1"), K)
    assert ans.verdict is Verdict.DEPLOYABLE
    # ...and web stays after its store is deleted (IgnoredDuringExecution)
    assert replay(inst, K, (*ans.witness, Step(Op.DELETE, store, "node-1")), [(web, "node-1")]).ok
    # two of the same on one node: never (self anti-affinity on hostname)
    for t in (web, store):
        assert not Evaluator(inst, K).ok(t, "node-1", {(store, "node-1"): 1, (web, "node-1"): 1})
    # the documented final layout: one store and one web per node
    assert decide(inst, Query(web, "node-2", store), K).verdict is Verdict.DEPLOYABLE


def test_zookeeper_selector_mismatch_allows_sharing():
    sc = scenario("AFF-zookeeper-label-mismatch")
    alloc = {"cpu": 2000, "memory": 4 * 1024**3}
    inst = with_cluster(
        read_manifests([DATA / "kubernetes-website" / "zookeeper.yaml"]), nodes_of(sc["nodes"], alloc)
    )
    ev = Evaluator(inst, K)
    assert ev.ok("default/zk", "n1", {("default/zk", "n1"): 1})
    assert ev.ok("default/zk", "n1", {("default/zk", "n1"): 2})
    assert not ev.ok(
        "default/zk", "n1", {("default/zk", "n1"): 4}
    )  # 4 x 1Gi would be full, 5th not; cpu 4 x 0.5


def test_self_affinity_bootstrap():
    sc = scenario("AFF-self-affinity-bootstrap")
    raw = read_manifests([DATA / "kubernetes-scheduler-perf" / "pod-with-pod-affinity.yaml"])
    (blue,) = raw.types
    blue = dataclasses.replace(blue, id="sched-test/affinity-pod", namespace="sched-test")
    inst = Instance(nodes_of(sc["nodes"]), (blue,))
    assert feasible_nodes(inst, blue.id, {}) == ["a1", "a2", "b1"]
    assert feasible_nodes(inst, blue.id, {(blue.id, "a1"): 1}) == ["a1", "a2"]  # never zone B at once
    assert decide(inst, Query(blue.id, "b1"), K).verdict is Verdict.DEPLOYABLE
    assert decide(inst, Query(blue.id, "x1"), K).verdict is Verdict.NOT_DEPLOYABLE
    default_ns = Instance(nodes_of(sc["nodes"]), (raw.types[0],))
    assert decide(default_ns, Query(raw.types[0].id, "a1"), K).verdict is Verdict.NOT_DEPLOYABLE


def test_docs_pod_with_pod_affinity():
    sc = scenario("AFF-docs-pod-with-pod-affinity")
    inst = with_cluster(
        read_manifests([DATA / "kubernetes-website" / "pod-with-pod-affinity.yaml"]), nodes_of(sc["nodes"])
    )
    q = Query("default/with-pod-affinity", "b1")
    assert decide(inst, q, K).verdict is Verdict.NOT_DEPLOYABLE
    s1 = PodType(id="default/s1", labels=frozen_map({"security": "S1"}))
    ans = decide(Instance(inst.nodes, (*inst.types, s1)), q, K)
    assert ans.verdict is Verdict.DEPLOYABLE and [s.pod_type for s in ans.witness] == ["default/s1", q.pod]


@pytest.mark.parametrize("k", [2, 3])
def test_argo_cd_anti_affinity_only(k):
    inst = read_manifests([DATA / "argo-cd-ha" / "argocd-ha-install_affinity-workloads.yaml"])
    # kubelet labels every node with its OS; the manifests select kubernetes.io/os=linux
    nodes = tuple(
        Node(f"n{i}", frozen_map({HOSTNAME: f"n{i}", "kubernetes.io/os": "linux"})) for i in range(k)
    )
    inst = Instance(nodes, inst.types)
    for t in inst.types:
        ans = decide(inst, Query(t.id, "n0"), K)
        assert ans.verdict is Verdict.DEPLOYABLE and ans.procedure == "empty-configuration check"
        assert not Evaluator(inst, K).ok(t.id, "n0", {(t.id, "n0"): 1})  # two of one workload: never
    redis = "default/argocd-redis-ha-server"
    full = {(redis, f"n{i}"): 1 for i in range(k)}
    # a third replica fits only if a node without one exists
    assert any(Evaluator(inst, K).ok(redis, n.name, full) for n in nodes) is False
