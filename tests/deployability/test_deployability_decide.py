"""decide / deployable_nodes on hand-made instances: answers, witnesses, reasons, budgets."""

from __future__ import annotations

import pytest

from kalena.deployability import (
    Budget,
    Op,
    Query,
    Semantics,
    Step,
    Taint,
    Verdict,
    decide,
    deployable_nodes,
    replay,
)
from kalena.testing.deployability import instance, knode, ptype, spread, term

K, P = Semantics.KUBERNETES, Semantics.PAPER
D, N, U = Verdict.DEPLOYABLE, Verdict.NOT_DEPLOYABLE, Verdict.UNKNOWN


def _ask(inst, pod, node, sem, co=None, budget=None):
    ans = decide(inst, Query(f"default/{pod}", node, f"default/{co}" if co else None), sem, budget)
    if ans.verdict is D:
        assert ans.checked
        targets = [(f"default/{pod}", node)] + ([(f"default/{co}", node)] if co else [])
        assert replay(inst, sem, ans.witness, targets).ok
    return ans


# --- the polynomial fragment -----------------------------------------------------------------------
def test_affinity_free_target_uses_the_empty_configuration_and_names_the_failing_constraint():
    inst = instance([knode("n", alloc={"cpu": 1000})], [ptype("big", requests={"cpu": 2000})])
    ans = _ask(inst, "big", "n", K)
    assert ans.verdict is N
    assert ans.procedure == "empty-configuration check"
    assert "insufficient-resource cpu" in ans.reasons[0]
    assert "requested 2000" in ans.reasons[0]


def test_affinity_free_witness_deletes_only_what_blocks():
    loner = ptype("loner", labels={"app": "l"}, anti=[term(app="l")])
    other = ptype("other")
    fresh = ptype("fresh", labels={"app": "l"})
    inst = instance([knode("n")], [loner, other, fresh], {("loner", "n"): 2, ("other", "n"): 1})
    ans = _ask(inst, "fresh", "n", K)  # loner's anti-affinity selects fresh (symmetric)
    assert ans.verdict is D
    assert [s.op for s in ans.witness] == [Op.DELETE, Op.DELETE, Op.DEPLOY]
    assert {s.pod_type for s in ans.witness[:2]} == {"default/loner"}
    assert _ask(inst, "fresh", "n", P).witness == (Step(Op.DEPLOY, "default/fresh", "n"),)


def test_already_running_needs_no_witness():
    inst = instance([knode("n")], [ptype("a", affinity=[term(app="none")])], {("a", "n"): 1})
    ans = _ask(inst, "a", "n", K)
    assert ans.verdict is D and ans.witness == ()


# --- the search -------------------------------------------------------------------------------------
def test_affinity_chain_witness_is_shortest():
    a = ptype("a", labels={"app": "a"})
    b = ptype("b", labels={"app": "b"}, affinity=[term(app="a")])
    c = ptype("c", affinity=[term(app="b")])
    inst = instance([knode("n"), knode("m")], [a, b, c])
    ans = _ask(inst, "c", "n", K)
    assert [(s.op, s.pod_type, s.node) for s in ans.witness] == [
        (Op.DEPLOY, "default/a", "n"),
        (Op.DEPLOY, "default/b", "n"),
        (Op.DEPLOY, "default/c", "n"),
    ]


def test_capacity_forces_deleting_a_prerequisite():
    # c needs b, b needs a; capacity 2: deploy a, b, delete a, deploy c (the pebbling move)
    a = ptype("a", labels={"app": "a"}, requests={"cpu": 1})
    b = ptype("b", labels={"app": "b"}, requests={"cpu": 1}, affinity=[term(app="a")])
    c = ptype("c", requests={"cpu": 1}, affinity=[term(app="b")])
    inst = instance([knode("n", alloc={"cpu": 2})], [a, b, c])
    ans = _ask(inst, "c", "n", P)
    assert ans.verdict is D
    assert [s.op for s in ans.witness] == [Op.DEPLOY, Op.DEPLOY, Op.DELETE, Op.DEPLOY]
    tight = instance([knode("n", alloc={"cpu": 1})], [a, b, c])
    assert _ask(tight, "c", "n", P).verdict is N


def test_not_deployable_reports_the_exploration():
    a = ptype("a", labels={"app": "a"}, anti=[term(app="b")])
    b = ptype("b", labels={"app": "b"}, affinity=[term(app="a")])
    inst = instance([knode("n")], [a, b])
    ans = _ask(inst, "b", "n", P)  # paper: a's anti-affinity only binds a itself
    assert ans.verdict is D
    ans = _ask(inst, "b", "n", K)  # kube-scheduler: a's term keeps b away from a's node
    assert ans.verdict is N
    assert "explored" in ans.reasons[0]
    assert ans.states_explored >= 2
    assert any("relevance" in r for r in ans.reductions)


def test_target_that_can_never_be_placed_is_a_static_answer():
    t = ptype("t", affinity=[term(app="x")], node_selector={"disk": "ssd"})
    inst = instance([knode("n")], [t])
    ans = _ask(inst, "t", "n", K)
    assert ans.verdict is N and ans.procedure == "static check"
    assert "node-affinity" in ans.reasons[0]


def test_co_occurrence_needs_both_at_once():
    a = ptype("a", labels={"app": "a"}, requests={"cpu": 1})
    b = ptype("b", labels={"app": "b"}, requests={"cpu": 1})
    inst = instance([knode("n", alloc={"cpu": 1})], [a, b])
    assert _ask(inst, "a", "n", K).verdict is D
    assert _ask(inst, "a", "n", K, co="b").verdict is N
    roomy = instance([knode("n", alloc={"cpu": 2})], [a, b])
    ans = _ask(roomy, "a", "n", K, co="b")
    assert ans.verdict is D and len(ans.witness) == 2


