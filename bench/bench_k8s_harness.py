"""The Kubernetes test harness: its cold build, and the control plane's start-up.

Build: ``scripts/build-k8s-harness.sh`` with GOCACHE, GOMODCACHE and KALENA_K8S_CACHE all empty,
in a temporary folder (so the modules are downloaded from the Go module proxy within it): wall
and CPU time, peak memory (the largest sum of resident memory over the build's processes, sampled
every 0.25 s, and the largest single process), the build cache's and the module cache's sizes;
then the script again, which finds its folder complete and does nothing. The temporary folder is
removed at the end.

Start-up: ``--trials`` control planes (:class:`kalena.testing.k8s.ControlPlane`), each timed from
etcd's start to the apiserver's ``/readyz``, to kube-scheduler's ``/readyz``, and to ``--nodes``
kwok nodes Ready (created once the scheduler is ready).

    python bench/bench_k8s_harness.py                      # cold build, then 3 start-ups with 100 nodes
    python bench/bench_k8s_harness.py --skip-build --trials 5 --nodes 1000 --json /tmp/k.json
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from kalena.testing.k8s import REPO, ControlPlane, find_binaries
from machine import machine_info

SCRIPT = REPO / "scripts" / "build-k8s-harness.sh"


def du(path: Path) -> int:
    return sum(p.lstat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def tree_rss(root: int) -> int:
    """Resident bytes of ``root`` and all its descendants, now."""
    parent: dict[int, int] = {}
    rss: dict[int, int] = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text().rsplit(") ", 1)[1].split()
            status = (d / "status").read_text()
        except OSError:
            continue
        parent[int(d.name)] = int(stat[1])
        for line in status.splitlines():
            if line.startswith("VmRSS:"):
                rss[int(d.name)] = int(line.split()[1]) * 1024
    total = 0
    for pid, kib in rss.items():
        p = pid
        while p > 1 and p != root:
            p = parent.get(p, 0)
        if p == root:
            total += kib
    return total


def run_script(env: dict[str, str]) -> dict[str, Any]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    proc = subprocess.Popen(
        ["bash", str(SCRIPT)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    peak = 0
    while proc.poll() is None:
        peak = max(peak, tree_rss(proc.pid))
        time.sleep(0.25)
    out, err = proc.communicate()
    wall = time.monotonic() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{SCRIPT} failed ({proc.returncode}):\n{err[-3000:]}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return {
        "wall_s": wall,
        "cpu_s": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime),
        "peak_tree_rss_bytes": peak,
        "max_process_rss_bytes": after.ru_maxrss
        * 1024,  # the largest single descendant, over this run's life
        "bin_dir": out.strip().splitlines()[-1],
        "said": [line for line in err.splitlines() if line.startswith("build-k8s-harness:")],
    }


def cold_build(tmp: Path) -> dict[str, Any]:
    env = {
        **os.environ,
        "GOCACHE": str(tmp / "gocache"),
        "GOMODCACHE": str(tmp / "gomodcache"),
        "KALENA_K8S_CACHE": str(tmp / "harness"),
    }
    load = os.getloadavg()[0]
    cold = run_script(env)
    again = run_script(env)
    return {
        "loadavg_1m_before": load,
        "cold": cold,
        "cached_again_wall_s": again["wall_s"],
        "gocache_bytes": du(tmp / "gocache"),
        "gomodcache_bytes": du(tmp / "gomodcache"),
        "binaries_bytes": du(Path(cold["bin_dir"])),
    }


def startups(bin_dir: Path, trials: int, nodes: int) -> list[dict[str, float]]:
    out = []
    for _ in range(trials):
        with ControlPlane(bin_dir=bin_dir) as cp:
            cp.add_nodes(nodes, timeout=600)
            out.append({**cp.timings, f"{nodes}_nodes_ready": time.monotonic() - cp.started_at})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--skip-build", action="store_true", help="only the start-ups, with the built binaries")
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--nodes", type=int, default=100)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    result: dict[str, Any] = {"machine": machine_info(load_1m=os.getloadavg()[0])}
    tmp = Path(tempfile.mkdtemp(prefix="kalena-k8s-bench-"))
    try:
        if args.skip_build:
            bin_dir = find_binaries()
        else:
            result["build"] = b = cold_build(tmp)
            bin_dir = Path(b["cold"]["bin_dir"])
            c = b["cold"]
            print("\n".join(c["said"]))
            gib = 2**30
            print(
                f"cold build (load {b['loadavg_1m_before']:.1f} before): {c['wall_s']:.0f} s wall, "
                f"{c['cpu_s']:.0f} s CPU, peak {c['peak_tree_rss_bytes'] / gib:.2f} GiB over its processes "
                f"(largest one {c['max_process_rss_bytes'] / gib:.2f} GiB)"
            )
            cache, mods = b["gocache_bytes"] / gib, b["gomodcache_bytes"] / gib
            print(
                f"build cache {cache:.2f} GiB, module cache {mods:.2f} GiB, binaries "
                f"{b['binaries_bytes'] / 2**20:.0f} MiB; the script again: {b['cached_again_wall_s']:.2f} s"
            )
        result["startups"] = runs = startups(bin_dir, args.trials, args.nodes)
        for key in runs[0]:
            values = sorted(r[key] for r in runs)
            print(
                f"etcd start -> {key}: median {values[len(values) // 2]:.2f} s, "
                f"min {values[0]:.2f} s, max {values[-1]:.2f} s ({len(values)} trials)"
            )
    finally:
        if (tmp / "gomodcache").exists():  # the module cache is read-only: go removes it
            env = {**os.environ, "GOMODCACHE": str(tmp / "gomodcache"), "GOTOOLCHAIN": "local"}
            subprocess.run(["go", "clean", "-modcache"], env=env, cwd=tmp, check=False)
        shutil.rmtree(tmp, ignore_errors=True)
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
