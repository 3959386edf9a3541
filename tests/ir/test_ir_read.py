"""Reading IR documents: kinds, quantities, unrolling, core mapping, gangs, observed, legacy shapes."""

import math
from pathlib import Path
from textwrap import dedent

import pytest

from kalena.core.model import Toleration
from kalena.ir import DocumentSet, IRError, build_cluster, load_cluster, parse_document
from kalena.ir.document import replica_names

SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "kuberina"
needs_shared = pytest.mark.skipif(not SHARED.is_dir(), reason=f"shared data not found at {SHARED}")


def parse(text: str, file: str = "doc.yaml"):
    return parse_document(dedent(text), file)


UNROLL = [
    ("single-replica-gets-dash-0", "web", 1, ("web-0",)),
    ("three-replicas-four-digits", "web", 3, ("web-0000", "web-0001", "web-0002")),
]


@pytest.mark.parametrize(("name", "n", "expected"), [c[1:] for c in UNROLL], ids=[c[0] for c in UNROLL])
def test_replica_names(name, n, expected):
    assert replica_names(name, n) == expected


def test_replica_names_widen_past_9999():
    names = replica_names("x", 10001)
    assert names[9999] == "x-9999" and names[10000] == "x-10000"


KINDS = [
    ("nodes-is-infrastructure", "nodes: []\n", "Infrastructure", True),
    ("daemonsets-is-infrastructure", "daemonsets: []\n", "Infrastructure", True),
    ("namespaces-is-workloads", "namespaces: {}\n", "Workloads", True),
    ("legacy-pods-is-workloads", "pods: []\n", "Workloads", True),
    ("solution-is-blueprint", "solution: {}\n", "Blueprint", True),
    ("v1-header", "apiVersion: kuberina.io/v1\nkind: Workloads\nnamespaces: {}\n", "Workloads", False),
    ("kind-without-apiversion", "kind: Infrastructure\nnodes: []\n", "Infrastructure", True),
]


@pytest.mark.parametrize(("text", "kind", "legacy"), [c[1:] for c in KINDS], ids=[c[0] for c in KINDS])
def test_kind_detection(text, kind, legacy):
    doc = parse(text)
    assert (doc.kind, doc.legacy) == (kind, legacy)


QUANTITIES = [
    ("millicores", "cpu: 2500m", "cpu", 2.5),
    ("mebibytes-to-gib", "ram: 512Mi", "ram", 0.5),
    ("plain-gib", "ram: 24", "ram", 24.0),
    ("decimal-bytes-to-gib", "storage: 5G", "storage", 5e9 / 2**30),
    ("disk-g-to-mb-per-s", "disk: {read: 5G}", "disk.read", 5000.0),
    ("network-plain-mb-per-s", "network: {out: 125}", "network.out", 125.0),
]


@pytest.mark.parametrize(
    ("line", "dim", "value"), [c[1:] for c in QUANTITIES], ids=[c[0] for c in QUANTITIES]
)
def test_quantities_in_ir_units(line, dim, value):
    doc = parse(
        f"apiVersion: kuberina.io/v1\nkind: Workloads\nnamespaces:\n  a:\n"
        f"    - name: w\n      requests: {{{line}}}\n"
    )
    assert doc.declarations[0].requests == {dim: pytest.approx(value)}


INFRA = """\
apiVersion: kuberina.io/v1
kind: Infrastructure
nodes:
  - name: gpu-a
    zone: az-1
    rack: r1
    labels: {accelerator: h100}
    taints: [{key: dedicated, value: ml, effect: NoSchedule}]
    allocatable: {cpu: 64, ram: 256Gi, gpu: 8}
  - name: open
daemonsets:
  - name: node-exporter
    resources: {cpu: 0.1, ram: 128Mi}
    tolerations: [dedicated]
  - name: ml-agent
    resources: {cpu: 1}
    nodeSelector: {accelerator: h100}
"""