def test_co_occurrence_with_same_type_is_rejected():
    with pytest.raises(ValueError, match="different"):
        Query("default/a", "n", "default/a")


def test_unknown_names_raise():
    inst = instance([knode("n")], [ptype("a")])
    with pytest.raises(ValueError, match="unknown pod type"):
        decide(inst, Query("default/zz", "n"), K)
    with pytest.raises(ValueError, match="unknown node"):
        decide(inst, Query("default/a", "zz"), K)


# --- budgets ----------------------------------------------------------------------------------------
def _chain(n: int):
    types = [ptype("p0", labels={"id": "p0"})]
    for i in range(1, n):
        types.append(ptype(f"p{i}", labels={"id": f"p{i}"}, affinity=[term(id=f"p{i - 1}")]))
    return instance([knode("n")], types)


def test_max_states_makes_the_answer_unknown():
    inst = _chain(8)
    ans = _ask(inst, "p7", "n", K, budget=Budget(max_states=3))
    assert ans.verdict is U and "--max-states" in ans.reasons[0]
    assert _ask(inst, "p7", "n", K).verdict is D


def test_should_stop_makes_the_answer_unknown():
    calls = []

    def stop() -> bool:
        calls.append(1)
        return True

    ans = _ask(_chain(8), "p7", "n", K, budget=Budget(should_stop=stop, check_every=1))
    assert ans.verdict is U and "--timeout" in ans.reasons[0]
    assert calls


def test_budget_validates():
    with pytest.raises(ValueError, match="max_states"):
        Budget(max_states=0)


# --- counters and caps ------------------------------------------------------------------------------
def test_spread_needs_several_instances_elsewhere():
    # w needs an s in its zone; s spreads with maxSkew 1 over zones a, b, c;
    # t needs two s in zone a, so zone b and c must each hold one first
    zones = {"a": "a", "b": "b", "c": "c"}
    nodes = [knode(f"n{z}", labels={"zone": z}, alloc={"pods": 4}) for z in zones]
    s = ptype("s", labels={"app": "s"}, spreads=[spread("zone", 1, app="s")])
    t = ptype("t", affinity=[term(app="s")])
    inst = instance(nodes, [s, t])
    ans = _ask(inst, "t", "na", K)
    assert ans.verdict is D


def test_unbounded_spread_counts_can_end_unknown_but_never_wrong():
    # a self-spreading type with no capacity bound: deployable answers still come with a witness
    nodes = [knode("na", labels={"zone": "a"}), knode("nb", labels={"zone": "b"})]
    s = ptype("s", labels={"app": "s"}, spreads=[spread("zone", 1, app="s")])
    t = ptype("t", affinity=[term(app="s")])
    inst = instance(nodes, [s, t])
    assert _ask(inst, "t", "na", K).verdict is D
    # a target no count can reach: unknown (caps keep growing), not a wrong "not-deployable"
    bad = ptype("bad", affinity=[term(app="none")], spreads=[spread("zone", 1, app="s")])
    inst2 = instance(nodes, [s, bad, ptype("none", labels={"app": "none"}, node_selector={"x": "y"})])
    ans = _ask(inst2, "bad", "na", K, budget=Budget(max_states=200))
    assert ans.verdict in (N, U)


# --- symmetry and all-nodes -------------------------------------------------------------------------
def test_interchangeable_nodes_are_merged_and_witness_is_concrete():
    # six identical workers in the target's zone: one class; the blockers sit on w3 and w4
    nodes = [knode("t", labels={"zone": "z"})] + [
        knode(f"w{i}", labels={"zone": "z"}, alloc={"cpu": 1}) for i in range(6)
    ]
    worker = ptype("worker", labels={"app": "w"}, requests={"cpu": 1}, anti=[term(app="w")])
    sink = ptype("sink", affinity=[term("zone", app="w")], anti=[term("zone", app="blocker")])
    blocker = ptype("blocker", labels={"app": "blocker"})
    inst = instance(
        nodes, [worker, sink, blocker], {("worker", "w0"): 1, ("blocker", "w3"): 1, ("blocker", "w4"): 1}
    )
    ans = _ask(inst, "sink", "t", K)
    assert ans.verdict is D
    assert any(r.startswith("symmetry: 1 classes") for r in ans.reductions)
    assert sorted((s.op.value, s.node) for s in ans.witness) == [
        ("delete", "w3"),
        ("delete", "w4"),
        ("deploy", "t"),
    ]


def test_deployable_nodes_reports_each_node():
    nodes = [
        knode("a", labels={"pool": "public"}),
        knode("b", labels={"pool": "private"}),
        knode("c", labels={"pool": "private"}),
    ]
    secret = ptype("secret", labels={"app": "s"}, node_selector={"pool": "private"}, affinity=[term(app="s")])
    inst = instance(nodes, [secret])
    answers = deployable_nodes(inst, "default/secret", K)
    assert [a.node for a in answers] == ["a", "b", "c"]
    assert [a.verdict for a in answers] == [N, D, D]
    assert all(a.checked for a in answers if a.verdict is D)
    assert answers[2].witness[-1].node == "c"


def test_deployable_nodes_affinity_free_and_taints():
    nodes = [knode("a"), knode("b", taints=[Taint("k", "", "NoExecute")])]
    inst = instance(nodes, [ptype("p")])
    assert [a.verdict for a in deployable_nodes(inst, "default/p", P)] == [D, N]
    with pytest.raises(ValueError):
        deployable_nodes(inst, "default/nope", P)
