"""The Stationkeeper's recommendations on a real kube-apiserver (issue 15 item 3): written as
VerticalPodAutoscalers (updateMode Off, the figures in status.recommendation, split over a pod's
containers by their requests), or with --apply into the Deployment's requests; as the
recommender's own account, whose rules are exactly what it uses (one verb more is refused).

The VPA CRD here is a minimal one written for this test (VPA's own is not installed by Kalena):
group, names and a status subresource, with the spec and status schema left open.
"""

from __future__ import annotations

import contextlib
import json
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "archive"))  # the plan and its samples
from archive_testlib import WORKLOADS, record
from kubernetes import client as kclient
from rbac_testlib import account, apply, exactly
from typer.testing import CliRunner

from kalena.archive import Archive
from kalena.cli.main import app
from kalena.k8s.recommend import (
    VPA_GROUP,
    VPA_PLURAL,
    VPA_VERSION,
    RecommendError,
    publish,
    recommender_rules,
)
from kalena.k8s.render import recommender_objects
from kalena.testing.k8s import ControlPlane, wait_for

pytestmark = pytest.mark.k8s

VPA_CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    # *.k8s.io groups are protected: a CRD there needs this annotation ("unapproved" is allowed)
    "metadata": {"name": f"{VPA_PLURAL}.{VPA_GROUP}",
                 "annotations": {"api-approved.kubernetes.io": "unapproved, a test stand-in for VPA's own"}},
    "spec": {
        "group": VPA_GROUP,
        "scope": "Namespaced",
        "names": {"plural": VPA_PLURAL, "singular": "verticalpodautoscaler", "kind": "VerticalPodAutoscaler"},
        "versions": [{
            "name": VPA_VERSION, "served": True, "storage": True, "subresources": {"status": {}},
            "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
            }}},
        }],
    },
}  # fmt: skip


def deployment(name: str, containers: dict[str, tuple[str, str]]) -> dict[str, Any]:
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": {"containers": [
                {"name": c, "image": "busybox", "resources": {"requests": {"cpu": cpu, "memory": mem}}}
                for c, (cpu, mem) in containers.items()
            ]}},
        },
    }  # fmt: skip


@pytest.fixture
def shop(control_plane: ControlPlane) -> str:
    """Namespace ``shop-*`` with Deployment ``api`` (two containers, cpu 1:3) and no ``db``."""
    cp = control_plane
    apply(cp, [VPA_CRD])
    wait_for("the VPA resource", lambda: _served(cp), 60)
    ns = f"shop-{uuid.uuid4().hex[:6]}"
    cp.ensure_namespace(ns)
    body = deployment("api", {"app": ("250m", "1Gi"), "sidecar": ("750m", "1Gi")})
    kclient.AppsV1Api(cp.client).create_namespaced_deployment(ns, body)
    return ns


