"""The cluster daemon's placement throughput across hosts: jobs placed per second by its tick.

Hosts are reports in the daemon's store (what each host's agent sends: capacity, production's
requests and reservations, no batch yet, a few images), written through the same call as the
HTTP endpoint; the jobs are queued in its store as ``kalena submit`` queues them. One
``Cluster.tick`` takes them in and places them all (the core's schedule on the ledger of the
hosts), saves its state and writes each host's work; the time of that tick, over the jobs placed,
is the figure. No engine is involved: this is the daemon's own cost.

    python bench/bench_cluster_placement.py                    # 2x100, 10x1000, 50x5000
    python bench/bench_cluster_placement.py --json /tmp/place.json
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from kalena.docker.cluster import Cluster, report_into
from kalena.store import Store

CASES = ((2, 100), (10, 1000), (50, 5000))


def run(hosts: int, jobs: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as d:
        db = Store(Path(d) / "cluster.db")
        now = time.time()
        for h in range(hosts):
            status = {
                "capacity": {"cpu": 64.0, "ram": 256.0},
                "production_limits": {"cpu": 16.0, "ram": 64.0},
                "production_reservations": {"cpu": 4.0 + h % 7, "ram": 16.0 + h % 5},
                "batch": [],
                "at": now,
            }
            images = ["app:1"] if h % 2 else ["app:1", "ml:2"]
            report_into(db, f"host-{h:03d}", {"status": status, "images": images, "jobs": {}}, now)
        specs = [
            (f"j{i}", {"name": f"j{i}", "image": "ml:2" if i % 3 else "app:1", "command": ["run"],
                       "priority": i % 5, "requests": {"cpu": 0.5, "ram": 1.0}})
            for i in range(jobs)
        ]  # fmt: skip
        db.submit(specs, now)
        cluster = Cluster(db, lost_after_s=1e9)
        t0 = time.perf_counter()
        placed = cluster.tick()
        dt = time.perf_counter() - t0
        n = sum(len(v) for v in placed.values())
        db.close()
        return {
            "hosts": hosts,
            "jobs": jobs,
            "placed": n,
            "tick_s": round(dt, 3),
            "jobs_per_s": round(n / dt, 1),
        }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    out = [run(h, j) for h, j in CASES]
    for row in out:
        print(json.dumps(row))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
