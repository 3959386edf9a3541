"""Command-line options are checked before any work starts, in the option's own name, and a
command that fails writes nothing (or, for an output folder, leaves one run's complete output).

Each command runs as a real subprocess (``python -m kalena.cli.main``) from an empty folder.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest
from cli_testlib import run_kalena

from kalena.data import irina_paths

#: Refusing an option must not wait for a run; a 6-minute simulation would show up here.
QUICK_S = 60


def kalena(args: list[str], cwd: Path) -> tuple[subprocess.CompletedProcess[str], float]:
    t = time.monotonic()
    r = run_kalena(args, cwd, timeout=600)
    return r, time.monotonic() - t


@pytest.mark.parametrize("hours", ["inf", "nan", "1e308", "1e20", "1e12", "-1", "0"])
def test_simulate_refuses_hours_outside_a_year_at_once(tmp_path, hours):
    r, took = kalena(["simulate", "--hours", hours], tmp_path)
    assert r.returncode == 2 and "--hours" in r.stderr and "Traceback" not in r.stderr
    assert took < QUICK_S and list(tmp_path.iterdir()) == []


def test_simulate_refuses_an_out_that_is_a_file_before_running(tmp_path):
    (tmp_path / "taken").write_text("mine\n")
    r, took = kalena(["simulate", "--out", "taken"], tmp_path)
    assert r.returncode == 2 and took < QUICK_S
    assert r.stderr.strip() == "taken: --out must be a folder, and this is a file"
    assert (tmp_path / "taken").read_text() == "mine\n"


def test_a_second_run_replaces_the_first_runs_outputs_and_removes_its_stale_plots(tmp_path):
    r, _ = kalena(["simulate", "--hours", "0.05", "--out", "o"], tmp_path)
    assert r.returncode == 0, r.stderr
    (tmp_path / "o" / "notes.txt").write_text("the operator's own file\n")
    first = {p.name for p in (tmp_path / "o").iterdir()}
    assert {"report.json", "slack_cluster.png", "slack_node.png"} <= first
    r, _ = kalena(["simulate", "--hours", "0.05", "--out", "o", "--no-plots", "--seed", "1"], tmp_path)
    assert r.returncode == 0, r.stderr
    # the plots of the first run are gone, the operator's file stays, no staging folder is left
    assert sorted(p.name for p in (tmp_path / "o").iterdir()) == ["notes.txt", "report.json"]
    assert json.loads((tmp_path / "o" / "report.json").read_text())["seed"] == 1


def test_ir_convert_writes_every_file_or_none_naming_the_path_given(tmp_path):
    missing = tmp_path / "no" / "such" / "r.yaml"
    r, _ = kalena(
        [
            "ir",
            "convert",
            "--to",
            "v1",
            *map(str, irina_paths()),
            "--out",
            "v1",
            "--rename-map",
            str(missing),
        ],
        tmp_path,
    )
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.startswith(
        f"{missing}: <document>: cannot write: No such file or directory; nothing was written"
    )
    assert list(tmp_path.iterdir()) == []  # not even the --out folder


DECLARATION = """apiVersion: kalena.naughtian.io/v1alpha1
kind: NodeDeclaration
node: {name: node-a, capacity: {cpu: 2, ram: 448Mi}}
workloads: []
"""


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("--sample-interval", "-1", "--sample-interval: must be a finite number > 0 (value: -1.0)"),
        ("--sample-interval", "nan", "--sample-interval: must be a finite number > 0 (value: nan)"),
        ("--estimate-interval", "0", "--estimate-interval: must be a finite number > 0 (value: 0.0)"),
        ("--grace-period", "-5", "--grace-period: must be a finite number >= 0 (value: -5.0)"),
        ("--min-run-time", "inf", "--min-run-time: must be a finite number >= 0 (value: inf)"),
        ("--escalation-rounds", "0", "--escalation-rounds: must be an integer >= 1 (value: 0)"),
        ("--duration", "-1", "--duration: must be a finite number of seconds >= 0 (value: -1.0)"),
        (
            "--cgroup-root",
            "../../x",
            "--cgroup-root: cgroup name '../../x' must be a path of non-empty parts",
        ),
    ],
)
def test_agent_run_names_the_option_and_touches_nothing(tmp_path, option, value, message):
    (tmp_path / "node.yaml").write_text(DECLARATION)
    r, took = kalena(
        ["agent", "run", "--declaration", "node.yaml", "--state-dir", "st", option, value], tmp_path
    )
    assert r.returncode == 2 and r.stderr.startswith(message) and took < QUICK_S, r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["node.yaml"]  # no state folder made


def test_agent_submit_needs_the_agents_folder_and_creates_none(tmp_path):
    r, _ = kalena(["agent", "submit", "--state-dir", "absent/x", "--name", "j1", "--", "true"], tmp_path)
    assert r.returncode == 2 and r.stderr.startswith("--state-dir: absent/x is not a folder")
    assert list(tmp_path.iterdir()) == []


def test_agent_submit_refuses_a_name_already_queued_and_keeps_the_first(tmp_path):
    (tmp_path / "st").mkdir()
    r, _ = kalena(["agent", "submit", "--state-dir", "st", "--name", "j1", "--", "sleep", "1"], tmp_path)
    assert r.returncode == 0, r.stderr
    r, _ = kalena(["agent", "submit", "--state-dir", "st", "--name", "j1", "--", "sleep", "2"], tmp_path)
    assert r.returncode == 2 and r.stderr.startswith("--name: a job of this name is already queued")
    assert json.loads((tmp_path / "st" / "inbox" / "j1.json").read_text())["command"] == ["sleep", "1"]
    assert sorted(p.name for p in (tmp_path / "st" / "inbox").iterdir()) == ["j1.json"]


def test_agent_submit_refuses_a_quantity_beyond_the_bound(tmp_path):
    (tmp_path / "st").mkdir()
    r, _ = kalena(
        ["agent", "submit", "--state-dir", "st", "--name", "j", "--request", "ram=1e400", "--", "true"],
        tmp_path,
    )
    assert (
        r.returncode == 2
        and "requests.ram: '1e400' is above the largest quantity accepted for ram" in r.stderr
    )
    assert list((tmp_path / "st").iterdir()) == []


def test_ir_validate_on_kubernetes_manifests_points_to_the_verifier(tmp_path):
    manifest = (
        Path(__file__).resolve().parent.parent / "fixtures" / "hostile" / "manifests" / "request-1e400.yaml"
    )
    r, _ = kalena(["ir", "validate", str(manifest)], tmp_path)
    assert r.returncode == 2 and r.stderr.strip() == (
        f"{manifest}: <document>: a Kubernetes object, not a Kuberina IR document: "
        "`kalena deployable --cluster FILE` reads those"
    )


NO_CPU_INFRA = """apiVersion: kuberina.io/v1
kind: Infrastructure
nodes:
  - {name: a, allocatable: {cpu: 4, ram: 16}}
  - {name: b, allocatable: {ram: 16}}
