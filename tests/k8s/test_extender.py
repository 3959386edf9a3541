"""Kalena's scheduler extender: its wire format both ways, its answers, and the real kube-scheduler.

Pure (no control plane): the ``ExtenderArgs`` reader and the 400s naming what is wrong; batch
judged by the core on the cache's ledger (the cache fed through its watch entry point); production
passed through, the Node objects sent back when they came, steered to the blueprint's open slots;
the bearer token on a non-loopback bind; the command's refusals.

On the real control plane (marker ``k8s``): ``kalena k8s extender`` serving HTTPS with client
certificates, kube-scheduler restarted with it as an extender: a batch pod that fits two nodes by
requests lands on the one the reservation ledger allows (kube-scheduler alone prefers the other),
one that fits the ledger nowhere stays pending with Kalena's reason in kube-scheduler's event, a
production pod goes where the blueprint places its declaration, and with the extender killed
scheduling goes on (ignorable).
"""

from __future__ import annotations

import os
import shutil
import signal
import ssl
import subprocess
import sys
import threading
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from k8s_testlib import install_crd, publish, until
from kubernetes import client as kclient
from kubernetes.client.exceptions import ApiException
from typer.testing import CliRunner

from kalena.api.serve import ApiServer, BindRefused, Listen, check_bind, parse_listen
from kalena.cli.main import app
from kalena.core.messages import ReservationEntry, ReservationReport
from kalena.core.placement import PlacementConfig
from kalena.core.resources import Resources
from kalena.ir import IRError, parse_document
from kalena.ir.document import BlueprintDoc
from kalena.k8s.cache import ClusterCache
from kalena.k8s.extender import MAX_AGE_S, BlueprintPreference, Extender, WireError, make_app, parse_args
from kalena.k8s.objects import declaration_of
from kalena.k8s.reports import GROUP, PLURAL, STALE_AFTER_S, VERSION, report_object
from kalena.testing.k8s import ControlPlane, NodeSpec, free_ports

TOKEN = "extender-token-0123456789"
TIER = "kalena.naughtian.io/tier"


# -- objects as the API holds them ----------------------------------------------------------------
def ready_node(name: str, cpu: str = "4", images: tuple[str, ...] = ()) -> dict[str, Any]:
    m = NodeSpec(name, cpu=cpu, memory="16Gi").manifest()
    m["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    if images:
        m["status"]["images"] = [{"names": [i], "sizeBytes": 1} for i in images]
    return m


def pod(
    name: str, cpu: str, *, ns: str = "ns", node: str = "", batch: bool = False, image: str = "busybox:1",
    selector: dict[str, str] | None = None, meta: dict[str, Any] | None = None,
) -> dict[str, Any]:  # fmt: skip
    metadata: dict[str, Any] = {"name": name, "namespace": ns, "uid": f"uid-{ns}-{name}", **(meta or {})}
    if batch:
        metadata.setdefault("labels", {})[TIER] = "batch"
    spec: dict[str, Any] = {
        "containers": [
            {"name": "c", "image": image, "resources": {"requests": {"cpu": cpu, "memory": "64Mi"}}}
        ]
    }
    if node:
        spec["nodeName"] = node
    if selector:
        spec["nodeSelector"] = selector
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec,
            "status": {"phase": "Running" if node else "Pending"}}  # fmt: skip


def fed_cache(nodes: list[dict[str, Any]], pods: list[dict[str, Any]]) -> ClusterCache:
    """A cache given its objects through the watch's own entry point (no apiserver here)."""
    cache = ClusterCache(kclient.CoreV1Api(kclient.ApiClient()))
    for n in nodes:
        cache.apply_event("nodes", "ADDED", n)
    for p in pods:
        cache.apply_event("pods", "ADDED", p)
    return cache


def names(result: list[dict[str, Any]]) -> dict[str, int]:
    return {h["Host"]: h["Score"] for h in result}


BLUEPRINT = """\
apiVersion: kuberina.io/v1
kind: Blueprint
metadata: {{feasible: true, pods: {pods}, activeNodes: {active}}}
solution:
{lines}
"""


