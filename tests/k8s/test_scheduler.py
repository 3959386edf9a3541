"""Kalena's secondary scheduler against the real control plane (kube-apiserver with TLS and RBAC,
kwok nodes): batch pods with ``schedulerName: kalena`` bind only where the ledger fits, with the
``Scheduled`` / ``FailedScheduling`` events and the ``PodScheduled`` condition; a bind against a
stale view gets a 409 (bound by someone else, or the pod made again under its name: the UID
precondition) and is decided again from fresh state, also among many binds in flight at once; a
refused bind leaves the pod pending in the cache; with its watches, a new pod is bound, also
after the apiserver restarted under the running scheduler."""

from __future__ import annotations

import contextlib
import threading
import time
import uuid

import pytest
from k8s_testlib import install_crd, publish, until
from kubernetes import client as kclient
from kubernetes.client.exceptions import ApiException
from typer.testing import CliRunner

from kalena.cli.main import app
from kalena.k8s.render import SCHEDULER_RULES
from kalena.k8s.reports import GROUP, PLURAL, VERSION
from kalena.k8s.scheduler import Scheduler
from kalena.testing.k8s import ControlPlane, NodeSpec

pytestmark = [pytest.mark.k8s, pytest.mark.slow]


def pod(name: str, cpu: str, *, node: str = "", scheduler: str = "kalena") -> dict:
    spec: dict = {
        "schedulerName": scheduler,
        "containers": [
            {"name": "c", "image": "busybox:1", "resources": {"requests": {"cpu": cpu, "memory": "64Mi"}}}
        ],
    }
    if node:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def bind(cp: ControlPlane, ns: str, name: str, node: str) -> None:
    body = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node}}  # fmt: skip
    cp.core.create_namespaced_pod_binding(name, ns, body, _preload_content=False)


def events(cp: ControlPlane, ns: str, name: str) -> list[tuple[str, str]]:
    got = cp.core.list_namespaced_event(ns, field_selector=f"involvedObject.name={name}").items
    return [(e.reason, e.message) for e in got]


def mine(pending: dict[str, str], ns: str) -> dict[str, str]:
    """This test's pods of a pass's pending ones (the control plane is the session's: another
    test's pod may wait too)."""
    return {k: v for k, v in pending.items() if k.startswith(f"{ns}/")}


@pytest.fixture
def cluster(control_plane: ControlPlane):
    tag = uuid.uuid4().hex[:6]
    label = {"kalena-test": tag}
    a, b = f"kal-{tag}-a", f"kal-{tag}-b"
    control_plane.add_nodes([NodeSpec(a, cpu="4", memory="8Gi", labels=label),
                             NodeSpec(b, cpu="2", memory="4Gi", labels=label)])  # fmt: skip
    ns = f"kal-{tag}"
    control_plane.ensure_namespace(ns)
    yield control_plane, ns, a, b, f"kalena-test={tag}"
    control_plane.core.delete_collection_namespaced_pod(ns, grace_period_seconds=0)
    for n in (a, b):
        control_plane.core.delete_node(n)


