"""1-safe Petri-net coverability -> deployability (seed 003 §5) against independent oracles.

* Random small nets: coverability of every place by an explicit marking-graph search written
  here, only for the tests (it shares nothing with the encoding or the search).
* The Model Checking Contest 2025 nets in ``../shared/data/deployability/petri-mcc2025/`` (PNML
  read by the generator): every ReachabilityFireability query that is a pure coverability
  query, with the contest's answer, and the single-place UpperBounds queries (bound 0 means the
  place is never marked).
"""

from __future__ import annotations

import json
from collections import deque
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kalena.deployability import Budget, Semantics, Verdict, decide, replay
from kalena.deployability_gen import (
    PetriNet,
    PNMLError,
    counter_net,
    fireability_goal,
    mutex_net,
    petri_instance,
    read_pnml,
    with_goal,
)

DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "deployability" / "petri-mcc2025"
needs_data = pytest.mark.skipif(not DATA.is_dir(), reason=f"shared data not found at {DATA}")
P = Semantics.PAPER


# --- the independent oracle -----------------------------------------------------------------------
def marking_graph(net: PetriNet) -> set[frozenset[str]] | None:
    """Every reachable marking (sets of marked places), or None when the net is not 1-safe."""
    start = frozenset(net.initial)
    seen = {start}
    queue = deque([start])
    while queue:
        m = queue.popleft()
        for t in net.transitions:
            pre, post = net.pre[t], net.post[t]
            if not pre <= m:
                continue
            rest = m - pre
            if rest & post:
                return None  # a second token in a place
            nxt = rest | post
            if nxt not in seen:
                seen.add(nxt)
                queue.append(nxt)
    return seen


def random_net(rng: np.random.Generator) -> PetriNet:
    n_p, n_t = int(rng.integers(3, 7)), int(rng.integers(2, 6))
    places = tuple(f"p{i}" for i in range(n_p))

    def subset(lo: int, hi: int) -> frozenset[str]:
        k = int(rng.integers(lo, hi + 1))
        return frozenset(rng.choice(places, size=min(k, n_p), replace=False).tolist())

    transitions = tuple(f"t{i}" for i in range(n_t))
    pre = {t: subset(0, 2) for t in transitions}
    post = {t: subset(0, 2) for t in transitions}
    return PetriNet(places, transitions, pre, post, subset(1, 3), "random")


def _covers(net: PetriNet, goal: str, budget: int = 500_000) -> bool:
    inst, q = petri_instance(net, goal)
    ans = decide(inst, q, P, Budget(max_states=budget))
    assert ans.verdict is not Verdict.UNKNOWN, ans.reasons
    if ans.verdict is Verdict.DEPLOYABLE:
        assert replay(inst, P, ans.witness, q.targets()).ok
    return ans.verdict is Verdict.DEPLOYABLE


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_random_nets_agree_with_the_marking_graph(seed):
    net = random_net(np.random.default_rng(seed))
    markings = marking_graph(net)
    if markings is None:
        return  # not 1-safe: outside the reduction's source problem
    covered = set().union(*markings)
    for p in net.places:
        assert _covers(net, p) == (p in covered), (seed, p)


@pytest.mark.parametrize("bits", [1, 2, 3, 4])
def test_counter_family_reaches_all_ones(bits):
    net, goal = counter_net(bits)
    assert marking_graph(net) is not None
    assert _covers(net, goal)


@pytest.mark.parametrize("procs", [2, 3, 4])
def test_mutex_family_never_has_two_in_the_section(procs):
    net, goal = mutex_net(procs)
    assert marking_graph(net) is not None
    assert not _covers(net, goal)


def test_kubernetes_semantics_cannot_run_the_protocol():
    # the start pod needs a ready pod and a token pod: no single pod matches both terms
    net, goal = counter_net(1)
    inst, q = petri_instance(net, goal)
    assert decide(inst, q, Semantics.KUBERNETES).verdict is Verdict.NOT_DEPLOYABLE


def test_goal_already_marked_is_immediate():
    net, _ = counter_net(2)
    inst, q = petri_instance(net, "b0_0")
    ans = decide(inst, q, P)
    assert ans.verdict is Verdict.DEPLOYABLE and len(ans.witness) == 1


def test_with_goal_and_errors():
    net, _ = counter_net(2)
    with pytest.raises(ValueError, match="unknown places"):
        with_goal(net, [["nope"]])
    with pytest.raises(ValueError, match="unknown goal"):
        petri_instance(net, "nope")


PNML_ERRORS = [
    ("not-xml", "<pnml", "not well-formed"),
    ("no-net", "<pnml/>", "no <net>"),
    (
        "weight-2",
        '<pnml><net><place id="p"/><transition id="t"/><arc id="a" source="p" target="t">'
        "<inscription><text>2</text></inscription></arc></net></pnml>",
        "weight",
    ),
    (
        "marking-2",
        '<pnml><net><place id="p"><initialMarking><text>2</text></initialMarking></place></net></pnml>',
        "initial marking",
    ),
    (
        "bad-arc",
        '<pnml><net><place id="p"/><place id="q"/><arc id="a" source="p" target="q"/></net></pnml>',
        "does not join",
    ),
]


@pytest.mark.parametrize(("text", "message"), [c[1:] for c in PNML_ERRORS], ids=[c[0] for c in PNML_ERRORS])
def test_pnml_errors(tmp_path, text, message):
    f = tmp_path / "m.pnml"
    f.write_text(text)
    with pytest.raises(PNMLError, match=message):
        read_pnml(f)


# --- the Model Checking Contest nets ----------------------------------------------------------------
SLOW_MODELS = {"Peterson-PT-2", "IBM319-PT-none", "SafeBus-PT-03", "Railroad-PT-005", "LamportFastMutEx-PT-2"}
MODELS = sorted(p.name for p in DATA.iterdir() if p.is_dir()) if DATA.is_dir() else []


def _mcc_params():
    for m in MODELS:
        marks = [pytest.mark.realdata] + ([pytest.mark.slow] if m in SLOW_MODELS else [])
        yield pytest.param(m, marks=marks, id=m)


@needs_data
@pytest.mark.parametrize("model", list(_mcc_params()))
def test_mcc_coverability_queries_match_the_contest(model):
    net = read_pnml(DATA / model / "model.pnml")
    answers = json.loads((DATA / model / "answers.json").read_text())
    assert len(net.places) == answers["places"] and len(net.transitions) == answers["transitions"]
    assert net.initial == {p for p, v in answers["initial_marking"].items() if v}
    for query in answers["reachability_fireability_coverability_queries"]:
        expected = (query["expected_mcc"] == "TRUE") == (query["kind"] == "EF_POS")
        goal_net = fireability_goal(net, query["dnf"])
        assert _covers(goal_net, "goal__", budget=2_000_000) == expected, query["id"]
    bounds = [b for b in answers["upper_bounds"] if len(b["places"]) == 1]
    zero = [b for b in bounds if b["expected_mcc"] == "0"]
    one = [b for b in bounds if b["expected_mcc"] == "1"][:2]
    for b in zero + one:
        assert _covers(net, b["places"][0], budget=2_000_000) == (b["expected_mcc"] == "1"), b["id"]
