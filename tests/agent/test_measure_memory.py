"""``scripts/measure_memory.py`` on this host's real cgroups (root only): three trials, short.

The script's data is what the simulator's memory model is held to (``tests/sim``); this keeps the
script itself working: the node's limit enforced, the kernel's victim recorded, nothing left behind.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from kalena.agent.cgroupfs import FsCgroupReader
from kalena.agent.writer import CgroupWriter, ManagedScope

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"
MIB = 1 << 20


def script():
    sys.path.insert(0, str(SCRIPTS))  # it imports its sibling measure_contention, as a script does
    try:
        spec = importlib.util.spec_from_file_location("measure_memory", SCRIPTS / "measure_memory.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(SCRIPTS))
    return module


def test_the_kernel_kills_past_the_limit_and_takes_the_pod_furthest_above_its_request(real_tree, tmp_path):
    if not real_tree.layout.has_psi or real_tree.layout.home("memory") is None:
        pytest.skip(f"no memory controller or per-cgroup PSI here ({real_tree.layout.describe()})")
    m = script()
    writer = CgroupWriter(real_tree, ManagedScope())
    reader = FsCgroupReader(real_tree)
    limit = 128 * MIB

    within = m.run_trial(writer, reader, "anon", 0.6, limit, 1.0, tmp_path)
    (p,) = within["processes"]
    assert not p["killed"] and p["bytes_per_s"] > 0 and within["node_oom_kills"] == 0

    past = m.run_trial(writer, reader, "anon", 1.3, limit, 1.0, tmp_path)
    (p,) = past["processes"]
    assert p["killed"] and p["ready_s"] is None and past["node_oom_kills"] == 1

    pair = m.run_trial(writer, reader, "pair-production-above-request", 1.1, limit, 1.0, tmp_path)
    killed = {r["process"]: r["killed"] for r in pair["processes"]}
    assert killed == {"p0": True, "b0": False}  # production above its request, batch within its own
    assert [r["oom_score_adj"] for r in pair["processes"]] == [500, 600]
    for h in real_tree.layout.hierarchies:  # every cgroup of the trials is gone
        assert not real_tree.dir(h, "node").exists()