def test_batch_binds_where_the_ledger_fits_with_events_and_the_condition(cluster):
    cp, ns, a, b, selector = cluster
    cp.core.create_namespaced_pod(ns, pod("prod", "3", node=a, scheduler="default-scheduler"))
    for name, cpu in (("b1", "1500m"), ("b2", "1"), ("b3", "3")):
        cp.core.create_namespaced_pod(ns, pod(name, cpu))
    lines: list[str] = []
    sched = Scheduler(cp.core, node_selector=selector, log=lines.append)
    sched.sync()
    r = sched.pass_once()
    # a: 4 cpu, production holds 3; b: 2 cpu. b1 (1.5) fits only b, then b2 (1) only a; b3 (3) nowhere
    assert r.bound == {f"{ns}/b1": b, f"{ns}/b2": a}
    assert list(mine(r.pending, ns)) == [f"{ns}/b3"] and r.conflicts == []
    why = r.pending[f"{ns}/b3"]
    assert why.startswith("0/2 nodes are available") and "cpu" in why.lower(), why
    cp.wait_for_pods(ns, ["b1", "b2"])  # bound, and kwok runs them
    assert sched.flush()  # the events and the condition are told beside the pass
    assert ("Scheduled", f"Successfully assigned {ns}/b1 to {b}") in events(cp, ns, "b1")
    assert ("FailedScheduling", why) in events(cp, ns, "b3")
    cond = {c.type: c for c in cp.core.read_namespaced_pod_status("b3", ns).status.conditions or []}
    assert cond["PodScheduled"].status == "False" and cond["PodScheduled"].reason == "Unschedulable"
    assert cond["PodScheduled"].message == why
    bound = {c.type: c for c in cp.core.read_namespaced_pod_status("b1", ns).status.conditions or []}
    assert bound["PodScheduled"].status == "True"
    # the same reason is told once
    sched.sync()
    assert mine(sched.pass_once().pending, ns) == {f"{ns}/b3": why}
    assert sched.flush()
    assert [e for e in events(cp, ns, "b3") if e[0] == "FailedScheduling"] == [("FailedScheduling", why)]


def test_a_bind_against_a_stale_view_gets_a_409_and_is_decided_again(cluster):
    cp, ns, _a, b, selector = cluster
    sched = Scheduler(cp.core, node_selector=selector)
    cp.core.create_namespaced_pod(ns, pod("c", "250m"))
    sched.sync()
    bind(cp, ns, "c", b)  # someone else binds it after the scheduler's view was taken
    r = sched.pass_once()
    assert r.conflicts == [f"{ns}/c"] and r.bound == {}
    assert sched.pass_once().bound == {}  # read again: bound, so not Kalena's to place
    ledger, _ = sched.ledger()
    assert f"{ns}/c" in ledger and ledger.node_names[ledger.node_of(f"{ns}/c")] == b
    # the UID precondition: the pod is made again under its name after the view was taken
    cp.core.create_namespaced_pod(ns, pod("d", "250m"))
    sched.sync()
    old = cp.core.read_namespaced_pod("d", ns).metadata.uid
    cp.core.delete_namespaced_pod("d", ns, grace_period_seconds=0)
    assert until(lambda: not [p for p in cp.core.list_namespaced_pod(ns).items if p.metadata.name == "d"])
    cp.core.create_namespaced_pod(ns, pod("d", "250m"))
    new = cp.core.read_namespaced_pod("d", ns).metadata.uid
    assert new != old
    r = sched.pass_once()
    assert r.conflicts == [f"{ns}/d"]
    r = sched.pass_once()  # the fresh pod, by its own UID
    assert f"{ns}/d" in r.bound
    assert cp.core.read_namespaced_pod("d", ns).spec.node_name == r.bound[f"{ns}/d"]


def test_many_binds_in_flight_each_told_once_and_the_stale_ones_decided_again(cluster):
    cp, ns, _a, b, selector = cluster
    names = [f"m{i:02d}" for i in range(24)]
    for n in names:
        cp.core.create_namespaced_pod(ns, pod(n, "100m"))
    sched = Scheduler(cp.core, node_selector=selector)
    assert sched.binders > 1  # the binds of a pass are in flight together
    sched.sync()
    taken = names[:3]
    for n in taken:  # bound by someone else after the view was taken
        bind(cp, ns, n, b)
    r = sched.pass_once()
    assert sorted(r.conflicts) == [f"{ns}/{n}" for n in taken]
    assert set(r.bound) == {f"{ns}/{n}" for n in names[3:]}
    assert sched.flush()
    on = {p.metadata.name: p.spec.node_name for p in cp.core.list_namespaced_pod(ns).items}
    assert all(on[n] == r.bound[f"{ns}/{n}"] for n in names[3:]) and all(on[n] == b for n in taken)
    got = cp.core.list_namespaced_event(ns, field_selector="reason=Scheduled").items
    told = sorted(e.involved_object.name for e in got if e.reporting_component == "kalena-scheduler")
    assert told == names[3:]  # every bound pod once, none of the ones it did not bind
    assert sched.pass_once().bound == {}  # the stale ones read again: bound, not Kalena's to place
    ledger, _ = sched.ledger()
    assert all(ledger.node_names[ledger.node_of(f"{ns}/{n}")] == on[n] for n in names)


