"""Writing IR v1: idempotence, number and string spelling, legacy -> v1 conversion with renames."""

from pathlib import Path
from textwrap import dedent

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from kalena.core.cluster import Cluster
from kalena.data import irina_paths
from kalena.ir import DocumentSet, build_cluster, dump_document, parse_document, read_document, to_v1
from kalena.ir import write as _ir_write
from kalena.ir.write import number, scalar, write_text_atomic

SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "kuberina"
needs_shared = pytest.mark.skipif(not SHARED.is_dir(), reason=f"shared data not found at {SHARED}")

NUMBERS = [
    ("integral-has-no-point", 64.0, "64"),
    ("fraction", 0.25, "0.25"),
    ("no-exponent-for-small", 1e-05, "0.00001"),
    ("shortest-repr", 0.1, "0.1"),
    ("big-integral", 1e16, "10000000000000000"),
]


@pytest.mark.parametrize(("value", "text"), [c[1:] for c in NUMBERS], ids=[c[0] for c in NUMBERS])
def test_number_spelling_reads_back_exactly(value, text):
    assert number(value) == text
    assert float(yaml.safe_load(text)) == value


SCALARS = [
    ("plain-name", "std-000", "std-000"),
    ("path-like", "ai/llm-inference-0000", "ai/llm-inference-0000"),
    ("bool-word-quoted", "true", '"true"'),
    ("number-like-quoted", "1e3", '"1e3"'),
    ("empty-quoted", "", '""'),
    ("space-quoted", "a b", '"a b"'),
    ("colon-quoted", "a:b", '"a:b"'),
]


@pytest.mark.parametrize(("value", "text"), [c[1:] for c in SCALARS], ids=[c[0] for c in SCALARS])
def test_scalar_spelling_reads_back_as_the_same_string(value, text):
    assert scalar(value) == text
    assert yaml.safe_load(f"k: {text}")["k"] == value


def roundtrip(text: str, file: str = "x.yaml") -> tuple[str, str]:
    """(first v1 output, v1 output of that output read back)."""
    first = dump_document(parse_document(text, file))
    return first, dump_document(parse_document(first, file))


SPEC_EXAMPLE = """\
apiVersion: kuberina.io/v1
kind: Workloads
namespaces:
  ai:
    - name: trainer
      replicas: 4
      requests: {cpu: 8, gpu: 1, ram: 32Gi, disk: {read: 5G}, network: {in: 1, out: 2}}
      nodeSelector: {accelerator: h100}
      tolerations: [{key: dedicated, operator: Equal, value: ml, effect: NoSchedule}]
      affinity: ["ai/parameter-server"]
      antiAffinity: ["ai/trainer"]
      topologySpread: {maxSkew: 1, topologyKey: zone}
      gang: trainers
      observed:
        window: 720h
        p50: {}
        p95: {cpu: 6.1, ram: 28Gi}
        exceeded_request_fraction: 0.004
    - name: parameter-server
groups:
  - {name: training-job, members: ["ai/parameter-server"], min_members: 1, colocate: false, nodeSelector: {}}
"""

V1_DOCS = [
    ("workloads-spec-example", SPEC_EXAMPLE),
    (
        "infra",
        "apiVersion: kuberina.io/v1\nkind: Infrastructure\nnodes:\n  - name: a\n    zone: z\n"
        "    labels: {x: 'yes'}\n    taints: [{key: k}]\n    allocatable: {cpu: 2500m, ram: 1Ti}\n"
        "daemonsets:\n  - {name: d, resources: {cpu: 0.1}, nodeSelector: {x: 'yes'}, tolerations: [k]}\n",
    ),
    (
        "blueprint",
        "apiVersion: kuberina.io/v1\nkind: Blueprint\nmetadata: {feasible: true}\n"
        "solution: {a/b-0: n1, a/c-0: n1}\n",
    ),
    ("empty-infra", "apiVersion: kuberina.io/v1\nkind: Infrastructure\n"),
]


@pytest.mark.parametrize("text", [c[1] for c in V1_DOCS], ids=[c[0] for c in V1_DOCS])
def test_v1_read_write_is_idempotent(text):
    first, second = roundtrip(text)
    assert first == second
    assert first.startswith("apiVersion: kuberina.io/v1\nkind: ")


def test_observed_absent_percentile_stays_absent_and_empty_stays_empty():
    first, _ = roundtrip(SPEC_EXAMPLE)
    assert "      p50: {}\n" in first and "p99" not in first and "peak" not in first
    assert "exceeded_request_fraction: 0.004" in first


# written plain into the YAML below, so never a word YAML 1.1 reads as something else (no, on, null)
_names = st.from_regex(r"[a-z][a-z0-9-]{0,8}", fullmatch=True).filter(lambda s: scalar(s) == s)
_qty = st.one_of(
    st.integers(0, 10**6).map(str),
    st.floats(0, 1e6, allow_nan=False, allow_infinity=False).map(repr),
    st.sampled_from(["2500m", "512Mi", "5G", "1Ti", "0.5"]),
)


