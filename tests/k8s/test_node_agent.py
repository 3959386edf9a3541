"""The DaemonSet agent (``kalena.k8s.agent``) on this machine's real cgroups, for pods that kwok
reports on a node named after this host.

No kubelet can run here (no container runtime is reachable), so :class:`Kubelet` below plays its
part, and says so: for each pod it makes the pod's cgroup where the kubelet's cgroupfs driver
puts it (the path is written out here, not asked of Kalena's code), with the pod's process in a
container cgroup below it, and it stops the process when the pod is gone, as the kubelet would
(SIGTERM, SIGKILL after the pod's grace). kwok reports the pods Running and removes deleted
ones; the apiserver (TLS, RBAC) takes the agent's evictions and enforces the
PodDisruptionBudget. kube-controller-manager does not run either, so the test writes the
budget's status as its disruption controller would.

The agent runs as the ServiceAccount ``kalena k8s render`` makes for it, with exactly its rules
(tests/k8s/test_rbac.py shows every further verb refused).

Rounds are driven by the test (``agent.step``), so nothing depends on speed: every wait is a
bound on a hung test.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from k8s_testlib import install_crd, until
from kubernetes import client as kclient
from kubernetes.client.exceptions import ApiException
from kubernetes.utils import parse_quantity
from rbac_testlib import account

from kalena.agent.config import AgentConfig
from kalena.agent.layout import CgroupLayout, LayoutError, detect
from kalena.agent.writer import Knob
from kalena.archive import Archive
from kalena.core.config import PolicyConfig
from kalena.core.enforcement import EscalationConfig, EvictionConfig
from kalena.core.lifecycle import TaskState
from kalena.k8s.agent import build_k8s_agent
from kalena.k8s.render import agent_objects
from kalena.k8s.reports import GROUP, PLURAL, VERSION, read_report
from kalena.testing.k8s import ControlPlane, NodeSpec

pytestmark = [pytest.mark.k8s, pytest.mark.slow]

HOST = socket.gethostname().lower()
MIB = 2**20
LOAD = (sys.executable, "-m", "kalena.agent.loadgen")


def _layout_or_skip() -> CgroupLayout:
    if os.geteuid() != 0:
        pytest.skip("the node agent's test needs root (euid 0) to make the kubelet's cgroups")
    try:
        layout = detect()
    except (OSError, LayoutError) as e:
        pytest.skip(f"no cgroup hierarchy on this host: {e}")
    if layout.home("memory") is None or layout.home("cpu") is None:
        pytest.skip("no cpu or memory controller here")
    return layout


class Kubelet:
    """The kubelet's part for the test's pods (module docstring)."""

    def __init__(self, layout: CgroupLayout, root: str) -> None:
        self.layout, self.root = layout, root
        self.procs: dict[str, list[subprocess.Popen[str]]] = {}  # pod uid -> its processes
        self.cgroups: dict[str, str] = {}  # pod uid -> its cgroup
        self.grace: dict[str, float] = {}
        self.gone: dict[str, float] = {}  # pod uid -> when its SIGTERM was sent

    def dirs(self, cgroup: str) -> list[Path]:
        return [h.dir(cgroup) for h in self.layout.hierarchies]

    def pod_cgroup(self, pod: Any) -> str:
        """The cgroupfs driver's path of the pod (QoS class as the apiserver set it)."""
        qos = pod.status.qos_class
        parent = {
            "Guaranteed": "kubepods",
            "Burstable": "kubepods/burstable",
            "BestEffort": "kubepods/besteffort",
        }
        return f"{self.root}/{parent[qos]}/pod{pod.metadata.uid}"

    def run(self, pod: Any, *load: str) -> subprocess.Popen[str]:
        """Start one of the pod's processes in its container cgroup (made with the pod's; with a
        CPU limit, the pod's and the container's quota written as the kubelet writes them)."""
        uid = pod.metadata.uid
        cg = self.cgroups.setdefault(uid, self.pod_cgroup(pod))
        self.grace[uid] = float(pod.spec.termination_grace_period_seconds or 30)
        for d in self.dirs(f"{cg}/c0"):
            d.mkdir(parents=True, exist_ok=True)
        limit = (pod.spec.containers[0].resources.limits or {}).get("cpu") if uid not in self.procs else None
        cpu = self.layout.home("cpu")
        if limit and cpu is not None:
            quota = int(float(parse_quantity(limit)) * 100_000)
            for d in (cpu.dir(cg), cpu.dir(f"{cg}/c0")):  # the pod's first: v1 checks children
                if (d / "cpu.cfs_quota_us").exists():
                    (d / "cpu.cfs_quota_us").write_text(str(quota))
                elif (d / "cpu.max").exists():
                    (d / "cpu.max").write_text(f"{quota} 100000")
        files = [d / "cgroup.procs" for d in self.dirs(f"{cg}/c0")]

        def enter() -> None:
            for f in files:
                with open(f, "w") as fh:
                    fh.write(str(os.getpid()))

        p = subprocess.Popen(
            [*LOAD, *load], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, preexec_fn=enter
        )
        assert p.stdout is not None and p.stdout.readline().startswith("ready")
        self.procs.setdefault(uid, []).append(p)
        return p

    def sync(self, core: kclient.CoreV1Api) -> None:
        """Stop the processes of pods that are gone from the API (or being deleted)."""
        live = {
            p.metadata.uid
            for p in core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={HOST}").items
            if p.metadata.deletion_timestamp is None
        }
        now = time.monotonic()
        for uid, procs in self.procs.items():
            if uid in live:
                continue
            if uid not in self.gone:
                self.gone[uid] = now
                for p in procs:
                    with contextlib.suppress(ProcessLookupError):
                        p.send_signal(signal.SIGTERM)
            elif now - self.gone[uid] >= self.grace[uid]:
                for p in procs:
                    with contextlib.suppress(ProcessLookupError):
                        p.kill()

    def alive(self, uid: str) -> bool:
        return any(p.poll() is None for p in self.procs.get(uid, []))

    def stop(self) -> None:
        for procs in self.procs.values():
            for p in procs:
                with contextlib.suppress(ProcessLookupError):
                    p.kill()
                with contextlib.suppress(Exception):
                    p.wait(5)
        for h in self.layout.hierarchies:  # deepest first
            top = h.dir(self.root)
            if not top.is_dir():
                continue
            for d in sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
                with contextlib.suppress(OSError):
                    d.rmdir()
            with contextlib.suppress(OSError):
                top.rmdir()