WORKLOADS = """\
apiVersion: kuberina.io/v1
kind: Workloads
namespaces:
  ai:
    - name: trainer
      replicas: 4
      requests: {cpu: 8, gpu: 1, ram: 32Gi}
      nodeSelector: {accelerator: h100}
      tolerations: [{key: dedicated, operator: Equal, value: ml, effect: NoSchedule}]
      affinity: ["ai/parameter-server"]
      antiAffinity: ["ai/trainer"]
      topologySpread: {maxSkew: 1, topologyKey: zone}
      observed:
        window: 720h
        p95: {cpu: 6.1, ram: 28Gi}
        exceeded_request_fraction: 0.004
    - name: parameter-server
      requests: {cpu: 2}
      gang: ps
groups:
  - name: training-job
    members: ["ai/trainer"]
    min_members: 3
    colocate: true
"""

BLUEPRINT = """\
apiVersion: kuberina.io/v1
kind: Blueprint
metadata: {feasible: true, pods: 5, activeNodes: 2}
solution:
  ai/trainer-0000: gpu-a
  ai/trainer-0001: gpu-a
  ai/trainer-0002: gpu-a
  ai/trainer-0003: gpu-a
  ai/parameter-server-0: open
"""


@pytest.fixture
def example():
    docs = [parse(INFRA, "infra.yaml"), parse(WORKLOADS, "wl.yaml"), parse(BLUEPRINT, "bp.yaml")]
    return build_cluster(DocumentSet.of(docs))


def test_node_allocatable_omitted_is_unconstrained_and_phase0_matches_taints(example):
    gpu_a, open_node = example.nodes
    assert gpu_a.allocatable["cpu"] == 64 and gpu_a.allocatable["ram"] == 256
    assert math.isinf(gpu_a.allocatable["storage"]) and math.isinf(open_node.allocatable["cpu"])
    # node-exporter tolerates the taint by key; ml-agent does not (and only selects gpu-a anyway).
    assert example.capacity["gpu-a"]["cpu"] == pytest.approx(63.9)
    assert example.capacity["gpu-a"]["ram"] == pytest.approx(255.875)
    assert (gpu_a.zone, gpu_a.rack, gpu_a.taints[0].key) == ("az-1", "r1", "dedicated")


def test_workloads_become_service_specs_with_declaration_owner_and_selectors(example):
    ids = [w.id for w in example.workloads]
    assert ids == [
        "ai/trainer-0000",
        "ai/trainer-0001",
        "ai/trainer-0002",
        "ai/trainer-0003",
        "ai/parameter-server-0",
    ]
    t = example.workload("ai/trainer-0002")
    assert (t.declaration, t.owner, t.namespace) == ("ai/trainer", "ai/trainer", "ai")
    assert t.requests["cpu"] == 8 and t.requests["ram"] == 32 and t.requests["storage"] == 0
    assert t.tolerations == (Toleration("dedicated", "Equal", "ml", "NoSchedule"),)
    assert example.targets_of(t.affinity) == {"ai/parameter-server-0"}
    assert len(example.targets_of(t.anti_affinity)) == 4  # a declaration name targets every replica
    assert example.placement["ai/parameter-server-0"] == "open"


def test_gangs_explicit_and_inline(example):
    groups = {g.name: g for g in example.groups}
    tj = groups["training-job"]
    assert (len(tj.members), tj.min_members, tj.colocate) == (4, 3, True)
    ps = groups["ps"]  # inline only: everyone, not colocated
    assert (ps.members, ps.min_members, ps.colocate) == (("ai/parameter-server-0",), 1, False)


def test_observed_block_parsed_and_absent_percentile_stays_absent(example):
    o = example.observed["ai/trainer-0001"]
    assert o.window == "720h" and o.exceeded_request_fraction == 0.004
    assert o.p95 is not None and o.p95["ram"] == 28
    assert o.p50 is None and o.p99 is None and o.peak is None
    assert "ai/parameter-server-0" not in example.observed


