"""The large-scale run of seed 000 §6.5 on kwok: thousands of nodes, tens of thousands of pods, churn.

A real control plane (:class:`kalena.testing.k8s.ControlPlane`) with ``--nodes`` kwok nodes (32 cpu,
128 GiB each) and ``--per-node`` production pods bound to each (2 cpu, 4 GiB); the node agents are
stubbed, as in Fauxmaster: each node's ``NodeReservation`` reserves its production pods at a
seeded fraction of their cpu request (0.2 to 0.8), written again every ``--report-every`` seconds.
Kalena's secondary scheduler runs as its own process (``kalena k8s scheduler``). Then, for
``--duration`` seconds, churn:

* batch pods (``schedulerName: kalena``, 1 cpu, 2 GiB) are created at ``--rate`` a second, and each
  bound one is deleted after an exponential run time (mean ``--run-s``): the slack fills and frees;
* production pods are deleted and made again on their node at ``--prod-churn`` a second (a
  restart: its report's reservation holds it, its request until the next report);
* reports are rewritten as they come due.

Measured: batch pods bound and their creation-to-bind latency (p50, p99, max: from this client's
create call to the watch event with its node), pods still pending at the end, the scheduler's peak
memory and CPU time. Checked at the end, independently of Kalena's code: on every node, the
batch requests plus production's reservations (the report's, else the request) fit the node's
allocatable cpu; a node that does not is counted as a violation (expected 0).

    python bench/bench_k8s_scale.py                                  # 2,000 nodes, 16,000 production
    python bench/bench_k8s_scale.py --nodes 200 --duration 60 --json /tmp/s.json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
from kubernetes import client as kclient
from kubernetes import watch as kwatch
from kubernetes.client.exceptions import ApiException

from bench_k8s_extender import _served, kalena_command
from kalena.core.messages import ReservationEntry, ReservationReport
from kalena.core.resources import Resources
from kalena.k8s.reports import CRD, GROUP, PLURAL, VERSION, report_object
from kalena.testing.k8s import ControlPlane, NodeSpec, wait_for
from machine import machine_info

NS = "scale"
NODE_CPU, PROD_CPU, BATCH_CPU = 32.0, 2.0, 1.0


def pod(name: str, cpu: float, mem: str, *, node: str = "", batch: bool = False) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": [{"name": "c", "image": "busybox:1",
                        "resources": {"requests": {"cpu": f"{cpu:g}", "memory": mem}}}],
    }  # fmt: skip
    if node:
        spec["nodeName"] = node
    if batch:
        spec["schedulerName"] = "kalena"
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NS}, "spec": spec}


class Stubbed:
    """The node agents' part: each node's production and its reservation fractions, and reports."""

    def __init__(self, cp: ControlPlane, nodes: list[str], per_node: int, seed: int) -> None:
        self.cp, self.nodes = cp, nodes
        rng = random.Random(seed)
        self.prod = {n: [f"{n}-web-{k}" for k in range(per_node)] for n in nodes}
        self.frac = {p: rng.uniform(0.2, 0.8) for ps in self.prod.values() for p in ps}
        self.custom = kclient.CustomObjectsApi(cp.client)
        self.written: dict[str, str] = {}  # node -> resourceVersion

    def report(self, node: str) -> None:
        entries = tuple(
            ReservationEntry(
                f"{NS}/{p}", Resources.from_mapping({"cpu": PROD_CPU * self.frac[p], "ram": 2.0})
            )
            for p in self.prod[node]
        )
        body = report_object(ReservationReport(node, 1, time.time(), entries))
        rv = self.written.get(node)
        if rv is None:
            got = self.custom.create_cluster_custom_object(GROUP, VERSION, PLURAL, body)
        else:
            body["metadata"]["resourceVersion"] = rv
            got = self.custom.replace_cluster_custom_object(GROUP, VERSION, PLURAL, node, body)
        self.written[node] = got["metadata"]["resourceVersion"]


def populate(cp: ControlPlane, n: int, per_node: int, seed: int) -> tuple[Stubbed, float]:
    t0 = time.monotonic()
    nodes = cp.add_nodes(
        [NodeSpec(f"node-{i:05d}", cpu=f"{NODE_CPU:g}", memory="128Gi", pods="110") for i in range(n)],
        timeout=3600,
    )
    cp.ensure_namespace(NS)
    kclient.ApiextensionsV1Api(cp.client).create_custom_resource_definition(CRD)
    stub = Stubbed(cp, nodes, per_node, seed)
    wait_for("the NodeReservation resource", lambda: _served(stub.custom), 120)
    core = cp.core

    def one(node: str) -> None:
        for p in stub.prod[node]:
            core.create_namespaced_pod(NS, pod(p, PROD_CPU, "4Gi", node=node), _preload_content=False)
        stub.report(node)

    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(one, nodes))
    return stub, time.monotonic() - t0


def every(stop: threading.Event, period: float, fn: Callable[[], None], workers: int = 1) -> threading.Thread:
    """``fn`` every ``period`` seconds until ``stop``, on ``workers`` threads (one call taking
    longer than the period must not slow the rate down); an API error is the run's noise."""
    pool = ThreadPoolExecutor(max_workers=workers)
    inflight = threading.Semaphore(workers * 4)  # a bound: a stalled apiserver queues nothing more

    def call() -> None:
        try:
            with contextlib.suppress(ApiException):
                fn()
        finally:
            inflight.release()

    def loop() -> None:
        next_t = time.monotonic()
        while not stop.is_set():
            if inflight.acquire(timeout=1.0):
                pool.submit(call)
            next_t += period
            stop.wait(max(0.0, next_t - time.monotonic()))
        pool.shutdown(wait=True)

    t = threading.Thread(target=loop, daemon=True)
    t.start()
    return t


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return float(line.split()[1]) / 1024
    return float("nan")


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def audit(cp: ControlPlane, stub: Stubbed) -> dict[str, Any]:
    """Every node's batch requests plus production's reservations within its allocatable cpu."""
    pods = json.loads(cp.core.list_namespaced_pod(NS, _preload_content=False).data)["items"]
    reports = {}
    for obj in stub.custom.list_cluster_custom_object(GROUP, VERSION, PLURAL)["items"]:
        rep = obj["spec"]["report"]
        reports.update({e["workload_id"]: e["reservation"].get("cpu", 0.0) for e in rep.get("entries") or []})
    used: dict[str, float] = {}
    for p in pods:
        node = p["spec"].get("nodeName")
        if not node or (p.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        name = f"{NS}/{p['metadata']['name']}"
        batch = p["spec"].get("schedulerName") == "kalena"
        cpu = BATCH_CPU if batch else reports.get(name, PROD_CPU)
        used[node] = used.get(node, 0.0) + cpu
    over = {n: u for n, u in used.items() if u > NODE_CPU * (1 + 1e-9)}
    return {
        "nodes_checked": len(used),
        "violations": len(over),
        "worst_over_cpu": max(over.values(), default=0.0),
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {"nodes": args.nodes, "production_pods": args.nodes * args.per_node}
    rng = random.Random(args.seed)
    with ControlPlane(node_heartbeat_s=3600.0) as cp, tempfile.TemporaryDirectory() as tmp:
        stub, out["setup_s"] = populate(cp, args.nodes, args.per_node, args.seed)
        log = open(Path(tmp) / "scheduler.log", "wb")  # noqa: SIM115 - closed below
        proc = subprocess.Popen(
            [*kalena_command(), "k8s", "scheduler", "--kubeconfig", str(cp.kubeconfig)],
            stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        core = cp.core
        created: dict[str, float] = {}
        bound: dict[str, float] = {}
        lock = threading.Lock()
        stop = threading.Event()

        def watch() -> None:
            w = kwatch.Watch()
            rv = ""
            while not stop.is_set():
                try:
                    for ev in w.stream(core.list_namespaced_pod, NS, resource_version=rv or None,
                                       timeout_seconds=30, deserialize=False):  # fmt: skip
                        obj = ev.get("object") or {}
                        rv = str((obj.get("metadata") or {}).get("resourceVersion") or rv)
                        name = (obj.get("metadata") or {}).get("name", "")
                        if name.startswith("job-") and (obj.get("spec") or {}).get("nodeName"):
                            with lock:
                                bound.setdefault(name, time.monotonic())
                        if stop.is_set():
                            break
                except Exception:
                    rv = ""  # expired or broken: from now on

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        time.sleep(2.0)
        wait_for(
            "the scheduler's first pass",
            lambda: proc.poll() is None and (Path(tmp) / "scheduler.log").stat().st_size > 0,
            600,
        )
        seq = iter(range(10**9))

        def create() -> None:
            with lock:
                name = f"job-{next(seq):06d}"
                created[name] = time.monotonic()
            core.create_namespaced_pod(NS, pod(name, BATCH_CPU, "2Gi", batch=True), _preload_content=False)

        def reap() -> None:
            now = time.monotonic()
            with lock:
                fresh = [n for n in bound if n not in ended]
                for n in fresh:
                    ended[n] = now + rng.expovariate(1.0 / args.run_s)
                due = [n for n, t in ended.items() if t <= now and n not in gone]
            for n in due:
                gone.add(n)
                with contextlib.suppress(ApiException):
                    core.delete_namespaced_pod(n, NS, grace_period_seconds=0, _preload_content=False)

        def restart_production() -> None:
            node = rng.choice(stub.nodes)
            p = rng.choice(stub.prod[node])
            try:
                core.delete_namespaced_pod(p, NS, grace_period_seconds=0, _preload_content=False)
            except ApiException:
                return
            wait_for(f"{p} gone", lambda: _gone(core, p), 30, every=0.05)
            core.create_namespaced_pod(NS, pod(p, PROD_CPU, "4Gi", node=node), _preload_content=False)

        ended: dict[str, float] = {}
        gone: set[str] = set()
        order = list(stub.nodes)
        cursor = [0]
        per_tick = max(1, len(order) // int(args.report_every))

        def reports() -> None:
            with lock:
                due = [order[(cursor[0] + i) % len(order)] for i in range(per_tick)]
                cursor[0] += per_tick
            for node in due:
                stub.report(node)

        cpu0 = cpu_s(proc.pid)
        t0 = time.monotonic()
        threads = [
            every(stop, 1.0 / args.rate, create, workers=8),
            every(stop, 0.5, reap),
            every(stop, 1.0, reports, workers=4),
        ]
        if args.prod_churn > 0:
            threads.append(every(stop, 1.0 / args.prod_churn, restart_production))
        time.sleep(args.duration)
        stop.set()
        for t in threads:
            t.join(timeout=30)
        churn_s = time.monotonic() - t0
        time.sleep(args.settle)  # the last creations' chance to bind
        with lock:
            lat = [(bound[n] - created[n]) * 1000 for n in created if n in bound]
            out["batch_created"] = len(created)
            out["batch_bound"] = len(lat)
            out["batch_pending_at_end"] = len(created) - len(lat)
        out["churn_s"] = churn_s
        out["bind_rate_per_s"] = len(lat) / (churn_s + args.settle)
        if lat:
            a = np.asarray(lat)
            out["latency_ms"] = {"p50": float(np.percentile(a, 50)), "p99": float(np.percentile(a, 99)),
                                 "max": float(a.max())}  # fmt: skip
        out["batch_deleted"] = len(gone)
        listed = json.loads(core.list_namespaced_pod(NS, _preload_content=False).data)["items"]
        out["batch_unbound_in_api"] = sum(
            1 for p in listed if p["metadata"]["name"].startswith("job-") and not p["spec"].get("nodeName")
        )  # the watch's count can miss an event across a reconnect; the API's cannot
        out["scheduler_peak_rss_mib"] = peak_rss_mib(proc.pid)
        out["scheduler_cpu_s"] = cpu_s(proc.pid) - cpu0
        out["audit"] = audit(cp, stub)
        out["total_pods_made"] = out["production_pods"] + len(created)
        proc.terminate()
        proc.wait(60)
        log.close()
        out["scheduler_log_tail"] = (Path(tmp) / "scheduler.log").read_text(errors="replace")[-2000:]
    return out


def _gone(core: kclient.CoreV1Api, name: str) -> bool:
    try:
        core.read_namespaced_pod(name, NS, _preload_content=False)
        return False
    except ApiException as e:
        return e.status == 404


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=2000)
    ap.add_argument("--per-node", type=int, default=8)
    ap.add_argument("--duration", type=float, default=180.0, help="seconds of churn")
    ap.add_argument("--rate", type=float, default=50.0, help="batch pods created a second")
    ap.add_argument("--run-s", type=float, default=60.0, help="mean run time of a bound batch pod")
    ap.add_argument("--prod-churn", type=float, default=2.0, help="production restarts a second")
    ap.add_argument("--report-every", type=float, default=60.0, help="seconds between a node's reports")
    ap.add_argument("--settle", type=float, default=15.0, help="seconds after the churn for the last binds")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    result = {
        "machine": machine_info(),
        "date": time.strftime("%Y-%m-%d"),
        "args": vars(args) | {"json": None},
    }
    result["result"] = run(args)
    text = json.dumps(result, indent=2, default=str)
    print(text)
    if args.json:
        args.json.write_text(text)


if __name__ == "__main__":
    main()
