"""Binding throughput: kube-scheduler's own, and Kalena's secondary scheduler's, on one control plane.

One real control plane (:class:`kalena.testing.k8s.ControlPlane`) with ``--nodes`` kwok nodes
(32 cpu, 256 GiB, 110 pods each; kwok's node heartbeats off, as nothing reads them). Three
phases, each with ``--pods`` pods of one kind (100m cpu, 128 MiB), made while nothing would bind
them:

1. **kube-scheduler**: restarted with its profile under another name (so nothing takes
   ``default-scheduler``'s pods), the pods made, then restarted with its own configuration (its
   client's rate limit included: 50 requests/s, bursts of 100);
2. **kube-scheduler unthrottled**: the same, its client's rate limit raised out of the way;
3. **Kalena**: the pods made with ``schedulerName: kalena``, then ``kalena k8s scheduler`` (the
   command, as its own process, as kube-scheduler is) started on every node; kube-scheduler
   stays up beside it, idle (it serves another name), as in a cluster.

A phase's pods are deleted before the next phase, so each scheduler starts on the same cluster
(the nodes and its own pending pods). Each phase is timed from its scheduler's start (the process
spawned: its list of the cluster is inside) to the last pod bound, and from the first bind to the
last (the binding rate once it has started). A pod is bound when this process's watch of the
namespace first sees its ``nodeName``. Also measured: each process's CPU seconds over the phase
(``/proc``: who took the cores), and, at the end, every pod's ``Scheduled`` event counted (none
may be lost). Everything shares the machine's cores: etcd, kube-apiserver, kube-scheduler, kwok
(which marks each bound pod Running: a write per pod in every phase), Kalena and this process's
watch.

    python bench/bench_k8s_binding.py --nodes 5000 --pods 10000
    python bench/bench_k8s_binding.py --nodes 200 --pods 1000 --json /tmp/b.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from kubernetes import client as kclient
from kubernetes import watch as kwatch
from kubernetes.client.exceptions import ApiException

from kalena.testing.k8s import ControlPlane, NodeSpec, tail, wait_for
from machine import machine_info

NS = "bench"
HELD = {"profiles": [{"schedulerName": "bench-held"}]}  # kube-scheduler serving no pod of the bench
TICK = os.sysconf("SC_CLK_TCK")


def pod(name: str, scheduler: str, phase: str) -> dict[str, Any]:
    container = {
        "name": "c",
        "image": "busybox:1",
        "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}},
    }
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"bench-phase": phase}},
            "spec": {"schedulerName": scheduler, "containers": [container]}}  # fmt: skip


class Observer:
    """This process's watch of the namespace's pods: when each was first seen bound, and Running."""

    def __init__(self, core: kclient.CoreV1Api) -> None:
        self.core = core
        self.bound: dict[str, float] = {}  # pod name -> time.monotonic() of its first nodeName
        self.running: set[str] = set()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._follow, daemon=True)
        self.rv = ""

    def start(self) -> None:
        got = json.loads(self.core.list_namespaced_pod(NS, _preload_content=False).data)
        self.rv = got["metadata"]["resourceVersion"]
        self.thread.start()

    def _follow(self) -> None:
        while not self.stop.is_set():
            w = kwatch.Watch()
            try:
                for ev in w.stream(self.core.list_namespaced_pod, NS, resource_version=self.rv,
                                   timeout_seconds=30, deserialize=False):  # fmt: skip
                    obj = ev.get("object") or {}
                    if ev.get("type") == "ERROR":  # 410: the bench missed events; its figures would be wrong
                        raise SystemExit(f"the bench's watch: {obj}")
                    now = time.monotonic()
                    self.rv = obj["metadata"]["resourceVersion"]
                    name = obj["metadata"]["name"]
                    if (obj.get("spec") or {}).get("nodeName") and name not in self.bound:
                        self.bound[name] = now
                    if (obj.get("status") or {}).get("phase") == "Running":
                        self.running.add(name)
            except Exception:  # a broken stream (at the end, the control plane going): from rv again
                self.stop.wait(0.5)
            finally:
                w.stop()

    def wait(self, names: list[str], what: str, timeout: float) -> None:
        """Until every one of ``names`` is seen ``what``; the times are the watch's, so the polling
        is slow and reads only the pods still awaited (this process takes little of the cores)."""
        seen: set[str] | dict[str, float] = self.bound if what == "bound" else self.running
        left = set(names)

        def done() -> bool:
            left.difference_update([n for n in left if n in seen])
            return not left

        wait_for(f"{len(names)} pods {what}", done, timeout, every=0.25)


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of ``pid`` (every thread), 0 if it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / TICK


def cpu_now(pids: dict[str, int]) -> dict[str, float]:
    out = {name: cpu_s(pid) for name, pid in pids.items()}
    out["bench (this process)"] = time.process_time()
    return out


def make_pods(core: kclient.CoreV1Api, names: list[str], scheduler: str, phase: str) -> float:
    t0 = time.monotonic()

    def one(name: str) -> None:
        resp = core.create_namespaced_pod(NS, pod(name, scheduler, phase), _preload_content=False)
        resp.drain_conn()  # read: the connection goes back to the pool
        resp.release_conn()

    with ThreadPoolExecutor(max_workers=6) as pool:
        list(pool.map(one, names))
    return time.monotonic() - t0


def scheduled_events(core: kclient.CoreV1Api, component: str) -> int:
    got = core.list_namespaced_event(NS, field_selector=f"reason=Scheduled,reportingComponent={component}",
                                     _preload_content=False)  # fmt: skip
    return len(json.loads(got.data)["items"])


def phase_result(obs: Observer, names: list[str], started: float, before: dict[str, float],
                 after: dict[str, float]) -> dict[str, Any]:  # fmt: skip
    times = sorted(obs.bound[n] for n in names)
    first, last = times[0], times[-1]
    return {
        "pods": len(names),
        "start_to_first_bind_s": first - started,
        "start_to_last_bind_s": last - started,
        "pods_per_s_from_start": len(names) / (last - started),
        "pods_per_s_first_to_last": (len(names) - 1) / (last - first),
        "cpu_s": {k: after.get(k, 0.0) - before.get(k, 0.0) for k in after},
    }


def kalena_command() -> list[str]:
    script = Path(sys.executable).with_name("kalena")
    if script.exists():
        return [str(script)]
    return [sys.executable, "-c", "from kalena.cli.main import main; main()"]


def unthrottled(cp: ControlPlane) -> dict[str, Any]:
    """kube-scheduler's client without its rate limit (QPS 50, burst 100 by default). The key
    replaces the harness's clientConnection, so its kubeconfig is named again."""
    kubeconfig = cp.work_dir / "kube-scheduler.kubeconfig"  # where ControlPlane writes it
    return {"clientConnection": {"kubeconfig": str(kubeconfig), "qps": 100000, "burst": 100000}}


