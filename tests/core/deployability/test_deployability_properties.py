"""On random small instances the answer agrees with a brute-force explorer, and every witness replays.

The brute force (``kalena.testing.deployability.brute_force``) applies no reduction at all: plain
BFS over explicit instance counts, each deploy checked by the independent checker's predicate.
Instances bound every node's pods, so its state space is finite.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kalena.core.deployability import Query, Semantics, Verdict, decide, replay
from kalena.testing.deployability import brute_force, random_instance


def _check(seed: int, sem: Semantics, n_nodes: int, n_types: int, pods_cap: int) -> None:
    rng = np.random.default_rng(seed)
    inst = random_instance(rng, n_nodes=n_nodes, n_types=n_types, pods_cap=pods_cap)
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
