"""Reading Kubernetes YAML into a deployability instance: kinds, requests, constraints, problems."""

from __future__ import annotations

import pytest

from kalena.deployability import HOSTNAME, Evaluator, LabelSelector, Requirement, Semantics
from kalena.ir.errors import IRError
from kalena.manifests import parse_manifests, read_manifests
from kalena.manifests.load import parse_workloads

NODE = (
    "apiVersion: v1\nkind: Node\nmetadata: {name: n1, labels: {zone: a}}\n"
    "status: {allocatable: {cpu: '2', memory: 4Gi, pods: '110'}}\n"
)
REQ = "requiredDuringSchedulingIgnoredDuringExecution"


def aff(kind: str, terms: str) -> str:
    """A pod spec's ``affinity`` line with required terms of one kind."""
    return f"  affinity: {{{kind}: {{{REQ}: [{terms}]}}}}\n"


def read(text: str, name: str = "c.yaml"):
    return parse_manifests([(name, text)])


def test_every_workload_kind_becomes_a_pod_type():
    tmpl = "spec:\n  template:\n    metadata: {labels: {app: X}}\n    spec: {containers: [{name: c}]}\n"
    docs = []
    for kind in ("Deployment", "StatefulSet", "DaemonSet", "Job", "ReplicaSet", "ReplicationController"):
        docs.append(
            f"apiVersion: apps/v1\nkind: {kind}\nmetadata: {{name: {kind.lower()}, namespace: ns}}\n"
            + tmpl.replace("X", kind)
        )
    docs.append(
        "apiVersion: batch/v1\nkind: CronJob\nmetadata: {name: cron}\nspec:\n  jobTemplate:\n    spec:\n"
        "      template:\n        metadata: {labels: {app: cron}}\n        spec: {containers: [{name: c}]}\n"
    )
    docs.append("apiVersion: v1\nkind: Service\nmetadata: {name: ignored}\n")
    inst = read("---\n".join(docs))
    assert sorted(t.id for t in inst.types) == sorted(
        [
            "ns/deployment",
            "ns/statefulset",
            "ns/daemonset",
            "ns/job",
            "ns/replicaset",
            "ns/replicationcontroller",
            "default/cron",
        ]
    )
    assert {t.kind for t in inst.types} >= {"Deployment", "CronJob"}
    assert dict(inst.types[0].labels) == {"app": "Deployment"}


def test_requests_sum_containers_max_init_and_default_to_limits():
    text = (
        NODE
        + """---
apiVersion: v1
kind: Pod
metadata: {name: p}
spec:
  overhead: {cpu: 10m}
  initContainers: [{name: i, resources: {requests: {cpu: '1', memory: 1Gi}}}]
  containers:
  - {name: a, resources: {requests: {cpu: 250m, memory: 512Mi}}}
  - {name: b, resources: {limits: {cpu: 100m, example.com/dongle: 2}}}
"""
    )
    inst = read(text)
    p = inst.types[0]
    assert dict(p.requests) == {"cpu": 1010, "memory": 1024**3, "example.com/dongle": 2, "pods": 1}
    n1 = inst.nodes[0]
    assert dict(n1.allocatable) == {"cpu": 2000, "memory": 4 * 1024**3, "pods": 110, "example.com/dongle": 0}
    assert n1.labels[HOSTNAME] == "n1"


def test_constraints_are_read_with_label_keys_merged():
    text = """apiVersion: v1
kind: Pod
metadata: {name: p, namespace: shop, labels: {app: web, ver: v2}}
spec:
  containers: [{name: c}]
  nodeSelector: {disk: ssd}
  tolerations: [{key: gpu, operator: Exists, effect: NoSchedule}]
  affinity:
    nodeAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        nodeSelectorTerms: [{matchExpressions: [{key: zone, operator: In, values: [a]}]}]
    podAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
      - labelSelector: {matchLabels: {app: db}}
        topologyKey: zone
        namespaces: [data]
        matchLabelKeys: [ver]
      preferredDuringSchedulingIgnoredDuringExecution:
      - {weight: 1, podAffinityTerm: {labelSelector: {}, topologyKey: zone}}
    podAntiAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
      - {topologyKey: kubernetes.io/hostname}
  topologySpreadConstraints:
  - maxSkew: 2
    topologyKey: zone
    whenUnsatisfiable: DoNotSchedule
    labelSelector: {matchLabels: {app: web}}
    minDomains: 3
  - {maxSkew: 1, topologyKey: host, whenUnsatisfiable: ScheduleAnyway}
"""
    p = read(text).types[0]
    assert p.id == "shop/p" and dict(p.node_selector) == {"disk": "ssd"}
    assert p.tolerations[0].key == "gpu" and p.tolerations[0].operator == "Exists"
    assert p.node_affinity[0].match_expressions == (Requirement("zone", "In", ("a",)),)
    (aff,) = p.affinity
    assert aff.namespaces == ("data",) and aff.topology_key == "zone"
    assert aff.selector.match_expressions == (Requirement("ver", "In", ("v2",)),)
    assert p.anti_affinity[0].selector is None  # no labelSelector: selects nothing
    (sp,) = p.spread  # ScheduleAnyway is soft
    assert (sp.max_skew, sp.min_domains, sp.selector) == (2, 3, LabelSelector({"app": "web"}))


