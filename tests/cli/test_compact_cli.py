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


def test_a_pending_pod_within_the_allowance_is_listed_per_trial(tmp_path: Path):
    wl = "    - {name: small, replicas: 500, requests: {cpu: 0.05, ram: 0.01}}\n"
    wl += "    - {name: odd, replicas: 1, requests: {cpu: 1, ram: 1}, nodeSelector: {pool: none}}\n"
    r = run_kalena(
        ["compact", *files(tmp_path, 4, wl), "--batch-hours", "0", "--trials", "2"], tmp_path, timeout=120
    )
    assert r.returncode == 0, r.stderr
    assert "production, trial 0: 1 pending, within the 0.2% allowed" in r.stdout
    assert "production, trial 1: 1 pending" in r.stdout


def test_the_validation_day_runs_the_compacted_cluster_beside_the_full_one(tmp_path: Path):
    wl = "    - {name: web, replicas: 16, requests: {cpu: 2, ram: 2}}\n"
    args = ["compact", *files(tmp_path, 12, wl), "--batch-hours", "1", "--trials", "3", "--validate"]
    r = run_kalena([*args, "--json"], tmp_path, timeout=600)
    assert r.returncode == 0, r.stderr
    f = json.loads(r.stdout)
    v = f["validation"]
    on = f["reclaim_on"]
    picked = on["trials"][v["trial"]]["nodes"]
    assert picked >= on["p90"] and all(t["nodes"] >= picked for t in on["trials"] if t["nodes"] >= on["p90"])
    assert v["hours"] == 1 and v["full"]["nodes"] == 12 and v["compacted"]["nodes"] == picked
    for side in ("full", "compacted"):
        assert v[side]["restoration_violations"] == 0 and isinstance(v[side]["meets_slo"], bool)
        assert v[side]["production_cpu_core_hours"] > 0
    table = run_kalena(args, tmp_path, timeout=600)
    assert table.returncode == 0, table.stderr
    assert (
        "Validation: 1 simulated hours" in table.stdout and "compacted (reclamation on, p90)" in table.stdout
    )
    bad = run_kalena(["compact", "--batch-hours", "0", "--validate"], tmp_path, timeout=120)
    assert bad.returncode == 2 and "--validate: the validation day is --batch-hours long" in bad.stderr


def test_kubernetes_manifests_compact_no_lower_than_their_anti_affinity_allows(tmp_path: Path):
    """redis-cache's three replicas must be on three hosts (required anti-affinity): six nodes of
    room compact to three, never fewer, in every arm."""
    web = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "deployability" / "k8s-manifests"
    nodes = tmp_path / "nodes.yaml"
    nodes.write_text(
        "".join(
            f"---\napiVersion: v1\nkind: Node\nmetadata: {{name: node{i}}}\n"
            "status: {allocatable: {cpu: '16', memory: 64Gi, pods: '110'}}\n"
            for i in range(6)
        )
    )
    manifests = web / "kubernetes-website" / "assign-pod-node_redis-cache_web-server.yaml"
    args = ["compact", "--manifests", str(nodes), "--manifests", str(manifests), "--batch-hours", "1"]
    r = run_kalena([*args, "--trials", "3", "--workers", "1", "--json"], tmp_path, timeout=600)
    assert r.returncode == 0, r.stderr
    figures = json.loads(r.stdout)
    assert figures["nodes"] == 6 and figures["workloads"] == 6 and figures["kuberina_paper"] is None
    for arm in ("production", "reclaim_on", "reclaim_off"):
        assert [t["nodes"] for t in figures[arm]["trials"]] == [3, 3, 3], arm
    # what the pack leaves out is said as in `kalena pack`: these files state no soft rule, and
    # no DaemonSet overfills a node
    assert figures["soft_rules_not_weighed"] == {} and figures["daemonsets_over_allocatable"] == []


def test_manifest_compact_says_what_its_packs_leave_out(tmp_path: Path):
    """The notes of `kalena pack --manifests` (here a DaemonSet bigger than one node) come with
    the compaction too, in the table and in --json."""
    f = tmp_path / "cluster.yaml"
    f.write_text(
        "".join(
            f"---\napiVersion: v1\nkind: Node\nmetadata: {{name: {name}}}\n"
            f"status: {{allocatable: {{cpu: '{cpu}', memory: 16Gi, pods: '110'}}}}\n"
            for name, cpu in (("small", 1), ("big-0", 8), ("big-1", 8))
        )
        + "---\napiVersion: apps/v1\nkind: DaemonSet\nmetadata: {name: agent, namespace: kube-system}\n"
        "spec:\n  selector: {matchLabels: {app: agent}}\n  template:\n    metadata: {labels: {app: agent}}\n"
        "    spec: {containers: [{name: a, image: x, resources: {requests: {cpu: '2'}}}]}\n"
        "---\napiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\n"
        "spec:\n  replicas: 3\n  selector: {matchLabels: {app: web}}\n  template:\n"
        "    metadata: {labels: {app: web}}\n"
        "    spec: {containers: [{name: w, image: x, resources: {requests: {cpu: '1'}}}]}\n",
        encoding="utf-8",
    )
    args = ["compact", "--manifests", str(f), "--batch-hours", "0", "--trials", "1", "--workers", "1"]
    r = run_kalena([*args, "--json"], tmp_path, timeout=300)
    assert r.returncode == 0, r.stderr
    over = json.loads(r.stdout)["daemonsets_over_allocatable"]
    assert over == [{"node": "small", "dimension": "cpu", "requested": 2.0, "allocatable": 1.0}]
    table = run_kalena(args, tmp_path, timeout=300)
    assert table.returncode == 0, table.stderr
    assert "note: node small: its DaemonSets request cpu 2, it has 1:" in table.stdout