def renamed_role(docs: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    out = []
    for d in docs:
        if d["kind"] == "ClusterRole":
            d = {**d, "metadata": {**d["metadata"], "name": name}}
        elif d["kind"] == "ClusterRoleBinding":
            d = {**d, "roleRef": {**d["roleRef"], "name": name}}
        out.append(d)
    return out


def targets(vpa: dict[str, Any]) -> dict[str, dict[str, str]]:
    return {
        c["containerName"]: c["target"] for c in vpa["status"]["recommendation"]["containerRecommendations"]
    }


def _served(cp: ControlPlane) -> bool | None:
    try:
        kclient.CustomObjectsApi(cp.client).list_cluster_custom_object(VPA_GROUP, VPA_VERSION, VPA_PLURAL)
    except kclient.ApiException:
        return None
    return True


def _plan(tmp_path: Path, ns: str) -> tuple[str, Path]:
    where = str(tmp_path / "archive.db")
    record(where)  # written for namespace "shop": the plan is renamed to this test's namespace
    with contextlib.closing(__import__("sqlite3").connect(where)) as db:
        db.execute("UPDATE archive_samples SET workload = replace(workload, 'shop/', ?)", (f"{ns}/",))
        db.commit()
    plan = tmp_path / "w.yaml"
    plan.write_text(WORKLOADS.replace("  shop:", f"  {ns}:"))
    return where, plan


def test_recommendations_become_vpa_objects_as_the_recommenders_own_account(
    control_plane: ControlPlane, shop: str, tmp_path: Path
) -> None:
    cp = control_plane
    where, plan = _plan(tmp_path, shop)
    r = CliRunner().invoke(
        app,
        ["recommend", "--archive", where, "--workloads", str(plan), "--kubernetes",
         "--kubeconfig", str(cp.kubeconfig), "--json"],
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    got = {w["workload"]: w for w in json.loads(r.output)["kubernetes"]}
    assert got[f"{shop}/db"]["outcome"] == "no-deployment"
    assert got[f"{shop}/api"]["outcome"] == "vpa"
    vpa = kclient.CustomObjectsApi(cp.client).get_namespaced_custom_object(
        VPA_GROUP, VPA_VERSION, shop, VPA_PLURAL, "kalena-api"
    )
    assert vpa["spec"]["targetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "api"}
    assert vpa["spec"]["updatePolicy"] == {"updateMode": "Off"}
    recs = {
        c["containerName"]: c["target"] for c in vpa["status"]["recommendation"]["containerRecommendations"]
    }
    # api's p99 of 0..2 cores is ~1.98 x 1.3 = 2.574 cores a pod: 1:3 over its containers; memory
    # 1 GiB x 1.3 = 1.3 GiB, split evenly (both ask 1Gi)
    assert recs == {"app": {"cpu": "644m", "memory": "666Mi"}, "sidecar": {"cpu": "1931m", "memory": "666Mi"}}

    # the recommender's account: exactly its rules, and it can do the whole job as itself
    with contextlib.ExitStack() as grants:
        docs = recommender_objects(f"{shop}-kalena")
        user, groups = grants.enter_context(account(cp, docs, f"{shop}-kalena", shop))
        exactly(cp, user, groups, recommender_rules())
        as_it = cp.api_client_for(user, groups)
        out = publish(as_it, {f"{shop}/api": {"cpu": 1.0, "memory": 2.0}})
        assert [w.outcome for w in out] == ["vpa"]
        with pytest.raises(RecommendError, match="cannot patch its requests: 403"):
            publish(as_it, {f"{shop}/api": {"cpu": 1.0}}, apply=True)
    vpa = kclient.CustomObjectsApi(cp.client).get_namespaced_custom_object(
        VPA_GROUP, VPA_VERSION, shop, VPA_PLURAL, "kalena-api"
    )
    recs = {
        c["containerName"]: c["target"] for c in vpa["status"]["recommendation"]["containerRecommendations"]
    }
    assert recs["app"] == {"cpu": "250m", "memory": "1024Mi"}  # the object updated, not a second one


def test_apply_patches_the_deployments_requests_with_the_apply_rule(
    control_plane: ControlPlane, shop: str, tmp_path: Path
) -> None:
    cp = control_plane
    with contextlib.ExitStack() as grants:
        # its own ClusterRole name: the other test's role (no patch) is cluster-wide and stays
        docs = renamed_role(recommender_objects(f"{shop}-kalena", apply=True), f"kalena-recommender-{shop}")
        user, groups = grants.enter_context(account(cp, docs, f"{shop}-kalena", shop))
        exactly(cp, user, groups, recommender_rules(apply=True))
        out = publish(
            cp.api_client_for(user, groups), {f"{shop}/api": {"cpu": 2.0, "memory": 4.0}}, apply=True
        )
    assert [w.outcome for w in out] == ["applied"]
    dep = kclient.AppsV1Api(cp.client).read_namespaced_deployment("api", shop)
    req = {c.name: c.resources.requests for c in dep.spec.template.spec.containers}
    assert req == {"app": {"cpu": "500m", "memory": "2Gi"}, "sidecar": {"cpu": "1500m", "memory": "2Gi"}}


def test_apply_from_the_cli_goes_through_the_adjustment_book_and_is_audited(
    control_plane: ControlPlane, shop: str, tmp_path: Path
) -> None:
    # --apply accepts first (as Docker's does): the Deployment gets what the book accepted, each
    # patch is an archive event, and a second run finds nothing left to propose or write anew
    cp = control_plane
    where, plan = _plan(tmp_path, shop)
    args = ["recommend", "--archive", where, "--workloads", str(plan), "--kubernetes",
            "--kubeconfig", str(cp.kubeconfig), "--apply", "--json"]  # fmt: skip
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    api = [a for a in doc["adjustments"] if a["workload"] == f"{shop}/api"]
    assert api and all(a["outcome"] == "accepted" for a in api)
    assert {w["workload"]: w["outcome"] for w in doc["kubernetes"]}[f"{shop}/api"] == "applied"
    dep = kclient.AppsV1Api(cp.client).read_namespaced_deployment("api", shop)
    req = {c.name: c.resources.requests for c in dep.spec.template.spec.containers}
    assert req["app"] == {"cpu": "644m", "memory": "666Mi"}  # as the VPA test's figures
    with Archive(where) as a:
        assert a.book([f"{shop}/api"]).epochs[f"{shop}/api"] == len(api)
        (ev,) = [e for e in a.events(workloads=[f"{shop}/api"]) if e.kind == "resize"]
    assert ev.cause == "applied" and ev.data["target"] == "deployment/api"
    assert ev.data["containers"]["sidecar"] == {"cpu": "1931m", "memory": "666Mi"}
    again = json.loads(CliRunner().invoke(app, args).output)
    assert [a for a in again["adjustments"] if a["workload"] == f"{shop}/api"] == []


def test_without_the_vpa_resource_the_error_says_so(control_plane: ControlPlane, tmp_path: Path) -> None:
    cp = control_plane
    ns = f"novpa-{uuid.uuid4().hex[:6]}"
    cp.ensure_namespace(ns)
    kclient.AppsV1Api(cp.client).create_namespaced_deployment(ns, deployment("api", {"app": ("1", "1Gi")}))
    crd = kclient.ApiextensionsV1Api(cp.client)
    with contextlib.suppress(kclient.ApiException):
        crd.delete_custom_resource_definition(f"{VPA_PLURAL}.{VPA_GROUP}")
    wait_for("the VPA resource gone", lambda: True if _served(cp) is None else None, 60)
    with pytest.raises(RecommendError, match="no VerticalPodAutoscaler resource"):
        publish(cp.client, {f"{ns}/api": {"cpu": 1.0}})
