"""Docker runtime: what Kalena itself costs on a host with 100 containers (CPU and memory).

``kalena docker serve`` (the agent and the HTTP API in one process, as an operator runs it) on
the local engine with ``--containers`` containers: production ones (``sleep``, each with a small
request label) and ``--batch`` batch jobs queued with ``kalena submit``'s store, all of them
running. After a warm-up, the process's CPU time (``/proc/PID/stat``: user + system) is read over
``--window`` seconds, its resident memory (``VmRSS``, peak ``VmHWM``) at the end, and
``/metrics`` is scraped every 5 s meanwhile (its latency is reported too).

    python bench/bench_docker_overhead.py                         # 100 containers, 60 s
    python bench/bench_docker_overhead.py --containers 100 --batch 10 --window 120 --json /tmp/o.json

Needs root and a Docker engine (``scripts/start-dockerd.sh``).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np
import yaml

from docker_bench import arguments, engine_and_image
from kalena.docker.cgroups import remove_empty_tree
from kalena.store import Store

P = "kalena.naughtian.io/"
TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK  # utime, stime


def memory_kib(pid: int) -> dict[str, int]:
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(rest.split()[0])
    return out


def main() -> None:
    ap = arguments(__doc__)
    ap.add_argument("--containers", type=int, default=100)
    ap.add_argument("--batch", type=int, default=10)
    ap.add_argument("--window", type=float, default=60.0)
    ap.add_argument("--warmup", type=float, default=15.0)
    args = ap.parse_args()
    engine, image, tag = engine_and_image(args.endpoint)
    root = "/kalena"  # docker serve's own root, as an operator runs it
    work = Path(tempfile.mkdtemp(prefix="kalena-bench-"))
    prod = [f"bench-{tag}-{i}" for i in range(args.containers - args.batch)]
    labels = {P + "request.cpu": "10m", P + "request.ram": "8Mi"}
    t0 = time.perf_counter()
    for name in prod:
        engine.api.create_container(image, ["sleep", "3600"], name=name, labels=labels)
        engine.start(name)
    made_s = time.perf_counter() - t0
    decl = work / "node.yaml"
    decl.write_text(
        yaml.safe_dump(
            {"apiVersion": "kalena.naughtian.io/v1alpha1", "kind": "NodeDeclaration",
             "node": {"name": "bench", "capacity": {"cpu": 64, "ram": "64Gi"}}}
        )
    )  # fmt: skip
    state = work / "state"
    with Store(state / "kalena.db") as db:
        for i in range(args.batch):
            spec = {"name": f"b{i}", "image": image, "command": ["sleep", "3600"],
                    "requests": {"cpu": 0.01, "ram": 0.01}}  # fmt: skip
            db.submit([(f"b{i}", spec)], time.time())
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [sys.executable, "-m", "kalena.cli.main", "docker", "serve", "--state-dir", str(state),
           "--declaration", str(decl), "--listen", f"127.0.0.1:{port}", "--min-run-time", "1e9"]  # fmt: skip
    log = open(work / "agent.log", "wb")  # noqa: SIM115 - the process's stderr, for a failure's story
    agent = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log)
    scrapes: list[float] = []
    try:
        time.sleep(args.warmup)
        c0, w0 = cpu_seconds(agent.pid), time.perf_counter()
        next_scrape = w0
        while time.perf_counter() - w0 < args.window:
            if time.perf_counter() >= next_scrape:
                s0 = time.perf_counter()
                r = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=30)
                r.raise_for_status()
                scrapes.append(time.perf_counter() - s0)
                next_scrape += 5.0
            time.sleep(0.2)
        c1, w1 = cpu_seconds(agent.pid), time.perf_counter()
        mem = memory_kib(agent.pid)
        running = [c for c in engine.containers() if tag in c.name or c.name.startswith("kalena-b")]
        status = httpx.get(f"http://127.0.0.1:{port}/v1/status", timeout=30).json()
    finally:
        agent.terminate()
        agent.wait(60)
        for name in prod + [f"kalena-b{i}.1" for i in range(args.batch)]:
            engine.remove(name)
        for top in Path("/sys/fs/cgroup").glob("*/" + root.lstrip("/")):
            remove_empty_tree(top)
        shutil.rmtree(work, ignore_errors=True)
    node = status["nodes"].get("bench", {})
    out = {
        "containers": len(running),
        "production": node.get("production"),
        "batch_running": len(node.get("batch") or []),
        "window_s": round(w1 - w0, 1),
        "cpu_percent_of_one_core": round(100 * (c1 - c0) / (w1 - w0), 2),
        "rss_mib": round(mem.get("VmRSS", 0) / 1024, 1),
        "peak_rss_mib": round(mem.get("VmHWM", 0) / 1024, 1),
        "metrics_scrape_ms_p50": round(float(np.percentile(np.asarray(scrapes) * 1e3, 50)), 1),
        "metrics_scrape_ms_max": round(float(max(scrapes)) * 1e3, 1),
        "containers_made_s": round(made_s, 1),
    }
    print(json.dumps(out, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