def test_a_refused_bind_is_not_counted_bound_and_the_next_pass_binds_it(cluster):
    """A bind the apiserver refuses otherwise than 409 (here RBAC's 403) fails the pass and stops
    the binds not yet sent; the cache never says any of them bound."""
    cp, ns, _a, _b, selector = cluster
    rbac = kclient.RbacAuthorizationV1Api(cp.client)
    user, role = f"{ns}-scheduler", f"{ns}-no-binding"
    no_binding = [r for r in SCHEDULER_RULES if r["resources"] != ["pods/binding"]]
    assert len(no_binding) == len(SCHEDULER_RULES) - 1
    rbac.create_cluster_role({"metadata": {"name": role}, "rules": no_binding})
    rbac.create_cluster_role_binding({
        "metadata": {"name": role},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
    })  # fmt: skip
    try:
        names = [f"r{i}" for i in range(8)]
        for n in names:
            cp.core.create_namespaced_pod(ns, pod(n, "100m"))
        sched = Scheduler(kclient.CoreV1Api(cp.api_client_for(user)), node_selector=selector)

        def synced() -> bool:
            try:
                sched.sync()
                return True
            except ApiException:  # the authorizer has not seen the binding yet
                return False

        assert until(synced)
        with pytest.raises(ApiException) as refused:
            sched.pass_once()
        assert refused.value.status == 403
        ledger, _ = sched.ledger()
        assert not [n for n in names if f"{ns}/{n}" in ledger]
        assert {f"{ns}/{n}" for n in names} <= {v.spec.id for v in sched.view()[2]}
        rbac.patch_cluster_role(role, {"rules": SCHEDULER_RULES})
        done: dict[str, str] = {}

        def binds() -> bool:
            with contextlib.suppress(ApiException):  # still refused: RBAC's cache catches up
                done.update(sched.pass_once().bound)
            return {f"{ns}/{n}" for n in names} <= set(done)

        assert until(binds)
        on = {p.metadata.name: p.spec.node_name for p in cp.core.list_namespaced_pod(ns).items}
        assert all(on[n] == done[f"{ns}/{n}"] for n in names)
        sched.close()
    finally:
        rbac.delete_cluster_role_binding(role)
        rbac.delete_cluster_role(role)


def test_the_watch_loop_survives_an_apiserver_restart_and_places_a_pod_made_after(cluster):
    cp, ns, a, b, selector = cluster
    lines: list[str] = []
    sched = Scheduler(cp.core, node_selector=selector, log=lines.append)
    stop = threading.Event()
    t = threading.Thread(target=sched.run, args=(stop, 0.5), daemon=True)
    t.start()
    try:
        cp.core.create_namespaced_pod(ns, pod("before", "250m"))
        cp.wait_for_pods(ns, ["before"], running=False, timeout=60)
        cp.restart_apiserver()
        assert t.is_alive(), lines

        def made() -> bool:
            try:
                cp.core.create_namespaced_pod(ns, pod("after", "250m"))
                return True
            except ApiException as e:  # ready, yet still starting up a part (a 5xx, say)
                return e.status == 409  # made by an earlier try whose answer was lost
            except Exception:  # the client's kept connections to the old process
                return False

        assert until(made)
        pods = cp.wait_for_pods(ns, ["after"], running=False, timeout=120)
        assert pods[0].spec.node_name in (a, b)
        assert t.is_alive(), lines
    finally:
        stop.set()
        t.join(timeout=60)
    assert not t.is_alive()


