"""Nodes, DaemonSets (Phase 0) and selectors."""

import math

import pytest

from kalena.core.model import Selector, Taint, Toleration, node_capacity, tolerates_all
from kalena.testing.builders import daemonset, node, workload

PHASE0 = [
    ("no-selector-applies-everywhere", {}, (), {"role": "x"}, (), 3.5),
    ("selector-matches", {"role": "x"}, (), {"role": "x"}, (), 3.5),
    ("selector-mismatch-skips", {"role": "y"}, (), {"role": "x"}, (), 4.0),
    ("taint-untolerated-skips", {}, (), {}, ("gpu",), 4.0),
    ("taint-tolerated-by-key", {}, ("gpu",), {}, ("gpu",), 3.5),
]


@pytest.mark.parametrize(
    ("selector", "tolerations", "labels", "taints", "cpu_left"),
    [c[1:] for c in PHASE0],
    ids=[c[0] for c in PHASE0],
)
def test_phase0(selector, tolerations, labels, taints, cpu_left):
    n = node("a", cpu=4, ram=8, labels=labels, taints=taints)
    ds = daemonset("agent", selector=selector, tolerations=tolerations, cpu=0.5, ram="512Mi")
    cap = node_capacity(n, [ds])
    assert cap["cpu"] == cpu_left
    assert cap["ram"] == (7.5 if cpu_left < 4 else 8.0)


def test_phase0_keeps_unconstrained_and_clips_at_zero():
    n = node("a", cpu=1)
    cap = node_capacity(n, [daemonset("big", cpu=2, ram=1)])
    assert cap["cpu"] == 0.0
    assert math.isinf(cap["ram"])


def test_tolerations():
    assert tolerates_all((Toleration("gpu"),), (Taint("gpu", "a100", "NoSchedule"),))
    assert not tolerates_all((), (Taint("gpu", effect="NoSchedule"),))
    assert tolerates_all((), (Taint("soft", effect="PreferNoSchedule"),))
    assert tolerates_all((Toleration("", operator="Exists"),), (Taint("anything"),))


SELECTORS = [
    ("full-id", Selector(frozenset({"ai/llm-0001"})), True),
    ("bare-pod-name", Selector(frozenset({"llm-0001"})), True),
    ("declaration", Selector(frozenset({"ai/llm"})), True),
    ("bare-declaration", Selector(frozenset({"llm"})), True),
    ("other", Selector(frozenset({"ai/llm-0002"})), False),
    ("labels", Selector(match_labels={"app": "llm"}), True),
    ("labels-mismatch", Selector(match_labels={"app": "web"}), False),
    ("empty-matches-nothing", Selector(), False),
]


@pytest.mark.parametrize(("sel", "expected"), [c[1:] for c in SELECTORS], ids=[c[0] for c in SELECTORS])
def test_selector(sel, expected):
    from dataclasses import replace

    w = replace(workload("ai/llm-0001", labels={"app": "llm"}), declaration="ai/llm")
    assert sel.matches(w) is expected


def test_topology_value_falls_back_to_ir_fields():
    n = node("a", zone="z1", rack="r9", labels={"disk": "ssd"})
    assert n.topology_value("zone") == "z1"
    assert n.topology_value("topology.kubernetes.io/zone") == "z1"
    assert n.topology_value("rack") == "r9"
    assert n.topology_value("kubernetes.io/hostname") == "a"
    assert n.topology_value("disk") == "ssd"
    assert n.topology_value("missing") is None
