"""Cluster: Phase 0 capacity, the request ledger, active nodes, utilisation and target lookup."""

import math
from dataclasses import replace

import numpy as np
import pytest

from kalena.core.cluster import Cluster, Group, ObservedUsage
from kalena.core.model import Selector
from kalena.core.resources import Resources
from kalena.testing.builders import daemonset, node, workload


def small_cluster(placement: dict[str, str] | None = None) -> Cluster:
    nodes = [node("a", cpu=4, ram=8), node("b", cpu=8, ram=16, labels={"gpu": "yes"}, taints=("gpu",))]
    ds = [daemonset("agent", cpu=0.5, ram=1), daemonset("gpu-driver", selector={"gpu": "yes"}, cpu=1)]
    wls = [
        workload("web/api-0000", cpu=2, ram=2),
        workload("web/api-0001", cpu=2, ram=2),
        workload("db/pg-0", cpu=3, ram=4),
    ]
    return Cluster.build(nodes, ds, wls, placement or {})


def test_build_computes_phase0_capacity_per_node():
    c = small_cluster()
    # agent runs on a; on b the taint is not tolerated by either DaemonSet, so nothing is deducted.
    assert c.capacity["a"]["cpu"] == 3.5 and c.capacity["a"]["ram"] == 7
    assert c.capacity["b"]["cpu"] == 8 and c.capacity["b"]["ram"] == 16
    assert math.isinf(c.capacity["a"]["gpu"])
    np.testing.assert_array_equal(c.phase0_deduction()[:, :3], [[0.5, 1, 0], [0, 0, 0]])


LEDGER = [
    ("fits", {"web/api-0000": "a", "db/pg-0": "b"}, []),
    ("cpu-over-on-a", {"web/api-0000": "a", "web/api-0001": "a"}, [("a", "cpu", 4.0, 3.5)]),
    ("exactly-full-holds", {"web/api-0000": "b", "web/api-0001": "b"}, []),
    ("unplaced-ignored", {}, []),
]


@pytest.mark.parametrize(("placement", "breaches"), [c[1:] for c in LEDGER], ids=[c[0] for c in LEDGER])
def test_request_ledger(placement, breaches):
    c = small_cluster(placement)
    got = [(b.node, b.dimension, b.load, b.capacity) for b in c.request_ledger_breaches()]
    assert got == breaches
    assert c.request_ledger_holds() == (not breaches)


def test_ledger_tolerates_float_rounding_of_decimal_sums():
    n = node("n", cpu=0.3)
    wls = [workload("x/a-0", cpu=0.1), workload("x/b-0", cpu=0.2)]  # 0.1 + 0.2 > 0.3 in binary
    c = Cluster.build([n], [], wls, {"x/a-0": "n", "x/b-0": "n"})
    assert c.request_ledger_holds()


def test_active_nodes_and_mean_utilisation():
    c = small_cluster({"web/api-0000": "a", "web/api-0001": "b"})
    assert c.active_nodes() == ("a", "b")
    np.testing.assert_allclose(c.utilisation("cpu"), [2 / 3.5, 2 / 8])
    assert c.mean_active_utilisation("cpu") == pytest.approx((2 / 3.5 + 2 / 8) / 2)
    assert math.isnan(small_cluster().mean_active_utilisation())


def test_node_load_sums_requests_per_node():
    c = small_cluster({"web/api-0000": "b", "web/api-0001": "b", "db/pg-0": "a"})
    np.testing.assert_array_equal(c.node_load()[:, :2], [[3, 4], [4, 4]])


TARGETS = [
    ("full-id", {"web/api-0000"}, {"web/api-0000"}),
    ("bare-pod-name", {"api-0001"}, {"web/api-0001"}),
    ("unknown", {"nope"}, set()),
]


@pytest.mark.parametrize(("names", "expected"), [c[1:] for c in TARGETS], ids=[c[0] for c in TARGETS])
def test_targets_of(names, expected):
    assert small_cluster().targets_of(Selector(frozenset(names))) == expected


def test_targets_of_declaration_name_matches_every_replica():
    w = [replace(workload(f"ai/t-000{i}", cpu=1), declaration="ai/t") for i in range(3)]
    c = Cluster.build([node("n")], [], w)
    assert c.targets_of(Selector(frozenset({"ai/t"}))) == {"ai/t-0000", "ai/t-0001", "ai/t-0002"}


BAD = [
    ("placement-unknown-workload", {"nope/x": "a"}, "unknown workload"),
    ("placement-unknown-node", {"db/pg-0": "zz"}, "unknown node"),
]


@pytest.mark.parametrize(("placement", "message"), [c[1:] for c in BAD], ids=[c[0] for c in BAD])
def test_inconsistent_cluster_is_a_bug(placement, message):
    with pytest.raises(ValueError, match=message):
        small_cluster(placement)


def test_group_and_observed_validate_their_ranges():
    with pytest.raises(ValueError, match=r"outside 1\.\.2"):
        Group("g", ("a/x-0", "a/y-0"), min_members=3)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        ObservedUsage(exceeded_request_fraction=1.5)
    assert ObservedUsage(p95=Resources.of(cpu=1)).p50 is None


def test_without_empty_nodes_keeps_production_where_it_is():
    c = small_cluster({"web/api-0000": "b", "web/api-0001": "b"})
    d = c.without_empty_nodes()
    assert d.node_names() == ("b",) and dict(d.placement) == dict(c.placement)
    assert d.capacity["b"] == c.capacity["b"] and d.workloads == c.workloads
    np.testing.assert_array_equal(d.node_load(), c.node_load()[1:])
    assert d.active_nodes() == c.active_nodes()
