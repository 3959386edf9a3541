"""Least privilege, tested: the scheduler works with exactly the rules `kalena k8s render` grants
its ServiceAccount (binds, events, the PodScheduled condition, reservation reports, its Lease),
and every verb beyond them is refused by the real apiserver's RBAC.

The ServiceAccount is authenticated with a client certificate whose name is the account's
(``system:serviceaccount:NS:NAME``), since the harness has no controller-manager to mint tokens;
RBAC judges the name and groups the same way either way."""

from __future__ import annotations

import time
import uuid

import pytest
import yaml
from k8s_testlib import until
from kubernetes import client as kclient
from kubernetes.client.exceptions import ApiException
from rbac_testlib import account, allowed, apply, exactly
from typer.testing import CliRunner

from kalena.cli.main import app
from kalena.k8s.render import (
    AGENT_RULES,
    EXTENDER_RULES,
    SCHEDULER,
    SCHEDULER_LEASE_RULES,
    SCHEDULER_RULES,
    agent_objects,
    extender_objects,
    objects,
)
from kalena.testing.k8s import ControlPlane, NodeSpec

pytestmark = [pytest.mark.k8s, pytest.mark.slow]


def empty(cp: ControlPlane, ns: str) -> None:
    """Delete a namespace's pods, then the namespace: without a controller-manager a deleted
    namespace keeps its pods, and a pending one would be every later scheduler's to place."""
    cp.core.delete_collection_namespaced_pod(ns, grace_period_seconds=0)
    cp.core.delete_namespace(ns)


def batch_pod(name: str, cpu: str) -> dict:
    container = {"name": "c", "image": "busybox:1", "resources": {"requests": {"cpu": cpu}}}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"schedulerName": "kalena", "containers": [container]}}  # fmt: skip


@pytest.fixture
def installed(control_plane: ControlPlane):
    cp = control_plane
    tag = uuid.uuid4().hex[:6]
    ns = f"kalena-rbac-{tag}"
    docs = objects(ns, components=("scheduler",))
    apply(cp, [d for d in docs if d["kind"] != "ClusterRoleBinding"])
    # one ClusterRoleBinding per test namespace (the rendered one names kalena-system's account)
    (crb,) = [d for d in docs if d["kind"] == "ClusterRoleBinding"]
    crb = {**crb, "metadata": {"name": f"{SCHEDULER}-{tag}"}}
    apply(cp, [crb])
    user = f"system:serviceaccount:{ns}:{SCHEDULER}"
    groups = ["system:serviceaccounts", f"system:serviceaccounts:{ns}", "system:authenticated"]
    yield cp, ns, tag, user, groups
    kclient.RbacAuthorizationV1Api(cp.client).delete_cluster_role_binding(f"{SCHEDULER}-{tag}")
    cp.core.delete_namespace(ns)


def test_every_verb_beyond_the_rendered_rules_is_refused(installed):
    cp, ns, _tag, user, groups = installed
    exactly(cp, user, groups, SCHEDULER_LEASE_RULES, ns)
    exactly(cp, user, groups, SCHEDULER_RULES)
    # and nothing else: secrets, other namespaces' leases, configmaps, deployments
    assert not allowed(cp, user, groups, "get", "secrets", namespace=ns)
    assert not allowed(cp, user, groups, "get", "leases", "coordination.k8s.io", namespace="kube-system")
    assert not allowed(cp, user, groups, "list", "configmaps")
    assert not allowed(cp, user, groups, "update", "deployments", "apps", namespace=ns)


