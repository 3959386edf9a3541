"""Nodes and pods (the API's JSON) into the core's specs: units, requests as the verifier reads
them, classification, tolerations and taints, the Kubernetes rules kept for each pass,
and readiness."""

from __future__ import annotations

import math

import pytest

from kalena.core.model import Tier
from kalena.k8s.objects import node_ready, node_spec, pod_view


def test_a_node_in_core_units_with_taints_and_zone():
    spec, problems = node_spec({
        "metadata": {"name": "n1", "labels": {"topology.kubernetes.io/zone": "z1", "disk": "ssd"}},
        "spec": {"taints": [{"key": "gpu", "value": "yes", "effect": "NoSchedule"}]},
        "status": {"allocatable": {"cpu": "3500m", "memory": "8Gi", "pods": "110"}},
    })  # fmt: skip
    assert problems == []
    assert spec.allocatable["cpu"] == pytest.approx(3.5) and spec.allocatable["ram"] == pytest.approx(8.0)
    assert spec.allocatable["gpu"] == 0.0  # no GPU unless the node says so
    assert math.isinf(spec.allocatable["storage"])  # omitted: unbounded
    assert spec.zone == "z1" and spec.labels["disk"] == "ssd"
    assert [(t.key, t.value, t.effect) for t in spec.taints] == [("gpu", "yes", "NoSchedule")]
    _bad, problems = node_spec({"metadata": {"name": "n2"}, "status": {"allocatable": {"cpu": "lots"}}})
    assert problems and "status.allocatable.cpu" in problems[0] and '(value: "lots")' in problems[0]


def test_ready_means_ready_and_schedulable():
    ready = {"status": {"conditions": [{"type": "Ready", "status": "True"}]}}
    assert node_ready(ready)
    assert not node_ready({**ready, "spec": {"unschedulable": True}})
    assert not node_ready({"status": {"conditions": [{"type": "Ready", "status": "Unknown"}]}})


def test_a_pod_as_the_core_sees_it():
    v = pod_view({
        "metadata": {"name": "p", "namespace": "ns", "uid": "u1",
                     "labels": {"kalena.naughtian.io/tier": "batch", "app": "x"},
                     "annotations": {"kalena.naughtian.io/priority": "7"},
                     "ownerReferences": [{"kind": "Job", "name": "j", "controller": True}]},
        "spec": {"schedulerName": "kalena", "nodeSelector": {"disk": "ssd"},
                 "tolerations": [{"key": "gpu", "operator": "Exists"}],
                 "initContainers": [{"name": "i", "resources": {"requests": {"cpu": "2"}}}],
                 "containers": [
                     {"name": "a", "image": "img:1",
                      "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}},
                     {"name": "b", "resources": {"limits": {"cpu": "1", "memory": "512Mi"}}}]},
        "status": {"phase": "Pending"},
    })  # fmt: skip
    s = v.spec
    assert s.id == "ns/p" and v.uid == "u1" and v.node == "" and v.scheduler == "kalena"
    assert s.tier is Tier.BATCH and s.priority == 7 and s.owner == "ns/Job/j" and s.image == "img:1"
    assert s.requests["cpu"] == pytest.approx(2.0)  # max(0.5 + 1, the init container's 2)
    assert s.requests["ram"] == pytest.approx(1.5)  # a limit stands for a missing request
    assert dict(s.node_selector) == {"disk": "ssd"} and s.tolerations[0].key == "gpu"
    assert v.problems == ()


def test_the_kubernetes_rules_kept_as_read_and_a_bad_classification():
    aff = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "k", "operator": "In", "values": ["v"]}]}]}}}  # fmt: skip
    v = pod_view({
        "metadata": {"name": "q", "namespace": "ns", "labels": {"kalena.naughtian.io/tier": "batch"}},
        "spec": {"affinity": aff, "containers": [{"name": "a"}]},
    })  # fmt: skip
    # kept as read, resolved each pass (kalena.k8s.affinity)
    assert v.node_affinity is not None and v.node_affinity[0].match_expressions[0].key == "k"
    term = {"labelSelector": {"matchLabels": {"a": "b"}}, "topologyKey": "kubernetes.io/hostname"}
    pod_aff = {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}
    u = pod_view({"metadata": {"name": "u", "labels": {"kalena.naughtian.io/tier": "batch"}},
                  "spec": {"affinity": pod_aff, "containers": [{"name": "a"}]}})  # fmt: skip
    assert u.affinity[0].topology_key == "kubernetes.io/hostname"
    w = pod_view({"metadata": {"name": "r", "labels": {"kalena.naughtian.io/tier": "maybe"}},
                  "spec": {"containers": [{"name": "a"}]}})  # fmt: skip
    assert w.spec.tier is Tier.SERVICE and w.problems and "treated as service" in w.problems[0]
    ds = pod_view({"metadata": {"name": "d", "ownerReferences": [{"kind": "DaemonSet", "name": "x"}]},
                   "spec": {"containers": [{"name": "a"}]}})  # fmt: skip
    assert ds.spec.is_daemonset


def test_a_pod_of_kalenas_scheduler_name_is_batch_whatever_its_labels_say():
    pod = {
        "metadata": {"name": "p", "namespace": "ns", "labels": {"kalena.naughtian.io/tier": "service"}},
        "spec": {"schedulerName": "kalena", "containers": [{"name": "c"}],
                 "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                     {"labelSelector": {"matchLabels": {"a": "b"}},
                      "topologyKey": "kubernetes.io/hostname"}]}}},
    }  # fmt: skip
    assert pod_view(pod).spec.tier is Tier.SERVICE
    v = pod_view(pod, batch_scheduler="kalena")
    assert v.spec.tier is Tier.BATCH
    assert v.anti_affinity[0].topology_key == "kubernetes.io/hostname"
    assert pod_view(pod, batch_scheduler="another").spec.tier is Tier.SERVICE


def test_quantities_read_once_read_the_same_and_true_is_no_quantity():
    def cpu(raw):
        spec, problems = node_spec({"metadata": {"name": "n"}, "status": {"allocatable": {"cpu": raw}}})
        return spec.allocatable["cpu"], problems

    for _ in range(2):  # the second read of each text comes from the cache
        assert cpu("1") == (1.0, []) and cpu("250m") == (0.25, []) and cpu(1) == (1.0, [])
    value, problems = cpu(True)
    assert math.isinf(value) and "is not a valid Kubernetes quantity" in problems[0]
    value, problems = cpu("9" * 100)  # long: not cached, still judged
    assert math.isinf(value) and "is above" in problems[0]
    value, problems = cpu("lots")
    assert "is not a valid Kubernetes quantity for cpu" in problems[0]