Start = Callable[[], tuple[float, str, int]]  # starts a scheduler: (time.monotonic(), name, pid)


def phase(cp: ControlPlane, obs: Observer, prefix: str, pods: int, scheduler: str, start: Start,
          component: str, beside: threading.Thread | None = None) -> dict[str, Any]:  # fmt: skip
    """``pods`` pods of ``scheduler`` made, then ``start()`` (and ``beside``), timed to the last bind."""
    core = cp.core
    names = [f"{prefix}-{i:05d}" for i in range(pods)]
    told = scheduled_events(core, component)  # an earlier phase's, of the same component
    made = make_pods(core, names, scheduler, prefix)
    time.sleep(2.0)  # the apiserver settles
    pids = {k: v for k, v in cp.pids().items() if k != "kube-scheduler"}
    before = cpu_now(pids)
    started, name, pid = start()
    pids[name], before[name] = pid, 0.0  # a new process
    if beside is not None:
        beside.start()
    if "kube-scheduler" not in pids:
        pids["kube-scheduler"] = cp.pids()["kube-scheduler"]
        before["kube-scheduler"] = cpu_s(pids["kube-scheduler"])
    obs.wait(names, "bound", 3600)
    out = phase_result(obs, names, started, before, cpu_now(pids))
    out["pods_made_s"], out["started"] = made, started
    obs.wait(names, "Running", 3600)  # kwok's writes done before the next phase
    wait_for(f"{component}'s Scheduled events", lambda: scheduled_events(core, component) - told >= pods,
             600, every=2.0)  # fmt: skip
    out["scheduled_events"] = scheduled_events(core, component) - told
    # gone before the next phase, so that each scheduler starts on the same cluster: the nodes
    # and its own pending pods
    selector = f"bench-phase={prefix}"

    def gone() -> bool:
        try:  # one call deletes what it can within the apiserver's request timeout (then a 504)
            core.delete_collection_namespaced_pod(NS, label_selector=selector, grace_period_seconds=0,
                                                  _preload_content=False)  # fmt: skip
        except ApiException as e:
            if e.status != 504:
                raise
        left = core.list_namespaced_pod(NS, label_selector=selector, limit=1, _preload_content=False)
        return not json.loads(left.data)["items"]

    wait_for(f"the pods of phase {prefix} gone", gone, 1800, every=1.0)
    time.sleep(5.0)  # their deletions' events delivered
    return out


