"""Docker runtime: from a production CPU surge to the batch throttle, on real containers.

A production container (request 1.5 cpu, priority 100, startup grace 1 s) idles in a loop that
burns two cores while a flag file exists (a host folder bind-mounted into it, polled every 10 ms);
a batch job (request 0.5 cpu) burns its quota, grown into the slack the idle production leaves on
a node declared with 2 cpus. Each trial: the
batch quota is up, the flag is made (the surge), the agent's round throttles the batch run's
quota, the flag is removed and the quota grows back. The agent runs in this process
(``Agent.run``, the loop the CLI runs) with ``--sample-interval`` rounds (PSI triggers may wake
it earlier); its writer's records time each write.

Two figures per trial:

* **surge to throttle**: from making the flag to the write of the batch quota below half of what
  it was (detection by the round's usage sample or a PSI trigger, the round, the write);
* **Kalena's own reaction**: from the start of the round that throttled to that write (the
  round's reading, the core's decision, the write; what the issue's 100 ms target is about).

    python bench/bench_docker_reaction.py                 # 100 trials, 0.1 s rounds
    python bench/bench_docker_reaction.py --trials 200 --sample-interval 0.05 --json /tmp/r.json

Needs root and a Docker engine (``scripts/start-dockerd.sh``).
"""

from __future__ import annotations

import json
import random
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

from docker_bench import arguments, engine_and_image, percentiles
from kalena.agent.config import AgentConfig
from kalena.agent.declaration import parse_declaration
from kalena.agent.writer import WriteRecord
from kalena.core.config import PolicyConfig
from kalena.core.enforcement import EscalationConfig, EvictionConfig
from kalena.core.estimators import DecayParams
from kalena.docker.agent import build_docker_agent
from kalena.docker.cgroups import remove_empty_tree
from kalena.store import Store

P = "kalena.naughtian.io/"
#: Idle (a 10 ms poll) until /flag/burn exists, then two busy loops until it is gone.
BURN = (
    "while :; do if [ -e /flag/burn ]; then (while [ -e /flag/burn ]; do :; done) & "
    "while [ -e /flag/burn ]; do :; done; wait; else sleep 0.01; fi; done"
)


def main() -> None:
    ap = arguments(__doc__)
    ap.add_argument("--trials", type=int, default=100)
    ap.add_argument("--sample-interval", type=float, default=0.1)
    args = ap.parse_args()
    engine, image, tag = engine_and_image(args.endpoint)
    root, flags = f"/kalena-bench-{tag}", Path(tempfile.mkdtemp(prefix="kalena-bench-"))
    state = Path(tempfile.mkdtemp(prefix="kalena-bench-state-"))
    prod = f"bench-prod-{tag}"
    hc = engine.api.create_host_config(binds={str(flags): {"bind": "/flag", "mode": "rw"}})
    labels = {P + "request.cpu": "1.5", P + "request.ram": "64Mi", P + "priority": "100"}
    labels[P + "startup-grace"] = "1"  # its reservation follows its (idle) use from 1 s on
    engine.api.create_container(image, ["sh", "-c", BURN], name=prod, labels=labels, host_config=hc)
    engine.start(prod)
    base = parse_declaration(
        {"apiVersion": "kalena.naughtian.io/v1alpha1", "kind": "NodeDeclaration",
         "node": {"name": "bench", "capacity": {"cpu": 2, "ram": "2Gi"}}},
        "bench",
    )  # fmt: skip
    policy = PolicyConfig(
        decay=DecayParams(half_life_s=1.0),  # the surge's reservation falls back within a trial
        eviction=EvictionConfig(min_run_time_s=1e9),  # this measures throttling: nothing is evicted
        escalation=EscalationConfig(rounds=10**9, persist_s=1e9),
    )
    config = AgentConfig(sample_interval_s=args.sample_interval, estimate_interval_s=0.5, policy=policy)
    agent = build_docker_agent(state, base=base, config=config, cgroup_root=root, relist_s=5.0)
    writes: list[WriteRecord] = []
    step_starts: list[float] = []
    audit = agent.writer.audit

    def record(rec: WriteRecord) -> None:
        writes.append(rec)
        if audit is not None:
            audit(rec)

    agent.writer.audit = record
    step = agent.step

    def timed_step(events=()):  # type: ignore[no-untyped-def]
        step_starts.append(time.perf_counter())
        return step(events)

    agent.step = timed_step  # type: ignore[method-assign]
    agent.start()
    with Store(state / "kalena.db") as db:
        spec = {"name": "spin", "image": image, "command": ["sh", "-c", "while :; do :; done"],
                "requests": {"cpu": 0.5, "ram": 0.0625}}  # fmt: skip
        db.submit([("spin", spec)], time.time())
    batch_cg = "batch/spin.1"

    def quota_writes(since: float) -> list[WriteRecord]:
        return [
            w for w in list(writes)
            if w.mono >= since and w.cgroup == batch_cg and w.action == "write" and "cpu" in Path(w.path).name
            and ("quota" in w.path or w.path.endswith("cpu.max"))
        ]  # fmt: skip

    def quota_of(w: WriteRecord) -> float:
        first = w.new.split()[0]
        return float("inf") if first in ("max", "-1") else float(first)

    surge, reaction, missed = [], [], 0
    stop = threading.Event()

    def trials() -> None:
        nonlocal missed
        rng = random.Random(1)
        try:
            time.sleep(3.0)  # the run starts and its quota grows into the slack
            ws = quota_writes(0.0)
            if not ws:
                raise SystemExit("the batch run never got a CPU quota (did it start?)")
            baseline = quota_of(ws[-1])  # the steady quota in the slack of idle production
            for k in range(args.trials):
                end = time.perf_counter() + 30  # the quota is back up (within 80 % of the baseline)
                while time.perf_counter() < end and quota_of(quota_writes(0.0)[-1]) < 0.8 * baseline:
                    time.sleep(0.05)
                before = quota_of(quota_writes(0.0)[-1])
                print(f"trial {k + 1}/{args.trials}", file=sys.stderr, flush=True)
                time.sleep(rng.uniform(0.2, 0.6))
                t0 = time.perf_counter()
                (flags / "burn").touch()
                end = t0 + 10
                hit = None
                while hit is None and time.perf_counter() < end:
                    hit = next((w for w in quota_writes(t0) if quota_of(w) <= before / 2), None)
                    time.sleep(0.005)
                (flags / "burn").unlink()
                if hit is None:
                    missed += 1
                    continue
                surge.append(hit.mono - t0)
                started = max(s for s in step_starts if s <= hit.mono)
                reaction.append(hit.mono - started)
        finally:
            stop.set()

    worker = threading.Thread(target=trials, daemon=True)
    worker.start()
    try:
        agent.run(should_stop=stop.is_set)
    finally:
        agent.shutdown()
        agent.log.close()
        for name in (prod, "kalena-spin.1"):
            engine.remove(name)
        for top in Path("/sys/fs/cgroup").glob("*/" + root.lstrip("/")):
            remove_empty_tree(top)
        shutil.rmtree(flags, ignore_errors=True)
        shutil.rmtree(state, ignore_errors=True)
    out = {
        "sample_interval_s": args.sample_interval,
        "surge_to_throttle": percentiles(surge) if surge else None,
        "own_reaction": percentiles(reaction) if reaction else None,
        "missed": missed,
    }
    print(json.dumps(out, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
