"""The crash-safe state file and the agent's own configuration."""

from __future__ import annotations

import dataclasses
import json
import math
import os

import pytest

from kalena.agent.config import AgentConfig
from kalena.agent.state import STATE_VERSION, AgentState, EvictionRecord, JobRecord, StateStore
from kalena.core.config import PolicyConfig
from kalena.core.controller import RoundState
from kalena.core.estimators import DecayParams
from kalena.core.lifecycle import TaskState, Transition, TransitionReason

S, R = TaskState, TransitionReason


def _state() -> AgentState:
    s = AgentState("n1")
    s.submit(JobRecord("a", ["true"], {"ram": 0.5}, {"ram": 1.0}, 3, 1.0, run=2), 1.0)
    for to, why in ((S.PLACED, R.ADMITTED), (S.STARTING, R.START_REQUESTED), (S.RUNNING, R.STARTED)):
        s.move("a", to, 2.0, why)
    s.evictions.append(
        EvictionRecord("ev-1", "batch/b.1", "batch/b.1", "batch", "limit-breach", 2.0, 32.0, [7])
    )
    s.eviction_history.append(("batch/b", "n1", 2.0))
    runs = RoundState.initial(1)
    runs.allowance[0] = 2.5
    s.round_state = runs.to_json()
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
    assert back.history("a") == s.history("a") and len(back.history("a")) == 4
    assert "status" not in json.loads((tmp_path / "state.json").read_text())["jobs"]["a"]


def test_the_round_state_survives_the_state_file_with_infinities(tmp_path):
    store = StateStore(tmp_path / "state.json")
    s = _state()
    runs = RoundState.initial(1)
    runs.allowance[0] = math.inf  # an unconstrained node's allowance
    s.round_state = runs.to_json()
    store.save(s)
    back = StateStore(tmp_path / "state.json").load()
    assert back is not None and RoundState.from_json(back.round_state).equals(runs)


def test_a_state_file_from_before_the_core_round_loads_without_its_rounds(tmp_path):
    """Agents before the core round saved their own allowance and rounds: cheap to lose, dropped."""
    store = StateStore(tmp_path / "state.json")
    store.save(_state())
    import json

    data = json.loads((tmp_path / "state.json").read_text())
    data.pop("round_state")
    data["previous_allowance"] = 1.5
    data["mitigation_rounds"] = [[3.0, True, ["ram"]]]
    (tmp_path / "state.json").write_text(json.dumps(data))
    back = StateStore(tmp_path / "state.json").load()
    assert back is not None and back.round_state is None and back.status("a") == "running"


def _v1_job(name: str, status: str, **kw) -> dict:
    job = JobRecord(name, ["true"], {"ram": 0.1}, None, 1, 1.0, **kw)
    return {**dataclasses.asdict(job), "status": status}


def test_a_version_1_file_rebuilds_the_lifecycle_from_the_statuses_at_the_load_time(tmp_path):
    """Before the lifecycle the state was each job's status string; each job becomes one
    restored entry at the load time, in the state its status names."""
    now = 5_000.0
    run = {"run": 1, "workload_id": "batch/x.1", "cgroup": "batch/x.1", "started_at": 10.0}
    jobs = {
        "new": _v1_job("new", "queued"),
        "cooling": _v1_job("cooling", "queued", run=1, not_before=now + 60),
        "cooled": _v1_job("cooled", "queued", run=1, not_before=now - 60),
        "up": _v1_job("up", "running", **run),
        "hit": _v1_job("hit", "running", **{**run, "workload_id": "batch/hit.1", "cgroup": "batch/hit.1"}),
        "going": _v1_job("going", "evicting", **run),
        "ok": _v1_job("ok", "done", exit_code=0),
        "bad": _v1_job("bad", "failed", exit_code=2),
    }
    del jobs["new"]["status"]  # version 1's default status was "queued"
    # a v1 agent recorded an eviction before its job's status: a crash between left "running"
    ev = EvictionRecord("ev-1", "batch/hit.1", "batch/hit.1", "batch", "reservation-ledger-breach", 9, 39, [])
    p = tmp_path / "state.json"
    p.write_text(
        json.dumps({"version": 1, "node": "n1", "jobs": jobs, "evictions": [dataclasses.asdict(ev)]})
    )
    back = StateStore(p).load(now)
    assert back is not None and back.version == STATE_VERSION
    expected = {
        "new": S.PENDING, "cooling": S.REQUEUED, "cooled": S.PENDING, "up": S.RUNNING,
        "hit": S.EVICTING, "going": S.EVICTING, "ok": S.SUCCEEDED, "bad": S.FAILED,
    }  # fmt: skip
    assert {n: back.task(n) for n in jobs} == expected
    assert all(back.history(n) == (Transition(expected[n], now, R.RESTORED),) for n in jobs)
    assert {n: back.status(n) for n in ("cooling", "hit", "ok")} == {
        "cooling": "queued", "hit": "evicting", "ok": "done",
    }  # fmt: skip
    store = StateStore(p)
    store.save(back)  # written back as version 2: the lifecycle, no status strings
    data = json.loads(p.read_text())
    assert data["version"] == STATE_VERSION and not any("status" in j for j in data["jobs"].values())
    assert StateStore(p).load(now + 1e6) == back  # a version 2 file is not rebuilt again


