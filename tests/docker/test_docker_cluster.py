"""The cluster daemon over two Docker engines on this machine (two more ``dockerd``s, each with its
own data root and socket), each with its agent joined over real HTTP on loopback: placement
across hosts, image locality, a cancel forwarded to the job's host, a run evicted on its host
(production arrived there) coming back to the daemon's queue and running on the other host while
its host cools, and a host going away (its batch requeued and run elsewhere, the other host's
production untouched).

The test drives the rounds itself (the daemon's tick, then each agent's round and report); every
wait is a bound on a hung test, never a speed assertion.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import pytest
from docker_testlib import free_port, until

from kalena.agent.config import AgentConfig
from kalena.agent.declaration import parse_declaration
from kalena.api.app import make_app
from kalena.api.serve import ApiServer, Listen
from kalena.core.config import PolicyConfig
from kalena.core.enforcement import EscalationConfig, EvictionConfig
from kalena.core.lifecycle import TaskState
from kalena.docker.agent import build_docker_agent
from kalena.docker.cgroups import remove_empty_tree
from kalena.docker.cluster import PLACED_BY, Cluster
from kalena.store import Store
from kalena.testing.docker import SecondEngine, busybox_image, rootfs_tar, static_busybox

pytestmark = [pytest.mark.docker, pytest.mark.slow]
P = "kalena.naughtian.io/"
MIB = 2**20
ONLY_C = "kalena-test/busybox:only-c"


def agent_for(name: str, endpoint: str, root: str, state: Path, url: str):
    base = parse_declaration(
        {"apiVersion": "kalena.naughtian.io/v1alpha1", "kind": "NodeDeclaration",
         "node": {"name": name, "capacity": {"cpu": 2, "ram": "600Mi"}}},
        "test",
    )  # fmt: skip
    policy = PolicyConfig(
        eviction=EvictionConfig(min_run_time_s=0.0, grace_period_s=2.0),
        escalation=EscalationConfig(rounds=10_000, persist_s=1e9),  # about placement, not pressure
    )
    config = AgentConfig(sample_interval_s=0.5, estimate_interval_s=0.5, policy=policy)
    return build_docker_agent(
        state, endpoint=endpoint, base=base, config=config, cgroup_root=root, relist_s=1.0, join=url
    )


def test_two_hosts_placement_image_locality_cancel_and_a_host_going_away(engine, image, tag, tmp_path):
    engines = {}
    made = []
    try:
        for host in ("b", "c"):
            second = SecondEngine(Path(tempfile.mkdtemp(prefix=f"kd{host}-", dir="/tmp")), host)
            made.append(second)
            engines[host] = second.wait()
            busybox_image(engines[host])
    except RuntimeError as e:
        for s in made:
            s.stop()
        pytest.skip(f"no second Docker engine: {e}")
    repo, _, only = ONLY_C.partition(":")
    engines["c"].api.import_image_from_data(rootfs_tar(static_busybox()), repository=repo, tag=only)
    web = f"web-{tag}"  # production on b, which the daemon never touches
    engines["b"].api.create_container(
        image, ["sleep", "600"], name=web, labels={P + "request.ram": "64Mi"},
        host_config=engines["b"].api.create_host_config(),
    )  # fmt: skip
    engines["b"].start(web)
    web_started = engines["b"].inspect(web).started_at

    db = Store(tmp_path / "cluster.db")
    cluster = Cluster(db, lost_after_s=4.0)
    port = free_port()
    server = ApiServer(make_app(db.path), Listen("127.0.0.1", port))
    server.start()
    url = f"http://127.0.0.1:{port}"
    roots = {h: f"/kalena-test-{tag}{h}" for h in engines}
    agents = {h: agent_for(h, engines[h].endpoint, roots[h], tmp_path / f"state-{h}", url) for h in engines}
    live = dict(agents)

    def rounds() -> None:
        cluster.tick()
        for a in live.values():
            a.step()
            for hook in a.after_step:
                hook(a)

    def queue(name: str, img: str, ram_mib: int) -> None:
        spec = {"name": name, "image": img, "command": ["sleep", "600"],
                "requests": {"cpu": 0.1, "ram": ram_mib / 1024}}  # fmt: skip
        db.submit([(name, spec)], time.time())

    def host_of(name: str) -> str | None:
        return cluster.state.jobs[name].host if name in cluster.state.jobs else None

    def running_on(name: str, host: str) -> bool:
        a = agents[host]
        return name in a.state.jobs and a.state.task(name) is TaskState.RUNNING

    try:
        for a in agents.values():
            a.start()
        # 1. image locality: with both hosts empty, the job goes where its image is
        y = f"y-{tag}"
        queue(y, ONLY_C, 50)
        assert until(lambda: host_of(y) == "c" and running_on(y, "c"), every=rounds)
        facts = engines["c"].inspect(f"kalena-{y}.1")
        assert facts is not None and facts.labels[PLACED_BY] == "cluster"
        # 2. across hosts: 250 MiB each, a host holds two at most (b: 64 + 500; c: 50 + 500)
        xs = [f"x{i}-{tag}" for i in range(4)]
        for x in xs:
            queue(x, image, 250)
        assert until(lambda: all(host_of(x) and running_on(x, host_of(x)) for x in xs), every=rounds)
        on = {h: sorted(x for x in xs if host_of(x) == h) for h in engines}
        assert len(on["b"]) == len(on["c"]) == 2, on
        rounds()  # the daemon reads the reports of the last round
        steps = [(t.state.value, t.reason.value) for t in cluster.state.history(xs[0])]
        assert steps[:4] == [
            ("pending", "submitted"), ("placed", "admitted"),  # the daemon's
            ("starting", "start-requested"), ("running", "started"),  # its host's, mirrored
        ]  # fmt: skip
        # 3. a cancel is forwarded to the job's host, and b's jobs make room there
        for x in [*on["b"], y]:
            db.cancel(x, time.time())
        gone = [*on["b"], y]
        assert until(lambda: all(cluster.state.task(x) is TaskState.CANCELLED for x in gone), every=rounds)
        assert all(engines[h].inspect(f"kalena-{x}.1") is None for x, h in ((on["b"][0], "b"), (y, "c")))
        # 4. production arrives on c and asks for more than c's batch leaves: c's agent evicts one
        # run, which comes back to the daemon's queue and runs on b (c's cooldown keeps it off c),
        # while c lets its attempt go
        prod = f"prod-{tag}"
        engines["c"].api.create_container(
            image, ["sleep", "600"], name=prod, labels={P + "request.ram": "300Mi"},
            host_config=engines["c"].api.create_host_config(),
        )  # fmt: skip
        engines["c"].start(prod)

        def evicted_to_b() -> list[str]:
            return [x for x in on["c"] if host_of(x) == "b" and running_on(x, "b")]

        assert until(lambda: len(evicted_to_b()) == 1, every=rounds)
        (ev,) = evicted_to_b()
        assert until(lambda: agents["c"].state.task(ev) is TaskState.CANCELLED, every=rounds)
        walk = [(t.state.value, t.reason.value) for t in cluster.state.history(ev)]
        # the rebuilt ledger (a new production container) cannot hold both runs, or the next round's
        # ledger breach says so: either way an eviction, then the cluster's requeue
        evicting = [r for s, r in walk if s == "evicting"]
        assert evicting and set(evicting) <= {"readmission-rejected", "evicted-ledger-breach"}, walk
        assert ("pending", "requeued") in walk, walk
        assert walk[-1] == ("running", "started") and cluster.state.jobs[ev].run == 2, walk
        assert [e.data["node"] for e in db.events(job=ev) if e.kind == "requeued"] == ["c"]
        assert engines["c"].inspect(f"kalena-{ev}.1") is None
        # 5. host c goes away: its engine stops (its containers with it) and its agent with it
        live.pop("c").shutdown()
        made[1].stop()
        moved = [x for x in on["c"] if x != ev]
        assert until(lambda: all(host_of(x) == "b" and running_on(x, "b") for x in moved), every=rounds)
        rounds()
        for x in moved:
            walk = [(t.state.value, t.reason.value) for t in cluster.state.history(x)]
            assert ("evicted", "node-lost") in walk and ("pending", "requeued") in walk
            assert walk[-1] == ("running", "started") and cluster.state.jobs[x].run == 2
        web_now = engines["b"].inspect(web)
        assert web_now.running and web_now.started_at == web_started  # production untouched
        assert not [
            r for r in agents["b"].log.memory if r["kind"] == "write" and "docker" in str(r.get("cgroup"))
        ]
        # the story, for people
        lines = [e.kind for e in db.events(job=moved[0])]
        assert "placed" in lines and "node-lost" in lines
    finally:
        for a in live.values():
            a.shutdown()
        server.stop()
        for h, e in engines.items():
            if h == "b" or made[1].proc.poll() is None:
                for c in e.api.containers(all=True):
                    e.remove(c["Id"])
        for s in made:
            s.stop()
        for root in roots.values():
            for top in Path("/sys/fs/cgroup").glob("*/" + root.lstrip("/")):
                remove_empty_tree(top)


def test_the_daemon_and_a_joined_host_as_an_operator_runs_them(engine, image, tag, tmp_path):
    """``kalena docker daemon`` and ``kalena docker serve --join`` as processes; a job queued with
    ``kalena submit --store`` on the daemon's store runs on the host and ends there, and
    ``kalena jobs`` names the host."""
    import json
    import subprocess
    import sys

    from typer.testing import CliRunner

    from kalena.cli.main import app

    cli = [sys.executable, "-m", "kalena.cli.main"]
    port = free_port()
    db = tmp_path / "cluster.db"
    root = f"/kalena-test-{tag}"
    daemon = subprocess.Popen(
        [*cli, "docker", "daemon", "--store", str(db), "--listen", f"127.0.0.1:{port}", "--lost-after", "10"],
        stderr=subprocess.DEVNULL,
    )
    host = subprocess.Popen(
        [*cli, "agent", "run", "--runtime", "docker", "--state-dir", str(tmp_path / "host"),
         "--cgroup-root", root, "--join", f"http://127.0.0.1:{port}", "--min-run-time", "0",
         "--escalation-persist", "1000000", "--escalation-rounds", "1000000"],
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    name = f"op-{tag}"
    try:
        r = CliRunner().invoke(
            app, ["submit", "--store", str(db), "--image", image, "--name", name, "--request", "ram=16Mi",
                  "--", "sh", "-c", "sleep 1; exit 3"],
        )  # fmt: skip
        assert r.exit_code == 0, r.output

        def ended() -> bool:
            out = CliRunner().invoke(app, ["jobs", "--store", str(db), "--json"])
            rows = {j["job"]: j for j in json.loads(out.stdout)} if out.exit_code == 0 else {}
            return rows.get(name, {}).get("state") == "failed"

        assert until(ended, bound_s=120)
        rows = {
            j["job"]: j
            for j in json.loads(CliRunner().invoke(app, ["jobs", "--store", str(db), "--json"]).stdout)
        }
        assert rows[name]["node"] not in ("", "cluster") and rows[name]["exit_code"] == 3
        why = CliRunner().invoke(app, ["job", "why", name, "--store", str(db)]).stdout
        assert "placed (admitted)" in why and "failed (exit-error)" in why
    finally:
        for p in (host, daemon):
            p.terminate()
            p.wait(60)
        engine.remove(f"kalena-{name}.1")
        for top in Path("/sys/fs/cgroup").glob("*/" + root.lstrip("/")):
            remove_empty_tree(top)
