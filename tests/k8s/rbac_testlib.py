"""A component's rendered ServiceAccount and rules installed for one test (its own namespace and
ClusterRoleBinding name), and the RBAC judgement of one verb (a SubjectAccessReview)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from kubernetes import client as kclient
from kubernetes import utils as kutils

from kalena.testing.k8s import ControlPlane, wait_for

VERBS = ("get", "list", "watch", "create", "update", "patch", "delete", "deletecollection")


def apply(cp: ControlPlane, docs: list[dict[str, Any]]) -> None:
    for d in docs:
        try:
            kutils.create_from_dict(cp.client, d)
        except kutils.FailToCreateError as e:
            if any(getattr(x, "status", None) != 409 for x in e.api_exceptions):
                raise


@contextmanager
def account(
    cp: ControlPlane, docs: list[dict[str, Any]], ns: str, tag: str
) -> Iterator[tuple[str, list[str]]]:
    """Install ``docs`` (a component's rendered objects for namespace ``ns``; its
    ClusterRoleBindings renamed with ``tag``, so tests do not share them) and yield the account's
    user name and groups, as a ServiceAccount token would carry them."""
    cp.ensure_namespace(ns)
    renamed = []
    for d in docs:
        if d["kind"] == "ClusterRoleBinding":
            d = {**d, "metadata": {"name": f"{d['metadata']['name']}-{tag}"}}
            renamed.append(d["metadata"]["name"])
        apply(cp, [d])
    (sa,) = [d for d in docs if d["kind"] == "ServiceAccount"]
    user = f"system:serviceaccount:{ns}:{sa['metadata']['name']}"
    groups = ["system:serviceaccounts", f"system:serviceaccounts:{ns}", "system:authenticated"]
    # The authorizer learns new bindings from a watch, a moment after they are written: a check
    # made at once can be refused on a loaded machine. Wait until each binding grants a rule of its role.
    for verb, resource, group, sub, where in _first_grants(docs):
        wait_for(
            f"the binding to grant {verb} {resource}",
            lambda v=verb, r=resource, g=group, s=sub, w=where: (
                allowed(cp, user, groups, v, r, g, s, w) or None
            ),
            60,
        )
    try:
        yield user, groups
    finally:
        rbac = kclient.RbacAuthorizationV1Api(cp.client)
        for name in renamed:
            rbac.delete_cluster_role_binding(name)


def _first_grants(docs: list[dict[str, Any]]) -> list[tuple[str, str, str, str, str]]:
    """(verb, resource, group, subresource, namespace) of each binding's role's first general rule."""
    roles = {(d["kind"], d["metadata"]["name"]): d for d in docs if d["kind"] in ("Role", "ClusterRole")}
    out = []
    for b in docs:
        if b["kind"] not in ("RoleBinding", "ClusterRoleBinding"):
            continue
        role = roles.get((b["roleRef"]["kind"], b["roleRef"]["name"]))
        if role is None:
            continue
        # a rule limited to named objects grants no request without a name: take a general one
        rule = next(
            (r for r in role.get("rules", []) if r.get("resources") and not r.get("resourceNames")), None
        )
        if rule is None:
            continue
        resource, _, sub = rule["resources"][0].partition("/")
        where = b["metadata"].get("namespace", "") if b["kind"] == "RoleBinding" else ""
        out.append((rule["verbs"][0], resource, rule["apiGroups"][0], sub, where))
    return out


def allowed(cp: ControlPlane, user: str, groups: list[str], verb: str, resource: str, group: str = "",
            sub: str = "", namespace: str = "") -> bool:  # fmt: skip
    attrs = {"verb": verb, "resource": resource, "group": group, "subresource": sub, "namespace": namespace}
    review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
              "spec": {"user": user, "groups": groups, "resourceAttributes": attrs}}  # fmt: skip
    got = kclient.AuthorizationV1Api(cp.client).create_subject_access_review(review)
    return bool(got.status.allowed)


def exactly(
    cp: ControlPlane, user: str, groups: list[str], rules: list[dict[str, Any]], where: str = ""
) -> None:
    """Every verb of every resource of ``rules`` is granted exactly when the rule names it."""
    for rule in rules:
        for res in rule["resources"]:
            resource, _, sub = res.partition("/")
            for verb in VERBS:
                want = verb in rule["verbs"]
                got = allowed(cp, user, groups, verb, resource, rule["apiGroups"][0], sub, where)
                assert got == want, (user, verb, res, where, "granted" if got else "refused")