@pytest.fixture
def kubelet() -> Iterator[Kubelet]:
    layout = _layout_or_skip()
    # the kubelet's --cgroup-root: below this process's own memory cgroup, where a sandboxed
    # root may make cgroups (the same absolute name in every hierarchy, as the kubelet's)
    own = (layout.home("memory").own or "/").rstrip("/")  # type: ignore[union-attr]
    k = Kubelet(layout, f"{own}/kalena-kubelet-{uuid.uuid4().hex[:8]}")
    for qos in ("kubepods", "kubepods/burstable", "kubepods/besteffort"):
        for d in k.dirs(f"{k.root}/{qos}"):
            try:
                d.mkdir(parents=True, exist_ok=True)
            except OSError as e:
                k.stop()
                pytest.skip(f"cannot make the kubelet's cgroups in {d}: {e}")
    try:
        yield k
    finally:
        k.stop()


@pytest.fixture
def host_node(control_plane: ControlPlane) -> Iterator[str]:
    """A kwok node named after this host: 2 cores, 512 MiB allocatable."""
    with contextlib.suppress(ApiException):
        control_plane.core.delete_node(HOST)
    control_plane.add_nodes([NodeSpec(HOST, cpu="2", memory="512Mi")])
    install_crd(control_plane)
    try:
        yield HOST
    finally:
        with contextlib.suppress(ApiException):
            control_plane.core.delete_node(HOST)


def make_pod(
    name: str, cpu: str, mem: str, *, batch: bool, limit_mem: str | None = None, limit_cpu: str | None = None
) -> dict:
    res: dict[str, Any] = {"requests": {"cpu": cpu, "memory": mem}}
    limits = {k: v for k, v in (("memory", limit_mem), ("cpu", limit_cpu)) if v}
    if limits:
        res["limits"] = limits
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {
            "nodeName": HOST,  # bound already: who placed it is not the agent's concern
            "schedulerName": "kalena" if batch else "default-scheduler",
            "terminationGracePeriodSeconds": 3,
            "containers": [{"name": "c", "image": "busybox:1", "resources": res}],
        },
    }


