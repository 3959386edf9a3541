"""The test harness's control plane is a real one: the apiserver serves TLS from the harness's CA
and enforces RBAC and the Node authorizer, kwok makes its nodes Ready without the not-ready taint,
the real kube-scheduler binds a plain pod where it fits (and nowhere when it fits nowhere), kwok's
stages run and delete it, and nothing is left running after a stop, a failed test or a failed start."""

from __future__ import annotations

import json
import os
import signal
import socket
import ssl
import urllib.error
import uuid
from pathlib import Path

import pytest
from kubernetes import client as kclient
from kubernetes.client.rest import ApiException
from typer.testing import CliRunner

from kalena.cli.main import app
from kalena.testing.k8s import (
    BUILD_COMMAND,
    NOT_READY_TAINT,
    ControlPlane,
    ControlPlaneError,
    HarnessMissing,
    NodeSpec,
    harness_missing,
    open_url,
    wait_for,
)

WAIT = 120.0  # seconds: the CI machine is loaded
RBAC = "rbac.authorization.k8s.io"


MISSING = harness_missing()
built = pytest.mark.skipif(MISSING is not None, reason=MISSING or "")
needs_harness = [pytest.mark.k8s, built]


def _unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _gone(pid: int) -> bool:
    """Neither the process nor anything in its process group is alive."""
    for probe in (lambda: os.kill(pid, 0), lambda: os.killpg(pid, 0)):
        try:
            probe()
            return False
        except ProcessLookupError:
            pass
    return True


def test_without_the_binaries_the_error_names_them_and_the_build_command(tmp_path):
    (tmp_path / "etcd").write_text("#!/bin/sh\n")
    (tmp_path / "etcd").chmod(0o755)
    with pytest.raises(HarnessMissing) as e:
        ControlPlane(bin_dir=tmp_path)
    msg = str(e.value)
    assert "kube-apiserver, kube-scheduler, kwok missing" in msg and BUILD_COMMAND in msg


def test_the_cli_says_what_to_build_when_the_binaries_are_absent(tmp_path):
    r = CliRunner().invoke(app, ["k8s", "control-plane"], env={"KALENA_K8S_BIN": str(tmp_path)})
    assert r.exit_code == 3, r.output
    assert BUILD_COMMAND in r.stderr and "etcd" in r.stderr