def test_with_its_watches_a_new_pod_is_bound(cluster):
    cp, ns, a, b, selector = cluster
    sched = Scheduler(cp.core, node_selector=selector)
    stop = threading.Event()
    t = threading.Thread(target=sched.run, args=(stop, 0.5), daemon=True)
    t.start()
    try:
        time.sleep(1.0)
        cp.core.create_namespaced_pod(ns, pod("w", "500m"))
        pods = cp.wait_for_pods(ns, ["w"], running=False, timeout=60)
        assert pods[0].spec.node_name in (a, b)
    finally:
        stop.set()
        t.join(timeout=30)
    assert not t.is_alive()


def test_the_command_binds_and_a_bad_kubeconfig_is_said(cluster, tmp_path):
    cp, ns, a, b, selector = cluster
    cp.core.create_namespaced_pod(ns, pod("cli", "500m"))
    runner = CliRunner()
    args = ["k8s", "scheduler", "--kubeconfig", str(cp.kubeconfig), "--node-selector", selector]
    r = runner.invoke(app, [*args, "--duration", "4"])
    assert r.exit_code == 0, r.output
    assert cp.core.read_namespaced_pod("cli", ns).spec.node_name in (a, b)
    bad = tmp_path / "kubeconfig"
    bad.write_text("not: [a kubeconfig")
    r = runner.invoke(app, ["k8s", "scheduler", "--kubeconfig", str(bad), "--duration", "1"])
    assert r.exit_code == 2 and f"--kubeconfig {bad}: cannot be used" in r.stderr, r.output


def test_batch_fits_into_the_reservations_the_agents_report_and_only_fresh_ones(cluster):
    """Borg's slack on Kubernetes: production asked for 3 of a's 4 cpu but its agent reports a
    reservation of 1; batch asking for 2 fits only once the report is in, and a stale or
    unreadable report leaves production at its requests (said once)."""
    cp, ns, a, b, selector = cluster
    install_crd(cp)
    cp.core.create_namespaced_pod(ns, pod("web", "3", node=a, scheduler="default-scheduler"))
    cp.core.create_namespaced_pod(ns, pod("web2", "1500m", node=b, scheduler="default-scheduler"))
    cp.core.create_namespaced_pod(ns, pod("big", "2"))
    lines: list[str] = []
    sched = Scheduler(cp.core, node_selector=selector, log=lines.append)
    sched.sync()
    assert mine(sched.pass_once().pending, ns)  # requests only: a has 1 cpu left, b 0.5
    # each step lists again until the write shows: on a loaded machine the apiserver's list can
    # trail a write by a moment (seen once in CI: the fresh report listed as the stale one)
    publish(cp, a, {f"{ns}/web": 1.0}, at=time.time() - 1000)  # a stale report changes nothing

    def stale_seen() -> bool:
        sched.sync()
        assert list(mine(sched.pass_once().pending, ns)) == [f"{ns}/big"]
        return any(f"report of {a} left out: stale" in line for line in lines)

    assert until(stale_seen), lines
    publish(cp, a, {f"{ns}/web": 1.0, f"{ns}/not-here": 0.1})
    passes = []

    def bound() -> bool:
        sched.sync()
        passes.append(sched.pass_once())
        return bool(passes[-1].bound)

    assert until(bound), passes[-1]
    r = passes[-1]
    assert r.bound == {f"{ns}/big": a}, r
    ledger, left = sched.ledger()
    assert left == {}, left
    rows = ledger.rows()
    res = dict(zip(rows.ids, rows.reservations[:, 0], strict=True))
    assert res[f"{ns}/web"] == pytest.approx(1.0) and res[f"{ns}/web2"] == pytest.approx(1.5)
    assert f"{ns}/not-here" not in res  # a report names only its own node's pods
    bad = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "NodeReservation", "metadata": {"name": b},
           "spec": {"report": {"version": 99, "kind": "reservation-report"}}}  # fmt: skip
    kclient.CustomObjectsApi(cp.client).create_cluster_custom_object(GROUP, VERSION, PLURAL, bad)
    sched.sync()
    sched.ledger()
    sched.ledger()
    said = [line for line in lines if f"report of {b} left out: unreadable" in line]
    assert len(said) == 1, lines
    for n in (a, b):
        kclient.CustomObjectsApi(cp.client).delete_cluster_custom_object(GROUP, VERSION, PLURAL, n)


