"""The peer encodings of the benchmark (Promela for SPIN, PDDL for Fast Downward).

Encoding tests need no tool. Tests marked ``peers`` run the tools on tiny instances and check
that they answer as Kalena does; they skip, saying why, when SPIN (Debian ``spin`` + ``gcc``) or
Fast Downward (PyPI ``up-fast-downward``, extra ``bench``) is absent.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.bench_deployability import _fd_driver, run_fd, run_spin  # noqa: E402
from bench.deployability.ground import ground  # noqa: E402
from bench.deployability.pddl import pddl  # noqa: E402
from bench.deployability.promela import promela  # noqa: E402

from kalena.deployability import Query, Semantics, decide  # noqa: E402
from kalena.deployability_gen import counter_net, mutex_net, pebbling_instance, petri_instance, pyramid  # noqa: E402
from kalena.testing.deployability import instance, knode, ptype, spread  # noqa: E402

CASES = [
    ("pyramid-2-k3", lambda: pebbling_instance(*pyramid(2), 3)),
    ("pyramid-2-k4", lambda: pebbling_instance(*pyramid(2), 4)),
    ("counter-2", lambda: petri_instance(*counter_net(2))),
    ("mutex-2", lambda: petri_instance(*mutex_net(2))),
]


def test_ground_model_of_a_pebbling_instance():
    inst, q = pebbling_instance(*pyramid(1), 3)
    g = ground(inst, q)
    assert len(g.names) == 3 and g.target == g.names.index("default/p-v1_0@n")
    assert g.rows == [(3, [(0, 1), (1, 1), (2, 1)])]
    assert g.deploy[g.target][0] == "and" and len(g.deploy[g.target][1]) == 2  # two predecessors


def test_promela_and_pddl_text():
    inst, q = pebbling_instance(*pyramid(1), 3)
    g = ground(inst, q)
    pml = promela(g)
    assert pml.count(":: atomic") == 6 and "assert(false)" in pml and "<= 3" in pml
    domain, problem = pddl(g)
    assert domain.count("(:action") == 3 * 3 + 3 * 3  # deploys and deletes per counter level
    assert "(:goal (x2))" in problem and "(c0-0)" in problem


def test_unsupported_questions_are_refused():
    s = ptype("s", labels={"app": "s"}, spreads=[spread("zone", 1, app="s")])
    inst = instance([knode("n", labels={"zone": "a"})], [s])
    with pytest.raises(ValueError, match="spread"):
        ground(inst, Query("default/s", "n"))
    with pytest.raises(ValueError, match="co-occurrence"):
        ground(inst, Query("default/s", "n", "default/t"))


needs_spin = pytest.mark.skipif(
    shutil.which("spin") is None or shutil.which("gcc") is None,
    reason="SPIN not installed (apt-get install -y spin gcc)",
)
needs_fd = pytest.mark.skipif(
    _fd_driver() is None, reason="Fast Downward not installed (pip install up-fast-downward)"
)


@pytest.mark.peers
@needs_spin
@pytest.mark.parametrize("build", [c[1] for c in CASES], ids=[c[0] for c in CASES])
def test_spin_agrees(build):
    inst, q = build()
    assert run_spin(inst, q, 120)["answer"] == decide(inst, q, Semantics.PAPER).verdict.value


@pytest.mark.peers
@needs_fd
@pytest.mark.parametrize("build", [c[1] for c in CASES], ids=[c[0] for c in CASES])
def test_fast_downward_agrees(build):
    inst, q = build()
    assert run_fd(inst, q, 120, "lama-first")["answer"] == decide(inst, q, Semantics.PAPER).verdict.value
