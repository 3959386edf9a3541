"""``kalena compact``: trials in worker processes, the p90 bars, exit codes (a real subprocess)."""

from __future__ import annotations

import json
from pathlib import Path

from cli_testlib import run_kalena

V1I = "apiVersion: kuberina.io/v1\nkind: Infrastructure\n"
V1W = "apiVersion: kuberina.io/v1\nkind: Workloads\n"


def files(tmp_path: Path, nodes: int, workloads: str) -> list[str]:
    infra = tmp_path / "infra.yaml"
    infra.write_text(
        V1I
        + "nodes:\n"
        + "".join(f"  - {{name: n{i}, allocatable: {{cpu: 10, ram: 10}}}}\n" for i in range(nodes))
    )
    wl = tmp_path / "wl.yaml"
    wl.write_text(V1W + "namespaces:\n  a:\n" + workloads)
    return [str(infra), str(wl)]


def test_irina_compacts_in_parallel_trials_beside_kuberinas_blueprint(tmp_path: Path):
    r = run_kalena(["compact", "--trials", "4", "--workers", "2", "--json"], tmp_path, timeout=300)
    assert r.returncode == 0, r.stderr
    f = json.loads(r.stdout)
    counts = [t["nodes"] for t in f["trials"]]
    assert [t["seed"] for t in f["trials"]] == [0, 1, 2, 3]
    assert f["min"] == min(counts) <= f["p90"] <= f["max"] == max(counts) <= f["nodes"] == 186
    assert f["blueprint_active_nodes"] == 152
    assert all(len(t["pending"]) <= 5 for t in f["trials"])  # 0.2 % of 2,714


def test_the_table_and_a_workload_that_does_not_fit_at_all(tmp_path: Path):
    ok = files(tmp_path, 6, "    - {name: web, replicas: 9, requests: {cpu: 3, ram: 1}}\n")
    r = run_kalena(["compact", *ok, "--trials", "3"], tmp_path, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "p90 of 3 trials" in r.stdout and "3 - 3" in r.stdout
    big = files(tmp_path, 2, "    - {name: web, replicas: 9, requests: {cpu: 3, ram: 1}}\n")
    r = run_kalena(["compact", *big, "--trials", "2"], tmp_path, timeout=120)
    assert r.returncode == 2 and "does not fit the whole cluster" in r.stderr and "Traceback" not in r.stderr
    r = run_kalena(["compact", big[0]], tmp_path, timeout=60)
    assert r.returncode == 2 and "expected INFRA WORKLOADS [BLUEPRINT]" in r.stderr