def test_initial_pods_map_to_their_types():
    text = (
        NODE
        + """---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec: {template: {metadata: {labels: {app: web}}, spec: {containers: [{name: c}]}}}
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: db}
spec: {template: {metadata: {labels: {app: db}}, spec: {containers: [{name: c}]}}}
---
apiVersion: v1
kind: Pod
metadata:
  name: web-7d9f-abcde
  labels: {app: web, pod-template-hash: 7d9f}
  ownerReferences: [{kind: ReplicaSet, name: web-7d9f, controller: true}]
spec: {nodeName: n1, containers: [{name: c}]}
---
apiVersion: v1
kind: Pod
metadata: {name: db-0, labels: {app: db}, ownerReferences: [{kind: StatefulSet, name: db, controller: true}]}
spec: {nodeName: n1, containers: [{name: c}]}
---
apiVersion: v1
kind: Pod
metadata: {name: tagged, annotations: {kalena.naughtian.io/pod-type: web}}
spec: {nodeName: n1, containers: [{name: c}]}
---
apiVersion: v1
kind: Pod
metadata: {name: loose}
spec: {nodeName: n1, containers: [{name: c}]}
"""
    )
    inst = read(text)
    assert dict(inst.initial) == {
        ("default/web", "n1"): 2,
        ("default/db", "n1"): 1,
        ("default/loose", "n1"): 1,
    }
    assert sorted(t.id for t in inst.types) == ["default/db", "default/loose", "default/web"]


def test_daemonset_pods_tolerate_unschedulable_nodes():
    text = (
        "apiVersion: v1\nkind: Node\nmetadata: {name: n1}\nspec: {unschedulable: true}\n---\n"
        "apiVersion: apps/v1\nkind: DaemonSet\nmetadata: {name: agent}\n"
        "spec: {template: {spec: {containers: [{name: c}]}}}\n---\n" + POD
    )
    inst = read(text)
    ev = Evaluator(inst, Semantics.KUBERNETES)
    assert ev.ok("default/agent", "n1", {})
    assert not ev.ok("default/p", "n1", {})  # an ordinary pod stays off a cordoned node


def test_list_and_namespace_objects_and_generate_name():
    text = """apiVersion: v1
kind: List
items:
- {apiVersion: v1, kind: Namespace, metadata: {name: data, labels: {team: d}}}
- {apiVersion: v1, kind: Pod, metadata: {generateName: gen-}, spec: {containers: [{name: c}]}}
"""
    inst = read(text)
    assert inst.types[0].id == "default/gen"
    assert inst.ns_labels("data") == {"team": "d", "kubernetes.io/metadata.name": "data"}


