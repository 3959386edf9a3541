"""Sweeps on a real Dask cluster (a ``LocalCluster``, its workers separate processes on loopback):
the same figures as the local run, and a clear error when no scheduler answers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_testlib import run_kalena
from distributed import LocalCluster


@pytest.fixture(scope="module")
def scheduler():
    with LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1", dashboard_address=None
    ) as cluster:
        yield cluster.scheduler_address


def test_compaction_trials_on_dask_equal_the_local_run(scheduler, tmp_path: Path):
    args = ["compact", "--batch-hours", "0", "--trials", "3", "--json"]
    local = run_kalena(args, tmp_path, timeout=300)
    remote = run_kalena([*args, "--scheduler", scheduler], tmp_path, timeout=300)
    assert local.returncode == remote.returncode == 0, (local.stderr, remote.stderr)
    mine, theirs = json.loads(local.stdout), json.loads(remote.stdout)
    assert set(mine.pop("wall_seconds")) == set(theirs.pop("wall_seconds")) == {"trials"}  # its own
    assert theirs == mine


def test_pareto_points_on_dask_equal_the_local_run(scheduler, tmp_path: Path):
    args = ["sweep", "pareto", "--points", "85,100", "--hours", "1", "--json"]
    local = run_kalena([*args, "--out", str(tmp_path / "local")], tmp_path, timeout=600)
    remote = run_kalena(
        [*args, "--out", str(tmp_path / "dask"), "--scheduler", scheduler], tmp_path, timeout=600
    )
    assert local.returncode == remote.returncode == 0, (local.stderr, remote.stderr)
    assert json.loads(remote.stdout) == json.loads(local.stdout)
    assert (tmp_path / "dask" / "pareto.png").exists()


def test_seed_runs_on_dask_equal_the_local_run(scheduler, tmp_path: Path):
    args = ["sweep", "seeds", "--seeds", "2", "--hours", "0.1", "--json"]
    local = run_kalena([*args, "--out", str(tmp_path / "local")], tmp_path, timeout=600)
    remote = run_kalena(
        [*args, "--out", str(tmp_path / "dask"), "--scheduler", scheduler], tmp_path, timeout=600
    )
    assert local.returncode == remote.returncode == 0, (local.stderr, remote.stderr)
    mine, theirs = json.loads(local.stdout), json.loads(remote.stdout)
    for record in (mine, theirs):  # each run's own wall time differs, nothing else may
        for run in record["runs"]:
            run.pop("wall_seconds")
    assert theirs == mine


def test_no_scheduler_at_the_address_is_exit_2(tmp_path: Path):
    r = run_kalena(
        ["compact", "--batch-hours", "0", "--trials", "1", "--scheduler", "tcp://127.0.0.1:9"],
        tmp_path,
        timeout=120,
    )
    assert r.returncode == 2 and "--scheduler" in r.stderr and "Traceback" not in r.stderr
