"""The simulator and the node agent run one controller: the same recording, the same decisions.

One recorded node (``replay.record``: 720 rounds of 10 s, three services, 48 batch jobs, a cpu
pressure episode that escalates, a memory surge that breaches the ledger, a service over its own
memory limit) goes through the simulator's path and through the agent's path with in-memory
ports (``replay`` module docstring). Round by round, the core's decision (every row's
reservation, usage, quota, cap and floor, the victims in order with cause and dimension, the
signals, the pressure classification, the escalation and the next round state) must be equal,
and so must every job's lifecycle history (state, time, reason).
"""

from __future__ import annotations

import pytest
from replay import (
    AgentReplay,
    ReplaySimulation,
    first_difference,
    record,
)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def replayed(tmp_path_factory):
    rec = record()
    sim = ReplaySimulation(rec)
    sim.run()
    agent = AgentReplay(rec, tmp_path_factory.mktemp("agent"))
    agent.run()
    return rec, sim, agent


def test_the_recording_exercises_every_episode(replayed):
    _, sim, _ = replayed
    t = sim.tally.counts
    assert t["rounds"] == 720
    assert t.get("cpu-pressure", 0) >= 20
    assert t.get("memory-pressure", 0) >= 5
    assert t.get("escalations", 0) >= 1
    assert t.get("evict:reservation-ledger-breach", 0) >= 1
    assert t.get("limit-breach-override", 0) >= 1
    assert t.get("evict:escalation-drain", 0) >= 1
    states = sim.histories()
    assert sum(h[-1][0] == "succeeded" for h in states.values()) >= 10
    assert sim.metrics.counts["production_oom_kills"] == sim.metrics.counts["batch_oom_kills"] == 0


def test_every_round_decides_the_same_on_both_paths(replayed):
    _, sim, agent = replayed
    assert len(sim.decisions) == len(agent.decisions) == 720
    assert first_difference(sim.decisions, agent.decisions) is None


def test_every_job_has_the_same_lifecycle_history_on_both_paths(replayed):
    _, sim, agent = replayed
    s, g = sim.histories(), agent.histories()
    assert s.keys() == g.keys()
    diff = {name: (s[name], g[name]) for name in s if s[name] != g[name]}
    assert not diff, next(iter(diff.items()))
