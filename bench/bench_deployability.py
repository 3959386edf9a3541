"""Pod-deployability benchmarks: the polynomial fragment at scale, pebbling and Petri-net families,
and the same instances given to SPIN (Promela) and Fast Downward (PDDL).

    python bench/bench_deployability.py [--json PATH] [--timeout 60] [--only poly,pebbling,petri]
                                        [--no-peers] [--fd-search lama-first|blind]
                                        [--max-height 9] [--max-bits 20] [--max-procs 40]
                                        [--max-states 10000000]

* ``poly``: 10,000 nodes (10 zones, 2 pools, 10 % tainted, 110 pods each), 1,000 pod types
  (nodeSelectors, tolerations, anti-affinity, spread, no affinity), 20,000 initial pods; timed:
  ``decide`` for 20 (type, node) questions (built in memory: not timed), and once end to end
  through ``kalena deployable`` on the written YAML (reading included).
* ``pebbling``: pyramids of height h = 2, 3, ... at k = h + 1 (not deployable: full exploration)
  and k = h + 2 (deployable), paper semantics, until a tool exceeds the timeout.
* ``mcc``: a selection of Model Checking Contest 2025 coverability queries (see ``MCC``),
  from ``../shared/data/deployability/petri-mcc2025`` (skipped when absent).
* ``petri``: the n-bit counter (deployable, 2^n - 1 firings) and n-process mutex (not deployable)
  families, paper semantics.

Kalena is timed in process (``decide``: compile, search, witness, independent replay). SPIN is
timed as ``spin -a`` + ``gcc -O2 -DBFS -DSAFETY`` + ``pan`` (states: "states, stored"); Fast
Downward as its driver (translate + search; states: "Expanded"). A tool is run on a family until
it needs more than ``--timeout`` seconds once. Peers get the boolean (saturated) model of
``bench/deployability/ground.py`` and none of Kalena's other reductions.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.deployability.ground import ground
from bench.deployability.pddl import pddl
from bench.deployability.promela import promela
from bench.machine import machine_info

from kalena.deployability import (
    HOSTNAME,
    Budget,
    Instance,
    LabelSelector,
    Node,
    PodAffinityTerm,
    PodType,
    Query,
    Semantics,
    SpreadConstraint,
    Taint,
    Toleration,
    decide,
)
from kalena.deployability.model import frozen_map
from kalena.deployability_gen import (
    counter_net,
    mutex_net,
    pebbling_instance,
    petri_instance,
    pyramid,
    write_yaml,
)

# (gcc runs cc1 and Fast Downward the translator as grandchildren: a timeout ends them too)
from kalena.testing.processes import run_group


def _fd_driver() -> Path | None:
    """The Fast Downward driver inside the up-fast-downward wheel (its ``__init__`` needs
    unified_planning, so the package is located, not imported)."""
    spec = importlib.util.find_spec("up_fast_downward")
    if spec is None or not spec.submodule_search_locations:
        return None
    p = Path(next(iter(spec.submodule_search_locations))) / "downward" / "fast-downward.py"
    return p if p.exists() else None


# --- the polynomial fragment at scale -----------------------------------------------------------------
def poly_instance(n_nodes: int, n_types: int, n_pods: int, seed: int) -> Instance:
    rng = np.random.default_rng(seed)
    nodes = []
    for i in range(n_nodes):
        labels = {HOSTNAME: f"node-{i}", "topology.kubernetes.io/zone": f"z{i % 10}", "pool": "ab"[i % 2]}
        taints = (Taint("dedicated", "gpu", "NoSchedule"),) if i % 10 == 7 else ()
        alloc = {"cpu": 16000, "memory": 64 * 2**30, "pods": 110}
        nodes.append(Node(f"node-{i}", frozen_map(labels), taints, frozen_map(alloc)))  # type: ignore[arg-type]
    types = []
    for j in range(n_types):
        labels = {"app": f"a{j}", "tier": f"t{j % 20}"}
        req = {"pods": 1, "cpu": int(rng.integers(100, 4000)), "memory": int(rng.integers(1, 16)) * 2**28}
        anti = (PodAffinityTerm(LabelSelector(frozen_map({"app": f"a{j}"})), HOSTNAME),) if j % 3 == 0 else ()
        spread = ()
        if j % 5 == 0:
            spread = (
                SpreadConstraint(
                    1, "topology.kubernetes.io/zone", LabelSelector(frozen_map({"app": f"a{j}"}))
                ),
            )
        types.append(
            PodType(
                id=f"default/w{j}",
                labels=frozen_map(labels),
                requests=frozen_map(req),  # type: ignore[arg-type]
                node_selector=frozen_map({"pool": "ab"[j % 2]}) if j % 4 == 0 else frozen_map({}),
                tolerations=(Toleration("dedicated", "Exists"),) if j % 7 == 0 else (),
                anti_affinity=anti,
                spread=spread,
            )
        )
    initial: dict[tuple[str, str], int] = {}
    for _ in range(n_pods):
        key = (types[int(rng.integers(0, n_types))].id, nodes[int(rng.integers(0, n_nodes))].name)
        initial[key] = initial.get(key, 0) + 1
    return Instance(tuple(nodes), tuple(types), frozen_map(initial))  # type: ignore[arg-type]


def bench_poly(args) -> dict:
    t0 = time.perf_counter()
    inst = poly_instance(10_000, 1_000, 20_000, seed=0)
    build = time.perf_counter() - t0
    rng = np.random.default_rng(1)
    times, verdicts = [], []
    for _ in range(20):
        q = Query(inst.types[int(rng.integers(0, 1000))].id, inst.nodes[int(rng.integers(0, 10_000))].name)
        t = time.perf_counter()
        ans = decide(inst, q, Semantics.KUBERNETES)
        times.append(time.perf_counter() - t)
        verdicts.append(ans.verdict.value)
    out = {
        "nodes": 10_000,
        "types": 1_000,
        "initial_pods": 20_000,
        "build_s": round(build, 3),
        "decide_median_s": round(float(np.median(times)), 4),
        "decide_max_s": round(max(times), 4),
        "verdicts": {v: verdicts.count(v) for v in set(verdicts)},
    }
    with tempfile.TemporaryDirectory() as d:
        path = write_yaml(inst, Path(d) / "cluster.yaml")
        q = Query(inst.types[3].id, inst.nodes[42].name)
        cmd = [sys.executable, "-m", "kalena.cli.main", "deployable", "--cluster", str(path)]
        cmd += ["--pod", q.pod, "--node", q.node, "--json"]
        t = time.perf_counter()
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        out["cli_end_to_end_s"] = round(time.perf_counter() - t, 2)
        out["cli_answer"] = json.loads(r.stdout)["answer"] if r.stdout else r.stderr[-200:]
        out["yaml_mb"] = round(path.stat().st_size / 1e6, 1)
    return out


# --- the tools ----------------------------------------------------------------------------------------
def run_kalena(inst: Instance, q: Query, timeout: float, max_states: int) -> dict:
    deadline = time.monotonic() + timeout
    t = time.perf_counter()
    ans = decide(inst, q, Semantics.PAPER, Budget(max_states, lambda: time.monotonic() > deadline))
    dt = time.perf_counter() - t
    return {
        "time_s": round(dt, 3),
        "states": ans.states_explored,
        "answer": ans.verdict.value,
        "steps": len(ans.witness),
    }


SPIN_CFLAGS = ["-O2", "-DBFS", "-DSAFETY", "-DMEMLIM=4096", "-DVECTORSZ=100000", "-o", "pan", "pan.c"]


def run_spin(inst: Instance, q: Query, timeout: float) -> dict:
    if shutil.which("spin") is None or shutil.which("gcc") is None:
        return {"error": "spin or gcc not installed (apt-get install -y spin gcc)"}
    with tempfile.TemporaryDirectory() as d:
        (Path(d) / "m.pml").write_text(promela(ground(inst, q)))
        t = time.perf_counter()
        try:
            for cmd in (["spin", "-a", "m.pml"], ["gcc", *SPIN_CFLAGS]):
                left = max(1.0, timeout - (time.perf_counter() - t))
                r = run_group(cmd, timeout=left, cwd=d)
                if r.returncode != 0:
                    return {"error": f"{cmd[0]} failed: {(r.stderr or r.stdout)[-300:]}"}
            built = time.perf_counter() - t
            # -E: a configuration with nothing left to do is not an error here; -m: no depth limit
            # short of the state budget (a 2^n - 1 firing witness is deeper than pan's default 10,000)
            r = run_group(["./pan", "-E", "-m100000000"], timeout=max(1.0, timeout - built), cwd=d)
        except subprocess.TimeoutExpired:
            return {"time_s": None, "timeout": True}
        dt = time.perf_counter() - t
    out = r.stdout
    states = re.search(r"([\d.e+]+) states, stored", out)
    answer = "deployable" if "assertion violated" in out else "not-deployable"
    if answer == "not-deployable" and ("out of memory" in out or "max search depth too small" in out):
        answer = "incomplete"
    return {
        "time_s": round(dt, 3),
        "build_s": round(built, 3),
        "states": int(float(states.group(1))) if states else None,
        "answer": answer,
    }


def run_fd(inst: Instance, q: Query, timeout: float, search: str) -> dict:
    driver = _fd_driver()
    if driver is None:
        return {"error": "Fast Downward not installed (pip install up-fast-downward)"}
    try:
        domain, problem = pddl(ground(inst, q))
    except ValueError as e:
        return {"error": str(e)}
    with tempfile.TemporaryDirectory() as d:
        (Path(d) / "domain.pddl").write_text(domain)
        (Path(d) / "problem.pddl").write_text(problem)
        cmd = [sys.executable, str(driver)]
        if search == "lama-first":
            cmd += ["--alias", "lama-first", "domain.pddl", "problem.pddl"]
        else:
            cmd += ["domain.pddl", "problem.pddl", "--search", "astar(blind())"]
        t = time.perf_counter()
        try:
            r = run_group(cmd, timeout=timeout, cwd=d)
        except subprocess.TimeoutExpired:
            return {"time_s": None, "timeout": True}
        dt = time.perf_counter() - t
    out = r.stdout
    expanded = re.findall(r"Expanded (\d+) state", out)
    length = re.search(r"Plan length: (\d+) step", out)
    if "Solution found" in out:
        answer = "deployable"
    elif "Completely explored state space" in out or r.returncode in (11, 12):
        answer = "not-deployable"
    else:
        return {"error": f"exit {r.returncode}: {(r.stderr or out)[-300:]}"}
    return {
        "time_s": round(dt, 3),
        "states": int(expanded[-1]) if expanded else None,
        "answer": answer,
        "steps": int(length.group(1)) if length else None,
    }


def _run(tool: str, inst: Instance, q: Query, args) -> dict:
    if tool == "kalena":
        return run_kalena(inst, q, args.timeout, args.max_states)
    if tool == "spin":
        return run_spin(inst, q, args.timeout)
    return run_fd(inst, q, args.timeout, args.fd_search)


def family(name: str, instances, args) -> list[dict]:
    """Run every tool on growing instances; a tool stops after its first timeout."""
    rows, stopped = [], set()
    for label, (inst, q) in instances:
        row = {"family": name, "instance": label, "types": len(inst.types)}
        tools = ["kalena"] + ([] if args.no_peers else ["spin", "fast-downward"])
        for tool in tools:
            if tool in stopped:
                row[tool] = {"skipped": "timed out on a smaller instance"}
                continue
            res = _run(tool, inst, q, args)
            row[tool] = res
            if (
                res.get("timeout")
                or (res.get("time_s") or 0) > args.timeout
                or res.get("answer") == "unknown"
            ):
                stopped.add(tool)
        k = row["kalena"]
        for tool in ("spin", "fast-downward"):
            p = row.get(tool, {})
            if k.get("time_s") and p.get("time_s"):
                p["time_ratio"] = round(p["time_s"] / k["time_s"], 2)
            if k.get("states") and p.get("states"):
                p["states_ratio"] = round(p["states"] / k["states"], 2)
            definite = ("deployable", "not-deployable")
            if k.get("answer") in definite and p.get("answer") in definite and p["answer"] != k["answer"]:
                p["DISAGREES"] = True
        print(_fmt(row), flush=True)
        rows.append(row)
        if len(stopped) == len(tools):
            break
    return rows


def _fmt(row: dict) -> str:
    parts = [f"{row['family']:<9} {row['instance']:<28}"]
    for tool in ("kalena", "spin", "fast-downward"):
        r = row.get(tool)
        if r is None:
            continue
        if "error" in r or "skipped" in r:
            parts.append(f"{tool}: {r.get('error') or r.get('skipped')}")
        elif r.get("timeout"):
            parts.append(f"{tool}: timeout")
        else:
            parts.append(f"{tool}: {r['answer']} {r['time_s']}s {r.get('states')} states")
    return " | ".join(parts)


MCC_DIR = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "deployability" / "petri-mcc2025"
#: (model, query id suffix): coverable and not coverable queries of growing state spaces.
MCC = (
    ("Philosophers-PT-000005", "04"),
    ("QuasiCertifProtocol-PT-02", "14"),
    ("Dekker-PT-010", "08"),
    ("Angiogenesis-PT-01", "14"),
    ("IBM319-PT-none", "11"),
    ("Railroad-PT-005", "03"),
    ("SafeBus-PT-03", "02"),
    ("Peterson-PT-2", "10"),
    ("Peterson-PT-2", "15"),
)


def mcc_instances():
    from kalena.deployability_gen import fireability_goal, read_pnml

    for model, qid in MCC:
        net = read_pnml(MCC_DIR / model / "model.pnml")
        answers = json.loads((MCC_DIR / model / "answers.json").read_text())
        query = next(
            x for x in answers["reachability_fireability_coverability_queries"] if x["id"].endswith(qid)
        )
        yield f"{model}/{qid}", petri_instance(fireability_goal(net, query["dnf"]), "goal__")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", dest="json_path", default=None)
    ap.add_argument("--timeout", type=float, default=60.0)
    ap.add_argument("--only", default="poly,pebbling,petri,mcc")
    ap.add_argument("--no-peers", action="store_true")
    ap.add_argument("--fd-search", choices=("lama-first", "blind"), default="lama-first")
    ap.add_argument("--max-height", type=int, default=9)
    ap.add_argument("--max-bits", type=int, default=20)
    ap.add_argument("--max-procs", type=int, default=40)
    ap.add_argument("--max-states", type=int, default=10_000_000, help="Kalena's state budget per question")
    args = ap.parse_args(argv)
    only = set(args.only.split(","))
    result: dict = {
        "machine": machine_info(),
        "timeout_s": args.timeout,
    }
    if "poly" in only:
        result["poly"] = bench_poly(args)
        print("poly", result["poly"], flush=True)
    if "pebbling" in only:
        rows = []
        for extra, tag in ((1, "k=h+1"), (2, "k=h+2")):
            insts = (
                (f"h={h},{tag}", pebbling_instance(*pyramid(h), h + extra))
                for h in range(2, args.max_height + 1)
            )
            rows += family("pyramid", insts, args)
        result["pebbling"] = rows
    if "petri" in only:
        rows = family(
            "counter",
            ((f"n={n}", petri_instance(*counter_net(n))) for n in range(2, args.max_bits + 1)),
            args,
        )
        rows += family(
            "mutex", ((f"n={n}", petri_instance(*mutex_net(n))) for n in range(2, args.max_procs + 1)), args
        )
        result["petri"] = rows
    if "mcc" in only and MCC_DIR.is_dir():
        rows = []
        for label, iq in mcc_instances():
            rows += family("mcc", [(label, iq)], args)  # every query on every tool (no early stop)
        result["mcc"] = rows
    if args.json_path:
        Path(args.json_path).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