def run(nodes: int, pods: int, tmp: Path) -> dict[str, Any]:
    out: dict[str, Any] = {"nodes": nodes, "pods_per_phase": pods}
    with ControlPlane(node_heartbeat_s=3600.0) as cp:
        t0 = time.monotonic()
        cp.add_nodes([NodeSpec(f"node-{i:05d}") for i in range(nodes)], timeout=3600)
        out["nodes_ready_s"] = time.monotonic() - t0
        cp.ensure_namespace(NS)
        obs = Observer(cp.core)
        obs.start()

        def kube_scheduler(config: dict[str, Any]) -> Start:
            def start() -> tuple[float, str, int]:
                ready_s = cp.restart_scheduler(config)
                return time.monotonic() - ready_s, "kube-scheduler", cp.pids()["kube-scheduler"]

            return start

        for k, (key, config) in enumerate(
            (("kube_scheduler", {}), ("kube_scheduler_unthrottled", unthrottled(cp)))
        ):
            cp.restart_scheduler(HELD)
            out[key] = phase(cp, obs, f"d{k}", pods, "default-scheduler", kube_scheduler(config),
                             "default-scheduler")  # fmt: skip
        cp.restart_scheduler(HELD)  # idle beside Kalena (it still watches every pod)
        log_path = tmp / "kalena-scheduler.log"
        with open(log_path, "wb") as log:
            procs: list[subprocess.Popen[bytes]] = []

            def kalena() -> tuple[float, str, int]:
                t = time.monotonic()
                procs.append(subprocess.Popen(
                    [*kalena_command(), "k8s", "scheduler", "--kubeconfig", str(cp.kubeconfig)],
                    stdout=log, stderr=subprocess.STDOUT,
                ))  # fmt: skip
                return t, "kalena scheduler", procs[0].pid

            listed: list[float] = []

            def said_listed() -> None:  # the command says so once its list of the cluster is in
                while procs[0].poll() is None and not listed:
                    if b"placing" in log_path.read_bytes():
                        listed.append(time.monotonic())
                    time.sleep(0.1)

            try:
                out["kalena"] = phase(cp, obs, "k", pods, "kalena", kalena, "kalena-scheduler",
                                      threading.Thread(target=said_listed, daemon=True))  # fmt: skip
                if listed:
                    out["kalena"]["start_to_listed_s"] = listed[0] - out["kalena"]["started"]
            except BaseException:
                print(f"kalena k8s scheduler's log ends:\n{tail(log_path)}", file=sys.stderr)
                raise
            finally:
                for proc in procs:
                    proc.terminate()
                    proc.wait(60)
            out["kalena_log"] = tail(log_path, 20)
        obs.stop.set()
    k = out["kalena"]
    for key in ("kube_scheduler", "kube_scheduler_unthrottled"):
        d = out[key]
        out[f"ratio_from_start_{key}"] = k["pods_per_s_from_start"] / d["pods_per_s_from_start"]
        out[f"ratio_first_to_last_{key}"] = k["pods_per_s_first_to_last"] / d["pods_per_s_first_to_last"]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=5000)
    ap.add_argument("--pods", type=int, default=10000, help="pods per phase")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    result: dict[str, Any] = {"machine": machine_info(load_1m=os.getloadavg()[0])}
    with tempfile.TemporaryDirectory(prefix="kalena-binding-bench-") as tmp:
        r = result["run"] = run(args.nodes, args.pods, Path(tmp))
    result["machine"]["load_1m_after"] = os.getloadavg()[0]
    print(f"{args.nodes} kwok nodes Ready in {r['nodes_ready_s']:.0f} s; {args.pods} pods per phase")
    labels = {
        "kube_scheduler": "kube-scheduler (its defaults)",
        "kube_scheduler_unthrottled": "kube-scheduler (client unthrottled)",
        "kalena": "Kalena",
    }
    for key, label in labels.items():
        p = r[key]
        print(f"  {label}: {p['pods_per_s_from_start']:.0f} pods/s from its start "
              f"({p['start_to_last_bind_s']:.1f} s; first bind at {p['start_to_first_bind_s']:.1f} s), "
              f"{p['pods_per_s_first_to_last']:.0f} pods/s first to last bind; "
              f"{p['scheduled_events']} Scheduled events")  # fmt: skip
        if "start_to_listed_s" in p:
            print(f"    its list of the cluster in at {p['start_to_listed_s']:.1f} s")
        print("    CPU s: " + ", ".join(f"{n} {s:.1f}" for n, s in p["cpu_s"].items()))
    for key in ("kube_scheduler", "kube_scheduler_unthrottled"):
        print(f"  Kalena / {labels[key]}: {r[f'ratio_from_start_{key}']:.2f} from start, "
              f"{r[f'ratio_first_to_last_{key}']:.2f} first to last bind")  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
