"""``kalena pack``: a blueprint the IR reader accepts, its figures, and each exit code (a real subprocess)."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from cli_testlib import run_kalena

from kalena.data import irina_paths
from kalena.ir import load_cluster
from kalena.ir.checks import soft_notes

V1I = "apiVersion: kuberina.io/v1\nkind: Infrastructure\n"
V1W = "apiVersion: kuberina.io/v1\nkind: Workloads\n"
NODES = (
    V1I
    + "nodes:\n  - {name: n1, allocatable: {cpu: 4, ram: 8}}\n  - {name: n2, allocatable: {cpu: 4, ram: 8}}\n"
)


def test_the_bundled_irina_packs_into_a_blueprint_the_reader_accepts(tmp_path: Path):
    out = tmp_path / "blueprint.yaml"
    r = run_kalena(["pack", "--out", str(out), "--json"], tmp_path, timeout=120)
    assert r.returncode == 0, r.stderr
    figures = json.loads(r.stdout)
    assert figures["placed"] == figures["workloads"] == 2714 and figures["pending"] == []
    assert figures["active_nodes"] <= 152  # Kuberina's own full packing of the same pods
    infra, workloads, _ = irina_paths()
    cluster = load_cluster(infra, workloads, out)  # every hard rule, checked by the reader
    assert len({*cluster.placement.values()}) == figures["active_nodes"]
    assert figures["soft_rules_broken"] == len(soft_notes(cluster))


def test_the_table_names_the_figures(tmp_path: Path):
    files = tmp_path / "infra.yaml", tmp_path / "wl.yaml"
    files[0].write_text(NODES, encoding="utf-8")
    files[1].write_text(
        V1W + "namespaces:\n  a:\n    - {name: web, replicas: 3, requests: {cpu: 1, ram: 1}}\n"
    )
    r = run_kalena(["pack", *map(str, files)], tmp_path, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "workloads placed" in r.stdout and "3 of 3" in r.stdout
    assert "active nodes" in r.stdout and "1 of 2" in r.stdout


def test_pods_that_cannot_go_are_named_with_the_reason_and_nothing_is_written(tmp_path: Path):
    files = tmp_path / "infra.yaml", tmp_path / "wl.yaml"
    files[0].write_text(NODES, encoding="utf-8")
    files[1].write_text(V1W + "namespaces:\n  a:\n    - {name: big, replicas: 1, requests: {cpu: 6}}\n")
    out = tmp_path / "bp.yaml"
    r = run_kalena(["pack", *map(str, files), "--out", str(out)], tmp_path, timeout=60)
    assert r.returncode == 1
    assert "pending: a/big-0: no node has room for its requests (cpu)" in r.stdout
    assert "not written" in r.stderr and not out.exists()


def test_bad_input_is_exit_2_naming_the_file_key_and_value(tmp_path: Path):
    files = tmp_path / "infra.yaml", tmp_path / "wl.yaml"
    files[0].write_text(NODES, encoding="utf-8")
    files[1].write_text(V1W + "namespaces:\n  a:\n    - {name: web, replicas: -1, requests: {cpu: 1}}\n")
    r = run_kalena(["pack", *map(str, files)], tmp_path, timeout=60)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert str(files[1]) in r.stderr and "replicas" in r.stderr and "-1" in r.stderr
    one = run_kalena(["pack", str(files[0])], tmp_path, timeout=60)
    assert one.returncode == 2 and "expected INFRA WORKLOADS" in one.stderr


SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "data"
REDIS_WEB = (
    SHARED
    / "deployability"
    / "k8s-manifests"
    / "kubernetes-website"
    / "assign-pod-node_redis-cache_web-server.yaml"
)


def kube_nodes(path: Path, n: int) -> Path:
    path.write_text(
        "".join(
            f"---\napiVersion: v1\nkind: Node\nmetadata: {{name: node{i}}}\n"
            "status: {allocatable: {cpu: '4', memory: 8Gi, pods: '110'}}\n"
            for i in range(n)
        ),
        encoding="utf-8",
    )
    return path


def test_kubernetes_manifests_pack_with_their_required_anti_affinity(tmp_path: Path):
    nodes = kube_nodes(tmp_path / "nodes.yaml", 3)
    out = tmp_path / "bp.yaml"
    args = ["pack", "--manifests", str(nodes), "--manifests", str(REDIS_WEB), "--json", "--out", str(out)]
    r = run_kalena(args, tmp_path, timeout=60)
    assert r.returncode == 0, r.stderr
    figures = json.loads(r.stdout)
    assert figures["placed"] == figures["workloads"] == 6 and figures["active_nodes"] == 3
    assert "default/redis-cache-0000" in out.read_text(encoding="utf-8")

    two = kube_nodes(tmp_path / "two.yaml", 2)
    r = run_kalena(["pack", "--manifests", str(two), "--manifests", str(REDIS_WEB)], tmp_path, timeout=60)
    assert r.returncode == 1
    assert (
        "pending: default/redis-cache-0002: no node with room keeps its required pod anti-affinity"
        in r.stdout
    )


def test_manifests_without_nodes_or_beside_ir_files_are_bad_input(tmp_path: Path):
    r = run_kalena(["pack", "--manifests", str(REDIS_WEB)], tmp_path, timeout=60)
    assert r.returncode == 2 and "no Node object" in r.stderr
    r = run_kalena(["pack", "a.yaml", "b.yaml", "--manifests", str(REDIS_WEB)], tmp_path, timeout=60)
    assert r.returncode == 2 and "not both" in r.stderr


ARGO_HA = (
    SHARED / "deployability" / "k8s-manifests" / "argo-cd-ha" / "argocd-ha-install_affinity-workloads.yaml"
)
POD_AFFINITY = (
    SHARED / "deployability" / "k8s-manifests" / "kubernetes-website" / "pod-with-pod-affinity.yaml"
)


def _soft_terms(path: Path) -> dict[str, dict[str, int]]:
    """The preferred terms the files state, counted straight from the YAML (the reader's figure)."""
    out: dict[str, dict[str, int]] = {}
    for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")):
        if not doc or doc.get("kind") in ("DaemonSet", "Node"):
            continue
        spec = doc["spec"] if doc["kind"] == "Pod" else doc["spec"]["template"]["spec"]
        aff = spec.get("affinity") or {}
        kinds = {
            "preferred node affinity": aff.get("nodeAffinity"),
            "preferred pod affinity": aff.get("podAffinity"),
            "preferred pod anti-affinity": aff.get("podAntiAffinity"),
        }
        for kind, block in kinds.items():
            n = len((block or {}).get("preferredDuringSchedulingIgnoredDuringExecution") or [])
            if n:
                c = out.setdefault(kind, {"terms": 0, "pod_types": 0})
                c["terms"] += n
                c["pod_types"] += 1
    return out


def test_manifest_pack_says_which_soft_rules_it_did_not_weigh(tmp_path: Path):
    nodes = tmp_path / "nodes.yaml"
    nodes.write_text(
        "".join(
            f"---\napiVersion: v1\nkind: Node\nmetadata: {{name: node{i}, labels: "
            f"{{kubernetes.io/hostname: node{i}, topology.kubernetes.io/zone: z{i % 2}}}}}\n"
            "status: {allocatable: {cpu: '16', memory: 64Gi, pods: '110'}}\n"
            for i in range(4)
        ),
        encoding="utf-8",
    )
    want = _soft_terms(ARGO_HA)
    for kind, c in _soft_terms(POD_AFFINITY).items():
        mine = want.setdefault(kind, {"terms": 0, "pod_types": 0})
        mine["terms"] += c["terms"]
        mine["pod_types"] += c["pod_types"]
    assert want["preferred pod anti-affinity"]["terms"] >= 3  # what the files are chosen for

    args = ["pack", "--manifests", str(nodes), "--manifests", str(ARGO_HA), "--manifests", str(POD_AFFINITY)]
    r = run_kalena([*args, "--json"], tmp_path, timeout=60)
    assert r.returncode in (0, 1), r.stderr

    def no_nan(token: str) -> None:
        raise AssertionError(f"--json printed {token}, which is not JSON")

    figures = json.loads(r.stdout, parse_constant=no_nan)
    assert figures["soft_rules_not_weighed"] == want
    assert figures["mean_cpu_on_active_nodes"] == 0.0  # these pods request no cpu: 0, not NaN

    table = run_kalena(args, tmp_path, timeout=60)
    n = want["preferred pod anti-affinity"]["terms"]
    assert "note: not weighed" in table.stdout and f"{n} preferred pod anti-affinity terms" in table.stdout

    # an IR cluster states no such rules: the figure is absent, not zero
    ir = run_kalena(["pack", "--json"], tmp_path, timeout=120)
    assert ir.returncode == 0 and "soft_rules_not_weighed" not in json.loads(ir.stdout)


DAEMONS = """
apiVersion: v1
kind: Node
metadata: {name: small}
status: {allocatable: {cpu: '1', memory: 8Gi, pods: '1'}}
---
apiVersion: v1
kind: Node
metadata: {name: big}
status: {allocatable: {cpu: '8', memory: 32Gi, pods: '110'}}
---
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: agent, namespace: kube-system}
spec:
  selector: {matchLabels: {app: agent}}
  template:
    metadata: {labels: {app: agent}}
    spec:
      containers: [{name: a, image: x, resources: {requests: {cpu: 1500m, memory: 1Gi}}}]
---
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: logs, namespace: kube-system}
spec:
  selector: {matchLabels: {app: logs}}
  template:
    metadata: {labels: {app: logs}}
    spec:
      containers: [{name: l, image: x, resources: {requests: {cpu: 100m}}}]
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers: [{name: w, image: x, resources: {requests: {cpu: '1', memory: 1Gi}}}]
"""


def test_manifest_pack_names_the_nodes_its_daemonsets_overfill(tmp_path: Path):
    """Kubernetes would leave some DaemonSet pods Pending on a node they do not fit; the pack
    counts that node with nothing left, and says so rather than hiding it in a clipped capacity."""
    f = tmp_path / "cluster.yaml"
    f.write_text(DAEMONS, encoding="utf-8")
    r = run_kalena(["pack", "--manifests", str(f), "--json"], tmp_path, timeout=60)
    assert r.returncode == 0, r.stderr
    figures = json.loads(r.stdout)
    assert figures["daemonsets_over_allocatable"] == [
        {"node": "small", "dimension": "cpu", "requested": 1.6, "allocatable": 1.0},
        {"node": "small", "dimension": "pods", "requested": 2.0, "allocatable": 1.0},
    ]
    assert figures["placed"] == 2 and figures["active_nodes"] == 1  # both web pods on big
    table = run_kalena(["pack", "--manifests", str(f)], tmp_path, timeout=60)
    assert "note: node small: its DaemonSets request cpu 1.6, it has 1:" in table.stdout