POD = "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers: [{name: c}]\n"
BAD = [
    ("yaml-syntax", "a: [b\n", "<document>", "YAML syntax error"),
    ("not-a-mapping", "- 1\n", "<document>", "must be a mapping"),
    ("no-kind", "apiVersion: v1\n", "kind", "is required"),
    (
        "bad-quantity",
        POD.replace("[{name: c}]", "[{name: c, resources: {requests: {cpu: 2x}}}]"),
        "spec.containers[0].resources.requests.cpu",
        "not a valid Kubernetes quantity",
    ),
    (
        "bad-operator",
        POD
        + aff(
            "podAffinity",
            "{labelSelector: {matchExpressions: [{key: a, operator: Gt, values: ['1']}]}, topologyKey: z}",
        ),
        "matchExpressions[0].operator",
        "must be one of",
    ),
    (
        "in-without-values",
        POD
        + aff("podAffinity", "{labelSelector: {matchExpressions: [{key: a, operator: In}]}, topologyKey: z}"),
        "matchExpressions[0]",
        "needs at least one value",
    ),
    (
        "empty-topology-key",
        POD + aff("podAntiAffinity", "{labelSelector: {}, topologyKey: ''}"),
        "topologyKey",
        "must not be empty",
    ),
    (
        "max-skew-0",
        POD
        + "  topologySpreadConstraints: [{maxSkew: 0, topologyKey: z, whenUnsatisfiable: DoNotSchedule}]\n",
        "topologySpreadConstraints[0].maxSkew",
        "at least 1",
    ),
    (
        "bad-when",
        POD + "  topologySpreadConstraints: [{maxSkew: 1, topologyKey: z, whenUnsatisfiable: Never}]\n",
        "whenUnsatisfiable",
        "DoNotSchedule or ScheduleAnyway",
    ),
    (
        "exists-with-value",
        POD + "  tolerations: [{key: k, operator: Exists, value: v}]\n",
        "spec.tolerations[0]",
        "takes no value",
    ),
    (
        "taint-effect",
        "apiVersion: v1\nkind: Node\nmetadata: {name: n}\nspec: {taints: [{key: k, effect: Sometimes}]}\n",
        "spec.taints[0].effect",
        "taint effect",
    ),
    ("unknown-node", POD.replace("spec:\n", "spec:\n  nodeName: ghost\n"), "spec.nodeName", "no Node object"),
    (
        "unknown-type-annotation",
        POD.replace("{name: p}", "{name: p, annotations: {kalena.naughtian.io/pod-type: zz}}").replace(
            "spec:\n", "spec:\n  nodeName: n1\n"
        )
        + "---\n"
        + NODE,
        "annotations",
        "names no pod type",
    ),
    ("duplicate-type", POD + "---\n" + POD, "documents[1].metadata.name", "already defined"),
    ("duplicate-node", NODE + "---\n" + NODE, "documents[1].metadata.name", "two Node objects"),
    (
        "unschedulable-not-bool",
        "apiVersion: v1\nkind: Node\nmetadata: {name: n}\nspec: {unschedulable: yes please}\n",
        "spec.unschedulable",
        "true or false",
    ),
    (
        "empty-node-terms",
        POD + f"  affinity: {{nodeAffinity: {{{REQ}: {{nodeSelectorTerms: []}}}}}}\n",
        "nodeSelectorTerms",
        "at least one",
    ),
    (
        "label-not-string",
        "apiVersion: v1\nkind: Pod\nmetadata: {name: p, labels: {a: [1]}}\nspec: {containers: []}\n",
        "metadata.labels.a",
        "must be a string",
    ),
    (
        "no-template",
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\nspec: {}\n",
        "spec.template",
        "is required",
    ),
]


@pytest.mark.parametrize(("text", "path", "message"), [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_input_names_file_key_and_value(text, path, message):
    with pytest.raises(IRError) as e:
        read(text, "bad.yaml")
    lines = str(e.value).splitlines()
    assert any(line.startswith("bad.yaml: ") and path in line and message in line for line in lines), lines


def test_missing_file_and_directory_reading(tmp_path):
    with pytest.raises(IRError, match="file does not exist"):
        read_manifests([tmp_path / "nope.yaml"])
    (tmp_path / "a.yaml").write_text(NODE)
    (tmp_path / "b.yml").write_text(POD)
    inst = read_manifests([tmp_path])
    assert [n.name for n in inst.nodes] == ["n1"] and [t.id for t in inst.types] == ["default/p"]


def test_soft_rules_are_counted_per_pod_type_by_kind():
    """Preferred terms and ScheduleAnyway spread are left out of the hard model but counted, each
    constraint once, beside the DoNotSchedule one that is kept."""
    doc = """
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      affinity:
        nodeAffinity:
          preferredDuringSchedulingIgnoredDuringExecution:
          - {weight: 1, preference: {matchExpressions: [{key: a, operator: Exists}]}}
      topologySpreadConstraints:
      - {maxSkew: 1, topologyKey: zone, whenUnsatisfiable: ScheduleAnyway}
      - {maxSkew: 1, topologyKey: host, whenUnsatisfiable: ScheduleAnyway}
      - {maxSkew: 1, topologyKey: rack, whenUnsatisfiable: DoNotSchedule}
      containers: [{name: w, image: x}]
"""
    m = parse_workloads([("web.yaml", doc)])
    assert m.soft == {"default/web": {"preferred node affinity": 1, "ScheduleAnyway spread": 2}}
    (t,) = m.instance.types
    assert [c.topology_key for c in t.spread] == ["rack"]
