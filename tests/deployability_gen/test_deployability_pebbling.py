"""Bounded black pebbling -> deployability (seed 003 §6) against exact pebbling prices.

Oracles: the closed forms (pyramid and complete binary tree of height h: h + 2 pebbles without
sliding; path: 2, or 1 for a single vertex) computed here for generated DAGs, and the stored
instances of ``../shared/data/deployability/pebbling/`` with prices found by exhaustive search.
Paper semantics: deployable iff k >= price. kube-scheduler semantics: a vertex with two or more
predecessors never is (no single pod matches all its terms).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kalena.deployability import Budget, Semantics, Verdict, decide, replay
from kalena.deployability_gen import binary_tree, path, pebbling_instance, pyramid, read_node_list

DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "deployability" / "pebbling"
needs_data = pytest.mark.skipif(not DATA.is_dir(), reason=f"shared data not found at {DATA}")
P, K = Semantics.PAPER, Semantics.KUBERNETES


def _deployable(dag, sink, k, sem=P, weights=None) -> bool:
    inst, q = pebbling_instance(dag, sink, k, weights)
    ans = decide(inst, q, sem, Budget(max_states=2_000_000))
    assert ans.verdict is not Verdict.UNKNOWN
    if ans.verdict is Verdict.DEPLOYABLE:
        assert replay(inst, sem, ans.witness, q.targets()).ok
        # the witness is a legal pebbling: never more than k pebbles at once
        running = 0
        for s in ans.witness:
            running += 1 if s.op.value == "deploy" else -1
            assert running <= k
    return ans.verdict is Verdict.DEPLOYABLE


FAMILIES = [
    ("pyramid-h1", pyramid, 1),
    ("pyramid-h2", pyramid, 2),
    ("pyramid-h3", pyramid, 3),
    ("pyramid-h4", pyramid, 4),
    ("tree-h1", binary_tree, 1),
    ("tree-h2", binary_tree, 2),
    ("tree-h3", binary_tree, 3),
]


@pytest.mark.parametrize(("family", "h"), [f[1:] for f in FAMILIES], ids=[f[0] for f in FAMILIES])
def test_price_is_h_plus_2(family, h):
    dag, sink = family(h)
    assert not _deployable(dag, sink, h + 1)
    assert _deployable(dag, sink, h + 2)


@pytest.mark.parametrize("n", [1, 2, 5], ids=lambda n: f"path-{n}")
def test_path_price(n):
    dag, sink = path(n)
    price = 1 if n == 1 else 2
    assert not _deployable(dag, sink, price - 1)
    assert _deployable(dag, sink, price)


def test_kubernetes_semantics_needs_one_pod_matching_all_terms():
    dag, sink = pyramid(2)
    assert not _deployable(dag, sink, 10, K)  # v2_0 has two predecessors
    dag, sink = path(4)
    assert _deployable(dag, sink, 2, K)  # one predecessor each: the two semantics agree


@pytest.mark.realdata
@needs_data
def test_stored_instances_match_their_prices():
    data = json.loads((DATA / "pebbling_instances.json").read_text())
    for inst in data["instances"]:
        if len(inst["vertices"]) > 16:
            continue  # the largest ones run in the slow test below
        dag = (tuple(inst["vertices"]), tuple(tuple(e) for e in inst["edges"]))
        price = inst["black_pebbling_price"]
        assert not _deployable(dag, inst["sink"], price - 1), inst["id"]
        assert _deployable(dag, inst["sink"], price), inst["id"]


@pytest.mark.realdata
@pytest.mark.slow
@needs_data
def test_stored_large_instances_match_their_prices():
    data = json.loads((DATA / "pebbling_instances.json").read_text())
    for inst in data["instances"]:
        if len(inst["vertices"]) <= 16:
            continue
        dag = (tuple(inst["vertices"]), tuple(tuple(e) for e in inst["edges"]))
        price = inst["black_pebbling_price"]
        assert not _deployable(dag, inst["sink"], price - 1), inst["id"]
        assert _deployable(dag, inst["sink"], price), inst["id"]


@pytest.mark.realdata
@needs_data
def test_weighted_app_playground_example():
    dag, root, weights = read_node_list((DATA / "app_playground_nodeList_example.txt").read_text())
    data = json.loads((DATA / "pebbling_instances.json").read_text())["weighted_instances"][0]
    assert root == "a" and weights == {**data["weights"], "l": 1}
    for v, cap in data["min_capacity_to_deploy"].items():
        assert not _deployable(dag, v, cap - 1, weights=weights), v
        assert _deployable(dag, v, cap, weights=weights), v


def test_read_node_list_rejects_bad_lines():
    with pytest.raises(ValueError, match="weight"):
        read_node_list("a x b\n")
    with pytest.raises(ValueError, match="unknown vertex"):
        read_node_list("a 1 b\n")
    with pytest.raises(ValueError, match="expected"):
        read_node_list("a\n")


def test_pebbling_instance_validates():
    dag, _ = path(2)
    with pytest.raises(ValueError, match="sink"):
        pebbling_instance(dag, "zz", 2)
    with pytest.raises(ValueError, match="non-negative"):
        pebbling_instance(dag, "v1", -1)