def running(core: kclient.CoreV1Api, ns: str, name: str) -> Any:
    got = {}

    def check() -> bool:
        got["pod"] = core.read_namespaced_pod(name, ns)
        return got["pod"].status.phase == "Running"

    assert until(check), f"{ns}/{name} never Running"
    return got["pod"]


def start_agent(
    cp: ControlPlane, ns: str, kubelet: Kubelet, tmp_path: Path, grants: contextlib.ExitStack
) -> tuple[Any, threading.Event]:
    """The agent, started, its watches running, as the ServiceAccount ``kalena k8s render`` makes
    (its grants undone by ``grants``); no minimum run time and a 3 s grace, so the test is short."""
    policy = PolicyConfig(
        eviction=EvictionConfig(min_run_time_s=0, grace_period_s=3, acute_grace_period_s=0),
        escalation=EscalationConfig(rounds=10_000, persist_s=1e9),  # these tests are about eviction
    )
    config = AgentConfig(estimate_interval_s=1.0, policy=policy)
    rendered = [d for d in agent_objects(f"{ns}-kalena") if d["kind"] != "DaemonSet"]
    user, groups = grants.enter_context(account(cp, rendered, f"{ns}-kalena", ns))
    as_agent = kclient.CoreV1Api(cp.api_client_for(user, groups))
    agent, pods = build_k8s_agent(
        as_agent, HOST, tmp_path, config=config, kubelet_root=kubelet.root, layout=kubelet.layout,
        archive=tmp_path / "archive.db",
    )  # fmt: skip
    stop = threading.Event()
    pods.start(stop)
    agent.start()
    return agent, stop


def grow(p: subprocess.Popen[str], mib: int) -> str:
    assert p.stdin is not None and p.stdout is not None
    p.stdin.write(f"grow {mib}\n")
    p.stdin.flush()
    return p.stdout.readline().strip()


