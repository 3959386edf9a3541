"""The scheduler extender's latency, as kube-scheduler sees it, at 186 and 5,000 nodes.

For each size: a real control plane (:class:`kalena.testing.k8s.ControlPlane`) with that many kwok
nodes (16 cpu, 64 GiB each), ``--pods-per-node`` production pods bound to each node (by
``nodeName``, 1 cpu and 2 GiB each), and a fresh ``NodeReservation`` report per node reserving
each of them at 0.4 cpu; then ``kalena k8s extender`` as its own process (plain HTTP on
loopback), its cache filled by its list and watches. The client is one keep-alive HTTP connection,
as kube-scheduler's; each figure is the wall time of one call, from the request sent to the
answer's last byte received (its decoding, Python's here and Go's in kube-scheduler, is outside).

* ``filter`` / ``prioritize`` of a batch pod (1 cpu, 2 GiB) with ``NodeNames`` (``nodeCacheCapable``):
  every node's name, and at 5,000 nodes also 500 names (kube-scheduler's adaptive
  ``percentageOfNodesToScore`` stops its own filtering at 10% of 5,000 feasible nodes, so 500 is
  what it sends there);
* ``filter`` of a production pod (passed through: the floor of a call);
* ``filter`` of a batch pod with ``Nodes``, the Node objects as the apiserver serves them (no
  ``nodeCacheCapable``: kube-scheduler sends every candidate's full object);
* the rebuild: ``Extender``'s derived view (the view, ``observed_ledger``, the image context),
  timed in this process on a cache synced from the same apiserver, first with every object read,
  then after one pod's event: what the command's thread does beside the calls (at most every
  0.25 s), hence how old the view the calls read is.

    python bench/bench_k8s_extender.py                      # 186 and 5,000 nodes, 300 calls each
    python bench/bench_k8s_extender.py --sizes 186 --calls 100 --json /tmp/e.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import numpy as np
from kubernetes import client as kclient
from kubernetes.client.exceptions import ApiException

from kalena.core.messages import ReservationEntry, ReservationReport
from kalena.core.resources import Resources
from kalena.k8s.cache import ClusterCache
from kalena.k8s.extender import Extender
from kalena.k8s.reports import CRD, GROUP, PLURAL, VERSION, report_object
from kalena.testing.k8s import ControlPlane, NodeSpec, free_ports, wait_for
from machine import machine_info

NS = "bench"


def pod(name: str, cpu: str, mem: str, *, node: str = "", batch: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": NS}
    if batch:
        meta["labels"] = {"kalena.naughtian.io/tier": "batch"}
    spec: dict[str, Any] = {
        "containers": [
            {"name": "c", "image": "busybox:1", "resources": {"requests": {"cpu": cpu, "memory": mem}}}
        ]
    }
    if node:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def populate(cp: ControlPlane, n: int, per_node: int) -> tuple[list[str], float]:
    """``n`` kwok nodes, their production pods and reports; the seconds it took."""
    t0 = time.monotonic()
    names = cp.add_nodes(
        [NodeSpec(f"node-{i:05d}", cpu="16", memory="64Gi", pods="110", labels={"zone": f"z{i % 3}"})
         for i in range(n)], timeout=1800,
    )  # fmt: skip
    cp.ensure_namespace(NS)
    ext = kclient.ApiextensionsV1Api(cp.client)
    ext.create_custom_resource_definition(CRD)
    custom = kclient.CustomObjectsApi(cp.client)
    wait_for("the NodeReservation resource", lambda: _served(custom), 120)
    core = cp.core
    now = time.time()

    def one(node: str) -> None:
        entries = []
        for k in range(per_node):
            name = f"{node}-web-{k}"
            core.create_namespaced_pod(NS, pod(name, "1", "2Gi", node=node), _preload_content=False)
            entries.append(ReservationEntry(f"{NS}/{name}", Resources.from_mapping({"cpu": 0.4, "ram": 1.0})))
        body = report_object(ReservationReport(node, 1, now, tuple(entries)))
        custom.create_cluster_custom_object(GROUP, VERSION, PLURAL, body)

    with ThreadPoolExecutor(max_workers=6) as pool:
        list(pool.map(one, names))
    return names, time.monotonic() - t0


def _served(custom: kclient.CustomObjectsApi) -> bool:
    try:
        custom.list_cluster_custom_object(GROUP, VERSION, PLURAL)
        return True
    except ApiException:
        return False


def kalena_command() -> list[str]:
    script = Path(sys.executable).with_name("kalena")
    return (
        [str(script)]
        if script.exists()
        else [sys.executable, "-c", "from kalena.cli.main import main; main()"]
    )


def quantiles(ms: list[float]) -> dict[str, float]:
    a = np.asarray(ms)
    return {"p50_ms": float(np.percentile(a, 50)), "p99_ms": float(np.percentile(a, 99)),
            "mean_ms": float(a.mean()), "max_ms": float(a.max()), "calls": len(ms)}  # fmt: skip


def timed(http: httpx.Client, url: str, body: bytes, calls: int, check: Any) -> dict[str, float]:
    for _ in range(3):  # warm: the first call after a change builds the view
        check(http.post(url, content=body, headers={"Content-Type": "application/json"}).json())
    ms = []
    for _ in range(calls):
        t = time.perf_counter()
        r = http.post(url, content=body, headers={"Content-Type": "application/json"})  # body read
        ms.append((time.perf_counter() - t) * 1000)
        check(r.json())  # decoded outside the clock: kube-scheduler's Go decoder is not Python's
    return quantiles(ms)


def bench_size(n: int, per_node: int, calls: int, node_calls: int, tmp: Path) -> dict[str, Any]:
    out: dict[str, Any] = {"nodes": n, "production_pods": n * per_node}
    with ControlPlane(node_heartbeat_s=3600.0) as cp:  # no heartbeats to write: the cores are few
        names, out["setup_s"] = populate(cp, n, per_node)
        (port,) = free_ports(1)
        url = f"http://127.0.0.1:{port}"
        log = open(tmp / f"extender-{n}.log", "wb")  # noqa: SIM115 - closed below
        proc = subprocess.Popen(
            [*kalena_command(), "k8s", "extender", "--kubeconfig", str(cp.kubeconfig),
             "--listen", f"127.0.0.1:{port}"],
            stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        try:
            http = httpx.Client(trust_env=False, timeout=120)
            batch = pod("job", "1", "2Gi", batch=True)
            all_names = json.dumps({"Pod": batch, "NodeNames": names}).encode()

            def synced() -> bool:
                try:
                    got = http.post(f"{url}/filter", content=all_names).json()
                except httpx.HTTPError:
                    return False
                return len(got.get("NodeNames") or []) == n

            t0 = time.monotonic()
            wait_for(f"the extender's cache of {n} nodes", synced, 600, every=1.0)
            out["extender_synced_s"] = time.monotonic() - t0

            def passes_all(got: Any) -> None:
                assert len(got["NodeNames"]) == len(json.loads(body_of[0])["NodeNames"]), got

            def scores_all(got: Any) -> None:
                assert (
                    len(got) == len(json.loads(body_of[0])["NodeNames"])
                    and max(h["Score"] for h in got) == 10
                )

            body_of = [all_names]
            out["filter_batch_all"] = timed(http, f"{url}/filter", all_names, calls, passes_all)
            out["prioritize_batch_all"] = timed(http, f"{url}/prioritize", all_names, calls, scores_all)
            if n > 500:
                part = json.dumps({"Pod": batch, "NodeNames": names[:: n // 500][:500]}).encode()
                body_of = [part]
                out["filter_batch_500"] = timed(http, f"{url}/filter", part, calls, passes_all)
                out["prioritize_batch_500"] = timed(http, f"{url}/prioritize", part, calls, scores_all)
            prod = json.dumps({"Pod": pod("web", "1", "2Gi"), "NodeNames": names}).encode()
            body_of = [prod]
            out["filter_production_all"] = timed(http, f"{url}/filter", prod, calls, passes_all)
            node_list = json.loads(cp.core.list_node(_preload_content=False).data)
            with_nodes = json.dumps({"Pod": batch, "Nodes": node_list}).encode()
            out["nodes_body_bytes"] = len(with_nodes)

            def passes_nodes(got: Any) -> None:
                assert len(got["Nodes"]["items"]) == n, len(got["Nodes"]["items"])

            out["filter_batch_nodes"] = timed(http, f"{url}/filter", with_nodes, node_calls, passes_nodes)
            # the rebuild, in this process, on a cache synced from the same apiserver
            cache = ClusterCache(cp.core)
            cache.sync()
            ext = Extender(cache)
            ms = []
            for _ in range(6):  # the first reads every object; the others what one event changes
                t = time.perf_counter()
                ext._build(cache.generation, time.monotonic())
                ms.append((time.perf_counter() - t) * 1000)
                cache.apply_event("pods", "MODIFIED", {**next(iter(cache.pods.values()))})
            out["rebuild_first_ms"] = ms[0]
            out["rebuild"] = quantiles(ms[1:])
        finally:
            proc.terminate()
            proc.wait(30)
            log.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[186, 5000])
    ap.add_argument("--pods-per-node", type=int, default=2)
    ap.add_argument("--calls", type=int, default=300, help="calls per figure")
    ap.add_argument("--node-calls", type=int, default=50, help="calls with the Node objects in the body")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    result: dict[str, Any] = {"machine": machine_info(load_1m=os.getloadavg()[0]), "sizes": []}
    with tempfile.TemporaryDirectory(prefix="kalena-extender-bench-") as tmp:
        for n in args.sizes:
            r = bench_size(n, args.pods_per_node, args.calls, args.node_calls, Path(tmp))
            result["sizes"].append(r)
            setup, synced = r["setup_s"], r["extender_synced_s"]
            print(f"{n} nodes, {r['production_pods']} production pods with reports: set up in {setup:.0f} s, "
                  f"the extender's cache synced in {synced:.1f} s")  # fmt: skip
            for key, v in r.items():
                if isinstance(v, dict):
                    print(f"  {key:24s} p50 {v['p50_ms']:8.2f} ms  p99 {v['p99_ms']:8.2f} ms  "
                          f"mean {v['mean_ms']:8.2f} ms  ({v['calls']} calls)")  # fmt: skip
            print(f"  the Node objects' body: {r['nodes_body_bytes'] / 2**20:.1f} MiB; the first rebuild "
                  f"(every object read) {r['rebuild_first_ms']:.0f} ms")  # fmt: skip
    result["machine"]["load_1m_after"] = os.getloadavg()[0]
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