@st.composite
def workloads_docs(draw) -> str:
    lines = ["apiVersion: kuberina.io/v1", "kind: Workloads", "namespaces:"]
    for ns in draw(st.lists(_names, min_size=1, max_size=3, unique=True)):
        lines.append(f"  {ns}:")
        for name in draw(st.lists(_names, min_size=1, max_size=3, unique=True)):
            dims = draw(st.dictionaries(st.sampled_from(["cpu", "ram", "gpu", "storage"]), _qty, max_size=4))
            req = ", ".join(f"{k}: {v}" for k, v in dims.items())
            lines.append(f"    - {{name: {name}, replicas: {draw(st.integers(1, 3))}, requests: {{{req}}}}}")
    return "\n".join(lines) + "\n"


@settings(max_examples=60, deadline=None)
@given(workloads_docs())
def test_generated_v1_workloads_roundtrip_byte_identically(text):
    first, second = roundtrip(text)
    assert first == second
    a, b = parse_document(text), parse_document(first)
    assert [d.requests for d in a.declarations] == [d.requests for d in b.declarations]


FOLDS = [
    (
        "complete-identical-run-folds",
        "pods:\n  - {name: w-0000, namespace: a, requests: {cpu: 1}}\n"
        "  - {name: w-0001, namespace: a, requests: {cpu: 1}}\n",
        [("w", 2)],
        {},
    ),
    (
        "different-specs-do-not-fold",
        "pods:\n  - {name: w-0000, namespace: a, requests: {cpu: 1}}\n"
        "  - {name: w-0001, namespace: a, requests: {cpu: 2}}\n",
        [("w-0000", 1), ("w-0001", 1)],
        {"a/w-0000": "a/w-0000-0", "a/w-0001": "a/w-0001-0"},
    ),
    (
        "incomplete-run-does-not-fold",
        "pods:\n  - {name: w-0000, namespace: a}\n  - {name: w-0002, namespace: a}\n",
        [("w-0000", 1), ("w-0002", 1)],
        {"a/w-0000": "a/w-0000-0", "a/w-0002": "a/w-0002-0"},
    ),
    (
        "single-pod-run-does-not-fold",
        "pods:\n  - {name: w-0000, namespace: a}\n",
        [("w-0000", 1)],
        {"a/w-0000": "a/w-0000-0"},
    ),
    (
        "runs-split-by-namespace",
        "pods:\n  - {name: w-0000, namespace: a}\n  - {name: w-0001, namespace: b}\n",
        [("w-0000", 1), ("w-0001", 1)],
        {"a/w-0000": "a/w-0000-0", "b/w-0001": "b/w-0001-0"},
    ),
    (
        "base-name-taken-does-not-fold",
        "pods:\n  - {name: w, namespace: a}\n  - {name: w-0000, namespace: a}\n"
        "  - {name: w-0001, namespace: a}\n",
        [("w", 1), ("w-0000", 1), ("w-0001", 1)],
        {"a/w": "a/w-0", "a/w-0000": "a/w-0000-0", "a/w-0001": "a/w-0001-0"},
    ),
    (
        "grouped-run-does-not-fold",
        "pods:\n  - {name: w-0000, namespace: a}\n  - {name: w-0001, namespace: a}\n"
        "groups:\n  - {name: g, members: [a/w-0000]}\n",
        [("w-0000", 1), ("w-0001", 1)],
        {"a/w-0000": "a/w-0000-0", "a/w-0001": "a/w-0001-0"},
    ),
]


@pytest.mark.parametrize(("text", "decls", "renames"), [c[1:] for c in FOLDS], ids=[c[0] for c in FOLDS])
def test_legacy_pods_fold_or_rename(text, decls, renames):
    legacy = parse_document(text, "w.yaml")
    conv = to_v1(workloads=legacy)
    assert [(d.name, d.replicas) for d in conv.workloads.declarations] == decls
    assert dict(conv.renames) == renames
    old_ids = [pid for pid, _ in legacy.pods()]
    new_ids = [pid for pid, _ in conv.workloads.pods()]
    assert sorted(renames.get(p, p) for p in old_ids) == sorted(new_ids)


def test_converter_rewrites_targets_members_and_blueprint_keys():
    wl = parse_document(
        dedent("""\
        pods:
          - {name: api-0000, namespace: web, affinity: [db-0000], antiAffinity: [api-0001, ghost]}
          - {name: api-0001, namespace: web, affinity: [db-0000], antiAffinity: [api-0000, ghost]}
          - {name: db-0000, namespace: data, gang: g}
        groups:
          - {name: g}
        """),
        "w.yaml",
    )
    bp = parse_document("solution: {api-0000: n1, api-0001: n2, db-0000: n1}\n", "b.yaml")
    conv = to_v1(workloads=wl, blueprint=bp)
    api0, _, _ = conv.workloads.declarations
    assert api0.affinity == ("data/db-0000-0",)
    assert api0.anti_affinity == ("web/api-0001-0", "ghost")  # unresolvable target kept verbatim
    assert conv.workloads.groups[0].members == ("data/db-0000",)
    assert dict(conv.blueprint.solution) == {
        "web/api-0000-0": "n1",
        "web/api-0001-0": "n2",
        "data/db-0000-0": "n1",
    }
    assert conv.notes == ("affinity target 'ghost' matches no pod; kept as written",)
    assert conv.blueprint.metadata.pods == 3 and conv.blueprint.metadata.active_nodes == 2


