"""Hard(t, n, sigma) in both semantics: a table of single placements, and the two implementations agree.

The reference predicate (``Evaluator``) and the independent checker's ``feasible`` are written
separately; every row is asserted against both, and a property test compares them on random
configurations of random instances.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kalena.deployability import (
    Evaluator,
    FailureCode,
    LabelSelector,
    NodeSelectorTerm,
    PodAffinityTerm,
    PodType,
    Requirement,
    Semantics,
    SpreadConstraint,
    Taint,
    Toleration,
)
from kalena.deployability.checker import feasible
from kalena.deployability.model import frozen_map
from kalena.testing.deployability import instance, knode, ptype, random_instance, sel, spread, term

K, P = Semantics.KUBERNETES, Semantics.PAPER
ZONE = "zone"

NODES = [
    knode("a1", labels={ZONE: "a"}, alloc={"cpu": 2000, "pods": 3}),
    knode("a2", labels={ZONE: "a"}),
    knode("b1", labels={ZONE: "b"}, taints=[Taint("gpu", "yes", "NoSchedule")]),
    knode("x1"),  # no zone label
]
DB = ptype("db", labels={"app": "db"})
WEB = ptype("web", labels={"app": "web"}, affinity=[term(app="db")])
BIG = ptype("big", requests={"cpu": 1500})
SELF = ptype("self", labels={"app": "self"}, affinity=[term(ZONE, app="self")])
BOTH = ptype("both", affinity=[term(app="db"), term(app="cache")])
CACHE = ptype("cache", labels={"app": "cache"})
DBCACHE = ptype("dbcache", labels={"app": "db", "tier": "cache"})
GUARD = ptype("guard", labels={"app": "guard"}, anti=[term(app="web")])
LONER = ptype("loner", labels={"app": "loner"}, anti=[term(ZONE, app="loner")])
OTHERNS = ptype("db2", ns="other", labels={"app": "db"})
TOL = ptype("tol", tolerations=[Toleration("gpu", "Equal", "yes", "NoSchedule")])
SPREAD = ptype("sp", labels={"app": "sp"}, spreads=[spread(ZONE, 1, app="sp")])
SELECTED = ptype("sel", node_selector={ZONE: "a"})
NAFF = PodType(
    id="default/naff",
    node_affinity=(NodeSelectorTerm(match_fields=(Requirement("metadata.name", "In", ("a2",)),)),),
)
TYPES = [DB, WEB, BIG, SELF, BOTH, CACHE, DBCACHE, GUARD, LONER, OTHERNS, TOL, SPREAD, SELECTED, NAFF]
INST = instance(NODES, TYPES)

# (id, semantics, pod, node, running pods, expected first failure or None)
CASES = [
    ("empty-cluster-plain", K, "db", "a1", {}, None),
    ("resources-fit", K, "big", "a1", {}, None),
    ("resources-exceeded", K, "big", "a1", {("big", "a1"): 1}, FailureCode.INSUFFICIENT_RESOURCE),
    ("pods-slot-exceeded", P, "db", "a1", {("db", "a1"): 3}, FailureCode.INSUFFICIENT_RESOURCE),
    ("taint-repels", K, "db", "b1", {}, FailureCode.UNTOLERATED_TAINT),
    ("taint-tolerated", K, "tol", "b1", {}, None),
    ("node-selector-mismatch", K, "sel", "b1", {}, FailureCode.NODE_AFFINITY),
    ("match-fields-name", P, "naff", "a2", {}, None),
    ("match-fields-other-node", P, "naff", "a1", {}, FailureCode.NODE_AFFINITY),
    ("affinity-unmet", K, "web", "a1", {}, FailureCode.POD_AFFINITY),
    ("affinity-met-same-node", K, "web", "a1", {("db", "a1"): 1}, None),
    ("affinity-other-host", P, "web", "a2", {("db", "a1"): 1}, FailureCode.POD_AFFINITY),
    ("self-affinity-bootstrap", K, "self", "a1", {}, None),
    ("self-affinity-bootstrap-paper", P, "self", "b1", {}, FailureCode.UNTOLERATED_TAINT),
    ("self-affinity-other-zone-k8s", K, "self", "a1", {("self", "b1"): 1}, FailureCode.POD_AFFINITY),
    ("self-affinity-same-zone", P, "self", "a2", {("self", "a1"): 1}, None),
    ("k8s-missing-topology-key", K, "self", "x1", {}, FailureCode.TOPOLOGY_KEY_MISSING),
    ("paper-missing-key-bootstraps", P, "self", "x1", {}, None),
    ("k8s-key-missing-pod-not-counted", K, "self", "a1", {("self", "x1"): 1}, None),
    ("paper-pod-anywhere-blocks-bootstrap", P, "self", "a1", {("self", "x1"): 1}, FailureCode.POD_AFFINITY),
    (
        "k8s-all-terms-two-pods",
        K,
        "both",
        "a1",
        {("db", "a1"): 1, ("cache", "a1"): 1},
        FailureCode.POD_AFFINITY,
    ),
    ("paper-terms-two-pods", P, "both", "a1", {("db", "a1"): 1, ("cache", "a1"): 1}, None),
    ("k8s-one-pod-matches-all", K, "both", "a1", {("dbcache", "a1"): 1}, FailureCode.POD_AFFINITY),
    ("anti-own-term", K, "loner", "a2", {("loner", "a1"): 1}, FailureCode.POD_ANTI_AFFINITY),
    ("anti-own-term-other-zone", P, "loner", "b1", {("loner", "a1"): 1}, FailureCode.UNTOLERATED_TAINT),
    ("anti-missing-key-passes", K, "loner", "x1", {("loner", "x1"): 1}, None),
    (
        "k8s-symmetric-anti",
        K,
        "web",
        "a1",
        {("db", "a1"): 1, ("guard", "a1"): 1},
        FailureCode.EXISTING_POD_ANTI_AFFINITY,
    ),
    ("paper-no-symmetric-anti", P, "web", "a1", {("db", "a1"): 1, ("guard", "a1"): 1}, None),
    ("k8s-namespace-scope", K, "web", "a1", {("other/db2", "a1"): 1}, FailureCode.POD_AFFINITY),
    ("paper-namespace-blind", P, "web", "a1", {("other/db2", "a1"): 1}, None),
    ("spread-skew-ok", K, "sp", "a1", {("sp", "b1"): 1}, None),
    ("spread-skew-too-big", K, "sp", "a1", {("sp", "a2"): 1}, FailureCode.TOPOLOGY_SPREAD),
    ("spread-min-raised-by-other-zone", K, "sp", "a1", {("sp", "a2"): 1, ("sp", "b1"): 1}, None),
    (
        "spread-min-raised-not-enough",
        P,
        "sp",
        "a1",
        {("sp", "a2"): 2, ("sp", "b1"): 1},
        FailureCode.TOPOLOGY_SPREAD,
    ),
    ("spread-unkeyed-pods-not-counted", K, "sp", "a1", {("sp", "x1"): 3}, None),
    ("spread-node-without-key", P, "sp", "x1", {}, FailureCode.TOPOLOGY_KEY_MISSING),
]


def _config(running: dict[tuple[str, str], int]) -> dict[tuple[str, str], int]:
    return {(t if "/" in t else f"default/{t}", n): c for (t, n), c in running.items()}


@pytest.mark.parametrize(
    ("sem", "pod", "node", "running", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_hard_table(sem, pod, node, running, expected):
    ev = Evaluator(INST, sem)
    config = _config(running)
    fails = ev.hard(f"default/{pod}", node, config)
    if expected is None:
        assert fails == ()
    else:
        assert fails and fails[0].code is expected, fails
    assert feasible(INST, sem, config, f"default/{pod}", node) is (expected is None)


def test_spread_counts_only_eligible_domains_and_min_domains():
    # three zones, one of them only on a tainted node the constraint honours: it is not a domain
    nodes = [
        knode("a", labels={ZONE: "a"}),
        knode("b", labels={ZONE: "b"}),
        knode("c", labels={ZONE: "c"}, taints=[Taint("t", "", "NoSchedule")]),
    ]
    honour = SpreadConstraint(1, ZONE, sel(app="s"), 1, "Honor", "Honor")
    s = ptype("s", labels={"app": "s"})
    s = PodType(id=s.id, labels=s.labels, spread=(honour,))
    inst = instance(nodes, [s])
    ev = Evaluator(inst, K)
    cfg = {("default/s", "b"): 1}
    # domains a, b: counts 0 and 1, min 0: a gets skew 1 (ok), b gets 2 (rejected)
    assert ev.ok("default/s", "a", cfg)
    assert not ev.ok("default/s", "b", cfg)
    # minDomains 3 > 2 eligible domains: the global minimum is 0, b is still rejected, a still fine
    md = SpreadConstraint(1, ZONE, sel(app="s"), 3, "Honor", "Honor")
    inst2 = instance(nodes, [PodType(id=s.id, labels=s.labels, spread=(md,))])
    assert not Evaluator(inst2, K).ok("default/s", "b", {("default/s", "b"): 1, ("default/s", "a"): 1})
    assert Evaluator(inst, K).ok("default/s", "b", {("default/s", "b"): 1, ("default/s", "a"): 1})


def test_namespace_selector_scopes_terms():
    web = ptype(
        "web",
        ns="shop",
        affinity=[
            PodAffinityTerm(
                sel(app="db"),
                "kubernetes.io/hostname",
                namespace_selector=LabelSelector(frozen_map({"team": "data"})),
            )
        ],
    )
    db = ptype("db", ns="data", labels={"app": "db"})
    inst = instance([knode("n")], [web, db])
    inst = type(inst)(
        inst.nodes, inst.types, inst.initial, frozen_map({"data": frozen_map({"team": "data"})})
    )
    cfg = {("data/db", "n"): 1}
    assert Evaluator(inst, K).ok("shop/web", "n", cfg)
    assert feasible(inst, K, cfg, "shop/web", "n")
    inst_nolabel = type(inst)(inst.nodes, inst.types, inst.initial)
    assert not Evaluator(inst_nolabel, K).ok("shop/web", "n", cfg)
    assert not feasible(inst_nolabel, K, cfg, "shop/web", "n")


@settings(max_examples=150, deadline=None)
@given(seed=st.integers(0, 10**6), sem=st.sampled_from(list(Semantics)))
def test_reference_and_checker_agree_on_random_configurations(seed, sem):
    rng = np.random.default_rng(seed)
    inst = random_instance(rng, n_nodes=3, n_types=4, pods_cap=3)
    ev = Evaluator(inst, sem)
    config = {}
    for t in inst.types:
        for n in inst.nodes:
            if rng.random() < 0.3:
                config[(t.id, n.name)] = int(rng.integers(1, 3))
    for t in inst.types:
        for n in inst.nodes:
            assert ev.ok(t.id, n.name, config) == feasible(inst, sem, config, t.id, n.name), (t.id, n.name)