"""
ONE_POD = (
    "apiVersion: kuberina.io/v1\nkind: Workloads\nnamespaces:\n  x:\n    - {name: web, requests: {cpu: 1}}\n"
)
ITS_PLAN = "apiVersion: kuberina.io/v1\nkind: Blueprint\nmetadata: {feasible: true}\nsolution: {x/web-0: a}\n"


def test_a_node_without_cpu_is_noted_by_validate_and_refused_by_simulate(tmp_path):
    for name, text in (("i.yaml", NO_CPU_INFRA), ("w.yaml", ONE_POD), ("b.yaml", ITS_PLAN)):
        (tmp_path / name).write_text(text)
    r, _ = kalena(["ir", "validate", "i.yaml", "w.yaml", "b.yaml"], tmp_path)
    assert r.returncode == 0, r.stderr
    assert (
        "note: i.yaml: nodes[1] (b) gives no cpu in its allocatable: unconstrained there (IR v1)" in r.stdout
    )
    r, took = kalena(
        ["simulate", "--infra", "i.yaml", "--workloads", "w.yaml", "--blueprint", "b.yaml"], tmp_path
    )
    assert r.returncode == 2 and took < QUICK_S
    assert r.stderr.startswith("i.yaml: nodes[1].allocatable.cpu: the simulator needs a finite cpu capacity")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b.yaml", "i.yaml", "w.yaml"]


@pytest.mark.parametrize("corrupt", ['{"version": 2, "node": ', "[" * 100_000], ids=["truncated", "deep"])
def test_a_corrupt_state_file_is_one_error_and_is_kept_as_it_is(tmp_path, corrupt):
    from kalena.agent.layout import LayoutError, detect

    try:
        detect()
    except (OSError, LayoutError) as e:
        pytest.skip(f"no cgroup hierarchy on this host: {e}")
    (tmp_path / "node.yaml").write_text(DECLARATION)
    (tmp_path / "st").mkdir()
    (tmp_path / "st" / "state.json").write_text(corrupt)
    r, _ = kalena(
        ["agent", "run", "--declaration", "node.yaml", "--state-dir", "st", "--duration", "1"], tmp_path
    )
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.startswith("st/state.json: unreadable state file: ") and "move it away" in r.stderr
    assert (tmp_path / "st" / "state.json").read_text() == corrupt
    r, _ = kalena(["agent", "status", "--state-dir", "st"], tmp_path)
    assert r.returncode == 2 and r.stderr.startswith("st/state.json: unreadable state file: ")


@pytest.mark.parametrize(
    "command",
    [
        ["docker", "serve", "--state-dir", "state"],
        ["docker", "daemon", "--store", "cluster.db"],
        ["k8s", "control-plane", "--dir", "cp"],
        ["k8s", "scheduler", "--kubeconfig", "kc"],
        ["k8s", "extender", "--kubeconfig", "kc"],
    ],
)
@pytest.mark.parametrize("value", ["-1", "nan", "inf"])
def test_every_long_running_command_checks_duration_before_it_starts(tmp_path, command, value):
    """One ``--duration`` for every command that runs until stopped, checked as it is parsed."""
    r, took = kalena([*command, "--duration", value], tmp_path)
    assert r.returncode == 2, r.stderr
    assert f"--duration: must be a finite number of seconds >= 0 (value: {float(value)!r})" in r.stderr
    assert list(tmp_path.iterdir()) == [] and took < QUICK_S  # nothing made, nothing waited for
