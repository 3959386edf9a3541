"""The packer behind ``kalena pack`` and compaction: hard rules kept, soft ones preferred and counted."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kalena.core.cluster import Cluster, Group
from kalena.core.model import selector_matches, tolerates_all
from kalena.core.packing import pack
from kalena.core.tolerance import REL_TOL
from kalena.data import irina_paths
from kalena.ir import load_cluster
from kalena.ir.checks import soft_notes
from kalena.testing.builders import node, workload


def placed(cluster: Cluster, placement) -> Cluster:
    return dataclasses.replace(cluster, placement=placement)


def hard_rules_hold(cluster: Cluster, placement) -> None:
    """Every rule a blueprint must keep (what ``kalena ir validate`` checks), on this placement."""
    c = placed(cluster, placement)
    assert c.request_ledger_breaches() == ()
    for wid, where in placement.items():
        w, nd = c.workload(wid), c.node(where)
        assert selector_matches(w.node_selector, nd.labels), (wid, where)
        assert tolerates_all(w.tolerations, nd.taints), (wid, where)
    for g in c.groups:
        on = [placement.get(m) for m in g.members]
        n_on = sum(x is not None for x in on)
        assert n_on == 0 or n_on >= g.min_members
        if g.colocate and n_on:
            assert len(set(on)) == 1
        for where in on:
            if where is not None:
                assert selector_matches(g.node_selector, c.node(where).labels)


def test_irina_packs_every_pod_on_fewer_nodes_than_kuberina_keeping_every_hard_rule():
    infra, workloads, blueprint = irina_paths()
    cluster = load_cluster(infra, workloads)
    result = pack(cluster)
    assert result.complete and len(result.placement) == 2714
    hard_rules_hold(cluster, result.placement)
    kuberina = load_cluster(infra, workloads, blueprint)
    assert result.active_nodes <= len({*kuberina.placement.values()}) == 152
    # the soft rules it breaks are counted as `kalena ir validate` lists them
    assert result.soft_broken == len(soft_notes(placed(cluster, result.placement)))
    assert pack(cluster).placement == result.placement  # a pure function of its input


def test_the_hard_rules_send_a_workload_where_they_allow_or_nowhere_with_the_reason():
    nodes = [
        node("plain", cpu=4, ram=8),
        node("ssd", cpu=4, ram=8, labels={"disk": "ssd"}),
        node("tainted", cpu=64, ram=64, taints=("dedicated",)),
    ]
    wl = [
        workload("a/needs-ssd", cpu=2, ram=1, node_selector={"disk": "ssd"}),
        workload("a/tolerant", cpu=32, ram=1, tolerations=("dedicated",)),
        workload("a/too-big", cpu=5, ram=1),
        workload("a/fits", cpu=1, ram=1),
    ]
    c = Cluster.build(nodes, (), wl)
    r = pack(c)
    assert r.placement["a/needs-ssd"] == "ssd"
    assert r.placement["a/tolerant"] == "tainted"
    assert r.placement["a/fits"] in ("plain", "ssd")
    assert dict(r.pending) == {"a/too-big": "no node has room for its requests (cpu)"}
    hard_rules_hold(c, r.placement)
    only_plain = pack(c, allowed=np.array([True, False, False]))
    assert dict(only_plain.pending)["a/needs-ssd"].startswith("no node keeps its nodeSelector and taints")


def test_a_gang_goes_all_or_nothing_and_a_colocated_one_on_one_node():
    nodes = [node(f"n{i}", cpu=4, ram=8, labels={"pool": "a" if i < 2 else "b"}) for i in range(4)]
    wl = [workload(f"g/c-{i}", cpu=1.5, ram=1) for i in range(2)]
    wl += [workload(f"g/s-{i}", cpu=3, ram=1) for i in range(3)]
    wl += [workload(f"g/x-{i}", cpu=3, ram=1) for i in range(3)]
    groups = [
        Group("together", ("g/c-0", "g/c-1"), 2, colocate=True),
        # three pods of 3 cpu in pool a: two nodes hold two, fewer than minMembers 3, so none go
        Group("poolA", ("g/s-0", "g/s-1", "g/s-2"), 3, node_selector={"pool": "a"}),
        Group("loose", ("g/x-0", "g/x-1", "g/x-2"), 2),
    ]
    c = Cluster.build(nodes, (), wl, groups=groups)
    r = pack(c)
    assert r.placement["g/c-0"] == r.placement["g/c-1"]
    assert not any(f"g/s-{i}" in r.placement for i in range(3))
    reasons = dict(r.pending)
    assert all("gang poolA" in reasons[f"g/s-{i}"] for i in range(3))
    assert sum(f"g/x-{i}" in r.placement for i in range(3)) >= 2
    hard_rules_hold(c, r.placement)


def test_soft_anti_affinity_is_kept_where_room_allows_and_counted_where_not():
    spread = [
        workload(f"s/r-{i}", cpu=1, ram=1, anti_affinity=tuple(f"r-{j}" for j in range(3) if j != i))
        for i in range(3)
    ]
    roomy = Cluster.build([node(f"n{i}", cpu=8, ram=8) for i in range(3)], (), spread)
    r = pack(roomy)
    assert len(set(r.placement.values())) == 3 and r.soft_broken == 0
    tight = Cluster.build([node("n0", cpu=8, ram=8)], (), spread)
    t = pack(tight)
    assert t.complete and t.soft_broken == 3 == len(soft_notes(placed(tight, t.placement)))


def test_an_empty_node_is_opened_only_when_the_used_ones_are_full():
    nodes = [node(f"n{i}", cpu=10, ram=10) for i in range(5)]
    wl = [workload(f"w/p-{i}", cpu=3, ram=1) for i in range(6)]
    r = pack(Cluster.build(nodes, (), wl))
    assert r.active_nodes == 2  # 3 + 3 + 3 on one node, the rest on a second


@st.composite
def clusters(draw):
    n = draw(st.integers(1, 6))
    nodes = []
    for i in range(n):
        labels = {"disk": "ssd"} if draw(st.booleans()) else {}
        taints = ("gpu",) if draw(st.integers(0, 4)) == 0 else ()
        cpu, ram = draw(st.sampled_from([2, 4, 8])), draw(st.sampled_from([4, 8, 16]))
        nodes.append(node(f"n{i}", cpu=cpu, ram=ram, labels=labels, taints=taints))
    wl = []
    for j in range(draw(st.integers(0, 25))):
        wl.append(
            workload(
                f"ns/w-{j}",
                cpu=draw(st.sampled_from([0.1, 0.5, 1, 2, 3])),
                ram=draw(st.sampled_from([0.5, 1, 2, 6])),
                node_selector={"disk": "ssd"} if draw(st.integers(0, 3)) == 0 else {},
                tolerations=("gpu",) if draw(st.booleans()) else (),
                anti_affinity=tuple(f"w-{k}" for k in draw(st.lists(st.integers(0, 24), max_size=3))),
            )
        )
    ids = [w.id for w in wl]
    groups = []
    if len(ids) >= 3 and draw(st.booleans()):
        members = tuple(ids[:3])
        groups.append(Group("g", members, draw(st.integers(1, 3)), colocate=draw(st.booleans())))
    return Cluster.build(nodes, (), wl, groups=groups)


@settings(max_examples=150, deadline=None)
@given(clusters(), st.data())
def test_no_workload_is_lost_and_every_placement_keeps_the_hard_rules(cluster, data):
    allowed = np.array(
        data.draw(st.lists(st.booleans(), min_size=len(cluster.nodes), max_size=len(cluster.nodes)))
    )
    r = pack(cluster, allowed=allowed)
    ids = [w.id for w in cluster.workloads]
    assert sorted([*r.placement, *dict(r.pending)]) == sorted(ids)  # each once: placed or pending
    assert all(allowed[[n.name for n in cluster.nodes].index(v)] for v in r.placement.values())
    hard_rules_hold(cluster, r.placement)
    names = [n.name for n in cluster.nodes]
    expected = np.zeros_like(r.load)
    for w, req in zip(cluster.workloads, cluster.requests_matrix(), strict=True):
        if w.id in r.placement:
            expected[names.index(r.placement[w.id])] += req
    assert np.allclose(r.load, expected)
    assert r.active_nodes == len(set(r.placement.values()))
    cap = cluster.capacity_matrix()
    assert (r.load <= cap + REL_TOL * np.maximum(1.0, np.abs(cap))).all()


def test_a_capacity_cap_packs_against_that_share_of_every_node():
    nodes = [node(f"n{i}", cpu=10, ram=10) for i in range(4)]
    c = Cluster.build(nodes, (), [workload(f"w/p-{i}", cpu=4, ram=1) for i in range(4)])
    assert pack(c).active_nodes == 2  # two 4-cpu pods per 10-cpu node
    capped = pack(c, cap_fraction=0.5)  # 5 cpu a node: one pod each
    assert capped.active_nodes == 4 and capped.complete
    hard_rules_hold(c, capped.placement)  # valid against the real capacity, too
    assert not pack(c, cap_fraction=0.3).complete  # 3 cpu a node: none fits
    with pytest.raises(ValueError, match="cap_fraction"):
        pack(c, cap_fraction=0.0)


def test_the_most_constrained_pods_go_first_so_the_scarce_nodes_keep_room_for_them():
    # best fit alone would put the 3-cpu pod on the 3-cpu nvme node and leave no room for the
    # pod that may only go there
    nodes = [node("plain", cpu=4, ram=8), node("nvme", cpu=3, ram=2, labels={"disk": "nvme"})]
    wl = [
        workload("a/anywhere", cpu=3, ram=1),
        workload("a/needs-nvme", cpu=2, ram=1, node_selector={"disk": "nvme"}),
    ]
    r = pack(Cluster.build(nodes, (), wl))
    assert r.complete and r.placement == {"a/needs-nvme": "nvme", "a/anywhere": "plain"}


@st.composite
def with_batch(draw):
    """A cluster and batch classes of identical pods, in a request ledger and a reservation one
    whose rows repeat (so classes form) or differ per pod."""
    cluster = draw(clusters())
    extra, reserved = [], []
    for c in range(draw(st.integers(0, 4))):
        cpu, ram = draw(st.sampled_from([0.25, 0.5, 1, 2])), draw(st.sampled_from([0.5, 1, 3]))
        selector = {"disk": "ssd"} if draw(st.integers(0, 3)) == 0 else {}
        fraction = draw(st.sampled_from([None, 0.5, 1.0]))  # None: a reservation per pod
        for k in range(draw(st.integers(1, 12))):
            extra.append(workload(f"b/c{c}-{k}", cpu=cpu, ram=ram, tier="batch", node_selector=selector))
            f = draw(st.sampled_from([0.3, 0.6, 0.9])) if fraction is None else fraction
            reserved.append(extra[-1].requests.array() * f)
    prod = cluster.requests_matrix()
    batch = np.array([w.requests.array() for w in extra]).reshape(-1, prod.shape[1])
    ledgers = (np.vstack([prod, batch]), np.vstack([prod * 0.7, *(r[None] for r in reserved)]))
    return cluster, extra, ledgers


@settings(max_examples=150, deadline=None)
@given(with_batch(), st.sampled_from([None, 0, 2]))
def test_the_same_class_shortcuts_change_no_answer(case, give_up):
    from kalena.core import packing

    cluster, extra, ledgers = case
    fast = pack(cluster, extra=extra, ledgers=ledgers, give_up_after=give_up)
    packing._Packer.shortcuts = False
    try:
        slow = pack(cluster, extra=extra, ledgers=ledgers, give_up_after=give_up)
    finally:
        packing._Packer.shortcuts = True
    assert fast.placement == slow.placement and fast.pending == slow.pending
    assert np.array_equal(fast.load, slow.load)
    if give_up is not None:  # it stops once more than that are pending (a gang fails whole)
        assert len(fast.pending) <= give_up + max([1, *(len(g.members) for g in cluster.groups)])