def test_the_daemonset_agent_throttles_batch_and_evicts_it_through_the_eviction_api_respecting_a_pdb(
    control_plane: ControlPlane, host_node: str, kubelet: Kubelet, tmp_path: Path
) -> None:
    cp = control_plane
    core = cp.core
    ns = f"agent-{uuid.uuid4().hex[:6]}"
    cp.ensure_namespace(ns)
    web = core.create_namespaced_pod(ns, make_pod("web", "250m", "64Mi", batch=False, limit_mem="480Mi"))
    # a CPU limit: on cgroup v1 its container's cgroup has a quota of its own, which the pod's may
    # not go below (the agent lowers the container's with it)
    spin = core.create_namespaced_pod(ns, make_pod("spin", "500m", "192Mi", batch=True, limit_cpu="2"))
    web, spin = running(core, ns, "web"), running(core, ns, "spin")
    web_mem = kubelet.run(web, "mem", "--mib", "32")
    kubelet.run(spin, "cpu")

    grants = contextlib.ExitStack()
    agent, stop = start_agent(cp, ns, kubelet, tmp_path, grants)

    def step() -> Any:
        r = agent.step(agent.notifier.wait(0.5))
        for hook in agent.after_step:
            hook(agent)
        kubelet.sync(core)
        return r

    try:
        spin_id, web_id = f"{ns}/spin", f"{ns}/web"
        spin_cg = f"{kubelet.root}/kubepods/burstable/pod{spin.metadata.uid}"
        web_cg = f"{kubelet.root}/kubepods/burstable/pod{web.metadata.uid}"
        # production is read from the kubelet's layout; the batch pod is taken as a running job
        assert until(lambda: bool(step() and spin_id in agent.batch.running()), 30)
        assert agent.cgroup_of()[web_id] == web_cg
        assert agent.batch.running()[spin_id].cgroup == spin_cg
        web_quota = agent.writer.current(web_cg, Knob.CPU_QUOTA)  # as the kubelet left it

        # 1. throttle on pressure: production's cpu demand rises, the batch pod's quota comes down
        assert until(lambda: bool(step()) and agent.writer.current(spin_cg, Knob.CPU_QUOTA) is not None, 30)
        q0 = agent.writer.current(spin_cg, Knob.CPU_QUOTA)
        assert q0 is not None and q0 > 0.5
        for _ in range(2):
            kubelet.run(web, "cpu")

        def cut() -> bool:
            step()
            q = agent.writer.current(spin_cg, Knob.CPU_QUOTA)
            return q is not None and q < q0

        assert until(cut, 60), "the batch pod's quota was never cut"
        container = agent.writer.current(f"{spin_cg}/c0", Knob.CPU_QUOTA)
        assert container is not None and container <= agent.writer.current(spin_cg, Knob.CPU_QUOTA)
        lowered = agent.state.nested_originals
        if kubelet.layout.home("cpu").version == 1:  # lowered with the pod, its own limit kept
            assert lowered == {f"{spin_cg}/c0": pytest.approx(2.0)}
        else:  # v2: cpu.max holds along the path, the container's own limit is left as it is
            assert lowered == {}
        throttles = [
            x for x in agent.log.memory if x["kind"] == "throttle" and x["why"]["workload"] == spin_id
        ]
        assert throttles and throttles[-1]["why"]["quota_cores"] < q0

        # the usage archive has both pods' samples and the throttle, with this node's name. The
        # first estimate is the first round's, which has no earlier counter to measure cpu from;
        # the next is due 1 s of the clock later, and on a loaded machine PSI wakes every step, so
        # all of the above can pass within that second (seen once in CI): step on until an
        # estimate with measured cpu is archived.
        def archived() -> bool:
            step()
            with Archive(tmp_path / "archive.db") as arch:
                seen = arch.window([spin_id, web_id], 0.0, time.time() + 60)
            return bool((seen.usage.count[:, 0] > 0).all() and (seen.reservation.count[:, 0] > 0).all())

        assert until(archived, 30), "no estimate with both pods' cpu reached the archive"
        with Archive(tmp_path / "archive.db") as arch:
            kinds = {(e.kind, e.node) for e in arch.events(workloads=[spin_id])}
            assert ("throttle", HOST) in kinds

        # the reservation report is published for Kalena's scheduler: both pods, by namespace/name
        custom = kclient.CustomObjectsApi(cp.client)
        report = read_report(custom.get_cluster_custom_object(GROUP, VERSION, PLURAL, HOST))
        assert {spin_id, web_id} <= {e.workload_id for e in report.entries}

        # 2. a PodDisruptionBudget that forbids evicting the batch pod (its status as the
        # disruption controller would write it: no disruption allowed)
        pdb = {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "spin"},
            "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"app": "spin"}}},
        }
        policy_api = kclient.PolicyV1Api(cp.client)
        made = policy_api.create_namespaced_pod_disruption_budget(ns, pdb)

        def budget(allowed: int) -> None:
            status = {
                "observedGeneration": made.metadata.generation,
                "disruptionsAllowed": allowed,
                "currentHealthy": 1,
                "desiredHealthy": 1 - allowed,
                "expectedPods": 1,
            }
            body = {"status": status}
            policy_api.patch_namespaced_pod_disruption_budget_status("spin", ns, body)

        budget(0)
        # production's memory grows (below its own limit): its reservation no longer leaves room
        # for the batch pod's request on the node's 512 MiB: the ledger breach picks the batch pod
        assert grow(web_mem, 360) == "at 360"

        def refused() -> bool:
            step()
            return any(x["kind"] == "eviction-refused" and x["workload"] == spin_id for x in agent.log.memory)

        assert until(refused, 60), "no eviction was asked"
        line = next(x for x in agent.log.memory if x["kind"] == "eviction-refused")
        assert "disruption budget" in line["detail"] and "429" in line["detail"]
        evict = next(x for x in agent.log.memory if x["kind"] == "evict" and x["workload"] == spin_id)
        assert evict["why"]["cause"] == "reservation-ledger-breach"
        for _ in range(5):  # the budget holds: asked again each round, the pod stays
            step()
        assert core.read_namespaced_pod("spin", ns).metadata.deletion_timestamp is None
        assert kubelet.alive(spin.metadata.uid)
        assert sum(x["kind"] == "eviction-refused" for x in agent.log.memory) == 1  # said once

        # 3. the budget allows one disruption now: the next ask is accepted, the pod goes
        budget(1)

        def evicted() -> bool:
            step()
            return agent.state.task(spin_id) is TaskState.FAILED

        assert until(evicted, 60), f"the batch pod was not evicted: {agent.state.task(spin_id)}"
        states = [t.state for t in agent.state.history(spin_id)]
        assert TaskState.EVICTING in states and TaskState.EVICTED in states
        assert any(x["kind"] == "eviction-accepted" for x in agent.log.memory)
        with pytest.raises(ApiException) as gone:
            core.read_namespaced_pod("spin", ns)
        assert gone.value.status == 404
        assert not kubelet.alive(spin.metadata.uid)
        # production was never evicted, and its cgroup is as the kubelet left it
        assert not any(x["kind"] == "evict" and x["workload"] == web_id for x in agent.log.memory)
        assert kubelet.alive(web.metadata.uid)
    finally:
        agent.shutdown()
        stop.set()
        grants.close()
        for name in (ns, f"{ns}-kalena"):
            with contextlib.suppress(ApiException):
                core.delete_namespace(name)
    assert agent.writer.current(web_cg, Knob.CPU_QUOTA) == web_quota  # restoration


