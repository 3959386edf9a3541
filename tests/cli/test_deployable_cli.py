"""``kalena deployable``: exit codes, output shapes, bad input, and the documented examples.

The examples in ``docs/deployability.md`` (each YAML block introduced by an ``<!-- example: ...
kubernetes=ANSWER paper=ANSWER -->`` line) are read from the document and both answers checked,
so the documentation cannot drift from the tool.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kalena.cli.main import app
from kalena.deployability import Op, Semantics, replay
from kalena.deployability.answer import Step
from kalena.deployability_gen import pebbling_instance, pyramid, write_yaml
from kalena.manifests import read_manifests

runner = CliRunner()
DOC = Path(__file__).resolve().parents[2] / "docs" / "deployability.md"
EXAMPLE = re.compile(r"<!-- example: (\S+) (.*?) -->\n```yaml\n(.*?)```", re.S)

NODES = "".join(f"---\napiVersion: v1\nkind: Node\nmetadata: {{name: node-{i}}}\n" for i in (1, 2, 3))
STORE = """---
apiVersion: apps/v1
kind: Deployment
metadata: {name: store}
spec:
  template:
    metadata: {labels: {app: store}}
    spec:
      containers: [{name: c, image: redis}]
      affinity:
        podAntiAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
          - {labelSelector: {matchLabels: {app: store}}, topologyKey: kubernetes.io/hostname}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  template:
    metadata: {labels: {app: web}}
    spec:
      containers: [{name: c, image: nginx}]
      nodeSelector: {kubernetes.io/hostname: node-1}
      affinity:
        podAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
          - {labelSelector: {matchLabels: {app: store}}, topologyKey: kubernetes.io/hostname}
"""


@pytest.fixture
def cluster(tmp_path: Path) -> Path:
    f = tmp_path / "cluster.yaml"
    f.write_text(NODES + STORE)
    return f


def run(*args: str):
    return runner.invoke(app, ["deployable", *args])


def test_deployable_prints_a_numbered_witness(cluster):
    r = run("--cluster", str(cluster), "--pod", "web", "--node", "node-1")
    assert r.exit_code == 0, r.output
    assert "deployable: default/web can run on node-1" in r.output
    assert "1. deploy default/store on node-1" in r.output
    assert "2. deploy default/web on node-1" in r.output
    assert "replayed by the independent checker" in r.output


def test_not_deployable_exits_1_with_reason(cluster):
    r = run("--cluster", str(cluster), "--pod", "default/web", "--node", "node-2")
    assert r.exit_code == 1, r.output
    assert "not-deployable" in r.output and "node-affinity" in r.output


def test_json_has_exactly_the_documented_keys(cluster):
    r = run("--cluster", str(cluster), "--pod", "web", "--node", "node-1", "--json")
    assert r.exit_code == 0
    body = json.loads(r.output)
    assert set(body) == {"answer", "witness", "states_explored"}
    assert body["answer"] == "deployable"
    assert body["witness"] == [
        {"op": "deploy", "pod_type": "default/store", "node": "node-1"},
        {"op": "deploy", "pod_type": "default/web", "node": "node-1"},
    ]
    steps = [Step(Op(s["op"]), s["pod_type"], s["node"]) for s in body["witness"]]
    assert replay(read_manifests([cluster]), Semantics.KUBERNETES, steps, [("default/web", "node-1")]).ok


def test_co_occurrence(cluster):
    r = run("--cluster", str(cluster), "--pod", "web", "--co-occur", "store", "--node", "node-1", "--json")
    assert r.exit_code == 0
    assert json.loads(r.output)["answer"] == "deployable"


def test_all_nodes_report_and_json(cluster):
    r = run("--cluster", str(cluster), "--pod", "store", "--all-nodes")
    assert r.exit_code == 0
    assert "default/store can land on 3 of 3 nodes" in r.output
    r = run("--cluster", str(cluster), "--pod", "web", "--all-nodes", "--json")
    body = json.loads(r.output)
    assert body["answer"] == "deployable"
    assert [(n["node"], n["answer"]) for n in body["nodes"]] == [
        ("node-1", "deployable"),
        ("node-2", "not-deployable"),
        ("node-3", "not-deployable"),
    ]


def test_unknown_exits_3(tmp_path):
    inst, q = pebbling_instance(*pyramid(3), 5)
    f = write_yaml(inst, tmp_path / "pyr.yaml")
    args = ("--cluster", str(f), "--pod", q.pod, "--node", q.node, "--semantics", "paper")
    r = run(*args, "--max-states", "5", "--json")
    assert r.exit_code == 3
    assert json.loads(r.output) == {"answer": "unknown", "witness": [], "states_explored": 5}
    r = run(*args)
    assert r.exit_code == 0 and "15 steps" in r.output  # h + 2 pebbles: 15-step witness


BAD_ARGS = [
    ("unknown-pod", ["--pod", "nope", "--node", "node-1"], "--pod: no pod type has this name"),
    ("unknown-node", ["--pod", "web", "--node", "nope"], "--node: no Node object has this name"),
    ("no-node", ["--pod", "web"], "--node: is required"),
    ("all-nodes-and-node", ["--pod", "web", "--node", "node-1", "--all-nodes"], "cannot be combined"),
    (
        "same-co-occur",
        ["--pod", "web", "--node", "node-1", "--co-occur", "default/web"],
        "different pod type",
    ),
]


@pytest.mark.parametrize("args,message", [b[1:] for b in BAD_ARGS], ids=[b[0] for b in BAD_ARGS])
def test_bad_arguments_exit_2(cluster, args, message):
    r = run("--cluster", str(cluster), *args)
    assert r.exit_code == 2
    assert message in r.output


def test_bad_file_exit_2_names_file_key_and_value(tmp_path):
    f = tmp_path / "bad.yaml"
    f.write_text(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n"
        "  containers: [{name: c, resources: {requests: {cpu: lots}}}]\n"
    )
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "kalena.cli.main",
            "deployable",
            "--cluster",
            str(f),
            "--pod",
            "p",
            "--node",
            "n",
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "200"},
        timeout=60,
    )
    assert r.returncode == 2
    assert r.stdout == ""
    assert r.stderr.strip() == (
        f"{f}: spec.containers[0].resources.requests.cpu: "
        'is not a valid Kubernetes quantity for cpu (value: "lots")'
    )
    assert "Traceback" not in r.stderr


def test_timeout_is_accepted(cluster):
    r = run("--cluster", str(cluster), "--pod", "web", "--node", "node-1", "--timeout", "30")
    assert r.exit_code == 0


# --- the documented examples ------------------------------------------------------------------
EXAMPLES = EXAMPLE.findall(DOC.read_text(encoding="utf-8"))


def test_the_document_has_the_examples():
    names = [e[0] for e in EXAMPLES]
    assert {"all-terms", "bootstrap", "symmetric-anti", "namespaces", "missing-key"} <= set(names)


@pytest.mark.parametrize(("attrs", "text"), [e[1:] for e in EXAMPLES], ids=[e[0] for e in EXAMPLES])
def test_documented_example_answers(tmp_path, attrs, text):
    spec = dict(kv.split("=", 1) for kv in attrs.split())
    f = tmp_path / "example.yaml"
    f.write_text(text)
    for sem in ("kubernetes", "paper"):
        r = run(
            "--cluster", str(f), "--pod", spec["pod"], "--node", spec["node"], "--semantics", sem, "--json"
        )
        assert json.loads(r.output)["answer"] == spec[sem], (sem, r.output)
        assert r.exit_code == {"deployable": 0, "not-deployable": 1}[spec[sem]]
