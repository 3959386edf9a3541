"""A blueprint is checked against every hard rule of IR v1, and its soft rules are reported.

Hard (an error naming the pod's blueprint key, the node and the rule): nodeSelector, taints,
a gang's ``colocate: true`` and a group's ``nodeSelector``, the request ledger. Soft
(``affinity``, ``antiAffinity``: Kuberina's solver may trade them): a note per pod, never an error.
"""

from __future__ import annotations

import pytest

from kalena.ir import DocumentSet, IRError, build_cluster, parse_document
from kalena.ir.checks import soft_notes

INFRA = """apiVersion: kuberina.io/v1
kind: Infrastructure
nodes:
  - {name: a, labels: {disk: ssd}, allocatable: {cpu: 8, ram: 32}}
  - {name: b, labels: {disk: hdd}, allocatable: {cpu: 8, ram: 32}}
  - name: c
    labels: {disk: ssd}
    taints: [{key: dedicated, effect: NoSchedule}]
    allocatable: {cpu: 8, ram: 32}
"""


def _workloads(extra: str = "", groups: str = "") -> str:
    return f"""apiVersion: kuberina.io/v1
kind: Workloads
namespaces:
  ns:
    - {{name: web, replicas: 2, requests: {{cpu: 1, ram: 1}}}}
    - {{name: db, requests: {{cpu: 1, ram: 1}}, antiAffinity: ["ns/web"], affinity: ["ns/cache"]}}
    - {{name: cache, requests: {{cpu: 1, ram: 1}}{extra}}}
{groups}"""


def _blueprint(**where: str) -> str:
    place = {"ns/web-0000": "a", "ns/web-0001": "a", "ns/db-0": "b", "ns/cache-0": "b", **where}
    lines = "".join(f"  {k}: {v}\n" for k, v in place.items())
    return f"apiVersion: kuberina.io/v1\nkind: Blueprint\nmetadata: {{feasible: true}}\nsolution:\n{lines}"


def _set(workloads: str, blueprint: str) -> DocumentSet:
    return DocumentSet.of(
        [
            parse_document(INFRA, "infra.yaml"),
            parse_document(workloads, "workloads.yaml"),
            parse_document(blueprint, "blueprint.yaml"),
        ]
    )


def _problems(workloads: str, blueprint: str) -> list[str]:
    with pytest.raises(IRError) as e:
        build_cluster(_set(workloads, blueprint))
    return [p.render() for p in e.value.problems]


def test_a_blueprint_that_keeps_every_rule_is_valid_and_quiet():
    cluster = build_cluster(_set(_workloads(), _blueprint()))
    assert soft_notes(cluster) == []


def test_a_split_colocated_gang_is_an_error_naming_pod_node_and_rule():
    groups = 'groups:\n  - {name: pair, members: ["ns/web"], colocate: true}\n'
    lines = _problems(_workloads(groups=groups), _blueprint(**{"ns/web-0001": "b"}))
    assert lines == [
        "blueprint.yaml: solution.ns/web-0001: group pair is colocate: true, but this member is on b "
        'and ns/web-0000 on a (value: "b")'
    ]


def test_a_group_node_selector_binds_every_member():
    groups = 'groups:\n  - {name: fast, members: ["ns/web"], nodeSelector: {disk: ssd}}\n'
    lines = _problems(_workloads(groups=groups), _blueprint(**{"ns/web-0001": "b"}))
    assert lines == [
        "blueprint.yaml: solution.ns/web-0001: node b does not match the nodeSelector of group fast"
        ' (value: "b")'
    ]


def test_node_selector_and_taints_are_hard():
    selector = ", nodeSelector: {disk: ssd}"
    assert _problems(_workloads(extra=selector), _blueprint(**{"ns/cache-0": "b"})) == [
        'blueprint.yaml: solution.ns/cache-0: node b does not match the pod\'s nodeSelector (value: "b")'
    ]
    assert _problems(_workloads(), _blueprint(**{"ns/cache-0": "c"})) == [
        'blueprint.yaml: solution.ns/cache-0: the pod does not tolerate the taints of c (value: "c")'
    ]


def test_soft_rules_broken_are_notes_not_errors():
    # db names web in antiAffinity and sits with it; it names cache in affinity and sits apart
    cluster = build_cluster(_set(_workloads(), _blueprint(**{"ns/db-0": "a", "ns/cache-0": "b"})))
    assert soft_notes(cluster) == [
        "ns/db-0 on a: its antiAffinity names ns/web-0000 and 1 more, on the same node (soft)",
        "ns/db-0 on a: its affinity names ns/cache-0, which is on b (soft)",
    ]
