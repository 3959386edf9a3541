"""``kalena compact``: trials in worker processes, the arms, the p90 bars, exit codes (a real subprocess)."""

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


def test_irina_production_compacts_in_parallel_trials_beside_kuberinas_blueprint(tmp_path: Path):
    r = run_kalena(
        ["compact", "--batch-hours", "0", "--trials", "4", "--workers", "2", "--json"], tmp_path, timeout=300
    )
    assert r.returncode == 0, r.stderr
    f = json.loads(r.stdout)
    p = f["production"]
    counts = [t["nodes"] for t in p["trials"]]
    assert [t["seed"] for t in p["trials"]] == [0, 1, 2, 3]
    assert p["min"] == min(counts) <= p["p90"] <= p["max"] == max(counts) <= f["nodes"] == 186
    assert f["blueprint_active_nodes"] == 152 and f["kuberina_paper"] == {"full_packing": 152, "pareto": 182}
    assert all(len(t["pending"]) <= 5 and t["added"] == 0 for t in p["trials"])  # 0.2 % of 2,714
    assert f["checkpoint"] is None and "reclaim_on" not in f


def test_with_an_hour_of_batch_reclamation_needs_fewer_nodes_than_requests_do(tmp_path: Path):
    r = run_kalena(["compact", "--batch-hours", "1", "--trials", "2", "--json"], tmp_path, timeout=600)
    assert r.returncode == 0, r.stderr
    f = json.loads(r.stdout)
    cp = f["checkpoint"]
    assert cp["time_h"] == 1.0 and cp["batch_pods"] > 1000
    on, off = f["reclaim_on"], f["reclaim_off"]
    # batch by requests needs more nodes than the cluster has: the pool grew by clones of its nodes
    assert off["min"] > f["nodes"] and all(t["added"] > 0 for t in off["trials"])
    assert f["production"]["max"] <= on["min"] and on["max"] < off["min"]
    assert f["extra_nodes_without_reclamation"] == off["p90"] - on["p90"] > 0


def test_the_table_and_a_workload_that_fits_nowhere(tmp_path: Path):
    ok = files(tmp_path, 6, "    - {name: web, replicas: 9, requests: {cpu: 3, ram: 1}}\n")
    r = run_kalena(["compact", *ok, "--batch-hours", "0", "--trials", "3"], tmp_path, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "p90 of 3 trials" in r.stdout and "production by requests" in r.stdout and "3 - 3" in r.stdout
    big = files(tmp_path, 2, "    - {name: web, replicas: 1, requests: {cpu: 11, ram: 1}}\n")
    r = run_kalena(["compact", *big, "--batch-hours", "0", "--trials", "2"], tmp_path, timeout=120)
    assert r.returncode == 2 and "does not fit the whole cluster" in r.stderr and "Traceback" not in r.stderr
    r = run_kalena(["compact", big[0]], tmp_path, timeout=60)
    assert r.returncode == 2 and "expected INFRA WORKLOADS [BLUEPRINT]" in r.stderr
    r = run_kalena(["compact", *ok, "--batch-hours", "0.5"], tmp_path, timeout=60)
    assert r.returncode == 2 and "--batch-hours" in r.stderr
