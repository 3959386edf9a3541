"""SIGKILL of the agent in the middle of a mitigation, then a restart: nothing lost, nothing twice.

The agent runs as its own process (``python -m kalena.cli.agent run``). A batch run that
ignores SIGTERM is being evicted (inside its grace period) when the agent is SIGKILLed; the
restarted agent must resume that eviction (SIGKILL at the recorded deadline) without starting
another, keep the other run, and keep the job queue.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from kalena.agent.actionlog import read_log
from kalena.agent.cgroupfs import FsCgroupReader
from kalena.agent.runtime import Submission, submit
from kalena.agent.state import StateStore
from kalena.agent.writer import CgroupWriter, ManagedScope
from kalena.core.placement.context import ContextKeeper

MIB = 2**20


def until(check, bound_s: float = 60.0) -> bool:
    end = time.monotonic() + bound_s  # a bound on a hung test, not a speed assertion
    while time.monotonic() < end:
        if check():
            return True
        time.sleep(0.1)
    return check()


@pytest.mark.slow
def test_sigkill_during_a_mitigation_then_restart_loses_nothing_and_evicts_once(real_tree, spawn, tmp_path):
    if real_tree.layout.home("memory") is None:
        pytest.skip("no memory controller in any hierarchy (v2 without +memory delegated here)")
    decl_path = tmp_path / "node.yaml"
    decl_path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kalena.naughtian.io/v1alpha1",
                "kind": "NodeDeclaration",
                "node": {"name": "n1", "capacity": {"cpu": 2, "ram": "448Mi"}, "memoryLimit": "1Gi"},
                "workloads": [
                    {"id": "prod/web", "cgroup": "prod/web", "priority": 100, "requests": {"ram": "128Mi"}}
                ],
            }
        )
    )
    state_dir = tmp_path / "state"
    cmd = [
        sys.executable, "-m", "kalena.cli.agent", "run",
        "--declaration", str(decl_path), "--state-dir", str(state_dir), "--cgroup-root", real_tree.root,
        "--grace-period", "3", "--min-run-time", "0", "--sample-interval", "0.2",
        "--escalation-rounds", "100000",
    ]  # fmt: skip
    agents: list[subprocess.Popen[bytes]] = []

    def start_agent() -> subprocess.Popen[bytes]:
        p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        agents.append(p)
        return p

    log_path = state_dir / "actions.jsonl"

    def lines(kind: str) -> list[dict]:
        return [r for r in read_log(log_path) if r.get("kind") == kind]

    owner = CgroupWriter(real_tree, ManagedScope())
    owner.create("prod/web", "test: production's owner")
    prod = spawn("mem", "--mib", "32", cgroup_procs=owner.procs_files("prod/web"))
    assert prod.stdout.readline().strip() == "ready 32"
    reader = FsCgroupReader(real_tree)
    try:
        first = start_agent()
        assert until(lambda: bool(lines("start"))), first.stderr
        stubborn = (sys.executable, "-m", "kalena.agent.loadgen", "mem", "--mib", "64", "--ignore-term")
        steady = (sys.executable, "-m", "kalena.agent.loadgen", "mem", "--mib", "64")
        submit(state_dir / "inbox", Submission("b-low", stubborn, {"ram": 0.125}, None, 1))
        submit(state_dir / "inbox", Submission("b-high", steady, {"ram": 0.125}, None, 5))
        runs = ("batch/b-low.1", "batch/b-high.1")
        assert until(lambda: all((reader.read(r).memory_usage or 0) >= 64 * MIB for r in runs))
        high_pids = reader.procs("batch/b-high.1")

        prod.stdin.write("grow 200\n")  # 128 (r of b-low) + 128 (b-high) + ~210 > 448 MiB
        prod.stdin.flush()
        assert prod.stdout.readline().strip() == "at 200"
        assert until(lambda: bool(lines("evict")))
        first.send_signal(signal.SIGKILL)  # mid-mitigation: b-low ignores SIGTERM, its grace runs
        first.wait(10)

        saved = StateStore(state_dir / "state.json").load()
        in_flight = saved.in_flight()
        assert [(e.workload, e.status) for e in in_flight] == [("batch/b-low.1", "terminating")]
        assert reader.procs("batch/b-low.1")  # still alive: SIGTERM ignored, no SIGKILL yet
        ev = in_flight[0].id

        second = start_agent()
        assert until(lambda: any(r.get("id") == ev for r in lines("evicted"))), second.stderr
        assert not reader.exists("batch/b-low.1") or reader.procs("batch/b-low.1") == ()
        time.sleep(1.0)  # a few more rounds of the restarted agent with the pressure gone
        second.send_signal(signal.SIGTERM)
        assert second.wait(20) == 0

        evicts = lines("evict")
        assert [r["workload"] for r in evicts] == ["batch/b-low.1"]  # once, across the crash
        assert [r["id"] for r in lines("sigkill")] == [ev]  # the restarted agent ended the grace
        starts = lines("start")
        assert len(starts) == 2 and starts[1]["resumed"] is True and starts[1]["in_flight"] == [ev]
        state = StateStore(state_dir / "state.json").load()
        assert state.status("b-high") == "running" and reader.procs("batch/b-high.1") == high_pids
        keeper = ContextKeeper.from_json(state.placement_context)
        cooling = keeper.cooldowns[("batch/b-low", 0)]  # the cooldown is the core keeper's, by node
        assert state.status("b-low") == "queued" and cooling == pytest.approx(evicts[0]["time"] + 600)
        assert [e.id for e in state.evictions] == [ev] and state.evictions[0].status == "done"
        assert prod.poll() is None
    finally:
        for p in agents:
            with contextlib.suppress(ProcessLookupError):
                p.kill()
            with contextlib.suppress(Exception):
                p.wait(10)


def test_a_torn_log_line_and_a_stale_temp_file_are_survived(tmp_path: Path):
    """The two leftovers a SIGKILL can leave: half a log line and a temp state file."""
    from kalena.agent.actionlog import ActionLog
    from kalena.agent.state import AgentState

    log = tmp_path / "actions.jsonl"
    log.write_text('{"kind": "start", "time": 1}\n{"kind": "evi')
    a = ActionLog(log)
    a.append("evict", 2.0, id="ev-1")
    a.close()
    assert [r["kind"] for r in read_log(log)] == ["start", "evict"]
    store = StateStore(tmp_path / "state.json")
    store.save(AgentState("n1", eviction_seq=4))
    (tmp_path / ".state.json.tmp-999").write_text("{torn")
    store.discard_temp_files()
    assert not list(tmp_path.glob(".state.json.tmp-*"))
    assert StateStore(tmp_path / "state.json").load().eviction_seq == 4
