"""``kalena agent``: validate, submit, status, detect, and run (exit codes, messages, side effects)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import yaml
from agent_testlib import remove_tree
from typer.testing import CliRunner

from kalena.agent.layout import CgroupTree, LayoutError, detect
from kalena.agent.state import AgentState, StateStore
from kalena.cli.main import app

runner = CliRunner()

GOOD = {
    "apiVersion": "kalena.naughtian.io/v1alpha1",
    "kind": "NodeDeclaration",
    "node": {"name": "node-a", "capacity": {"cpu": 2, "ram": "1Gi"}},
    "workloads": [{"id": "prod/web", "cgroup": "prod/web", "requests": {"cpu": 1, "ram": "256Mi"}}],
}


def write(tmp_path: Path, doc: dict | str) -> Path:
    p = tmp_path / "node.yaml"
    p.write_text(doc if isinstance(doc, str) else yaml.safe_dump(doc))
    return p


def test_validate_a_good_declaration(tmp_path):
    r = runner.invoke(app, ["agent", "validate", str(write(tmp_path, GOOD))])
    assert r.exit_code == 0, r.output
    assert "node node-a: 1 production, 0 DaemonSet-class workloads" in r.output


def test_validate_reports_file_key_and_value(tmp_path):
    bad = dict(GOOD, workloads=[{"id": "prod/web", "cgroup": "prod/web", "requests": {"ram": "12Qi"}}])
    path = write(tmp_path, bad)
    r = runner.invoke(app, ["agent", "validate", str(path)])
    assert r.exit_code == 2
    assert (
        f"{path}: workloads[0].requests.ram: '12Qi' is not a valid quantity for ram (value: \"12Qi\")"
        in r.output
    )


def test_run_with_a_bad_declaration_changes_nothing(tmp_path):
    path = write(tmp_path, "apiVersion: nope\n")
    state_dir = tmp_path / "state"
    root = f"kalena-cli-{uuid.uuid4().hex[:8]}"
    r = subprocess.run(
        [sys.executable, "-m", "kalena.cli.agent", "run", "--declaration", str(path),
         "--state-dir", str(state_dir), "--cgroup-root", root],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert r.returncode == 2
    assert f"{path}: apiVersion:" in r.stderr and f"{path}: kind: required key 'kind' is missing" in r.stderr
    assert not state_dir.exists()
    try:
        lay = detect()
    except (OSError, LayoutError):
        return
    assert not any(CgroupTree(lay, root).dir(h, "").exists() for h in lay.hierarchies)


def test_submit_writes_one_inbox_file(tmp_path):
    cmd = ["agent", "submit", "--state-dir", str(tmp_path), "--name", "etl", "--priority", "2"]
    r = runner.invoke(app, [*cmd, "--request", "ram=256Mi", "--request", "cpu=500m", "--", "sleep", "5"])
    assert r.exit_code == 0, r.output
    data = json.loads((tmp_path / "inbox" / "etl.json").read_text())
    assert data["command"] == ["sleep", "5"] and data["requests"] == {"ram": 0.25, "cpu": 0.5}
    r = runner.invoke(app, [*cmd, "--request", "ram", "--", "sleep"])
    assert r.exit_code == 2 and "--request: expected DIM=QUANTITY" in r.output
    r = runner.invoke(app, [*cmd, "--request", "gpu=1", "--", "sleep"])
    assert r.exit_code == 2 and "requests.gpu: batch never gets a GPU" in r.output


def test_status(tmp_path):
    r = runner.invoke(app, ["agent", "status", "--state-dir", str(tmp_path)])
    assert r.exit_code == 2 and "no state file" in r.output
    StateStore(tmp_path / "state.json").save(AgentState("node-a", slack_ineligible_until=5.0))
    r = runner.invoke(app, ["agent", "status", "--state-dir", str(tmp_path)])
    assert r.exit_code == 0 and json.loads(r.output)["slack_ineligible_until"] == 5.0


def test_detect_names_the_layout():
    r = runner.invoke(app, ["agent", "detect"])
    if r.exit_code == 3:
        pytest.skip(f"no cgroup hierarchy on this host: {r.output}")
    assert r.exit_code == 0 and r.output.startswith("mode=") and "psi:" in r.output


@pytest.fixture
def scratch_root():
    """A fresh name for Kalena's root cgroup on this host's real hierarchies, removed (with anything
    left running in it) afterwards; skips where cgroups cannot be made."""
    if os.geteuid() != 0:
        pytest.skip("kalena agent run needs root (euid 0) to create its cgroups")
    try:
        lay = detect()
    except (OSError, LayoutError) as e:
        pytest.skip(f"no cgroup hierarchy on this host: {e}")
    root = f"kalena-cli-{uuid.uuid4().hex[:8]}"
    tree = CgroupTree(lay, root)
    yield lay, root, tree
    remove_tree(tree)


@pytest.mark.slow
def test_run_starts_and_stops_cleanly(tmp_path, scratch_root):
    lay, root, tree = scratch_root
    state_dir = tmp_path / "state"
    proc = subprocess.Popen(
        [sys.executable, "-m", "kalena.cli.agent", "run", "--declaration", str(write(tmp_path, GOOD)),
         "--state-dir", str(state_dir), "--cgroup-root", root],
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        end = time.monotonic() + 60  # a bound on a hung test
        while time.monotonic() < end and not (state_dir / "state.json").exists():
            time.sleep(0.1)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
        kinds = [json.loads(line)["kind"] for line in (state_dir / "actions.jsonl").read_text().splitlines()]
        assert kinds[0] != "stop" and kinds[-1] == "stop" and "start" in kinds
        assert "kalena agent: node node-a, mode=" in proc.stderr.read()
        # nothing ran under Kalena's root, so the stopped agent leaves no cgroup of its own behind
        assert [str(tree.dir(h, "")) for h in lay.hierarchies if tree.dir(h, "").exists()] == []
    finally:
        if proc.poll() is None:
            proc.kill()
        shutil.rmtree(state_dir, ignore_errors=True)


@pytest.mark.slow
def test_purge_stops_the_batch_runs_a_stopped_agent_left_and_removes_its_cgroups(tmp_path, scratch_root):
    lay, root, tree = scratch_root
    state_dir = tmp_path / "state"
    state_dir.mkdir()
    decl = write(tmp_path, {**GOOD, "workloads": []})
    cli = [sys.executable, "-m", "kalena.cli.main", "agent"]
    sub = subprocess.run(
        [*cli, "submit", "--state-dir", str(state_dir), "--name", "sleeper", "--request", "cpu=100m",
         "--request", "ram=16Mi", "--", "sleep", "300"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert sub.returncode == 0, sub.stderr
    proc = subprocess.Popen(
        [*cli, "run", "--declaration", str(decl), "--state-dir", str(state_dir), "--cgroup-root", root],
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    run_dir = [tree.dir(h, "batch/sleeper.1") for h in lay.hierarchies]
    try:
        end = time.monotonic() + 60  # a bound on a hung test
        while time.monotonic() < end and not (run_dir[0] / "cgroup.procs").exists():
            time.sleep(0.1)
        while time.monotonic() < end and not (run_dir[0] / "cgroup.procs").read_text().split():
            time.sleep(0.1)
        pids = [int(p) for p in (run_dir[0] / "cgroup.procs").read_text().split()]
        assert pids, "the batch run never started"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
        assert all(d.is_dir() for d in run_dir)  # a stopped agent leaves its batch running, by design
        r = subprocess.run(
            [*cli, "purge", "--declaration", str(decl), "--cgroup-root", root],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert r.returncode == 0, r.stderr
        assert f"batch runs stopped and removed under {root}/batch" in r.stdout
        assert [str(tree.dir(h, "")) for h in lay.hierarchies if tree.dir(h, "").exists()] == []
        for pid in pids:  # killed (a zombie of a reaped child is gone from /proc too)
            assert (
                not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2]
            )
    finally:
        if proc.poll() is None:
            proc.kill()
