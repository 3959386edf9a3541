"""Every quick benchmark in ``bench/`` runs to the end with small arguments (no figure is checked).

Benchmarks are not tests, so nothing else ran them: ``bench_agent_latency.py`` waited for ever
after a change to the agent (its own test is in ``tests/agent``), and ``bench_stationkeeper.py
--days 1`` ended in a traceback. These runs are about the benchmarks still working: exit status 0
and, where a benchmark writes JSON, a JSON file. The long ones (the simulated day, the 5,000-node
hour, the trace replay, the hostile-input sweep) are left to their own commands (the simulator's
benchmark runs here on a 20-node cluster and on a minute of Irina); the Kubernetes ones run on a
small control plane where the harness is built.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kalena.testing.k8s import harness_missing
from kalena.testing.processes import run_group

BENCH = Path(__file__).resolve().parents[1] / "bench"


def _docker_answers() -> bool:
    try:
        import docker

        docker.from_env(timeout=5).ping()
    except Exception:  # no engine, no socket, no permission: the docker runs are skipped
        return False
    return True


ROOT = pytest.mark.skipif(os.geteuid() != 0, reason="creates cgroups: needs root (euid 0)")
K8S = [
    pytest.mark.k8s,
    pytest.mark.skipif(harness_missing() is not None, reason=harness_missing() or ""),
]
DOCKER = [
    pytest.mark.docker,
    pytest.mark.skipif(not _docker_answers(), reason="no Docker engine answers on this host"),
]

CASES = [
    pytest.param("bench_estimator.py", ["--workloads", "1000"], True, id="estimator"),
    pytest.param("bench_ledger_refresh.py", ["--hours", "0.1", "--repeat", "5"], True, id="ledger-refresh"),
    pytest.param("bench_round.py", ["--hours", "0.1", "--samples", "3", "--repeat", "2"], True, id="round"),
    pytest.param("bench_placement.py", ["--nodes", "200", "--repeat", "1"], True, id="placement"),
    pytest.param("bench_archive.py", ["--workloads", "50", "--days", "1"], True, id="archive"),
    pytest.param(
        "bench_observed_ledger.py",
        ["--nodes", "100", "--production", "400", "--batch", "500", "--repeat", "1"],
        True,
        id="observed-ledger",
    ),
    pytest.param("bench_stationkeeper.py", ["--days", "1.1"], True, id="stationkeeper"),
    pytest.param("bench_compare.py", ["--hours", "0.2", "--skip-serial"], True, id="compare"),
    pytest.param("bench_sim_size.py", ["--nodes", "20,30", "--hours", "0.1"], True, id="sim-size"),
    pytest.param(  # the step timers wrap the engine's methods by name: a renamed step fails here
        "bench_simulate.py",
        ["--skip-default", "--nodes", "20", "--pods", "200", "--scaling-hours", "0.1", "--phases"],
        True,
        id="simulate-phases",
    ),
    pytest.param(
        "bench_simulate.py",
        ["--skip-scaling", "--default-hours", "0.02", "--repeat", "2", "--versus", "peak"],
        True,
        id="simulate-versus",
    ),
    pytest.param(  # tree against tree: this checkout against itself, as another checkout would run
        "bench_simulate.py",
        ["--against", str(BENCH.parent), "--default-hours", "0.02", "--repeat", "2"],
        True,
        id="simulate-against",
    ),
    pytest.param(
        "bench_arms.py", ["--hours", "0.2", "--seeds", "1", "--loads", "1", "--workers", "1"], True, id="arms"
    ),
    pytest.param(
        "bench_compact.py", ["--trials", "1", "--batch-hours", "0", "--workers", "1"], True, id="compact"
    ),
    pytest.param("bench_cluster_placement.py", [], True, id="cluster-placement"),
    pytest.param(
        "bench_k8s_rules.py",
        ["--nodes", "20", "--residents", "50", "--pending", "40", "--jobs", "4", "--repeat", "1"],
        True,
        id="k8s-rules",
    ),
    pytest.param(
        "bench_k8s_extender.py",
        ["--sizes", "20", "--calls", "10", "--node-calls", "5"],
        True,
        id="k8s-extender",
    ),
    pytest.param(
        "bench_deployability.py",
        ["--only", "poly", "--no-peers", "--timeout", "10"],
        True,
        id="deployability",
    ),
    pytest.param(
        "bench_k8s_harness.py",
        ["--skip-build", "--trials", "1", "--nodes", "20"],
        True,
        id="k8s-harness",
        marks=K8S,
    ),
    pytest.param(
        "bench_k8s_binding.py", ["--nodes", "20", "--pods", "40"], True, id="k8s-binding", marks=K8S
    ),
    pytest.param(
        "bench_k8s_scale.py", ["--nodes", "20", "--duration", "10"], True, id="k8s-scale", marks=K8S
    ),
    pytest.param(
        "bench_agent_overhead.py",
        ["--cgroups", "10", "--short", "2", "--long", "4"],
        True,
        id="agent-overhead",
        marks=ROOT,
    ),
    pytest.param("bench_docker.py", ["--trials", "10"], False, id="docker", marks=[ROOT, *DOCKER]),
    pytest.param(
        "bench_docker_reaction.py", ["--trials", "5"], False, id="docker-reaction", marks=[ROOT, *DOCKER]
    ),
    pytest.param(
        "bench_docker_overhead.py",
        ["--containers", "5", "--batch", "2", "--window", "5", "--warmup", "2"],
        False,
        id="docker-overhead",
        marks=[ROOT, *DOCKER],
    ),
]


@pytest.mark.slow
@pytest.mark.parametrize(("script", "args", "writes_json"), CASES)
def test_the_benchmark_runs_to_the_end(
    script: str, args: list[str], writes_json: bool, tmp_path: Path
) -> None:
    out = tmp_path / "result.json"
    cmd = [sys.executable, str(BENCH / script), *args, *(["--json", str(out)] if writes_json else [])]
    try:  # (a bound on a hang; its workers and helpers end with it)
        done = run_group(cmd, timeout=600, grace=15)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"{' '.join(cmd[1:])} ran past {e.timeout:g} s\n{(e.stderr or '')[-2500:]}")
    assert done.returncode == 0, f"{' '.join(cmd[1:])}\n{done.stdout[-1500:]}\n{done.stderr[-2500:]}"
    if writes_json:
        assert json.loads(out.read_text())  # figures, as an object or a list of runs


def test_a_stationkeeper_run_too_short_to_score_is_refused_with_a_message() -> None:
    done = subprocess.run(
        [sys.executable, str(BENCH / "bench_stationkeeper.py"), "--days", "1"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert "--days must leave a sample after the first day's warm-up, got 1" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("script", ["bench_simulate.py", "bench_round.py"])
def test_against_a_folder_that_is_not_a_checkout_is_refused(script: str, tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(BENCH / script), "--against", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert f"--against {tmp_path}: not a checkout of Kalena" in done.stderr
    assert "Traceback" not in done.stderr
