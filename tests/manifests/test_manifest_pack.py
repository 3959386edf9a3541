"""Packing a cluster read from Kubernetes manifests: the hard rules only Kubernetes states.

The deployability verifier's independent replay checker (``kalena.deployability.checker``, which
shares no code with the packer) is the referee: every pack is replayed step by step from an empty
cluster, DaemonSet pods first, and every workload the packer leaves pending is checked to have no
feasible node in the final configuration.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from kalena.core.compaction import relax_large_gangs, trial
from kalena.core.model import Taint as CoreTaint
from kalena.core.model import Toleration as CoreToleration
from kalena.core.model import tolerates_all
from kalena.core.packing import PackResult, pack
from kalena.deployability.checker import feasible, replay
from kalena.deployability.model import Instance, Semantics, Taint, Toleration
from kalena.ir import IRError
from kalena.manifests.cluster import ManifestCluster, read_cluster, replay_steps, to_cluster
from kalena.manifests.load import MAX_REPLICAS, Manifests
from kalena.testing.deployability import random_instance

SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "data"
FORGE = SHARED / "kuberina"
WEBSITE = SHARED / "deployability" / "k8s-manifests" / "kubernetes-website"
K = Semantics.KUBERNETES
ZONE = "topology.kubernetes.io/zone"
needs_data = pytest.mark.skipif(not SHARED.is_dir(), reason=f"shared data not found at {SHARED}")


def nodes_yaml(path: Path, n: int, *, cpu: str = "8", pods: str = "110", taint: dict | None = None) -> Path:
    """``n`` Nodes, alternately in zones a and b."""
    docs = []
    for i in range(n):
        node = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": f"node{i}", "labels": {ZONE: "ab"[i % 2]}},
            "status": {"allocatable": {"cpu": cpu, "memory": "32Gi", "pods": pods}},
        }
        if taint is not None and i == 0:
            node["spec"] = {"taints": [taint]}
        docs.append(node)
    path.write_text(yaml.safe_dump_all(docs), encoding="utf-8")
    return path


def deployment(name: str, replicas: int, spec: dict, labels: dict | None = None) -> dict:
    labels = labels or {"app": name}
    pod = {"containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": "1"}}}], **spec}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": pod},
        },
    }


def replays(mc: ManifestCluster, r: PackResult) -> None:
    """The pack replays in the checker, and no pending workload could go anywhere at the end."""
    inst = dataclasses.replace(mc.instance, initial={})
    rp = replay(inst, K, replay_steps(mc, r.order, r.placement), [])
    assert rp.ok, rp.message
    config = Counter((mc.pod_type[w], n) for w, n in r.placement.items())
    config.update((ds, n) for ds, on in mc.daemonset_nodes.items() for n in on)
    for w, why in r.pending:
        where = [n.name for n in inst.nodes if feasible(inst, K, config, mc.pod_type[w], n.name)]
        assert not where, f"{w} left pending ({why}) but it fits on {where}"


@needs_data
def test_kuberinas_forge_manifests_pack_keeping_affinity_spread_and_the_daemonset():
    mc = read_cluster([FORGE / "k8s_cluster-nodes.yaml", FORGE / "k8s_workloads.yaml"])
    c = mc.cluster
    assert sorted(w.id for w in c.workloads) == [
        "ai/parameter-server-0",
        "ai/trainer-0000",
        "ai/trainer-0001",
    ]
    # node-exporter (100m, 128Mi) runs on every node; gpu-a's dedicated taint is tolerated by it
    assert [round(c.capacity[n]["cpu"], 6) for n in ("gpu-a", "gpu-b", "std-a")] == [63.9, 63.9, 15.9]
    r = pack(c)
    assert r.complete, r.pending
    server = r.placement["ai/parameter-server-0"]
    # its required podAffinity (app: trainer, same hostname) keeps it beside a trainer; it does not
    # tolerate gpu-a's taint, so the trainers went where it could follow them
    assert server in {r.placement["ai/trainer-0000"], r.placement["ai/trainer-0001"]}
    assert server != "gpu-a"
    replays(mc, r)


@needs_data
def test_required_anti_affinity_leaves_the_third_replica_pending_on_two_nodes(tmp_path: Path):
    mc = read_cluster(
        [nodes_yaml(tmp_path / "n.yaml", 2), WEBSITE / "assign-pod-node_redis-cache_web-server.yaml"]
    )
    r = pack(mc.cluster)
    pending = dict(r.pending)
    assert sorted(pending) == ["default/redis-cache-0002", "default/web-server-0002"]
    assert "required pod anti-affinity" in pending["default/redis-cache-0002"]
    by_node = Counter(r.placement.values())
    assert by_node == {"node0": 2, "node1": 2}  # one cache and one web server on each
    for n in ("node0", "node1"):
        apps = sorted(w.split("/")[1].rsplit("-", 1)[0] for w, m in r.placement.items() if m == n)
        assert apps == ["redis-cache", "web-server"]
    replays(mc, r)
    # a third node takes the rest
    mc3 = read_cluster(
        [nodes_yaml(tmp_path / "n3.yaml", 3), WEBSITE / "assign-pod-node_redis-cache_web-server.yaml"]
    )
    r3 = pack(mc3.cluster)
    assert r3.complete and r3.active_nodes == 3
    replays(mc3, r3)


def test_hard_spread_splits_replicas_over_zones_where_best_fit_would_stack_them(tmp_path: Path):
    spread = {
        "topologySpreadConstraints": [
            {
                "maxSkew": 1,
                "topologyKey": ZONE,
                "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": {"matchLabels": {"app": "web"}},
            }
        ]
    }
    wl = tmp_path / "w.yaml"
    wl.write_text(yaml.safe_dump_all([deployment("web", 4, spread), deployment("plain", 4, {})]))
    mc = read_cluster([nodes_yaml(tmp_path / "n.yaml", 4), wl])
    r = pack(mc.cluster)
    assert r.complete
    zone = {n.name: n.labels[ZONE] for n in mc.cluster.nodes}
    assert Counter(zone[r.placement[f"default/web-{i:04d}"]] for i in range(4)) == {"a": 2, "b": 2}
    assert len({r.placement[f"default/plain-{i:04d}"] for i in range(4)}) == 1  # best fit stacks these
    replays(mc, r)


def test_a_toleration_from_kubernetes_matches_value_and_effect():
    taint = CoreTaint("dedicated", "ml", "NoSchedule")
    assert tolerates_all((CoreToleration("dedicated", "Equal", "ml", "NoSchedule", exact=True),), (taint,))
    assert not tolerates_all((CoreToleration("dedicated", "Equal", "gpu", exact=True),), (taint,))
    assert not tolerates_all(
        (CoreToleration("dedicated", "Exists", effect="NoExecute", exact=True),), (taint,)
    )
    assert tolerates_all((CoreToleration("dedicated", "Exists", exact=True),), (taint,))
    assert not tolerates_all((CoreToleration("", "Exists", effect="NoExecute", exact=True),), (taint,))
    assert tolerates_all((CoreToleration("dedicated", "Equal", "gpu"),), (taint,))  # IR v1: the key only


def test_a_pod_tolerating_another_value_stays_off_the_tainted_node(tmp_path: Path):
    wl = tmp_path / "w.yaml"
    tol = {"tolerations": [{"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}]}
    wl.write_text(yaml.safe_dump(deployment("x", 1, tol)))
    taint = {"key": "dedicated", "value": "ml", "effect": "NoSchedule"}
    mc = read_cluster([nodes_yaml(tmp_path / "n.yaml", 1, taint=taint), wl])
    r = pack(mc.cluster)
    assert r.pending == (("default/x-0", "no node keeps its nodeSelector and taints"),)


def test_the_pods_allocatable_less_the_daemonset_pods_bounds_a_node(tmp_path: Path):
    ds = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "agent"},
        "spec": {
            "selector": {"matchLabels": {"app": "agent"}},
            "template": {
                "metadata": {"labels": {"app": "agent"}},
                "spec": {
                    "containers": [{"name": "a", "image": "x", "resources": {"requests": {"cpu": "1"}}}]
                },
            },
        },
    }
    wl = tmp_path / "w.yaml"
    wl.write_text(yaml.safe_dump_all([ds, deployment("x", 5, {})]))
    mc = read_cluster([nodes_yaml(tmp_path / "n.yaml", 2, pods="3"), wl])
    assert [n.max_pods for n in mc.cluster.nodes] == [2, 2]
    assert [mc.cluster.capacity[n]["cpu"] for n in ("node0", "node1")] == [7.0, 7.0]
    r = pack(mc.cluster)
    assert len(r.placement) == 4 and r.pending[0][1] == "no node takes another pod (its pods allocatable)"
    replays(mc, r)


def test_what_the_packer_cannot_model_is_refused_naming_the_file_and_key(tmp_path: Path):
    wl = tmp_path / "w.yaml"
    pod = deployment("x", 1, {})
    pod["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["hugepages-2Mi"] = "2Mi"
    wl.write_text(yaml.safe_dump(pod))
    with pytest.raises(IRError) as e:
        read_cluster([nodes_yaml(tmp_path / "n.yaml", 1), wl])
    line = e.value.problems[0].render()
    assert str(wl) in line and "spec.template.spec.containers" in line and "hugepages-2Mi" in line

    wl.write_text(yaml.safe_dump(deployment("x", MAX_REPLICAS + 1, {})))
    with pytest.raises(IRError) as e:
        read_cluster([wl])
    assert "spec.replicas" in e.value.problems[0].render()

    # within the bound one by one, beyond it together (read, but never unrolled)
    wl.write_text(yaml.safe_dump_all([deployment("x", MAX_REPLICAS, {}), deployment("y", 1, {})]))
    with pytest.raises(IRError) as e:
        read_cluster([wl])
    assert f"pods in all, more than {MAX_REPLICAS:,}" in e.value.problems[0].render()


def _pod(name: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "c", "image": "x"}]},
    }


def _job(name: str, parallelism: int, **spec: object) -> dict:
    template = {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "x"}]}}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {"parallelism": parallelism, **spec, "template": template},
    }


def test_replicas_and_a_jobs_parallelism_unroll_like_ir_declarations(tmp_path: Path):
    job = _job("crunch", 5, completions=3)
    job["metadata"]["namespace"] = "ml"
    wl = tmp_path / "w.yaml"
    wl.write_text(yaml.safe_dump_all([deployment("web", 2, {}), job, _pod("solo")]))
    c = read_cluster([wl]).cluster
    ids = sorted(w.id for w in c.workloads)
    assert ids == [
        "default/solo-0",
        "default/web-0000",
        "default/web-0001",
        "ml/crunch-0000",
        "ml/crunch-0001",
        "ml/crunch-0002",
    ]
    tiers = {w.id: w.tier.value for w in c.workloads}
    assert tiers["ml/crunch-0000"] == "batch" and tiers["default/web-0000"] == "service"


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_every_pack_of_a_random_kubernetes_cluster_replays_and_leaves_nothing_placeable(seed: int):
    """Random nodes (zones, pod counts, some cpu, some tainted) and pod types (required affinity,
    anti-affinity and spread over hostname or zone, namespaces, tolerations that match the taint's
    value or not), 0-3 replicas each."""
    rng = np.random.default_rng(seed)
    inst = random_instance(
        rng, n_nodes=int(rng.integers(1, 7)), n_types=int(rng.integers(1, 7)), pods_cap=5, spread_p=0.4
    )
    taint = Taint("t", "v", "NoSchedule")
    nodes = tuple(dataclasses.replace(n, taints=(taint,)) if rng.random() < 0.3 else n for n in inst.nodes)
    types = tuple(
        dataclasses.replace(
            t, tolerations=(Toleration("t", "Equal", str(rng.choice(["v", "w"])), "NoSchedule"),)
        )
        if rng.random() < 0.5
        else t
        for t in inst.types
    )
    inst = Instance(nodes, types, {}, inst.namespace_labels)
    replicas = {t.id: int(rng.integers(0, 4)) for t in inst.types}
    mc = to_cluster(Manifests(inst, replicas, {t.id: ("f.yaml", ("spec",)) for t in inst.types}))
    replays(mc, pack(mc.cluster))


def test_compaction_makes_the_hard_rules_of_a_declaration_larger_than_half_the_cluster_soft(tmp_path: Path):
    """Borg §5.1: four replicas that must be on four hosts, on six nodes, would hold compaction at
    four; with more replicas than half the nodes their anti-affinity is soft there (pack keeps it)."""
    anti = {
        "affinity": {
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "labelSelector": {"matchLabels": {"app": "wide"}},
                        "topologyKey": "kubernetes.io/hostname",
                    }
                ]
            }
        }
    }
    wl = tmp_path / "w.yaml"
    wl.write_text(yaml.safe_dump(deployment("wide", 4, anti)))
    c = read_cluster([nodes_yaml(tmp_path / "n.yaml", 6), wl]).cluster
    assert pack(c).active_nodes == 4
    assert trial(c, np.random.default_rng(0)).nodes == 1  # 4 cpu fit one 8-cpu node once soft
    relaxed = relax_large_gangs(c)
    assert all(
        not w.required_anti_affinity and w.anti_affinity.names == {"default/wide"} for w in relaxed.workloads
    )
    wl.write_text(yaml.safe_dump(deployment("wide", 3, anti)))  # three is not more than half of six
    c3 = read_cluster([nodes_yaml(tmp_path / "n.yaml", 6), wl]).cluster
    assert relax_large_gangs(c3) is c3 and trial(c3, np.random.default_rng(0)).nodes == 3


def _cronjob(name: str, parallelism: int, suspend: object = None, job_suspend: object = None) -> dict:
    job_spec = _job(name, parallelism, **({} if job_suspend is None else {"suspend": job_suspend}))["spec"]
    spec: dict = {"schedule": "*/5 * * * *", "jobTemplate": {"spec": job_spec}}
    if suspend is not None:
        spec["suspend"] = suspend
    return {"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": name}, "spec": spec}


def test_a_cronjob_counts_its_jobs_pods_and_a_suspended_one_none(tmp_path: Path):
    suspended_job = _job("held", 4, suspend=True)
    docs = [
        _cronjob("nightly", 2),
        _cronjob("paused", 3, suspend=True),
        _cronjob("template-paused", 3, job_suspend=True),
        _cronjob("resumed", 1, suspend=False),
        suspended_job,
    ]
    wl = tmp_path / "w.yaml"
    wl.write_text(yaml.safe_dump_all(docs))
    ids = sorted(w.id for w in read_cluster([wl]).cluster.workloads)
    # a CronJob's pods need room whenever it fires; suspended, it asks none (the type still exists)
    assert ids == ["default/nightly-0000", "default/nightly-0001", "default/resumed-0"]


def test_a_suspend_that_is_not_a_boolean_is_named(tmp_path: Path):
    wl = tmp_path / "w.yaml"
    wl.write_text(yaml.safe_dump_all([_cronjob("nightly", 2, suspend="yes")]))
    with pytest.raises(IRError) as e:
        read_cluster([wl])
    assert 'spec.suspend: must be true or false (value: "yes")' in str(e.value)
    assert "w.yaml" in str(e.value)
