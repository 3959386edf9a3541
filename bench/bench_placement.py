"""Batch placement throughput on a synthetic 5,000-node cluster holding 50,000 workloads.

    python bench/bench_placement.py [--json PATH] [--nodes 5000] [--repeat 3]

Setup (not timed): ``synthetic_cluster`` builds 5,000 nodes and 45,000 production workloads
placed on the request ledger; a bulk estimator update lowers every reservation to 30-90% of its
request; 5,000 batch pods are then scheduled and committed so the ledger holds 50,000 workloads.

Timed: one pass over 5,000 further pending batch pods (100 equivalence classes of 50, some with
nodeSelectors, production anti-affinity, spread, own anti-affinity, one GPU class that must stay
pending). One *decision* is everything for one pending pod: every filter, scoring, choosing the
node and committing it to the ledger (``Ledger.apply`` of its ``PlaceBatch``), or, for a pod
that fits nowhere, building its why-pending answer. Decisions/s = pods / (schedule + apply time).

Four configurations: equivalence-class reuse (class filters, fit cache, score cache) on/off x
relaxed randomisation (stop after 100 feasible nodes in random order) on/off. Each run starts
from the same ledger state (the previous run's placements are removed, untimed) with a fresh
``PlacementCache`` whose node indexes are built before the clock starts (a shell keeps them).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import numpy as np

from kalena.core.ledger import Blueprint, RemoveBatch, restoration_violations
from kalena.core.placement import PlacementCache, PlacementConfig, SchedulingContext, schedule
from kalena.testing.clusters import estimated_reservations, synthetic_cluster
from machine import machine_info  # bench/ is on sys.path when a script runs

CONFIGS = (
    ("reuse+relaxed", True, True),
    ("reuse only", True, False),
    ("relaxed only", False, True),
    ("neither", False, False),
)


def _undo(ledger, placements) -> None:
    for p in placements:
        n = p.node
        r = ledger.apply(RemoveBatch(p.workload.id, n, ledger.node_epoch(n)))
        assert r.accepted, r.reasons


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=5000)
    ap.add_argument("--production", type=int, default=45_000)
    ap.add_argument("--resident-batch", type=int, default=5000)
    ap.add_argument("--pending", type=int, default=5000)
    ap.add_argument("--per-class", type=int, default=50)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", dest="json_path", default=None)
    args = ap.parse_args(argv)

    t = time.perf_counter()
    c = synthetic_cluster(
        args.nodes,
        args.production,
        args.resident_batch + args.pending + 4 * args.per_class,  # spare: GPU classes never place
        seed=args.seed,
        per_class=args.per_class,
    )
    ledger = c.ledger()
    assert ledger.apply(estimated_reservations(ledger, np.random.default_rng(args.seed))).accepted
    ctx = SchedulingContext(now=0.0, images=c.images, volatility=c.volatility)
    # resident = the first ``resident_batch`` placeable pods (GPU pods never place), pending = the next pods
    placeable = np.cumsum([p.requests["gpu"] == 0 for p in c.pending])
    cut = int(np.searchsorted(placeable, args.resident_batch)) + 1
    resident = tuple(p for p in c.pending[:cut] if p.requests["gpu"] == 0)
    pending = c.pending[cut : cut + args.pending]
    warm = schedule(resident, ledger, ctx, PlacementConfig(), np.random.default_rng(args.seed))
    assert all(r.accepted for r in ledger.apply_all(warm.placements))
    blueprint = Blueprint.of(c.nodes, c.production, c.placement)
    setup_s = time.perf_counter() - t
    t = time.perf_counter()
    violations = restoration_violations(ledger, blueprint)
    check_ms = (time.perf_counter() - t) * 1e3
    print(
        f"cluster: {ledger.n_nodes} nodes, {len(ledger)} workloads "
        f"({ledger.production_count} production, {len(ledger) - ledger.production_count} batch); "
        f"{len(pending)} pending in {len({p.equivalence_key for p in pending})} classes; "
        f"setup {setup_s:.1f} s; "
        f"restoration check {check_ms:.1f} ms, {len(violations)} violations"
    )

    results = []
    for label, reuse, relaxed in CONFIGS:
        cfg = PlacementConfig(equivalence_reuse=reuse, relaxed_randomisation=relaxed)
        runs = []
        for rep in range(args.repeat):
            cache = PlacementCache()
            cache.bind(ledger, cfg)
            rng = np.random.default_rng(args.seed + rep)
            t0 = time.perf_counter()
            d = schedule(pending, ledger, ctx, cfg, rng, cache=cache)
            t1 = time.perf_counter()
            applied = ledger.apply_all(d.placements)
            t2 = time.perf_counter()
            accepted = sum(r.accepted for r in applied)
            runs.append(
                {
                    "schedule_s": t1 - t0,
                    "apply_s": t2 - t1,
                    "decisions_per_s": len(pending) / (t2 - t0),
                    "placed": len(d.placements),
                    "accepted": accepted,
                    "pending": len(d.pending),
                    "nodes_examined_per_pod": d.stats.nodes_examined / max(1, len(pending)),
                    "score_cache_hit_rate": d.stats.score_cache_hits
                    / max(1, d.stats.score_cache_hits + d.stats.score_cache_misses),
                }
            )
            assert restoration_violations(ledger, blueprint) == ()
            _undo(ledger, [p for p, r in zip(d.placements, applied, strict=True) if r.accepted])
        rates = [r["decisions_per_s"] for r in runs]
        best = max(runs, key=lambda r: r["decisions_per_s"])
        results.append(
            {
                "config": label,
                "equivalence_reuse": reuse,
                "relaxed": relaxed,
                "runs": runs,
                "median_decisions_per_s": statistics.median(rates),
            }
        )
        print(
            f"{label:>14}: median {statistics.median(rates):7.0f} decisions/s "
            f"(best {best['decisions_per_s']:.0f}; "
            f"schedule {best['schedule_s'] * 1e3:.0f} ms + apply {best['apply_s'] * 1e3:.0f} ms; "
            f"placed {best['placed']}, accepted {best['accepted']}, pending {best['pending']}; "
            f"{best['nodes_examined_per_pod']:.0f} nodes examined/pod; "
            f"score-cache hit rate {best['score_cache_hit_rate']:.2f})"
        )

    if args.json_path:
        doc = {
            "benchmark": "bench_placement",
            "command": " ".join([sys.executable.rsplit("/", 1)[-1], *sys.argv]),
            "machine": machine_info(),
            "params": vars(args)
            | {"workloads_resident": len(ledger), "setup_s": setup_s, "restoration_check_ms": check_ms},
            "results": results,
        }
        with open(args.json_path, "w", encoding="utf-8") as fh:
            json.dump(doc, fh, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
