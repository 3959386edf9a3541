"""Compaction: the smallest cluster along random removal orders, Borg's allowances, the p90 bars."""

from __future__ import annotations

import numpy as np
import pytest

from kalena.core.cluster import Cluster, Group
from kalena.core.compaction import budget, compact, relax_large_gangs, trial
from kalena.testing.builders import node, workload


def cluster_of(n_nodes: int, pods: int, cpu: float = 3.0, ram: float = 1.0, **kw) -> Cluster:
    nodes = [node(f"n{i}", cpu=10, ram=10) for i in range(n_nodes)]
    return Cluster.build(nodes, (), [workload(f"w/p-{i}", cpu=cpu, ram=ram) for i in range(pods)], **kw)


def test_every_order_finds_the_smallest_cluster_when_the_nodes_are_alike():
    c = cluster_of(8, 9)  # three 3-cpu pods per 10-cpu node: 3 nodes
    result = compact(c, seeds=range(5))
    assert result.counts.tolist() == [3] * 5
    assert (result.p90, result.low, result.high) == (3.0, 3, 3)
    t = result.trials[0]
    assert len(t.removed) == 5 and t.pending == () and t.packs < 8  # bisection, not one pack per node


def test_a_removal_order_decides_when_one_node_is_special():
    nodes = [node(f"n{i}", cpu=10, ram=10) for i in range(6)] + [
        node("ssd", cpu=10, ram=10, labels={"disk": "ssd"})
    ]
    wl = [workload(f"w/p-{i}", cpu=3, ram=1) for i in range(3)]
    wl.append(workload("w/needs-ssd", cpu=1, ram=1, node_selector={"disk": "ssd"}))
    c = Cluster.build(nodes, (), wl)
    counts = compact(c, seeds=range(12)).counts
    # the ssd node must stay: removed early, the bisection keeps every node after it in the order
    assert counts.min() <= 2 and counts.max() > counts.min()
    assert all(trial(c, s).nodes == n for s, n in enumerate(counts.tolist()))  # a pure function of the seed


def test_a_few_especially_constrained_workloads_may_stay_pending():
    c = cluster_of(4, 500, cpu=0.05, ram=0.01)
    assert budget(c) == 1
    wl = [*c.workloads, workload("w/impossible", cpu=1, ram=1, node_selector={"pool": "none"})]
    with_one = Cluster.build(c.nodes, (), wl)
    t = trial(with_one, 0)
    assert t.pending == ("w/impossible",) and t.nodes == 3  # 500 x 0.05 cpu = 25 cpu on 10-cpu nodes
    with pytest.raises(ValueError, match="does not fit the whole cluster"):
        trial(with_one, 0, pending_fraction=0.0)


def test_a_gang_larger_than_half_the_cluster_loses_its_gang_rules():
    members = tuple(f"w/p-{i}" for i in range(5))
    big = cluster_of(8, 9, groups=[Group("huge", members, 5, colocate=True)])  # 15 cpu on one 10-cpu node
    small = cluster_of(8, 9, groups=[Group("pair", members[:2], 2, colocate=True)])
    assert relax_large_gangs(big).groups == () and relax_large_gangs(small).groups == small.groups
    assert trial(big, 0).nodes == 3  # packed as single pods
    assert np.isfinite(compact(small, seeds=[0]).p90)