def test_the_scheduler_works_with_exactly_those_rules(installed):
    cp, ns, tag, user, groups = installed
    label = {"kalena-rbac": tag}
    node = f"rbac-{tag}"
    cp.add_nodes([NodeSpec(node, cpu="2", memory="4Gi", labels=label)])
    work = f"work-{tag}"
    cp.ensure_namespace(work)
    for name, cpu in (("fits", "1"), ("too-big", "8")):
        cp.core.create_namespaced_pod(work, batch_pod(name, cpu))
    kubeconfig = cp.kubeconfig_for(user, groups)
    args = ["k8s", "scheduler", "--kubeconfig", str(kubeconfig), "--node-selector", f"kalena-rbac={tag}",
            "--leader-elect", "--lease-namespace", ns, "--lease-duration", "4"]  # fmt: skip
    args += ["--duration", "8"]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    assert "Forbidden" not in r.output and "403" not in r.output, r.output
    assert cp.core.read_namespaced_pod("fits", work).spec.node_name == node  # pods/binding
    reasons = {e.reason for e in cp.core.list_namespaced_event(work).items}
    assert {"Scheduled", "FailedScheduling"} <= reasons  # events
    cond = {c.type: c for c in cp.core.read_namespaced_pod_status("too-big", work).status.conditions or []}
    assert cond["PodScheduled"].status == "False"  # pods/status
    lease = kclient.CoordinationV1Api(cp.client).read_namespaced_lease(SCHEDULER, ns)
    assert lease.spec.holder_identity  # its Lease, in its namespace
    empty(cp, work)
    cp.core.delete_node(node)


def test_render_prints_every_object_once(tmp_path):
    r = CliRunner().invoke(app, ["k8s", "render", "--namespace", "kal", "--image", "reg.example/kalena:1"])
    assert r.exit_code == 0, r.output
    docs = list(yaml.safe_load_all(r.stdout))
    kinds = [d["kind"] for d in docs]
    assert kinds[:2] == ["Namespace", "CustomResourceDefinition"]
    assert {
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
        "Deployment",
    } <= set(kinds)
    (dep,) = [d for d in docs if d["kind"] == "Deployment"]
    c = dep["spec"]["template"]["spec"]["containers"][0]
    assert c["image"] == "reg.example/kalena:1" and "--leader-elect" in c["args"]
    assert dep["spec"]["template"]["spec"]["serviceAccountName"] == SCHEDULER
    bad = CliRunner().invoke(app, ["k8s", "render", "--namespace", "Not_A_Label"])
    assert bad.exit_code == 2 and "--namespace: not a DNS label" in bad.stderr


def test_a_second_replica_takes_over_when_the_leader_dies(installed, tmp_path):
    """Two replicas with --leader-elect: one holds the Lease and places; killed, the other takes the
    Lease within its duration and places the next pod."""
    import os
    import signal
    import subprocess
    import sys

    cp, ns, tag, user, groups = installed
    label = {"kalena-le": tag}
    node = f"le-{tag}"
    cp.add_nodes([NodeSpec(node, cpu="4", memory="4Gi", labels=label)])
    work = f"le-{tag}"
    cp.ensure_namespace(work)
    kubeconfig = cp.kubeconfig_for(user, groups)
    cmd = [sys.executable, "-m", "kalena.cli.main", "k8s", "scheduler", "--kubeconfig", str(kubeconfig),
           "--node-selector", f"kalena-le={tag}", "--leader-elect", "--lease-namespace", ns,
           "--lease-duration", "4", "--duration", "90"]  # fmt: skip
    procs = [subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)]
    leases = kclient.CoordinationV1Api(cp.client)

    def holder() -> str:
        try:
            return leases.read_namespaced_lease(SCHEDULER, ns).spec.holder_identity or ""
        except ApiException:
            return ""

    def make(name: str) -> None:
        cp.core.create_namespaced_pod(work, batch_pod(name, "100m"))

    try:
        assert until(lambda: holder().endswith(f"-{procs[0].pid}"), 60), holder()
        procs.append(subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True))
        make("one")
        cp.wait_for_pods(work, ["one"], running=False, timeout=60)
        time.sleep(2.0)
        assert holder().endswith(f"-{procs[0].pid}")  # the second waits
        os.kill(procs[0].pid, signal.SIGKILL)
        procs[0].wait(10)
        assert until(lambda: holder().endswith(f"-{procs[1].pid}"), 60), holder()
        make("two")
        cp.wait_for_pods(work, ["two"], running=False, timeout=60)
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                p.wait(30)
        empty(cp, work)
        cp.core.delete_node(node)