def blueprint_text(solution: dict[str, str]) -> str:
    lines = "\n".join(f"  {k}: {v}" for k, v in solution.items())
    return BLUEPRINT.format(pods=len(solution), active=len(set(solution.values())), lines=lines)


# -- the wire format ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("body", "said"),
    [
        ([], "the body must be an ExtenderArgs object, got list"),
        ({"NodeNames": ["a"]}, "Pod: must be a Pod object (missing)"),
        ({"Pod": "x", "NodeNames": ["a"]}, "Pod: must be a Pod object"),
        ({"Pod": {"spec": {}}, "NodeNames": ["a"]}, "Pod.metadata.name: must be a non-empty string"),
        ({"Pod": {"metadata": {"name": "p"}, "spec": []}, "NodeNames": []}, "Pod.spec: must be an object"),
        ({"Pod": {"metadata": {"name": "p"}}}, "NodeNames or Nodes: one is needed"),
        ({"Pod": {"metadata": {"name": "p"}}, "NodeNames": "a"}, "NodeNames: must be a list of node names"),
        ({"Pod": {"metadata": {"name": "p"}}, "NodeNames": ["a", 3]}, "NodeNames: must be a list"),
        ({"Pod": {"metadata": {"name": "p"}}, "Nodes": {"items": {}}}, "Nodes.items: must be a list"),
        (
            {"Pod": {"metadata": {"name": "p"}}, "Nodes": {"items": [{"metadata": {}}]}},
            "Nodes.items[0].metadata.name: must be a non-empty string",
        ),
    ],
)
def test_what_is_not_extender_args_is_refused_naming_the_key(body, said):
    with pytest.raises(WireError) as e:
        parse_args(body)
    assert said in str(e.value)


def test_extender_args_with_node_names_or_node_objects():
    p = pod("p", "1")
    a = parse_args({"Pod": p, "NodeNames": ["a", "b"], "Nodes": None})
    assert a.node_names == ("a", "b") and a.nodes is None
    b = parse_args({"Pod": p, "Nodes": {"metadata": {}, "items": [ready_node("a"), ready_node("b")]}})
    assert b.node_names == ("a", "b") and set(b.nodes or {}) == {"a", "b"}


# -- the answers ----------------------------------------------------------------------------------
def test_batch_is_filtered_and_ranked_by_the_core_on_the_reservation_ledger():
    cache = fed_cache(
        [ready_node("a", "4"), ready_node("b", "2"), ready_node("c", "8", images=("img:2",))],
        [pod("prod", "3", node="a")],
    )
    cache.apply_event("nodes", "MODIFIED", {**ready_node("d"), "spec": {"unschedulable": True}})
    ext = Extender(cache)
    args = parse_args({"Pod": pod("job", "1500m", batch=True, image="img:2"), "NodeNames": list("abcdz")})
    got = ext.filter(args)
    assert got["NodeNames"] == ["b", "c"] and got["Error"] == ""
    assert got["FailedNodes"] == {"a": "Kalena: Insufficient cpu"}  # 3 + 1.5 > 4: the core's reason
    assert got["FailedAndUnresolvableNodes"] == {
        "d": "Kalena: the node is not Ready (or its allocatable cannot be read)",
        "z": "Kalena: a node Kalena has not seen",
    }
    assert "Nodes" not in got  # nodeCacheCapable: names only
    # c holds the image (the core's image locality, weight 3): c is the core's choice
    assert names(ext.prioritize(args)) == {"a": 0, "b": 0, "c": 10, "d": 0, "z": 0}
    # production on the same nodes passes unchanged, with no opinion on where
    prod = parse_args({"Pod": pod("web", "1500m"), "NodeNames": list("abcdz")})
    assert ext.filter(prod) == {
        "NodeNames": list("abcdz"), "FailedNodes": {}, "FailedAndUnresolvableNodes": {}, "Error": ""
    }  # fmt: skip
    assert set(names(ext.prioritize(prod)).values()) == {0}


