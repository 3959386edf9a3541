"""Compaction: the smallest cluster along random removal orders, Borg's allowances, the p90 bars."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kalena.core.cluster import Cluster, Group
from kalena.core.compaction import (
    BatchLoad,
    Guide,
    _search,
    arm,
    budget,
    capacity_bound,
    compact,
    compacted,
    grown,
    relax_large_gangs,
    trial,
)
from kalena.testing.builders import node, workload


def rngs(n: int) -> list[np.random.Generator]:
    return [np.random.default_rng(s) for s in range(n)]


def cluster_of(n_nodes: int, pods: int, cpu: float = 3.0, ram: float = 1.0, **kw) -> Cluster:
    nodes = [node(f"n{i}", cpu=10, ram=10) for i in range(n_nodes)]
    return Cluster.build(nodes, (), [workload(f"w/p-{i}", cpu=cpu, ram=ram) for i in range(pods)], **kw)


def test_every_order_finds_the_smallest_cluster_when_the_nodes_are_alike():
    c = cluster_of(8, 9)  # three 3-cpu pods per 10-cpu node: 3 nodes
    result = compact(c, rngs(5))
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
    counts = compact(c, rngs(12)).counts
    # the ssd node must stay: removed early, the bisection keeps every node after it in the order
    assert counts.min() <= 2 and counts.max() > counts.min()
    assert all(
        trial(c, np.random.default_rng(s)).nodes == n for s, n in enumerate(counts.tolist())
    )  # seeded alike


def test_a_few_especially_constrained_workloads_may_stay_pending():
    c = cluster_of(4, 500, cpu=0.05, ram=0.01)
    assert budget(c) == 1
    wl = [*c.workloads, workload("w/impossible", cpu=1, ram=1, node_selector={"pool": "none"})]
    with_one = Cluster.build(c.nodes, (), wl)
    t = trial(with_one, np.random.default_rng(0))
    assert t.pending == ("w/impossible",) and t.nodes == 3  # 500 x 0.05 cpu = 25 cpu on 10-cpu nodes
    with pytest.raises(ValueError, match="does not fit the whole cluster"):
        trial(with_one, np.random.default_rng(0), pending_fraction=0.0)


def test_a_gang_larger_than_half_the_cluster_loses_its_gang_rules():
    members = tuple(f"w/p-{i}" for i in range(5))
    big = cluster_of(8, 9, groups=[Group("huge", members, 5, colocate=True)])  # 15 cpu on one 10-cpu node
    small = cluster_of(8, 9, groups=[Group("pair", members[:2], 2, colocate=True)])
    assert relax_large_gangs(big).groups == () and relax_large_gangs(small).groups == small.groups
    assert trial(big, np.random.default_rng(0)).nodes == 3  # packed as single pods
    assert np.isfinite(compact(small, rngs(1)).p90)


def batch_load(c: Cluster, pods: int, cpu: float, reserved: float) -> BatchLoad:
    batch = tuple(workload(f"b/t-{i}", cpu=cpu, ram=0.5, tier="batch") for i in range(pods))
    res = np.zeros((pods, 8))
    res[:, 0], res[:, 1] = reserved, 0.5
    return BatchLoad(batch, res, c.requests_matrix() * 0.5)


def test_the_arms_count_batch_by_its_reservation_or_its_request():
    c = cluster_of(6, 6)  # 18 cpu of production
    load = batch_load(c, 10, cpu=2.0, reserved=0.5)
    extra, ledgers = arm(c, load, reclaim=False)
    assert extra == load.batch and len(ledgers) == 1
    assert ledgers[0][:6, 0].tolist() == [3.0] * 6 and ledgers[0][6:, 0].tolist() == [2.0] * 10
    _, (requests, reservations) = arm(c, load, reclaim=True)
    assert requests[6:].sum() == 0 and requests[:6, 0].tolist() == [3.0] * 6  # batch is not in it
    assert reservations[:6, 0].tolist() == [1.5] * 6 and reservations[6:, 0].tolist() == [0.5] * 10
    assert arm(c, None, reclaim=True) == ((), None)
    on, off = (
        trial(c, np.random.default_rng(0), load=load, reclaim=True),
        trial(c, np.random.default_rng(0), load=load, reclaim=False),
    )
    # on: 18 cpu of production requests, 9 + 5 reserved -> 2 nodes; off: 18 + 20 cpu -> 4 nodes
    assert (on.nodes, off.nodes) == (2, 4)


def test_a_workload_larger_than_the_cluster_grows_it_by_clones_of_its_nodes():
    c = cluster_of(2, 12)  # 36 cpu on 20: four 10-cpu nodes needed
    t = trial(c, np.random.default_rng(3))
    assert t.nodes == 4 and t.added >= 2 and t.pending == ()
    pool = grown(c, np.array([1, 0]), 3)
    assert [n.name for n in pool.nodes] == ["n0", "n1", "n1~0", "n0~1", "n1~2"]
    assert pool.capacity["n1~2"] == c.capacity["n1"]


def test_the_compacted_cluster_is_the_trial_s_nodes_with_its_placement():
    c = cluster_of(8, 9)
    t = trial(c, np.random.default_rng(3))
    small = compacted(c, t)
    assert len(small.nodes) == t.nodes == 3
    assert {nd.name for nd in small.nodes} == set(t.kept) == {nd.name for nd in c.nodes} - set(t.removed)
    assert set(small.placement) == {w.id for w in c.workloads}
    assert small.request_ledger_holds()


def test_a_compacted_cluster_larger_than_the_original_has_its_clones_and_leaves_the_pending_out():
    c = cluster_of(2, 12)  # 36 cpu on two 10-cpu nodes: the pool grows by clones
    wl = [*c.workloads, workload("w/impossible", cpu=1, ram=1, node_selector={"pool": "none"})]
    c = Cluster.build(c.nodes, (), wl)
    t = trial(c, np.random.default_rng(0), pending_fraction=0.1)
    small = compacted(c, t)
    assert t.added > 0 and len(small.nodes) == t.nodes == 4
    clones = [nd for nd in small.nodes if "~" in nd.name]
    assert clones and all(nd.allocatable == c.node(nd.name.split("~")[0]).allocatable for nd in clones)
    assert "w/impossible" in t.pending and "w/impossible" not in small.placement
    assert len(small.workloads) == 12 and small.request_ledger_holds()


def test_the_volume_bound_skips_packs_and_changes_no_trial():
    """least_placed answers the probes whose nodes cannot hold the workload without packing them;
    with it off (nothing must be placed), every probe packs, and each trial ends the same."""
    import kalena.core.compaction as compaction

    c = cluster_of(12, 30)  # 90 cpu on 10-cpu nodes: removing more than 2 nodes cannot fit
    batch = [workload(f"b/p-{i}", cpu=1, ram=1, tier="batch") for i in range(20)]
    res = np.array([w.requests.array() * 0.5 for w in batch])
    load = BatchLoad(tuple(batch), res, c.requests_matrix() * 0.6)
    for reclaim in (True, False):
        quick = [trial(c, np.random.default_rng(s), load=load, reclaim=reclaim) for s in range(4)]
        original = compaction.least_placed
        compaction.least_placed = lambda *a: np.zeros((1, 8))
        try:
            full = [trial(c, np.random.default_rng(s), load=load, reclaim=reclaim) for s in range(4)]
        finally:
            compaction.least_placed = original
        for q, f in zip(quick, full, strict=True):
            assert dataclasses.replace(q, packs=0, bound=0) == dataclasses.replace(f, packs=0, bound=0)
        assert sum(q.packs for q in quick) < sum(f.packs for f in full)


@given(n=st.integers(1, 400), data=st.data())
def test_the_search_finds_the_boundary_from_any_start(n: int, data):
    """Over a monotone answer (removing up to ``t`` nodes fits), a bisection and a gallop from any
    start both end at ``t``, with its pack; a start at the boundary takes two probes."""
    t = data.draw(st.integers(0, n - 1))
    start = data.draw(st.none() | st.integers(-5, n + 5))
    probes: list[int] = []

    def probe(m: int):
        probes.append(m)
        return m  # the "pack" is the probe's count

    lo, best = _search(probe, lambda m: m <= t, n, start)
    assert lo == t and best == (None if t == 0 else t)
    assert len(probes) == len(set(probes))  # no count probed twice
    if start == t and 0 < t < n - 1:
        assert sorted(probes) == [t, t + 1]


def test_the_capacity_bound_is_the_fewest_nodes_from_the_end_of_the_order():
    c = Cluster.build([node(f"n{i}", cpu=10 * (i + 1), ram=100) for i in range(4)], (), [])
    need = np.zeros((1, 8))
    need[0, 0] = 45.0  # cpu
    assert capacity_bound(c, np.array([0, 1, 2, 3]), need) == 2  # 30 + 40 (10 + 20 are removed)
    assert capacity_bound(c, np.array([3, 2, 1, 0]), need) == 3  # 10 + 20 < 45 <= 10 + 20 + 30
    need[0, 0] = 95.0
    assert capacity_bound(c, np.array([0, 1, 2, 3]), need) == 4  # every node: 100
    need[0, 0] = 1000.0
    assert capacity_bound(c, np.array([0, 1, 2, 3]), need) == 4  # nothing holds it: the whole pool


def test_a_trial_guided_by_another_ends_where_a_bisection_does_with_fewer_packs():
    nodes = [node(f"n{i}", cpu=10, ram=10) for i in range(30)]
    wl = [workload(f"w/p-{i}", cpu=3, ram=1 + (i % 4)) for i in range(60)]
    c = Cluster.build(nodes, (), wl)
    batch = tuple(workload(f"b/t-{i}", cpu=2, ram=1, tier="batch") for i in range(40))
    load = BatchLoad(batch, np.array([w.requests.array() * 0.5 for w in batch]), c.requests_matrix() * 0.7)
    for kw in ({}, {"load": load, "reclaim": True}, {"load": load, "reclaim": False}):
        plain = [trial(c, np.random.default_rng(s), **kw) for s in range(6)]
        guided = [trial(c, np.random.default_rng(s), guide=Guide.of(plain[0]), **kw) for s in range(6)]
        for p, g in zip(plain, guided, strict=True):
            assert dataclasses.replace(p, packs=0) == dataclasses.replace(g, packs=0)
            assert p.bound <= p.nodes
        assert sum(g.packs for g in guided) < sum(p.packs for p in plain)
    small = cluster_of(2, 3, cpu=6.0)  # 18 cpu in 20 yet one pod per node: it grows, packed once
    plain = [trial(small, np.random.default_rng(s)) for s in range(4)]
    guide = Guide.of(plain[0])
    assert guide.grows and all(p.added > 0 for p in plain)
    guided = [trial(small, np.random.default_rng(s), guide=guide) for s in range(4)]
    assert [dataclasses.replace(g, packs=0) for g in guided] == [
        dataclasses.replace(p, packs=0) for p in plain
    ]
    assert sum(g.packs for g in guided) < sum(p.packs for p in plain)


def test_a_guided_trial_whose_pool_holds_the_workload_but_cannot_pack_it_grows_as_an_unguided_one():
    # 42 cpu of 6-cpu pods, one per 10-cpu node: 5 nodes hold 42 cpu, yet 7 are needed. A guided
    # trial searches a pool its capacity allows (5, then 6 nodes), finds every probe and the pool
    # too small, and grows again with its removal order drawn again from the same generator state.
    c = cluster_of(4, 7, cpu=6.0)
    plain = [trial(c, np.random.default_rng(s)) for s in range(6)]
    assert {p.added for p in plain} == {4} and {p.nodes for p in plain} == {7}
    guide = Guide.of(plain[0])
    guided = [trial(c, np.random.default_rng(s), guide=guide) for s in range(6)]
    assert [dataclasses.replace(g, packs=0) for g in guided] == [
        dataclasses.replace(p, packs=0) for p in plain
    ]
    assert len({p.removed for p in plain}) > 1  # the removal orders differ: drawing them matters
