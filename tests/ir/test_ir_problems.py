"""Problems: key paths, rendering, collecting every problem of a file, never a traceback."""

from textwrap import dedent

import pytest
import yaml
from hypothesis import example, given, settings
from hypothesis import strategies as st

from kalena.ir import IRError, Problem, parse_document
from kalena.ir.errors import DOCUMENT, MISSING, key_path, render_value

PATHS = [
    ("list-index", ("nodes", 3, "allocatable", "cpu"), "nodes[3].allocatable.cpu"),
    ("namespace-map", ("namespaces", "ai", 2, "requests", "ram"), "namespaces.ai[2].requests.ram"),
    ("blueprint-key", ("solution", "ai/foo-0"), "solution.ai/foo-0"),
    ("empty-is-document", (), DOCUMENT),
]


@pytest.mark.parametrize(("loc", "text"), [c[1:] for c in PATHS], ids=[c[0] for c in PATHS])
def test_key_path(loc, text):
    assert key_path(loc) == text


def test_problem_renders_file_path_message_value():
    p = Problem("infra.yaml", "nodes[3].allocatable.cpu", "bad quantity", "12x")
    assert p.render() == 'infra.yaml: nodes[3].allocatable.cpu: bad quantity (value: "12x")'
    assert Problem("f", "p", "m", MISSING).render() == "f: p: m"
    assert render_value("x" * 200).endswith("...") and len(render_value("x" * 200)) == 80


def problems(text: str, file: str = "doc.yaml") -> list[str]:
    with pytest.raises(IRError) as e:
        parse_document(dedent(text), file)
    return [p.render() for p in e.value.problems]


def test_every_problem_of_a_file_is_collected():
    lines = problems(
        """\
        apiVersion: kuberina.io/v1
        kind: Infrastructure
        colour: blue
        nodes:
          - name: a
            allocatable: {cpu: lots}
          - name: a
            shape: round
          - allocatable: {ram: 1Gi}
        daemonsets:
          - {name: d, resources: {gpu: -1}}
        """
    )
    expected = [
        "doc.yaml: colour: unknown key 'colour'",
        "doc.yaml: nodes[0].allocatable.cpu: 'lots' is not a valid quantity for cpu",
        "doc.yaml: nodes[1].shape: unknown key 'shape'",
        "doc.yaml: nodes[2].name: required key 'name' is missing",
        "doc.yaml: daemonsets[0].resources.gpu: -1 is not a finite",
        "doc.yaml: nodes[1].name: duplicate node name (first at nodes[0])",
    ]
    for e in expected:
        assert any(line.startswith(e) for line in lines), (e, lines)
    assert len(lines) == len(expected)


def test_strict_v1_rejects_legacy_shapes_with_a_hint():
    lines = problems("apiVersion: kuberina.io/v1\nkind: Workloads\npods: []\n")
    assert lines == [
        "doc.yaml: pods: unknown key 'pods' (the legacy pods: list is read only from documents "
        "without apiVersion) (value: [])"
    ]


def test_legacy_resource_given_flat_and_nested_is_an_error():
    lines = problems("nodes:\n  - {name: a, allocatable: {disk_read: 5, disk: {read: 5}}}\n")
    assert lines == [
        "doc.yaml: nodes[0].allocatable: disk_read is given both flat and nested (value: "
        '{"disk_read": 5, "disk": {"read": 5}})'
    ]


# Arbitrary YAML-able data, shaped loosely like IR documents, must give a document or IRError.
_leaf = st.one_of(
    st.none(), st.booleans(), st.integers(-5, 5), st.floats(allow_nan=True), st.text(max_size=6)
)
_keys = st.sampled_from(
    [
        "nodes",
        "name",
        "allocatable",
        "cpu",
        "ram",
        "disk",
        "read",
        "namespaces",
        "pods",
        "replicas",
        "requests",
        "groups",
        "members",
        "min_members",
        "gang",
        "solution",
        "metadata",
        "feasible",
        "observed",
        "p95",
        "apiVersion",
        "kind",
        "x",
    ]
)
_tree = st.recursive(
    _leaf,
    lambda kids: st.one_of(st.lists(kids, max_size=3), st.dictionaries(_keys, kids, max_size=4)),
    max_leaves=12,
)


@settings(max_examples=150, deadline=None)
@example({"nodes": "\x85"})  # U+0085 is a line break for str.splitlines: the value must be escaped
@example({"solution": {"a/b-0": ["n1"]}, "metadata": {"feasible": True}})  # unhashable node value
@given(st.dictionaries(_keys | st.integers(0, 3), _tree, max_size=4))
def test_never_a_traceback(data):
    text = yaml.safe_dump(data)
    try:
        parse_document(text, "fuzz.yaml")
    except IRError as e:
        assert all(line.startswith("fuzz.yaml: ") for line in str(e).splitlines())


def test_unreadable_file_is_a_problem_not_a_traceback(tmp_path, monkeypatch):
    from pathlib import Path

    from kalena.ir import read_document

    target = tmp_path / "locked.yaml"
    target.write_text("nodes: []\n")

    def deny(self, *args, **kwargs):
        raise PermissionError(13, "Permission denied", str(self))

    # A stand-in for a real permission error: the tests run as root, which reads a mode-000 file.
    monkeypatch.setattr(Path, "open", deny)
    with pytest.raises(IRError) as e:
        read_document(target)
    assert str(e.value) == f"{target}: <document>: file is not readable (permission denied)"
