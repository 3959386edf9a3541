"""On random small instances the answer agrees with a brute-force explorer, and every witness replays.

The brute force (``kalena.testing.deployability.brute_force``) applies no reduction at all: plain
BFS over explicit instance counts, each deploy checked by the independent checker's predicate.
Instances bound every node's pods, so its state space is finite.
"""

from __future__ import annotations

import importlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kalena.deployability import Query, Semantics, Verdict, decide, replay, search_vec
from kalena.deployability_gen import pebbling_instance, pyramid
from kalena.testing.deployability import brute_force, random_instance

# the package exports the function ``decide``, which hides the module of the same name
decide_module = importlib.import_module("kalena.deployability.decide")


def _check(
    seed: int, sem: Semantics, n_nodes: int, n_types: int, pods_cap: int, spread_p: float = 0.25
) -> None:
    rng = np.random.default_rng(seed)
    inst = random_instance(rng, n_nodes=n_nodes, n_types=n_types, pods_cap=pods_cap, spread_p=spread_p)
    t = inst.types[int(rng.integers(0, len(inst.types)))]
    n = inst.nodes[int(rng.integers(0, len(inst.nodes)))]
    co = inst.types[int(rng.integers(0, len(inst.types)))].id if rng.random() < 0.3 else None
    q = Query(t.id, n.name, co if co != t.id else None)
    ans = decide(inst, q, sem)
    assert ans.verdict is not Verdict.UNKNOWN, ans.reasons
    expected = brute_force(inst, sem, q.targets())
    assert (ans.verdict is Verdict.DEPLOYABLE) == expected, (seed, sem, q, ans)
    if expected:
        assert ans.checked
        assert replay(inst, sem, ans.witness, q.targets()).ok


@settings(max_examples=200, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), sem=st.sampled_from(list(Semantics)))
def test_agrees_with_brute_force_on_two_node_instances(seed, sem):
    _check(seed, sem, 2, 3, 2)


@settings(max_examples=120, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), sem=st.sampled_from(list(Semantics)))
def test_agrees_with_brute_force_on_three_node_instances(seed, sem):
    _check(seed, sem, 3, 4, 2)


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), sem=st.sampled_from(list(Semantics)))
def test_agrees_with_brute_force_on_four_node_instances(seed, sem):
    _check(seed, sem, 4, 4, 2)


@settings(max_examples=100, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), sem=st.sampled_from(list(Semantics)))
def test_plain_and_vectorised_searches_agree(seed, sem):
    """The same questions through the Python BFS (vectorised path disabled) and the default."""
    rng = np.random.default_rng(seed)
    inst = random_instance(rng, n_nodes=3, n_types=4, pods_cap=2)
    q = Query(inst.types[int(rng.integers(0, 4))].id, inst.nodes[int(rng.integers(0, 3))].name)
    fast = decide(inst, q, sem)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(search_vec, "applicable", lambda c, symmetric: False)
        plain = decide(inst, q, sem)
    assert fast.verdict is plain.verdict
    if fast.witness:
        assert len(fast.witness) == len(plain.witness)  # both breadth-first: equally short


@settings(max_examples=150, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), sem=st.sampled_from(list(Semantics)), words=st.sampled_from([1, 2, 3]))
def test_vectorised_search_agrees_with_brute_force_in_any_word_width(seed, sem, words):
    """Forced through the vectorised search (tiny first budget, no width test; no spread, so no
    slot is counted) with states of one, two or three 64-bit words: the answers are the brute
    force's and every witness replays. About a third of the searching questions take that path."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(decide_module, "FIRST_BFS_STATES", 1)
        mp.setattr(decide_module, "WIDE_LEVEL", 0)
        mp.setattr(search_vec, "MIN_WORDS", words)
        _check(seed, sem, 3, 4, 2, spread_p=0.0)


def test_states_wider_than_one_word_are_searched_vectorised():
    """A pyramid of height 10 has 66 vertices, so its states take two words; the beam probe
    finds the pebbling (k = h + 2) and the independent checker replays it."""
    inst, q = pebbling_instance(*pyramid(10), 12)
    ans = decide(inst, q, Semantics.PAPER)
    assert ans.verdict is Verdict.DEPLOYABLE and ans.checked, ans.reasons
    assert "beam probe" in ans.procedure
    assert replay(inst, Semantics.PAPER, ans.witness, q.targets()).ok
    assert sum(1 for s in ans.witness if s.op.value == "deploy") >= 66  # every vertex pebbled at least once


@pytest.mark.parametrize(
    ("h", "k", "expected"),
    [(3, 4, Verdict.NOT_DEPLOYABLE), (3, 5, Verdict.DEPLOYABLE), (4, 6, Verdict.DEPLOYABLE)],
)
def test_probe_phase_keeps_answers_exact(h, k, expected):
    """With a tiny first BFS budget the probe and the full vectorised BFS after it answer exactly."""
    inst, q = pebbling_instance(*pyramid(h), k)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(decide_module, "FIRST_BFS_STATES", 10)
        mp.setattr(decide_module, "WIDE_LEVEL", 0)
        ans = decide(inst, q, Semantics.PAPER)
    assert ans.verdict is expected
    if expected is Verdict.DEPLOYABLE:
        assert ans.checked and "beam probe" in ans.procedure
    else:
        assert "beam probe found nothing" in ans.procedure


def test_narrow_searches_stay_plain():
    """A deep, narrow search (the counter net) continues in plain Python after the first budget."""
    from kalena.deployability_gen import counter_net, petri_instance

    inst, q = petri_instance(*counter_net(3))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(decide_module, "FIRST_BFS_STATES", 20)
        ans = decide(inst, q, Semantics.PAPER)
    assert ans.verdict is Verdict.DEPLOYABLE and ans.procedure == "breadth-first search"
