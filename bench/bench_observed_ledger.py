"""A cluster shell's ledger of one pass: ``observed_ledger`` at Kubernetes scale, bulk against the loop.

    python bench/bench_observed_ledger.py [--nodes 2000] [--production 8000] [--batch 15000] [--repeat 5]

The Kubernetes scheduler, its extender and the Docker daemon rebuild their ledger every pass from
what they observe. Timed here on synthetic residents (Irina-like node size, half the pods with a
reservation report): the core's ``observed_ledger`` as shipped (production in one vectorised
step, the bound batch through ``Ledger.place_until_refused``), against the same ledger with its
bound batch placed by the loop that call stands for (``Ledger._place_one_by_one``, one
``PlaceBatch`` each), in the same run; best of ``--repeat``. (Before the bulk loads, production
was added row by row too and the selector index kept from the first row: 0.54 s for the default
sizes on this machine, 2026-12-02.)
"""

from __future__ import annotations

import argparse
import json
import random
import time

import numpy as np

from kalena.core.ledger import Ledger
from kalena.core.ledger import observed as observed_mod
from kalena.core.ledger.observed import observed_ledger
from kalena.core.model import NodeSpec, Tier, WorkloadSpec
from kalena.core.resources import Resources
from machine import machine_info  # bench/ is on sys.path when a script runs


def residents(nodes: int, production: int, batch: int) -> tuple[list[NodeSpec], list, dict]:
    rng = random.Random(0)
    cap = Resources.of(default=float("inf"), cpu=32, ram=128)
    ns = [NodeSpec(f"n{i}", cap) for i in range(nodes)]
    out = []
    for i in range(production):
        labels = {"app": f"a{i % 50}"}
        w = WorkloadSpec(f"prod/p{i}", Resources.of(cpu=1, ram=2), labels=labels, namespace="prod")
        out.append((w, f"n{i % nodes}"))
    for i in range(batch):
        w = WorkloadSpec(f"batch/b{i}", Resources.of(cpu=0.5, ram=1), tier=Tier.BATCH, namespace="batch")
        out.append((w, f"n{rng.randrange(nodes)}"))
    reports = {w.id: Resources.of(cpu=0.3, ram=1) for w, _ in out[::2]}
    return ns, out, reports


def best(fn, repeat: int) -> float:  # type: ignore[no-untyped-def]
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=2000)
    ap.add_argument("--production", type=int, default=8000)
    ap.add_argument("--batch", type=int, default=15000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--json", dest="json_path")
    args = ap.parse_args()
    nodes, res, reports = residents(args.nodes, args.production, args.batch)
    bulk_ledger, _ = observed_ledger(nodes, res, reports)
    bulk = best(lambda: observed_ledger(nodes, res, reports), args.repeat)
    shipped = Ledger.place_until_refused
    Ledger.place_until_refused = Ledger._place_one_by_one  # type: ignore[method-assign]
    try:
        loop_ledger, _ = observed_ledger(nodes, res, reports)
        loop = best(lambda: observed_ledger(nodes, res, reports), args.repeat)
    finally:
        Ledger.place_until_refused = shipped  # type: ignore[method-assign]
    same = np.array_equal(bulk_ledger.reservation_sum, loop_ledger.reservation_sum)
    rows = args.production + args.batch
    print(f"{observed_mod.__name__}.observed_ledger, {args.nodes} nodes, {rows} residents:")
    print(f"  bulk {bulk * 1e3:.0f} ms ({bulk / rows * 1e6:.1f} us/row)")
    print(f"  batch by the loop of PlaceBatch {loop * 1e3:.0f} ms")
    print(f"  loop / bulk = {loop / bulk:.2f}; the same sums: {same}")
    if args.json_path:
        with open(args.json_path, "w") as f:
            json.dump({"machine": machine_info(), "args": vars(args), "bulk_s": bulk, "loop_s": loop}, f)


if __name__ == "__main__":
    main()
