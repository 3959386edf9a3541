"""The independent checker refuses every illegal step and shares no code with the search."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kalena.deployability import Op, Semantics, Step, replay
from kalena.deployability.checker import Checker
from kalena.testing.deployability import instance, knode, ptype, random_instance, term

K = Semantics.KUBERNETES
DB = ptype("db", labels={"app": "db"}, requests={"cpu": 1})
WEB = ptype("web", affinity=[term(app="db")], requests={"cpu": 1})
INST = instance([knode("n", alloc={"cpu": 2}), knode("m")], [DB, WEB], {("db", "m"): 1})


def dep(t: str, n: str = "n") -> Step:
    return Step(Op.DEPLOY, f"default/{t}", n)


def rm(t: str, n: str = "n") -> Step:
    return Step(Op.DELETE, f"default/{t}", n)


CASES = [
    ("legal", [dep("db"), dep("web")], True, -1),
    ("deploy-before-prerequisite", [dep("web")], False, 0),
    ("delete-nothing", [rm("db")], False, 0),
    ("capacity", [dep("db"), dep("db"), dep("web")], False, 2),
    ("target-not-reached", [dep("db")], False, 1),
    ("delete-after-deploy-keeps-target", [dep("db"), dep("web"), rm("db")], True, -1),
    ("unknown-node", [dep("db", "zz")], False, 0),
    ("initial-pod-witnesses-other-node-only", [dep("web", "m")], True, -1),
]


@pytest.mark.parametrize(("steps", "ok", "step"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_replay(steps, ok, step):
    target = steps[-1].node if steps else "n"
    r = replay(INST, K, steps, [("default/web", target)])
    assert r.ok is ok
    if not ok:
        assert r.step == step
        assert r.message


SEARCH_MODULES = {
    "search",
    "compiled",
    "relevance",
    "symmetry",
    "tables",
    "decide",
    "semantics",
    "labels",
    "fragment",
}


def test_checker_imports_nothing_from_the_search():
    src = Path(__file__).parents[2] / "src" / "kalena" / "deployability" / "checker.py"
    tree = ast.parse(src.read_text(encoding="utf-8"))
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module)
        elif isinstance(node, ast.Import):
            imported.update(a.name for a in node.names)
    ours = {m.rsplit(".", 1)[-1] for m in imported if m.startswith("kalena")}
    assert ours <= {"answer", "model"}, ours
    assert not ours & SEARCH_MODULES


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), sem=st.sampled_from(list(Semantics)))
def test_a_shared_checker_replays_like_a_fresh_one(seed, sem):
    """Checker undoes each replay (and keeps spread tallies only for the configuration they describe)."""
    rng = np.random.default_rng(seed)
    inst = random_instance(rng, n_nodes=3, n_types=4, pods_cap=3)
    shared = Checker(inst, sem)
    for _ in range(6):
        steps = []
        for _ in range(int(rng.integers(1, 6))):
            t = inst.types[int(rng.integers(0, 4))].id
            n = inst.nodes[int(rng.integers(0, 3))].name
            steps.append(Step(Op.DEPLOY if rng.random() < 0.7 else Op.DELETE, t, n))
        target = [(steps[-1].pod_type, steps[-1].node)]
        assert shared.replay(steps, target) == replay(inst, sem, steps, target)