def test_the_ledger_follows_the_cache_and_a_report():
    cache = fed_cache([ready_node("a", "4"), ready_node("b", "4")], [pod("web", "1", node="a")])
    ext = Extender(cache, refresh_s=0.0)
    args = parse_args({"Pod": pod("job", "2", batch=True), "NodeNames": ["a", "b"]})
    assert ext.filter(args)["NodeNames"] == ["a", "b"]
    entry = ReservationEntry("ns/web", Resources.from_mapping({"cpu": 3.5, "ram": 0.0625}))
    report = report_object(ReservationReport("a", 1, cache.clock(), (entry,)))
    cache.apply_event("reports", "ADDED", report)  # web uses more than it asked for: a is full
    got = ext.filter(args)
    assert got["NodeNames"] == ["b"] and got["FailedNodes"] == {"a": "Kalena: Insufficient cpu"}, got
    cache.apply_event("pods", "ADDED", pod("other", "3", node="b", batch=True))
    got = ext.filter(args)
    assert got["NodeNames"] == [] and set(got["FailedNodes"]) == {"a", "b"}


def test_a_report_that_goes_stale_stops_releasing_slack_without_any_event():
    now = {"t": 1000.0}
    cache = ClusterCache(kclient.CoreV1Api(kclient.ApiClient()), clock=lambda: now["t"])
    for n in (ready_node("a", "4"), ready_node("b", "4")):
        cache.apply_event("nodes", "ADDED", n)
    cache.apply_event("pods", "ADDED", pod("web", "3", node="a"))
    entry = ReservationEntry("ns/web", Resources.from_mapping({"cpu": 1.0, "ram": 0.0625}))
    cache.apply_event("reports", "ADDED", report_object(ReservationReport("a", 1, now["t"], (entry,))))
    ext = Extender(cache, clock=lambda: now["t"])
    args = parse_args({"Pod": pod("job", "2", batch=True), "NodeNames": ["a", "b"]})
    assert ext.filter(args)["NodeNames"] == ["a", "b"]  # web reserved at 1 of its 3: a has room
    now["t"] += STALE_AFTER_S + MAX_AGE_S  # no event: the report is stale, the view old
    got = ext.filter(args)
    assert got["NodeNames"] == ["b"] and got["FailedNodes"] == {"a": "Kalena: Insufficient cpu"}, got


def test_with_its_thread_a_call_is_answered_from_the_last_view_built():
    cache = fed_cache([ready_node("a", "4")], [])
    ext = Extender(cache, refresh_s=0.05)
    stop = threading.Event()
    thread = ext.run(stop)
    try:
        args = parse_args({"Pod": pod("job", "2", batch=True), "NodeNames": ["a"]})
        assert ext.filter(args)["NodeNames"] == ["a"]
        cache.apply_event("pods", "ADDED", pod("web", "3", node="a"))
        assert until(lambda: ext.filter(args)["NodeNames"] == [], 30)  # rebuilt beside the calls
    finally:
        stop.set()
        thread.join(10)
    assert not thread.is_alive()


def test_node_objects_sent_come_back_for_those_that_pass():
    nodes = [ready_node("a", "4"), ready_node("b", "2")]
    ext = Extender(fed_cache(nodes, [pod("prod", "3", node="a")]))
    for p, want in ((pod("job", "1500m", batch=True), ["b"]), (pod("web", "1500m"), ["a", "b"])):
        got = ext.filter(parse_args({"Pod": p, "Nodes": {"items": nodes}}))
        assert got["NodeNames"] == want
        assert got["Nodes"] == {"items": [n for n in nodes if n["metadata"]["name"] in want]}


def test_kalenas_scheduler_name_is_batch_and_daemonset_pods_pass():
    ext = Extender(fed_cache([ready_node("a", "1")], []))
    mine = pod("k", "2")
    mine["spec"]["schedulerName"] = "kalena"
    assert ext.filter(parse_args({"Pod": mine, "NodeNames": ["a"]}))["FailedNodes"] == {
        "a": "Kalena: Insufficient cpu"
    }
    owner = {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "agent", "uid": "u", "controller": True}
    ds = pod("ds", "2", batch=True, meta={"ownerReferences": [owner]})
    assert ext.filter(parse_args({"Pod": ds, "NodeNames": ["a"]}))["NodeNames"] == ["a"]


