"""Kubernetes' pod rules in one pass of Kalena's scheduler: their resolution and the core's filters.

    python bench/bench_k8s_rules.py [--nodes 2000] [--residents 8000] [--pending 10000] [--jobs 100]

Every pass resolves the pending batch pods' required node affinity, pod anti-affinity and hard
spread, and the bound pods' anti-affinity, to names (``kalena.k8s.affinity``), then the core's
``schedule`` keeps them. Timed here on synthetic pods as the API's JSON, as the cache reads them
(``pod_view``): ``--pending`` batch pods in ``--jobs`` jobs (each job one label set, a hostname
anti-affinity to its own pods, a zone spread and a node affinity to two of four zones) beside
``--residents`` production pods (one in twenty with an anti-affinity term against one job), on
``--nodes`` nodes in four zones. The same pass without the rules (the same pods, their affinity
and spread left out) is timed in the same run. Then the worst case for the resolution: the same
number of pending pods, each with a label set of its own. Best of ``--repeat``.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from kalena.core.ledger.observed import observed_ledger
from kalena.core.placement import ContextKeeper, PlacementConfig, schedule
from kalena.k8s.affinity import bind_batch, resolve_pending
from kalena.k8s.objects import PodView, node_spec, pod_view
from machine import write_json  # bench/ is on sys.path when a script runs

ZONE = "topology.kubernetes.io/zone"
HOST = "kubernetes.io/hostname"


def nodes(n: int) -> list[dict[str, Any]]:
    return [
        {
            "metadata": {"name": f"n{i}", "labels": {HOST: f"n{i}", ZONE: "abcd"[i % 4]}},
            "status": {"allocatable": {"cpu": "32", "memory": "128Gi", "pods": "110"}},
        }
        for i in range(n)
    ]


def pod(name: str, labels: dict[str, str], *, node: str = "", rules: dict[str, Any] | None = None) -> dict:
    spec: dict[str, Any] = {
        "containers": [
            {"name": "c", "image": "x", "resources": {"requests": {"cpu": "250m", "memory": "1Gi"}}}
        ],
        **(rules or {}),
    }
    if node:
        spec["nodeName"] = node
    else:
        spec["schedulerName"] = "kalena"
    return {"metadata": {"name": name, "namespace": "jobs", "labels": labels}, "spec": spec}


def job_rules(app: str) -> dict[str, Any]:
    sel = {"matchLabels": {"app": app}}
    zones = {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": ZONE, "operator": "In", "values": ["a", "b"]}]}]
    }
    return {
        "affinity": {
            "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": sel, "topologyKey": HOST}]},
            "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": zones},
        },
        "topologySpreadConstraints": [
            {"maxSkew": 50, "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule", "labelSelector": sel}],
    }  # fmt: skip


def views(args: argparse.Namespace, *, rules: bool, own_labels: bool) -> list[PodView]:
    out = []
    for i in range(args.residents):
        term = {"labelSelector": {"matchLabels": {"app": f"job{i % args.jobs}"}}, "topologyKey": HOST}
        anti = {"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}}
        out.append(
            pod(
                f"p{i}",
                {"app": f"svc{i % 50}"},
                node=f"n{i % args.nodes}",
                rules=anti if i % 20 == 0 else None,
            )
        )
    for i in range(args.pending):
        app = f"job{i % args.jobs}"
        labels = {"app": app, **({"index": str(i)} if own_labels else {})}
        out.append(pod(f"b{i}", labels, rules=job_rules(app) if rules else None))
    return [pod_view(p, batch_scheduler="kalena") for p in out]


def one_pass(node_docs: list[dict[str, Any]], vs: list[PodView]) -> tuple[float, float, int]:
    """(resolution seconds, ledger and schedule seconds, pods placed)."""
    specs = [node_spec(n)[0] for n in node_docs]
    t0 = time.perf_counter()
    residents = [(v.spec, v.node) for v in vs if v.node]
    pending = resolve_pending([v for v in vs if not v.node], residents, specs)
    terms = {v.spec.id: v.anti_affinity for v in vs if v.node and v.anti_affinity}
    residents = bind_batch(residents, [v.spec for v in pending], terms)
    t1 = time.perf_counter()
    ledger, _ = observed_ledger(specs, residents)
    batch = [v.spec for v in pending]
    ctx = ContextKeeper(ledger.node_names).context(0.0, batch)
    d = schedule(batch, ledger, ctx, PlacementConfig(), np.random.default_rng(0))
    return t1 - t0, time.perf_counter() - t1, len(d.placements)


def best(fn: Callable[[], tuple[float, float, int]], repeat: int) -> dict[str, float]:
    runs = [fn() for _ in range(repeat)]
    return {
        "resolve_s": round(min(r[0] for r in runs), 3),
        "ledger_and_schedule_s": round(min(r[1] for r in runs), 3),
        "placed": runs[0][2],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=2000)
    ap.add_argument("--residents", type=int, default=8000)
    ap.add_argument("--pending", type=int, default=10000)
    ap.add_argument("--jobs", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", dest="json_path", default=None)
    args = ap.parse_args()
    node_docs = nodes(args.nodes)
    results = {}
    for name, rules, own in (("with the rules", True, False), ("without them", False, False),
                             ("with the rules, a label set per pod", True, True)):  # fmt: skip
        vs = views(args, rules=rules, own_labels=own)
        results[name] = best(lambda vs=vs: one_pass(node_docs, vs), args.repeat)
        print(name, results[name], flush=True)
    load = os.getloadavg()
    print(json.dumps(results, indent=2))
    write_json(args.json_path, "bench_k8s_rules", vars(args), results, load)


if __name__ == "__main__":
    main()