@pytest.mark.parametrize(
    ("edit", "match"),
    [
        (
            lambda d: d["jobs"]["a"].update(status="paused"),
            r"jobs\.a\.status: unknown status \(value: 'paused'\)",
        ),
        (lambda d: d.update(version=2), "lifecycle: missing"),
        (lambda d: d.update(version=2, lifecycle={}), "jobs.a: .*'status'"),
    ],
    ids=["unknown-status", "version-2-without-lifecycle", "version-2-with-a-status"],
)
def test_a_bad_version_1_file_is_an_error_naming_the_key(tmp_path, edit, match):
    data = {"version": 1, "node": "n1", "jobs": {"a": _v1_job("a", "running")}}
    edit(data)
    p = tmp_path / "state.json"
    p.write_text(json.dumps(data))
    with pytest.raises(ValueError, match=match):
        StateStore(p).load(0.0)


def test_the_lifecycle_must_name_exactly_the_jobs(tmp_path):
    store = StateStore(tmp_path / "state.json")
    store.save(_state())
    data = json.loads((tmp_path / "state.json").read_text())
    data["jobs"]["b"] = {**data["jobs"]["a"], "name": "b"}
    (tmp_path / "state.json").write_text(json.dumps(data))
    with pytest.raises(ValueError, match=r"lifecycle\.ids: .*\['b'\]"):
        StateStore(tmp_path / "state.json").load()


def test_a_job_name_comes_back_only_once_its_job_ended_and_with_a_fresh_history():
    s = _state()
    with pytest.raises(ValueError, match="only terminal tasks may be forgotten: 'a' \\(running\\)"):
        s.submit(JobRecord("a", ["true"], {}, None, 1, 3.0), 3.0)
    assert s.task("a") is S.RUNNING and s.jobs["a"].run == 2  # nothing replaced
    s.move("a", S.SUCCEEDED, 4.0, R.FINISHED)
    s.submit(JobRecord("a", ["true"], {}, None, 1, 5.0), 5.0)
    assert s.history("a") == (Transition(S.PENDING, 5.0, R.SUBMITTED),) and len(s.lifecycle) == 1


def test_a_clock_stepped_back_never_puts_an_entry_before_the_previous_one():
    s = _state()  # running since t = 2
    s.move("a", S.THROTTLED, 1.5, R.THROTTLED)  # the wall clock went back half a second
    assert s.history("a")[-1] == Transition(S.THROTTLED, 2.0, R.THROTTLED)


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
    p.write_text('{"version": true, "node": "n1"}')
    with pytest.raises(ValueError, match="version True is not"):
        StateStore(p).load()


@pytest.mark.parametrize(
    ("kw", "key"),
    [
        ({"sample_interval_s": 0}, "sample_interval_s"),
        ({"estimate_interval_s": 0.5}, "estimate_interval_s"),
        ({"memory_some_fraction": 1.0}, "memory_some_fraction"),
        ({"io_some_fraction": True}, "io_some_fraction"),
        ({"max_history": 3}, "max_history"),
        ({"policy": PolicyConfig(estimator="peak")}, "policy.estimator"),
        ({"policy": {"estimator": "decay"}}, "policy"),
    ],
    ids=[
        "zero-interval",
        "estimate-faster-than-sample",
        "fraction-one",
        "bool-fraction",
        "tiny-history",
        "estimator-the-agent-does-not-run",
        "dict-for-policy",
    ],
)
def test_config_names_key_and_value(kw, key):
    with pytest.raises(ValueError, match=f"AgentConfig.{key} must be"):
        AgentConfig(**kw)


def test_the_agent_runs_the_one_policy_it_is_given():
    policy = PolicyConfig(decay=DecayParams(margin=1.5))
    cfg = AgentConfig(policy=policy)
    assert cfg.policy is policy and cfg.policy.round.acute_fraction == 0.95