def test_declarations_of_live_pods():
    rs = {"ownerReferences": [{"kind": "ReplicaSet", "name": "api-5d8f9", "controller": True}],
          "labels": {"pod-template-hash": "5d8f9"}}  # fmt: skip
    assert declaration_of(pod("api-5d8f9-x2x7q", "1", ns="web", meta=rs)) == "web/api"
    sts = {"ownerReferences": [{"kind": "StatefulSet", "name": "db", "controller": True}]}
    assert declaration_of(pod("db-1", "1", ns="data", meta=sts)) == "data/db"
    named = {"annotations": {"kalena.naughtian.io/pod-type": "other/thing"}}
    assert declaration_of(pod("x", "1", meta=named)) == "other/thing"
    assert declaration_of(pod("api-0", "1", ns="web")) == "web/api"  # a bare pod named as IR unrolls
    assert declaration_of(pod("worker", "1", ns="web")) == "web/worker"


def test_the_blueprint_steers_production_to_its_open_slots():
    doc = parse_document(blueprint_text({"web/api-0000": "a", "web/api-0001": "b", "web/db-0": "c"}))
    assert isinstance(doc, BlueprintDoc)
    pref = BlueprintPreference.from_document(doc)
    nodes = [ready_node(n, "8") for n in "abc"]
    rs = {"ownerReferences": [{"kind": "ReplicaSet", "name": "api-77", "controller": True}],
          "labels": {"pod-template-hash": "77"}}  # fmt: skip
    ext = Extender(fed_cache(nodes, [pod("api-77-aaaaa", "1", ns="web", node="b", meta=rs)]), blueprint=pref)
    args = parse_args({"Pod": pod("api-77-bbbbb", "1", ns="web", meta=rs), "NodeNames": list("abc")})
    assert names(ext.prioritize(args)) == {"a": 10, "b": 0, "c": 0}  # b's replica runs already
    assert ext.filter(args)["NodeNames"] == list("abc")  # a preference, never a filter
    other = parse_args({"Pod": pod("cache-0", "1", ns="web"), "NodeNames": list("abc")})
    assert set(names(ext.prioritize(other)).values()) == {0}  # not in the blueprint: no opinion


def test_a_legacy_blueprint_is_refused_with_the_way_out():
    doc = parse_document("solution:\n  api-0: a\n")
    assert isinstance(doc, BlueprintDoc) and doc.legacy
    with pytest.raises(IRError, match="kalena ir convert --to v1"):
        BlueprintPreference.from_document(doc)


# -- over HTTP ------------------------------------------------------------------------------------
@pytest.fixture
def serve():
    servers: list[ApiServer] = []

    def start(ext: Extender, token: str | None = None, host: str = "127.0.0.1") -> str:
        (port,) = free_ports(1)
        server = ApiServer(make_app(ext, token), Listen(host, port))
        server.start()
        servers.append(server)
        return f"http://127.0.0.1:{port}"

    yield start
    for s in servers:
        s.stop()


def test_over_http_bad_input_is_a_400_naming_what_is_wrong(serve):
    url = serve(Extender(fed_cache([ready_node("a")], [])))
    http = httpx.Client(trust_env=False, timeout=30)
    for verb in ("filter", "prioritize"):
        r = http.post(f"{url}/{verb}", content=b'{"Pod": ')
        assert r.status_code == 400 and r.json()["Error"].startswith(f"{verb}: the body is not JSON:"), r.text
        r = http.post(f"{url}/{verb}", json={"Pod": {"metadata": {"name": "p"}}, "NodeNames": [1]})
        assert r.status_code == 400 and r.json() == {
            "Error": f"{verb}: NodeNames: must be a list of node names"
        }
        assert "Traceback" not in r.text
    r = http.post(f"{url}/filter", json={"Pod": pod("p", "1", batch=True), "NodeNames": ["a"]})
    assert r.status_code == 200 and r.json()["NodeNames"] == ["a"]
    r = http.post(f"{url}/prioritize", json={"Pod": pod("p", "1", batch=True), "NodeNames": ["a"]})
    assert r.status_code == 200 and r.json() == [{"Host": "a", "Score": 10}]


