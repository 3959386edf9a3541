"""The node declaration: whole or nothing, and every problem names file, key and value."""

from __future__ import annotations

import copy

import pytest
import yaml

from kalena.agent.declaration import DeclarationError, load_declaration, parse_declaration
from kalena.core.model import Tier
from kalena.ir import Problem

GOOD = {
    "apiVersion": "kalena.naughtian.io/v1alpha1",
    "kind": "NodeDeclaration",
    "node": {"name": "node-a", "capacity": {"cpu": 2, "ram": "448Mi"}, "memoryLimit": "512Mi"},
    "workloads": [
        {
            "id": "prod/web",
            "cgroup": "prod/web",
            "priority": 100,
            "requests": {"cpu": "500m", "ram": "128Mi"},
            "limits": {"cpu": 1, "ram": "256Mi"},
        },
        {
            "id": "kube-system/logger",
            "cgroup": "/system.slice/logger.service",
            "daemonset": True,
            "requests": {"cpu": "100m", "ram": "64Mi"},
        },
    ],
}


def test_a_good_declaration():
    d = parse_declaration(GOOD, "node.yaml")
    assert d.node.name == "node-a" and d.memory_limit == 512 * 2**20
    assert [a.spec.id for a in d.production] == ["prod/web"]
    assert [a.cgroup for a in d.daemonsets] == ["/system.slice/logger.service"]
    web = d.production[0].spec
    assert (web.tier, web.priority, web.requests["cpu"], web.limits["ram"]) == (Tier.SERVICE, 100, 0.5, 0.25)
    cap = d.capacity()  # Phase 0: the DaemonSet's requests come off the node
    assert cap["cpu"] == pytest.approx(1.9) and cap["ram"] == pytest.approx((448 - 64) / 1024)
    assert cap["storage"] == float("inf")  # undeclared dimensions are unconstrained


def _with(path: str, value):
    doc = copy.deepcopy(GOOD)
    *parents, last = path.split(".")
    cur = doc
    for p in parents:
        cur = cur[int(p)] if p.isdigit() else cur[p]
    if value is _DROP:
        del cur[last]
    else:
        cur[last] = value
    return doc


_DROP = object()


def _overfull():
    doc = _with("workloads.0.requests.ram", "1Gi")
    del doc["workloads"][0]["limits"]
    return doc


@pytest.mark.parametrize(
    ("doc", "key", "fragment"),
    [
        (_with("apiVersion", "v2"), "apiVersion", '"v2"'),
        (_with("kind", _DROP), "kind", "required key 'kind' is missing"),
        (_with("node.capacity.ram", "lots"), "node.capacity.ram", '"lots"'),
        (_with("node.capacity.gpus", 1), "node.capacity.gpus", "unknown dimension"),
        (_with("node.memoryLimit", "-5Mi"), "node.memoryLimit", '"-5Mi"'),
        (_with("workloads.0.requests.ram", "12Qi"), "workloads[0].requests.ram", '"12Qi"'),
        (_with("workloads.0.limits.ram", "64Mi"), "workloads[0].limits.ram", "below the request"),
        (_with("workloads.0.priority", -1), "workloads[0].priority", "-1"),
        (_with("workloads.0.tier", "batch"), "workloads[0].tier", '"batch"'),
        (_with("workloads.0.cgroup", "../escape"), "workloads[0].cgroup", '"../escape"'),
        (_with("workloads.1.cgroup", "/"), "workloads[1].cgroup", "root"),
        (_with("workloads.1.id", "prod/web"), "workloads[1].id", "repeats workloads[0].id"),
        (_with("workloads.0.extra", 1), "workloads[0].extra", "unknown key 'extra'"),
        (_overfull(), "workloads", "exceed the ram capacity"),
    ],
    ids=[
        "api-version",
        "missing-kind",
        "bad-quantity",
        "unknown-dimension",
        "negative-limit",
        "bad-suffix",
        "limit-below-request",
        "negative-priority",
        "batch-cannot-be-adopted",
        "escaping-cgroup",
        "hierarchy-root",
        "duplicate-id",
        "unknown-key",
        "production-overfills-node",
    ],
)
def test_problems_name_file_key_and_value(doc, key, fragment):
    with pytest.raises(DeclarationError) as e:
        parse_declaration(doc, "node.yaml")
    lines = [p.render() for p in e.value.problems]
    assert any(line.startswith(f"node.yaml: {key}: ") and fragment in line for line in lines), lines


def test_every_problem_is_reported_at_once():
    doc = _with("workloads.0.requests.ram", "lots")
    doc["workloads"][1]["requests"]["cpu"] = "x"
    with pytest.raises(DeclarationError) as e:
        parse_declaration(doc, "f")
    assert len(e.value.problems) == 2


@pytest.mark.parametrize(
    ("text", "fragment"),
    [("node: [unclosed\n", "YAML syntax error at line 2"), ("- a\n- b\n", "must be a mapping")],
    ids=["yaml-syntax", "not-a-mapping"],
)
def test_unreadable_documents(tmp_path, text, fragment):
    p = tmp_path / "node.yaml"
    p.write_text(text)
    with pytest.raises(DeclarationError, match=fragment) as e:
        load_declaration(p)
    assert e.value.problems[0].render().startswith(f"{p}: <document>:")


def test_problems_are_the_ir_readers_problems_one_line_each():
    with pytest.raises(DeclarationError) as e:
        parse_declaration(_with("node.capacity.ram", "lots\u2028more"), "node.yaml")
    (p,) = e.value.problems
    assert isinstance(p, Problem) and p.path == "node.capacity.ram"
    assert "\n" not in p.render() and p.render().endswith('(value: "lots\\u2028more")')


def test_a_document_problem_has_no_value(tmp_path):
    with pytest.raises(DeclarationError) as e:
        load_declaration(tmp_path / "nope.yaml")
    assert "(value:" not in e.value.problems[0].render()


def test_missing_file(tmp_path):
    with pytest.raises(DeclarationError, match="file does not exist"):
        load_declaration(tmp_path / "nope.yaml")


def test_load_from_a_file(tmp_path):
    p = tmp_path / "node.yaml"
    p.write_text(yaml.safe_dump(GOOD))
    assert load_declaration(p).source == str(p)