def test_lists_come_from_the_watch_cache_and_an_expired_version_is_listed_afresh(cluster):
    """The first list is the apiserver's watch cache (``resourceVersion=0``: no read of etcd); a
    watch whose version expired (410) is followed by a quorum list (``resourceVersion`` unset) and
    a watch from its version. The 410 is the one part played: the apiserver answers 410 only for
    a version etcd has compacted away (every 5 minutes), so the watch from version 1 is refused
    as it would be then, before it reaches the apiserver; every other call is real."""
    cp, ns, _, _, selector = cluster
    core = kclient.CoreV1Api(cp.core.api_client)
    calls: list[dict] = []
    real = core.list_pod_for_all_namespaces

    def recording(*args, **kwargs):  # the real call, its arguments noted
        calls.append({k: kwargs.get(k) for k in ("watch", "resource_version")})
        if kwargs.get("watch") and kwargs.get("resource_version") == "1":
            raise ApiException(status=410, reason="Gone")  # (played: see the docstring)
        return real(*args, **kwargs)

    core.list_pod_for_all_namespaces = recording  # type: ignore[method-assign]
    sched = Scheduler(core, node_selector=selector)
    sched.sync()
    assert {"watch": None, "resource_version": "0"} in calls
    calls.clear()
    sched.versions["pods"] = "1"  # expired long ago
    stop = threading.Event()
    t = threading.Thread(target=sched.watch, args=("pods", stop, 5), daemon=True)
    t.start()
    try:
        # the watch from 1, its 410, a list without a version, a watch from that list's
        assert until(lambda: sum(1 for c in calls if c["watch"]) >= 2, bound_s=60), calls
    finally:
        stop.set()
        t.join(timeout=30)
    assert calls[0] == {"watch": True, "resource_version": "1"}
    assert calls[1] == {"watch": None, "resource_version": None}, calls
    assert calls[2]["watch"] and calls[2]["resource_version"] not in (None, "", "0", "1"), calls
    cp.core.create_namespaced_pod(ns, pod("seen", "100m"))  # and the cache follows the cluster
    sched.sync()
    assert f"{ns}/seen" in {v.spec.id for v in sched.view()[2]}


def test_a_production_pods_required_anti_affinity_keeps_the_batch_it_selects_away(cluster):
    cp, ns, a, b, selector = cluster
    prod = pod("db", "1", node=a, scheduler="default-scheduler")
    term = {"labelSelector": {"matchLabels": {"app": "noisy"}}, "topologyKey": "kubernetes.io/hostname"}
    prod["spec"]["affinity"] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}
    cp.core.create_namespaced_pod(ns, prod)
    for name in ("noisy", "quiet"):
        p = pod(name, "500m")
        p["metadata"]["labels"] = {"app": name}
        cp.core.create_namespaced_pod(ns, p)
    sched = Scheduler(cp.core, node_selector=selector, log=lambda _line: None)
    sched.sync()
    r = sched.pass_once()
    # both fit either node; the co-location score would put both beside production on a
    assert r.bound == {f"{ns}/noisy": b, f"{ns}/quiet": a}, r.pending


def test_a_batch_pods_own_anti_affinity_spreads_its_replicas_and_the_rest_wait(cluster):
    cp, ns, a, b, selector = cluster
    term = {"labelSelector": {"matchLabels": {"app": "shard"}}, "topologyKey": "kubernetes.io/hostname"}
    for i in range(3):
        p = pod(f"shard-{i}", "200m")
        p["metadata"]["labels"] = {"app": "shard"}
        p["spec"]["affinity"] = {
            "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}
        }
        cp.core.create_namespaced_pod(ns, p)
    sched = Scheduler(cp.core, node_selector=selector, log=lambda _line: None)
    sched.sync()
    r = sched.pass_once()
    assert sorted(r.bound.values()) == sorted([a, b])  # one on each node
    (left,) = mine(r.pending, ns)
    assert "Own anti affinity" in r.pending[left], r.pending[left]
    # bound, they keep the third away by their own terms as well (Kubernetes' symmetric rule)
    cp.wait_for_pods(ns, [k.split("/")[1] for k in r.bound])
    sched.sync()
    again = sched.pass_once()
    assert again.bound == {} and list(mine(again.pending, ns)) == [left]