def test_without_the_token_a_call_is_refused_on_a_non_loopback_bind(serve):
    url = serve(Extender(fed_cache([ready_node("a")], [])), token=TOKEN, host="0.0.0.0")  # every address
    http = httpx.Client(trust_env=False, timeout=30)
    body = {"Pod": pod("p", "1", batch=True), "NodeNames": ["a"]}
    assert http.get(f"{url}/healthz").status_code == 200  # says nothing but "up"
    for verb in ("filter", "prioritize"):
        r = http.post(f"{url}/{verb}", json=body)
        assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
        assert (
            http.post(f"{url}/{verb}", json=body, headers={"Authorization": "Bearer nope"}).status_code == 401
        )
        ok = http.post(f"{url}/{verb}", json=body, headers={"Authorization": f"Bearer {TOKEN}"})
        assert ok.status_code == 200
    with pytest.raises(BindRefused, match=r"give --token-file \(and --tls-cert/--tls-key\)"):
        check_bind(parse_listen("0.0.0.0:8471"), None, tls="--tls-cert/--tls-key")
    check_bind(parse_listen("0.0.0.0:8471"), None, client_ca=True)  # client certificates authenticate


def test_the_command_refuses_what_it_cannot_serve(tmp_path):
    runner = CliRunner()
    cert = tmp_path / "cert.pem"
    cert.write_text("x")
    token = tmp_path / "token"
    token.write_text(TOKEN)
    bad_bp = tmp_path / "bp.yaml"
    bad_bp.write_text("apiVersion: kuberina.io/v1\nkind: Blueprint\nsolution: [1]\n")
    cases = [
        (["--listen", "0.0.0.0:8471"], "--listen: 0.0.0.0:8471 is not loopback; give --token-file"),
        (["--listen", "unix:/tmp/x.sock"], "kube-scheduler calls HOST:PORT, not a Unix socket"),
        (["--listen", "nope"], "--listen: expected HOST:PORT"),
        (["--tls-cert", str(cert)], "--tls-cert and --tls-key: give both or neither"),
        (["--tls-client-ca", str(cert)], "--tls-client-ca: only with --tls-cert/--tls-key"),
        (["--tls-cert", str(cert), "--tls-key", str(tmp_path / "none")], "--tls-key: no such file"),
        (["--blueprint", str(bad_bp)], str(bad_bp)),
        (["--blueprint", str(tmp_path / "absent.yaml")], "absent.yaml"),
    ]
    for args, said in cases:
        r = runner.invoke(app, ["k8s", "extender", *args, "--duration", "1"])
        assert r.exit_code == 2 and said in r.stderr, (args, r.output)
    # a token off loopback passes the checks; the kubeconfig is what fails then
    r = runner.invoke(app, ["k8s", "extender", "--listen", "0.0.0.0:1", "--token-file", str(token),
                            "--kubeconfig", str(tmp_path / "absent"), "--duration", "1"])  # fmt: skip
    assert r.exit_code == 2 and "--kubeconfig" in r.stderr, r.output


def test_the_command_says_when_the_apiserver_does_not_answer(tmp_path):
    (port,) = free_ports(1)
    kubeconfig = tmp_path / "kubeconfig"
    server = f"https://127.0.0.1:{port}"  # nothing listens there
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "c",
                "clusters": [{"name": "c", "cluster": {"server": server, "insecure-skip-tls-verify": True}}],
                "users": [{"name": "u", "user": {"token": "x"}}],
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
            }
        )
    )
    r = CliRunner().invoke(app, ["k8s", "extender", "--kubeconfig", str(kubeconfig), "--duration", "1"])
    assert r.exit_code == 3 and "kalena k8s extender: the apiserver:" in r.stderr, r.output


