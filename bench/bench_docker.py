"""Docker runtime: what one CPU-limit change costs through the cgroup file and through ``docker update``.

The measurement behind the Docker runtime's choice (``docs/docker.md``): the batch throttle is
written to the run's cgroup file by the audited writer, and only production's rare
anti-starvation cap goes through the Engine API. One container (the test image, ``sleep``)
under a parent cgroup; each trial alternates two quota values so every write changes the file:

* ``cgroup``: the agent's ``CgroupWriter`` writing the parent's CPU quota (open, write, close,
  plus the audit record);
* ``docker update``: the Engine API's update of the container's own ``CpuQuota`` (an HTTP
  request on the local socket, then runc rewriting the files), as ``DockerEnforcer`` sends it.

    python bench/bench_docker.py                     # 200 trials each
    python bench/bench_docker.py --trials 500 --json /tmp/docker.json

Needs root and a Docker engine (``scripts/start-dockerd.sh``).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from docker_bench import arguments, engine_and_image, percentiles
from kalena.agent.build import cgroup_tree
from kalena.agent.writer import CgroupWriter, Knob, KnobWrite, ManagedScope
from kalena.docker.cgroups import remove_empty_tree


def main() -> None:
    ap = arguments(__doc__)
    ap.add_argument("--trials", type=int, default=200)
    args = ap.parse_args()
    engine, image, tag = engine_and_image(args.endpoint)
    root = f"/kalena-bench-{tag}"
    tree = cgroup_tree(root)
    writer = CgroupWriter(tree, ManagedScope())
    writer.create("batch/b.1", "bench")
    name = f"kalena-bench-{tag}"
    hc = engine.api.create_host_config(cgroup_parent=f"{root}/batch/b.1")
    engine.api.create_container(image, command=["sleep", "3600"], name=name, host_config=hc)
    engine.start(name)
    cg_times: list[float] = []
    api_times: list[float] = []
    try:
        for i in range(args.trials):
            q = 0.2 if i % 2 else 0.3
            t0 = time.perf_counter()
            recs = writer.apply([KnobWrite("batch/b.1", Knob.CPU_QUOTA, q, "bench")])
            cg_times.append(time.perf_counter() - t0)
            assert recs and recs[0].outcome == "written", recs
            t0 = time.perf_counter()
            engine.update(name, cpu_quota=round(q * 100_000 / 2))
            api_times.append(time.perf_counter() - t0)
    finally:
        engine.remove(name)
        writer.purge("", "bench done")
        for top in Path("/sys/fs/cgroup").glob("*" + root):  # what runc made in the other hierarchies
            remove_empty_tree(top)
    out = {"cgroup file": percentiles(cg_times), "docker update": percentiles(api_times)}
    out["ratio_p50"] = out["docker update"]["p50_ms"] / out["cgroup file"]["p50_ms"]
    print(f"{'path':16s} {'p50 ms':>10s} {'p99 ms':>10s}")
    for k in ("cgroup file", "docker update"):
        print(f"{k:16s} {out[k]['p50_ms']:10.3f} {out[k]['p99_ms']:10.3f}")
    print(f"docker update / cgroup file (p50): {out['ratio_p50']:.0f}x")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)


if __name__ == "__main__":
    main()