def test_a_batch_pods_required_pod_affinity_puts_it_beside_what_it_names(cluster):
    cp, ns, a, b, selector = cluster
    for name, node in (("db", a), ("cache", b)):  # production on both nodes
        prod = pod(name, "500m", node=node, scheduler="default-scheduler")
        prod["metadata"]["labels"] = {"app": name}
        cp.core.create_namespaced_pod(ns, prod)
    for name, target in (("reader", "cache"), ("orphan", "absent")):
        p = pod(name, "200m")
        term = {"labelSelector": {"matchLabels": {"app": target}}, "topologyKey": "kubernetes.io/hostname"}
        p["spec"]["affinity"] = {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}
        cp.core.create_namespaced_pod(ns, p)
    sched = Scheduler(cp.core, node_selector=selector, log=lambda _line: None)
    sched.sync()
    r = sched.pass_once()
    assert r.bound == {f"{ns}/reader": b}
    assert "Pod affinity" in mine(r.pending, ns)[f"{ns}/orphan"]  # nothing it names runs anywhere


def test_a_namespace_selector_reads_the_labels_of_the_watched_namespaces(cluster):
    """A required pod affinity scoped by a namespaceSelector follows only the pods of the namespaces
    whose labels it selects: the scheduler lists Namespaces, and its watch sees a label added."""
    cp, ns, a, b, selector = cluster
    other = f"{ns}-other"
    cp.ensure_namespace(other)
    cp.core.patch_namespace(ns, {"metadata": {"labels": {"team": "web"}}})
    cp.core.patch_namespace(other, {"metadata": {"labels": {"team": "ml"}}})
    for where, node in ((ns, a), (other, b)):  # the same production app in both, one on each node
        prod = pod("db", "500m", node=node, scheduler="default-scheduler")
        prod["metadata"]["labels"] = {"app": "db"}
        cp.core.create_namespaced_pod(where, prod)
    term = {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": "kubernetes.io/hostname",
            "namespaceSelector": {"matchLabels": {"team": "ml"}}}  # fmt: skip
    rule = {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}

    def follower(name: str, cpu: str) -> None:
        p = pod(name, cpu)
        p["spec"]["affinity"] = rule
        cp.core.create_namespaced_pod(ns, p)

    stop = threading.Event()
    try:
        follower("small", "200m")
        sched = Scheduler(cp.core, node_selector=selector, log=lambda _line: None)
        sched.sync()
        # only team ml's db counts: node b, though a has more room and this namespace's own db
        assert sched.pass_once().bound == {f"{ns}/small": b}
        sched.watch_all(stop)
        follower("large", "1500m")  # b has 1.3 cpu left: only a could take it
        assert until(lambda: any(v.spec.id == f"{ns}/large" for v in sched.view()[2]), 30)
        r = sched.pass_once()
        assert r.bound == {} and "Pod affinity" in r.pending[f"{ns}/large"], r.pending
        cp.core.patch_namespace(ns, {"metadata": {"labels": {"team": "ml"}}})  # a's db counts now

        def relabelled() -> bool:
            return ((sched.namespaces.get(ns) or {}).get("metadata") or {}).get("labels", {}).get(
                "team"
            ) == "ml"

        assert until(relabelled, 30)
        assert sched.pass_once().bound == {f"{ns}/large": a}
    finally:
        stop.set()
        cp.core.delete_collection_namespaced_pod(other, grace_period_seconds=0)
        cp.core.delete_namespace(other)
