"""The simulator's memory model against the kernel: every trial measured on real cgroups, replayed.

``src/kalena/sim/params/contention/memory-512mib.json`` was measured with
``python scripts/measure_memory.py --seconds 5`` (a node = a cgroup with a 512 MiB memory limit;
anonymous and file-backed working sets from 50 % to 130 % of it; production and batch processes
with the kubelet's ``oom_score_adj``). The measurement needs root, per-cgroup PSI and a quiet
machine, so the test replays the stored record rather than measuring again.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from kalena.core.enforcement import BATCH_OOM_SCORE_ADJ
from kalena.core.resources import NDIM, RAM
from kalena.sim import SimConfig, memory

RECORD = Path(memory.__file__).parent / "params" / "contention" / "memory-512mib.json"
DATA = json.loads(RECORD.read_text())
TRIALS = DATA["trials"]
KUBELET = [t for t in TRIALS if t["mix"] not in ("file", "pair-kalena-scores")]


def _ids(trials: list[dict]) -> list[str]:
    return [f"{t['mix']}-{t['fill']}" for t in trials]


def test_the_record_covers_working_sets_from_half_to_past_the_limit_on_a_named_kernel():
    assert DATA["kernel"] and DATA["cgroups"] and DATA["swap_bytes"] == 0
    fills = {t["fill"] for t in TRIALS}
    assert min(fills) <= 0.5 and max(fills) >= 1.2
    assert {t["mix"] for t in TRIALS} >= {"anon", "file", "pair-production-within-request"}


@pytest.mark.parametrize("trial", KUBELET, ids=_ids(KUBELET))
def test_the_oom_killer_takes_whom_the_simulator_takes(trial):
    """Anonymous memory, the kubelet's scores: the replay through ``oom_victims`` names exactly the
    processes killed.

    The kernel judges when the limit is crossed: the processes started one after another, so the
    last one holds then only what was left (a page more), not its whole working set.
    """
    procs = trial["processes"]
    n = len(procs)
    limit = trial["limit_bytes"]
    want = [p["bytes"] + DATA["interpreter_bytes"] for p in procs]
    held = [*want[:-1], min(want[-1], limit - sum(want[:-1]) + 4096)]
    usage = np.zeros((n, NDIM))
    usage[:, RAM] = held
    request = np.zeros((n, NDIM))
    request[:, RAM] = [p["request_share"] * limit for p in procs]
    capacity = np.full(NDIM, np.inf)
    capacity[RAM] = limit
    killed = memory.oom_victims(np.arange(n), request, usage, np.full((n, NDIM), np.inf), capacity)
    assert {procs[i]["process"] for i in killed} == {p["process"] for p in procs if p["killed"]}
    assert trial["node_oom_kills"] == len(killed)


def test_a_production_pod_above_its_request_goes_before_batch_within_its_own():
    """What the old rule (batch always first) got wrong, on the kernel's own record."""
    above = [t for t in TRIALS if t["mix"] == "pair-production-above-request" and t["fill"] > 1.0]
    assert above
    for t in above:
        assert [p["process"] for p in t["processes"] if p["killed"]] == ["p0"]


def test_with_kalenas_scores_the_kernel_takes_batch_first():
    """The same pair with the scores Kalena's runtimes give (batch 1000, production at 0): batch goes."""
    trials = [t for t in TRIALS if t["mix"] == "pair-kalena-scores" and t["fill"] > 1.0]
    assert trials
    for t in trials:
        assert [p["process"] for p in t["processes"] if p["killed"]] == ["b0"]
        assert [p["oom_score_adj"] for p in t["processes"]] == [0, BATCH_OOM_SCORE_ADJ]


def test_below_the_limit_memory_stalls_nothing_as_the_simulator_assumes():
    """The simulator reports no memory pressure below capacity: neither kind of memory stalled there."""
    below = [t for t in TRIALS if t["fill"] < 1.0]
    assert below
    for t in below:
        assert t["node_some"] < 0.001, t
        assert not any(p["killed"] for p in t["processes"])


def test_memory_arrives_and_the_kernel_kills_faster_than_the_agent_reacts():
    """Why the simulator lets the kernel act before the round (``SimConfig.reaction_s``): a node's
    whole memory arrives, and the OOM killer answers, well within the agent's reaction time."""
    reaction = SimConfig().reaction_s
    for t in KUBELET:
        for p in t["processes"]:
            if p["ready_s"] is not None:
                assert p["bytes"] / p["ready_s"] * reaction > t["limit_bytes"]
            if p["killed"]:
                assert p["ended_s"] - p["started_s"] < reaction


def test_file_backed_memory_past_the_limit_thrashes_instead_of_dying():
    """The gap the simulator leaves (its memory is an anonymous working set): page cache past the
    limit is dropped and read again, so the kernel kills nobody, stalls and slows instead."""
    files = [t for t in TRIALS if t["mix"] == "file"]
    within = [p["bytes_per_s"] for t in files if t["fill"] < 1.0 for p in t["processes"]]
    past = [t for t in files if t["fill"] > 1.0]
    assert past and within
    for t in past:
        (p,) = t["processes"]
        assert not p["killed"] and t["node_oom_kills"] == 0
        assert t["node_some"] > 0.005
        assert p["bytes_per_s"] < 0.5 * min(within)