# -- on the real control plane --------------------------------------------------------------------
def kalena_command() -> list[str]:
    script = Path(sys.executable).with_name("kalena")
    return (
        [str(script)]
        if script.exists()
        else [sys.executable, "-c", "from kalena.cli.main import main; main()"]
    )


class Extended:
    """The shared control plane with two nodes of Kalena's, ``kalena k8s extender`` serving HTTPS
    with client certificates, and kube-scheduler calling it."""

    def __init__(self, cp: ControlPlane, tmp: Path) -> None:
        self.cp = cp
        tag = uuid.uuid4().hex[:6]
        self.label = {"kalena-ext": tag}
        self.a, self.b = f"ext-{tag}-a", f"ext-{tag}-b"
        self.ns, self.bp_ns = f"ext-{tag}", f"ext-bp-{tag}"
        assert cp.pki is not None
        self.serving = cp.pki.issue(f"extender-{tag}", "kalena-extender", server_ips=["127.0.0.1"])
        self.client_cert = cp.pki.issue(f"extender-client-{tag}", "kube-scheduler-extender-client")
        self.blueprint = tmp / "blueprint.yaml"
        self.blueprint.write_text(blueprint_text({f"{self.bp_ns}/api-0": self.b}))
        (self.port,) = free_ports(1)
        self.url = f"https://127.0.0.1:{self.port}"
        self.log = tmp / "extender.log"
        self.proc: subprocess.Popen[bytes] | None = None
        ctx = ssl.create_default_context(cafile=str(cp.ca))
        ctx.load_cert_chain(*self.client_cert)
        self.http = httpx.Client(verify=ctx, trust_env=False, timeout=30)

    def start_extender(self) -> None:
        cmd = [*kalena_command(), "k8s", "extender", "--kubeconfig", str(self.cp.kubeconfig),
               "--listen", f"127.0.0.1:{self.port}", "--tls-cert", str(self.serving[0]),
               "--tls-key", str(self.serving[1]), "--tls-client-ca", str(self.cp.ca),
               "--node-selector", f"kalena-ext={self.label['kalena-ext']}",
               "--blueprint", str(self.blueprint)]  # fmt: skip
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)

        def up() -> bool:
            assert self.proc is not None and self.proc.poll() is None, self.log.read_text()
            try:
                return self.http.get(f"{self.url}/healthz").status_code == 200
            except httpx.HTTPError:
                return False

        assert until(up, 120), self.log.read_text()

    def kill_extender(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(30)

    def scheduler_config(self) -> dict[str, Any]:
        return {"extenders": [{
            "urlPrefix": self.url, "filterVerb": "filter", "prioritizeVerb": "prioritize", "weight": 5,
            "nodeCacheCapable": True, "ignorable": True, "enableHTTPS": True, "httpTimeout": "10s",
            "tlsConfig": {"caFile": str(self.cp.ca), "certFile": str(self.client_cert[0]),
                          "keyFile": str(self.client_cert[1])},
        }]}  # fmt: skip

    def filter(self, p: dict[str, Any]) -> dict[str, Any]:
        r = self.http.post(f"{self.url}/filter", json={"Pod": p, "NodeNames": [self.a, self.b]})
        assert r.status_code == 200, r.text
        return dict(r.json())

    def create(self, p: dict[str, Any]) -> None:
        ns = p["metadata"]["namespace"]
        body = {**p, "metadata": {k: v for k, v in p["metadata"].items() if k != "uid"}}
        body.pop("status", None)
        self.cp.core.create_namespaced_pod(ns, body)

    def node_of(self, ns: str, name: str) -> str:
        return str(self.cp.wait_for_pods(ns, [name], running=False, timeout=120)[0].spec.node_name)


@pytest.fixture(scope="module")
def extended(control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory):
    cp = control_plane
    e = Extended(cp, tmp_path_factory.mktemp("extender"))
    cp.add_nodes([NodeSpec(e.a, cpu="8", memory="16Gi", labels=e.label),
                  NodeSpec(e.b, cpu="6", memory="16Gi", labels=e.label)])  # fmt: skip
    for ns in (e.ns, e.bp_ns):
        cp.ensure_namespace(ns)
    install_crd(cp)
    # production the default scheduler placed: a holds 1 of 8 cpu, b 3 of 6 by requests
    e.create(pod("web-a", "1", ns=e.ns, node=e.a))
    e.create(pod("web-b", "3", ns=e.ns, node=e.b))
    # a's agent reports web-a using 7.5 cpu: by the reservation ledger a has 0.5 left
    publish(cp, e.a, {f"{e.ns}/web-a": 7.5})
    e.start_extender()
    cp.restart_scheduler(e.scheduler_config())
    try:
        yield e
    finally:
        e.kill_extender()
        cp.restart_scheduler()  # the shared control plane as it was
        for ns in (e.ns, e.bp_ns):
            cp.core.delete_collection_namespaced_pod(ns, grace_period_seconds=0)
        for n in (e.a, e.b):
            cp.core.delete_node(n)
        try:
            kclient.CustomObjectsApi(cp.client).delete_cluster_custom_object(GROUP, VERSION, PLURAL, e.a)
        except ApiException as exc:
            if exc.status != 404:
                raise


def events(cp: ControlPlane, ns: str, name: str) -> list[str]:
    got = cp.core.list_namespaced_event(ns, field_selector=f"involvedObject.name={name}").items
    return [f"{e.reason}: {e.message}" for e in got]


@pytest.mark.k8s
@pytest.mark.slow
@pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl makes the harness's certificates")
class TestWithKubeScheduler:
    def test_only_kube_schedulers_certificate_gets_in(self, extended: Extended):
        plain = httpx.Client(verify=ssl.create_default_context(cafile=str(extended.cp.ca)), trust_env=False)
        with pytest.raises(httpx.HTTPError):  # no client certificate: the handshake is refused
            plain.get(f"{extended.url}/healthz").raise_for_status()
        assert extended.http.get(f"{extended.url}/healthz").json() == {"ok": True}

    def test_batch_lands_where_the_reservation_ledger_fits(self, extended: Extended):
        e, cp, sel = extended, extended.cp, extended.label
        probe = pod("probe", "1", ns=e.ns, batch=True, selector=sel)
        assert until(lambda: e.a in e.filter(probe)["FailedNodes"], 120), (
            e.log.read_text()
        )  # the report is in
        # kube-scheduler alone prefers a (1 of 8 cpu requested, b 3 of 6): production goes there
        e.create(pod("ctl", "1", ns=e.ns, selector=sel))
        assert e.node_of(e.ns, "ctl") == e.a
        # batch fits both by requests (a 2 of 8, b 3 of 6), the reservation ledger only b
        e.create(pod("batch-1", "1", ns=e.ns, batch=True, selector=sel))
        assert e.node_of(e.ns, "batch-1") == e.b
        # 3 cpu: a by requests, but not by the ledger; b not even by requests: it waits, saying why
        e.create(pod("batch-2", "3", ns=e.ns, batch=True, selector=sel))

        def told() -> str | None:
            return next((m for m in events(cp, e.ns, "batch-2") if m.startswith("FailedScheduling")), None)

        assert until(told, 120), events(cp, e.ns, "batch-2")
        said = told() or ""
        assert "1 Kalena: Insufficient cpu" in said and "1 Insufficient cpu" in said, said
        assert not cp.core.read_namespaced_pod("batch-2", e.ns).spec.node_name

    def test_production_goes_where_the_blueprint_places_its_declaration(self, extended: Extended):
        e, sel = extended, extended.label
        # kube-scheduler alone prefers a (a 2 of 8 cpu requested, b 4 of 6): a declaration the
        # blueprint does not name goes there; api (api-0 on b in the blueprint) goes to b
        e.create(pod("other-0", "500m", ns=e.bp_ns, selector=sel))
        assert e.node_of(e.bp_ns, "other-0") == e.a
        e.create(pod("api-0", "500m", ns=e.bp_ns, selector=sel))
        assert e.node_of(e.bp_ns, "api-0") == e.b

    def test_with_the_extender_killed_scheduling_goes_on(self, extended: Extended):
        e, sel = extended, extended.label
        e.kill_extender()
        with pytest.raises(httpx.HTTPError):
            e.http.get(f"{e.url}/healthz", timeout=5)
        # 2 cpu batch: b has 1.5 left by requests, a 5.5 but by the ledger (web-a reserved at 7.5)
        # none: with the extender alive it would wait; the extender ignorable, it is placed on a
        e.create(pod("batch-3", "2", ns=e.ns, batch=True, selector=sel))
        assert e.node_of(e.ns, "batch-3") == e.a
        e.create(pod("after", "250m", ns=e.ns, selector=sel))
        assert e.node_of(e.ns, "after") in (e.a, e.b)


def test_a_placement_config_is_the_cores():
    """The extender takes the core's PlacementConfig: with the image term off, the image no
    longer decides (the scores are the core's weights, not the extender's)."""
    cache = fed_cache([ready_node("a", "4"), ready_node("b", "4", images=("img:1",))], [])
    args = parse_args({"Pod": pod("j", "1", batch=True, image="img:1"), "NodeNames": ["a", "b"]})
    assert names(Extender(cache).prioritize(args)) == {"a": 0, "b": 10}
    flat = Extender(cache, placement=PlacementConfig(image_weight=0.0))
    assert names(flat.prioritize(args)) == {"a": 10, "b": 10}


# -- any body: an answer or a 400, never another exception ----------------------------------------
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=10,
)
CONTAINER = st.fixed_dictionaries(
    {"name": st.text(max_size=3), "image": JSON},
    optional={"resources": JSON | st.fixed_dictionaries(
        {"requests": st.dictionaries(st.sampled_from(["cpu", "memory", "nvidia.com/gpu", "x"]), JSON)})},
)  # fmt: skip
SPEC = st.dictionaries(
    st.sampled_from(["containers", "initContainers", "nodeSelector", "tolerations", "affinity", "overhead",
                     "schedulerName", "topologySpreadConstraints"]),
    JSON, max_size=4,
) | st.fixed_dictionaries({"containers": st.lists(CONTAINER, max_size=2)})  # fmt: skip
META = st.fixed_dictionaries(
    {"name": st.just("p")},
    optional={
        "namespace": JSON,
        "labels": st.dictionaries(st.sampled_from([TIER, "app", "x"]), st.text(max_size=6)) | JSON,
        "annotations": st.dictionaries(
            st.sampled_from(["kalena.naughtian.io/pod-type", "kalena.naughtian.io/slack-cpu", "x"]),
            st.text(max_size=5),
        ),
        "ownerReferences": st.lists(st.dictionaries(st.sampled_from(["kind", "name", "controller"]), JSON)),
    },
)
FUZZ_EXAMPLES = int(os.environ.get("KALENA_FUZZ_EXAMPLES", "200"))
FUZZ_EXTENDER = Extender(fed_cache([ready_node("a")], [pod("w", "1", node="a")]))


@pytest.mark.fuzz
@settings(max_examples=FUZZ_EXAMPLES, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(meta=META, spec=SPEC, nodes=st.lists(st.sampled_from(["a", "b", ""]), max_size=3) | JSON)
def test_any_body_gets_an_answer_or_a_wire_error(meta, spec, nodes):
    ext = FUZZ_EXTENDER
    try:
        args = parse_args({"Pod": {"metadata": meta, "spec": spec}, "NodeNames": nodes})
    except WireError:
        return
    got = ext.filter(args)
    assert set(got["NodeNames"]) | set(got["FailedNodes"]) | set(got["FailedAndUnresolvableNodes"]) == set(
        args.node_names
    )
    assert all(0 <= h["Score"] <= 10 for h in ext.prioritize(args))