GANGS = [
    (
        "explicit-wins-over-inline-of-same-name",
        "  a:\n    - {name: w, replicas: 2, gang: g}\n    - {name: v, replicas: 1}\n"
        "groups:\n  - {name: g, members: [a/v], min_members: 2, colocate: true}\n",
        {"g": (("a/v-0", "a/w-0000", "a/w-0001"), 2, True)},
    ),
    (
        "members-default-min-is-all-pods",
        "  a:\n    - {name: w, replicas: 3}\ngroups:\n  - {name: g, members: [a/w]}\n",
        {"g": (("a/w-0000", "a/w-0001", "a/w-0002"), 3, False)},
    ),
]


@pytest.mark.parametrize(("body", "expected"), [c[1:] for c in GANGS], ids=[c[0] for c in GANGS])
def test_gang_resolution(body, expected):
    doc = parse("apiVersion: kuberina.io/v1\nkind: Workloads\nnamespaces:\n" + body)
    got = {g.name: (tuple(sorted(g.members)), g.min_members, g.colocate) for g in doc.resolved_groups}
    assert got == expected


def test_legacy_shapes_pods_flat_spellings_string_tolerations_and_member_less_groups():
    doc = parse(
        """\
        pods:
          - name: a
            namespace: x
            requests: {cpu: 1, disk_read: 5, net_out: 7, storage: 2Gi}
            tolerations: [gpu]
            gang: g
          - name: b
            requests: {cpu: 1}
            group: g
        groups:
          - {name: g, minMembers: 1}
        """
    )
    a, b = doc.declarations
    assert a.pod_ids() == ("x/a",) and b.pod_ids() == ("default/b",)
    assert a.requests == {"cpu": 1, "storage": 2, "disk.read": 5, "network.out": 7}
    assert a.tolerations[0].key == "gpu" and a.tolerations[0].operator == "Exists"
    (g,) = doc.resolved_groups
    assert (g.members, g.min_members) == (("x/a", "default/b"), 1)


def test_legacy_blueprint_bare_keys_resolve_through_the_workloads(tmp_path):
    (tmp_path / "i.yaml").write_text("nodes: [{name: n1}]\n")
    (tmp_path / "w.yaml").write_text("pods: [{name: web-0000, namespace: fe}]\n")
    (tmp_path / "b.yaml").write_text("solution: {web-0000: n1}\n")
    c = load_cluster(tmp_path / "i.yaml", tmp_path / "w.yaml", tmp_path / "b.yaml")
    assert dict(c.placement) == {"fe/web-0000": "n1"}


def test_expected_kind_is_enforced(tmp_path):
    (tmp_path / "w.yaml").write_text("namespaces: {}\n")
    with pytest.raises(IRError) as e:
        load_cluster(tmp_path / "w.yaml")
    assert "expected kind Infrastructure" in str(e.value)


@pytest.mark.realdata
@needs_shared
def test_homelab_v020_reads_as_headerless_v1():
    c = load_cluster(SHARED / "homelab_infra.yaml", SHARED / "homelab_workloads.yaml")
    assert [n.name for n in c.nodes] == ["thinkcentre-alpha", "thinkcentre-beta", "thinkcentre-gamma"]
    cap = c.capacity["thinkcentre-beta"]
    assert (cap["cpu"], cap["ram"], cap["disk.read"], cap["network.in"]) == (
        pytest.approx(3.55),
        15.75,
        500,
        1000,
    )
    assert len(c.workloads) == 10 and c.workload("dns/pihole-0").requests["network.in"] == 10
    ha = c.workload("smart-home/home-assistant-0")
    assert c.targets_of(ha.affinity) == {"smart-home/zigbee2mqtt-0"}  # a bare declaration name
    assert c.targets_of(c.workload("dns/pihole-0").anti_affinity) == frozenset()  # adguard: no such pod
