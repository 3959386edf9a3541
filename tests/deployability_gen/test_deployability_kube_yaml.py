"""Generated instances written as Kubernetes YAML read back to the same instance."""

from __future__ import annotations

import numpy as np
import pytest
import yaml

from kalena.deployability import (
    LabelSelector,
    NodeSelectorTerm,
    PodAffinityTerm,
    PodType,
    Query,
    Requirement,
    Semantics,
    SpreadConstraint,
    Taint,
    Toleration,
    decide,
)
from kalena.deployability.model import Instance, frozen_map
from kalena.deployability_gen import (
    counter_net,
    pebbling_instance,
    petri_instance,
    pyramid,
    to_yaml,
    write_yaml,
)
from kalena.manifests import parse_manifests, read_manifests
from kalena.testing.deployability import instance, knode, ptype, random_instance, sel


def _rich_instance() -> Instance:
    full = PodType(
        id="shop/full",
        namespace="shop",
        labels=frozen_map({"app": "full"}),
        requests=frozen_map({"pods": 1, "cpu": 250, "memory": 536870912, "example.com/dongle": 1}),  # type: ignore[arg-type]
        node_selector=frozen_map({"disk": "ssd"}),
        node_affinity=(
            NodeSelectorTerm((Requirement("zone", "In", ("a", "b")), Requirement("gen", "Gt", ("3",)))),
            NodeSelectorTerm(match_fields=(Requirement("metadata.name", "NotIn", ("n1",)),)),
        ),
        tolerations=(Toleration("gpu", "Exists", "", "NoSchedule"), Toleration(operator="Exists")),
        affinity=(PodAffinityTerm(sel(app="db"), "zone", ("data",), LabelSelector(frozen_map({"t": "x"}))),),
        anti_affinity=(
            PodAffinityTerm(
                LabelSelector(match_expressions=(Requirement("app", "Exists"),)), "kubernetes.io/hostname"
            ),
            PodAffinityTerm(None, "zone"),
        ),
        spread=(SpreadConstraint(2, "zone", sel(app="full"), 2, "Ignore", "Honor"),),
    )
    nodes = [
        knode("n1", labels={"zone": "a", "disk": "ssd", "gen": "4"}, alloc={"cpu": 4000, "pods": 110}),
        knode("n2", labels={"zone": "b"}, taints=[Taint("gpu", "", "NoSchedule")]),
    ]
    nodes[1] = type(nodes[1])(nodes[1].name, nodes[1].labels, nodes[1].taints, nodes[1].allocatable, True)
    inst = instance(nodes, [full, ptype("db", ns="data", labels={"app": "db"})], {("data/db", "n1"): 2})
    return Instance(inst.nodes, inst.types, inst.initial, frozen_map({"data": frozen_map({"t": "x"})}))  # type: ignore[arg-type]


def test_rich_instance_round_trips(tmp_path):
    inst = _rich_instance()
    path = write_yaml(inst, tmp_path / "out" / "cluster.yaml")
    back = read_manifests([path])
    assert back.types == inst.types
    assert back.initial == inst.initial
    n1 = {n.name: n for n in back.nodes}["n1"]
    assert n1.labels == inst.nodes[0].labels
    # a node that lists allocatable has none of an extended resource it omits (the scheduler's rule)
    assert dict(n1.allocatable) == {**inst.nodes[0].allocatable, "example.com/dongle": 0}
    assert back.nodes[1].unschedulable
    # every document is plain Kubernetes YAML
    kinds = [d["kind"] for d in yaml.safe_load_all(path.read_text())]
    assert kinds == ["Namespace", "Node", "Node", "Pod", "Pod", "Pod", "Pod"]


GENERATED = [
    ("pebbling", lambda: pebbling_instance(*pyramid(2), 4)[0]),
    ("petri", lambda: petri_instance(*counter_net(2))[0]),
]


@pytest.mark.parametrize("build", [g[1] for g in GENERATED], ids=[g[0] for g in GENERATED])
def test_generated_instances_round_trip(build):
    inst = build()
    assert parse_manifests([("gen.yaml", to_yaml(inst))]) == inst


@pytest.mark.parametrize("seed", range(20))
def test_random_instances_round_trip_with_the_same_answers(seed):
    rng = np.random.default_rng(seed)
    inst = random_instance(rng, n_nodes=3, n_types=4)
    back = parse_manifests([("r.yaml", to_yaml(inst))])
    assert back.types == inst.types and back.initial == inst.initial
    t, n = inst.types[seed % 4].id, inst.nodes[seed % 3].name
    for sem in Semantics:
        assert decide(back, Query(t, n), sem).verdict is decide(inst, Query(t, n), sem).verdict
