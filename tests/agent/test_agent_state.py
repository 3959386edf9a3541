"""The crash-safe state file and the agent's own configuration."""

from __future__ import annotations

import math
import os

import pytest

from kalena.agent.config import AgentConfig
from kalena.agent.state import STATE_VERSION, AgentState, EvictionRecord, JobRecord, StateStore


def _state() -> AgentState:
    s = AgentState("n1")
    s.jobs["a"] = JobRecord("a", ["true"], {"ram": 0.5}, {"ram": 1.0}, 3, 1.0, run=2, status="running")
    s.evictions.append(
        EvictionRecord("ev-1", "batch/b.1", "batch/b.1", "batch", "limit-breach", 2.0, 32.0, [7])
    )
    s.eviction_history.append(("batch/b", "n1", 2.0))
    s.mitigation_rounds.append((3.0, True, ["ram"]))
    s.previous_allowance = math.inf  # JSON has no infinity: written as "inf"
    s.production_originals["prod/web"] = math.inf
    s.reservations["prod/web"] = [1.0, 0.5, 0, 0, 0, 0, 0, 0]
    return s


def test_round_trip(tmp_path):
    store = StateStore(tmp_path / "state.json")
    assert store.load() is None
    s = _state()
    assert store.save(s) is True
    back = StateStore(tmp_path / "state.json").load()
    assert back == s
    assert back.in_flight()[0].id == "ev-1"


def test_identical_saves_are_skipped_and_writes_are_atomic(tmp_path, monkeypatch):
    store = StateStore(tmp_path / "state.json")
    s = _state()
    store.save(s)
    assert store.save(s) is False and store.writes == 1
    calls = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (calls.append(fd), real_fsync(fd)))
    s.eviction_seq += 1
    store.save(s)
    assert len(calls) == 2  # the temp file, then the folder after the rename
    assert [p.name for p in tmp_path.iterdir()] == ["state.json"]


def test_a_corrupt_or_foreign_file_is_an_error_not_a_guess(tmp_path):
    p = tmp_path / "state.json"
    p.write_text("{not json")
    with pytest.raises(ValueError):
        StateStore(p).load()
    p.write_text('{"version": 99, "node": "n1"}')
    with pytest.raises(ValueError, match=f"is not {STATE_VERSION}"):
        StateStore(p).load()


@pytest.mark.parametrize(
    ("kw", "key"),
    [
        ({"sample_interval_s": 0}, "sample_interval_s"),
        ({"estimate_interval_s": 0.5}, "estimate_interval_s"),
        ({"memory_some_fraction": 1.0}, "memory_some_fraction"),
        ({"acute_memory_fraction": True}, "acute_memory_fraction"),
        ({"max_history": 3}, "max_history"),
    ],
    ids=["zero-interval", "estimate-faster-than-sample", "fraction-one", "bool-fraction", "tiny-history"],
)
def test_config_names_key_and_value(kw, key):
    with pytest.raises(ValueError, match=f"AgentConfig.{key} must be"):
        AgentConfig(**kw)