@pytest.mark.parametrize(
    ("make", "rules"), [(agent_objects, AGENT_RULES), (extender_objects, EXTENDER_RULES)]
)
def test_the_agent_and_the_extender_get_exactly_their_rules(control_plane: ControlPlane, make, rules):
    """The agent's own work with those rules is tests/k8s/test_node_agent.py (it runs as this
    account); here every further verb is refused."""
    cp = control_plane
    tag = uuid.uuid4().hex[:6]
    ns = f"kalena-rbac-{tag}"
    with account(
        cp, [d for d in make(ns) if d["kind"] not in ("DaemonSet", "Deployment", "Service")], ns, tag
    ) as (
        user,
        groups,
    ):
        exactly(cp, user, groups, rules)
        assert not allowed(cp, user, groups, "get", "secrets", namespace=ns)
        assert not allowed(cp, user, groups, "patch", "nodes")
        assert not allowed(cp, user, groups, "create", "pods", sub="binding")
    cp.core.delete_namespace(ns)


def test_the_extender_works_with_exactly_its_rules(control_plane: ControlPlane):
    cp = control_plane
    tag = uuid.uuid4().hex[:6]
    ns = f"kalena-rbac-{tag}"
    docs = [d for d in extender_objects(ns) if d["kind"] not in ("Deployment", "Service")]
    with account(cp, docs, ns, tag) as (user, groups):
        kubeconfig = cp.kubeconfig_for(user, groups)
        r = CliRunner().invoke(app, ["k8s", "extender", "--kubeconfig", str(kubeconfig), "--duration", "3"])
    assert r.exit_code == 0, r.output
    assert "nodes" in r.output and "serving" in r.output
    assert "Forbidden" not in r.output and "403" not in r.output, r.output
    cp.core.delete_namespace(ns)


def test_render_writes_a_kustomization_and_the_scheduler_config(tmp_path):
    out = tmp_path / "kalena"
    r = CliRunner().invoke(
        app, ["k8s", "render", "--components", "scheduler,agent,extender", "--out", str(out)]
    )
    assert r.exit_code == 0, r.output
    kust = yaml.safe_load((out / "kustomization.yaml").read_text())
    files = sorted(p.name for p in out.iterdir())
    assert sorted([*kust["resources"], "kustomization.yaml", "kube-scheduler-config.yaml"]) == files
    kinds = [d["kind"] for f in kust["resources"] for d in yaml.safe_load_all((out / f).read_text())]
    assert {"DaemonSet", "Deployment", "Service", "CustomResourceDefinition"} <= set(kinds)
    assert kinds.count("ClusterRole") == 3  # one per component, each its own rules
    (ds,) = [
        d
        for f in kust["resources"]
        for d in yaml.safe_load_all((out / f).read_text())
        if d["kind"] == "DaemonSet"
    ]
    args = ds["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[:2] == ["k8s", "agent"]
    config = yaml.safe_load((out / "kube-scheduler-config.yaml").read_text())
    (ext,) = config["extenders"]
    assert ext["ignorable"] is True and ext["nodeCacheCapable"] is True and ext["enableHTTPS"] is True
    printed = CliRunner().invoke(app, ["k8s", "render", "--scheduler-config"])
    assert yaml.safe_load(printed.stdout) == config
    bad = CliRunner().invoke(app, ["k8s", "render", "--components", "scheduler,bogus"])
    assert bad.exit_code == 2 and "--components" in bad.stderr


def test_rendered_yaml_has_no_anchors():
    """A dict used twice (the labels of a Deployment) is written out each time, not as &id001."""
    r = CliRunner().invoke(app, ["k8s", "render", "--components", "scheduler,agent,extender"])
    assert r.exit_code == 0 and "&id" not in r.stdout and "*id" not in r.stdout