class TestOnTheSharedControlPlane:
    pytestmark = needs_harness

    def test_the_apiserver_serves_tls_from_the_harness_ca(self, control_plane: ControlPlane):
        url = f"{control_plane.api_url}/version"
        # the system's trust store does not know the harness's CA
        with pytest.raises(urllib.error.URLError) as e:
            open_url(url, ssl.create_default_context())
        assert isinstance(e.value.reason, ssl.SSLCertVerificationError)
        ours = ssl.create_default_context(cafile=str(control_plane.ca))
        with open_url(url, ours) as r:  # anonymous may read /version
            assert b'"gitVersion": "v1.36.5"' in r.read()
        host, port = control_plane.api_url.removeprefix("https://").split(":")
        with socket.create_connection((host, int(port)), timeout=10) as raw:
            with ours.wrap_socket(raw, server_hostname=host) as tls:
                issuer = dict(x[0] for x in tls.getpeercert()["issuer"])
            assert issuer == {"commonName": "kalena-harness-ca"}
        # no plain HTTP
        with socket.create_connection((host, int(port)), timeout=10) as plain:
            plain.sendall(b"GET /version HTTP/1.0\r\n\r\n")
            assert plain.recv(200).startswith(b"HTTP/1.0 400")

    def test_anonymous_requests_are_authenticated_as_nobody_and_refused(self, control_plane: ControlPlane):
        ours = ssl.create_default_context(cafile=str(control_plane.ca))
        with pytest.raises(urllib.error.HTTPError) as e:
            open_url(f"{control_plane.api_url}/api/v1/pods", ours)
        assert e.value.code == 403 and b"system:anonymous" in e.value.read()

    def test_rbac_allows_a_minted_user_exactly_what_a_role_grants(self, control_plane: ControlPlane):
        ns, other, user = _unique("rbac"), _unique("rbac-other"), _unique("alice")
        control_plane.ensure_namespace(ns)
        control_plane.ensure_namespace(other)
        alice = kclient.CoreV1Api(control_plane.api_client_for(user, ["kalena-testers"]))
        with pytest.raises(ApiException) as e:
            alice.list_namespaced_pod(ns)
        assert e.value.status == 403
        assert f'User "{user}" cannot list resource "pods"' in json.loads(e.value.body)["message"]

        rbac = kclient.RbacAuthorizationV1Api(control_plane.client)
        rbac.create_namespaced_role(ns, {
            "metadata": {"name": "pod-lister"},
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}],
        })  # fmt: skip
        rbac.create_namespaced_role_binding(ns, {
            "metadata": {"name": "pod-lister"},
            "roleRef": {"apiGroup": RBAC, "kind": "Role", "name": "pod-lister"},
            "subjects": [{"apiGroup": RBAC, "kind": "Group", "name": "kalena-testers"}],
        })  # fmt: skip

        def allowed() -> bool:
            try:
                alice.list_namespaced_pod(ns)
                return True
            except ApiException as e:
                assert e.status == 403, e
                return False

        wait_for("the RoleBinding to take effect", allowed, WAIT)  # RBAC's cache follows a watch
        refused = {
            "get pods": lambda: alice.read_namespaced_pod("any", ns),
            "delete pods": lambda: alice.delete_namespaced_pod("any", ns),
            "list secrets": lambda: alice.list_namespaced_secret(ns),
            "list pods elsewhere": lambda: alice.list_namespaced_pod(other),
        }
        for verb, call in refused.items():
            with pytest.raises(ApiException) as e:
                call()
            assert e.value.status == 403, verb

    def test_the_node_authorizer_is_on(self, control_plane: ControlPlane):
        name, other = control_plane.add_nodes(2, timeout=WAIT)
        node = kclient.CoreV1Api(control_plane.api_client_for(f"system:node:{name}", ["system:nodes"]))
        # no RBAC rule lets system:nodes read nodes: the Node authorizer lets a node read its own only
        assert node.read_node(name).metadata.name == name
        for refused in (lambda: node.read_node(other), lambda: node.list_namespaced_secret("default")):
            with pytest.raises(ApiException) as e:
                refused()
            assert e.value.status == 403
        impostor = kclient.CoreV1Api(
            control_plane.api_client_for(f"system:node:{name}")
        )  # not in system:nodes
        with pytest.raises(ApiException) as e:
            impostor.read_node(name)
        assert e.value.status == 403

    def test_kwok_nodes_become_ready_without_the_not_ready_taint(self, control_plane: ControlPlane):
        pool = _unique("pool")
        specs = [
            NodeSpec(f"{pool}-{i}", cpu="4", memory="8Gi", pods="20", labels={"pool": pool}) for i in range(3)
        ]
        names = control_plane.add_nodes(specs, timeout=WAIT)
        for name in names:
            node = control_plane.core.read_node(name)
            ready = [c for c in node.status.conditions if c.type == "Ready"]
            assert [(c.status, c.reason) for c in ready] == [("True", "KwokReady")]
            assert not any(t.key == NOT_READY_TAINT for t in node.spec.taints or [])
            assert node.status.allocatable == {"cpu": "4", "memory": "8Gi", "pods": "20"}
            assert node.metadata.labels["pool"] == pool

    def test_the_default_scheduler_binds_a_pod_where_it_fits_and_kwok_runs_it(
        self, control_plane: ControlPlane
    ):
        ns, pool = _unique("sched"), _unique("pool")
        control_plane.ensure_namespace(ns)
        small, big = control_plane.add_nodes(
            [NodeSpec(f"{pool}-small", cpu="1", labels={"pool": pool}),
             NodeSpec(f"{pool}-big", cpu="8", labels={"pool": pool})],
            timeout=WAIT,
        )  # fmt: skip

        def pod(name: str, cpu: str) -> dict:
            return {
                "metadata": {"name": name},
                "spec": {
                    "nodeSelector": {"pool": pool},
                    "containers": [{"name": "main", "image": "example/none:1",
                                    "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}],
                },
            }  # fmt: skip

        core = control_plane.core
        core.create_namespaced_pod(ns, pod("fits-big", "2"))
        (running,) = control_plane.wait_for_pods(ns, ["fits-big"], timeout=WAIT)
        assert running.spec.node_name == big  # 2 cpu do not fit the 1-cpu node
        conditions = {c.type: c.status for c in running.status.conditions}
        assert conditions["PodScheduled"] == "True" and conditions["Ready"] == "True"
        (status,) = running.status.container_statuses
        assert status.ready and status.state.running is not None
        events = core.list_namespaced_event(ns, field_selector="involvedObject.name=fits-big").items
        assert any(e.reason == "Scheduled" and big in e.message for e in events)

        core.create_namespaced_pod(ns, pod("fits-nowhere", "100"))

        def unschedulable() -> bool:
            p = core.read_namespaced_pod("fits-nowhere", ns)
            return any(
                c.type == "PodScheduled" and c.reason == "Unschedulable" for c in p.status.conditions or []
            )

        wait_for("fits-nowhere marked Unschedulable", unschedulable, WAIT)
        assert core.read_namespaced_pod("fits-nowhere", ns).spec.node_name is None
        assert small != big

        core.delete_namespaced_pod("fits-big", ns)  # graceful: only kwok's delete stage removes it

        def deleted() -> bool:
            try:
                core.read_namespaced_pod("fits-big", ns)
                return False
            except ApiException as e:
                return e.status == 404

        wait_for("fits-big deleted", deleted, WAIT)


@pytest.mark.k8s
@built
def test_a_failing_test_leaves_no_process_and_no_folder():
    with pytest.raises(RuntimeError, match="the test failed"), ControlPlane() as cp:
        pids = cp.pids()
        work = cp.work_dir
        assert set(pids) == {"etcd", "kube-apiserver", "kube-scheduler", "kwok"}
        assert all(not _gone(p) for p in pids.values())
        raise RuntimeError("the test failed")
    assert all(_gone(p) for p in pids.values()), pids
    assert not work.exists()


@pytest.mark.k8s
@built
def test_a_failed_start_shows_the_log_and_leaves_no_process(tmp_path: Path):
    cp = ControlPlane(work_dir=tmp_path, apiserver_args=["--no-such-flag"])
    with pytest.raises(ControlPlaneError) as e:
        cp.start()
    assert "kube-apiserver exited" in str(e.value) and "unknown flag: --no-such-flag" in str(e.value)
    assert cp.processes == {} and set(cp.spawned) == {"etcd", "kube-apiserver"}
    assert all(_gone(p) for p in cp.spawned.values()), cp.spawned
    assert (tmp_path / "logs" / "kube-apiserver.log").is_file()  # a folder given is kept, logs and all


@pytest.mark.k8s
@built
def test_the_cli_starts_a_control_plane_with_nodes_and_stops_it():
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        r = CliRunner().invoke(app, ["k8s", "control-plane", "--nodes", "2", "--duration", "2"])
    finally:  # the command takes over SIGINT and SIGTERM, as it should; pytest gets them back
        for s, h in handlers.items():
            signal.signal(s, h)
    assert r.exit_code == 0, r.output
    assert "2 kwok nodes Ready" in r.output and "export KUBECONFIG=" in r.output
    kubeconfig = Path(r.output.split("export KUBECONFIG=")[1].split()[0])
    assert not kubeconfig.exists()  # its temporary folder went with it