def assert_same_cluster(old: Cluster, new: Cluster, renames) -> None:
    """Equal up to the rename map: requests, capacities, placements, selectors, targets."""
    ren = lambda wid: renames.get(wid, wid)  # noqa: E731
    assert [n.name for n in old.nodes] == [n.name for n in new.nodes]
    assert dict(old.capacity) == dict(new.capacity)
    assert [n.allocatable for n in old.nodes] == [n.allocatable for n in new.nodes]
    assert sorted(ren(w.id) for w in old.workloads) == sorted(w.id for w in new.workloads)
    assert {ren(k): v for k, v in old.placement.items()} == dict(new.placement)
    for w in old.workloads:
        v = new.workload(ren(w.id))
        assert (v.requests, dict(v.node_selector), v.tolerations) == (
            w.requests,
            dict(w.node_selector),
            w.tolerations,
        )
        assert {ren(t) for t in old.targets_of(w.affinity)} == new.targets_of(v.affinity)
        assert {ren(t) for t in old.targets_of(w.anti_affinity)} == new.targets_of(v.anti_affinity)
    assert [(g.name, tuple(map(ren, g.members)), g.min_members) for g in old.groups] == [
        (g.name, g.members, g.min_members) for g in new.groups
    ]


def convert_and_reread(paths):
    docs = [read_document(p) for p in paths]
    old = build_cluster(DocumentSet.of(docs))
    conv = to_v1(**{k: v for k, v in zip(("infra", "workloads", "blueprint"), docs, strict=False)})
    texts = [dump_document(d) for d in (conv.infra, conv.workloads, conv.blueprint) if d is not None]
    reread = [parse_document(t, f"v1-{i}.yaml") for i, t in enumerate(texts)]
    new = build_cluster(DocumentSet.of(reread))
    again = to_v1(**{k: v for k, v in zip(("infra", "workloads", "blueprint"), reread, strict=False)})
    texts_again = [dump_document(d) for d in (again.infra, again.workloads, again.blueprint) if d is not None]
    return old, new, conv, texts, texts_again


def test_irina_to_v1_gives_the_same_cluster_and_is_a_fixed_point():
    old, new, conv, texts, texts_again = convert_and_reread(list(irina_paths()))
    assert_same_cluster(old, new, conv.renames)
    assert texts == texts_again  # v1 output re-converted is byte-identical
    assert len(new.active_nodes()) == 152 and new.request_ledger_holds()
    # Runs with identical specs folded (no renames for them); runs with per-pod targets did not.
    assert new.workload("comms/chat-service-0059").declaration == "comms/chat-service"
    assert conv.renames["ai/llm-inference-0000"] == "ai/llm-inference-0000-0"
    assert len(conv.renames) + sum(1 for w in new.workloads if w.id not in conv.renames.values()) == 2714


@pytest.mark.realdata
@needs_shared
def test_homelab_to_v1_gives_the_same_cluster_and_is_a_fixed_point():
    old, new, conv, texts, texts_again = convert_and_reread(
        [SHARED / "homelab_infra.yaml", SHARED / "homelab_workloads.yaml"]
    )
    assert dict(conv.renames) == {}
    assert_same_cluster(old, new, conv.renames)
    assert texts == texts_again
    assert "        - smart-home/zigbee2mqtt-0\n" in texts[1]  # bare declaration target made explicit


def test_atomic_write_replaces_whole_file_and_leaves_no_temp(tmp_path):
    target = tmp_path / "out.yaml"
    target.write_text("old\n")
    write_text_atomic(target, "new\n")
    assert target.read_text() == "new\n"
    assert [p.name for p in tmp_path.iterdir()] == ["out.yaml"]


def test_an_atomic_write_gives_a_new_file_the_umasks_mode_and_keeps_a_replaced_ones(tmp_path):
    """The staging file is 0600 (mkstemp); what lands is what ``open`` would have made."""
    import stat

    new = tmp_path / "report.html"
    write_text_atomic(new, "x")
    made = tmp_path / "made.html"
    made.write_text("x")  # open()'s own mode under this process's umask
    assert stat.S_IMODE(new.stat().st_mode) == stat.S_IMODE(made.stat().st_mode) == 0o666 & ~_ir_write._UMASK
    kept = tmp_path / "private.yaml"
    kept.write_text("a")
    kept.chmod(0o600)
    write_text_atomic(kept, "b")
    assert stat.S_IMODE(kept.stat().st_mode) == 0o600 and kept.read_text() == "b"