def test_the_limit_breach_override_goes_past_a_pdb_and_says_so(
    control_plane: ControlPlane, host_node: str, kubelet: Kubelet, tmp_path: Path
) -> None:
    """A production pod past its own memory limit (the test's kubelet writes no limits, so its
    process can pass the one it declares) under memory pressure, with a batch pod whose 400 MiB
    request the node's 512 MiB no longer holds beside it: the limit-breach override takes
    precedence over everything (seed 000 §3.3), its PodDisruptionBudget included; the agent
    deletes the pod and its log says which refusal it went past."""
    cp = control_plane
    core = cp.core
    ns = f"agent-{uuid.uuid4().hex[:6]}"
    cp.ensure_namespace(ns)
    core.create_namespaced_pod(ns, make_pod("leak", "100m", "64Mi", batch=False, limit_mem="128Mi"))
    core.create_namespaced_pod(ns, make_pod("fill", "100m", "400Mi", batch=True))
    leak, fill = running(core, ns, "leak"), running(core, ns, "fill")
    proc = kubelet.run(leak, "mem", "--mib", "32")
    kubelet.run(fill, "mem", "--mib", "16")
    policy_api = kclient.PolicyV1Api(cp.client)
    pdb = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "leak"},
        "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"app": "leak"}}},
    }
    made = policy_api.create_namespaced_pod_disruption_budget(ns, pdb)
    status = {"observedGeneration": made.metadata.generation, "disruptionsAllowed": 0,
              "currentHealthy": 1, "desiredHealthy": 1, "expectedPods": 1}  # fmt: skip
    policy_api.patch_namespaced_pod_disruption_budget_status("leak", ns, {"status": status})

    grants = contextlib.ExitStack()
    agent, stop = start_agent(cp, ns, kubelet, tmp_path, grants)
    leak_id = f"{ns}/leak"
    try:
        agent.step()
        # past its 128 MiB limit, and past the 90 % of the node's 512 MiB where its memory trigger is
        assert grow(proc, 480) == "at 480"

        def overridden() -> bool:
            agent.step(agent.notifier.wait(0.5))
            kubelet.sync(core)
            return any(x["kind"] == "eviction-override" for x in agent.log.memory)

        assert until(overridden, 60), [x["kind"] for x in agent.log.memory][-20:]
        evict = next(x for x in agent.log.memory if x["kind"] == "evict" and x["workload"] == leak_id)
        assert evict["why"]["cause"] == "limit-breach"
        line = next(x for x in agent.log.memory if x["kind"] == "eviction-override")
        assert line["workload"] == leak_id and "disruption budget" in line["detail"]
        assert "limit-breach override" in line["detail"]

        def names() -> list[str]:
            return [p.metadata.name for p in core.list_namespaced_pod(ns).items]

        assert until(lambda: "leak" not in names(), 30), names()
        assert evict["victim_order"][0] == leak_id  # the override first, before any batch
    finally:
        agent.shutdown()
        stop.set()
        grants.close()
        for name in (ns, f"{ns}-kalena"):
            with contextlib.suppress(ApiException):
                core.delete_namespace(name)
