"""``kalena recommend --docker [--apply]`` on real engines (issue 15 item 3): the Stationkeeper's
sizes written with ``docker update`` onto a plain container and with ``docker service update``
onto a Swarm service, each write an archive event; a request a label sets is refused with the
reason, batch is never sized, and a second run finds nothing to do.

The usage is recorded into the archive by the test (steady numbers, so the expected sizes are
p99 x 1.30 by hand); what is real is the engine and what it holds afterwards."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from docker_testlib import MIB, running_tasks, service, until
from typer.testing import CliRunner

from kalena.archive import Archive
from kalena.cli.main import app
from kalena.docker.engine import Engine

pytestmark = [pytest.mark.docker]
P = "kalena.naughtian.io/"
GIB = 2**30


def run_container(engine: Engine, image: str, name: str, labels=None, **host) -> str:
    hc = engine.api.create_host_config(**host)
    c = engine.api.create_container(image, command=["sleep", "3600"], name=name, labels=labels or {},
                                    host_config=hc)  # fmt: skip
    engine.api.start(c["Id"])
    return c["Id"]


def steady(where: Path, ids: list[str], cpu: float, ram_gib: float, n: int = 120) -> None:
    """``n`` samples 10 s apart of ``ids`` using ``cpu`` cores and ``ram_gib`` each."""
    with Archive(str(where)) as a:
        for k in range(n):
            use = np.full((len(ids), 8), np.nan)
            use[:, 0], use[:, 1] = cpu, ram_gib
            a.record(1000.0 + 10.0 * k, "n1", ids, use, use.copy())


def recommend(where: Path, endpoint: str, *extra: str) -> dict:
    r = CliRunner().invoke(
        app, ["recommend", "--archive", str(where), "--docker", "--docker-host", endpoint, "--json", *extra]
    )
    assert r.exit_code == 0, r.output
    return json.loads(r.output)


def test_containers_are_sized_in_place_and_a_label_set_request_is_refused(
    engine, image, tag, containers, tmp_path
):
    web, lab, job = f"web-{tag}", f"lab-{tag}", f"job-{tag}"
    containers.extend([web, lab, job])
    run_container(engine, image, web, cpu_shares=2048, mem_reservation=256 * MIB, mem_limit=512 * MIB)
    run_container(engine, image, lab, labels={P + "request.cpu": "2"}, mem_reservation=256 * MIB)
    run_container(engine, image, job, labels={P + "tier": "batch"}, cpu_shares=2048)
    where = tmp_path / "archive.db"
    steady(where, [f"docker/{web}", f"docker/{lab}", f"docker/{job}"], cpu=0.3, ram_gib=0.1)

    shown = recommend(where, engine.endpoint)  # no --apply: nothing is written
    assert engine.inspect(web).cpu_shares == 2048
    by = {(a["workload"], a["knob"]): a for a in shown["adjustments"]}
    assert by[(f"docker/{web}", "cpu")]["proposed"] == pytest.approx(0.3 * 1.3)
    assert by[(f"docker/{web}", "memory")]["proposed"] == pytest.approx(0.1 * 1.3)
    assert not any(w == f"docker/{job}" for w, _ in by)  # batch is not sized
    assert "docker" not in shown

    done = recommend(where, engine.endpoint, "--apply")
    assert {a["outcome"] for a in done["adjustments"]} == {"accepted"}  # applying is accepting
    outcome = {d["workload"]: d["outcome"] for d in done["docker"]}
    assert outcome[f"docker/{web}"] == "applied"
    assert outcome[f"docker/{lab}"].startswith("label-sets-request: " + P + "request.cpu")
    c = engine.inspect(web)
    assert c.cpu_shares == round(0.3 * 1.3 * 1024)
    assert c.memory_reservation == math.ceil(0.1 * 1.3 * GIB)
    assert c.memory == 512 * MIB  # the limit is not the Stationkeeper's
    assert engine.inspect(lab).memory_reservation == 256 * MIB  # refused whole, memory too
    with Archive(str(where)) as a:
        resized = {e.workload: e for e in a.events(0.0, 1e12) if e.kind == "resize"}
    assert resized[f"docker/{web}"].cause == "applied"
    assert resized[f"docker/{web}"].data["cpu_shares"] == c.cpu_shares
    assert resized[f"docker/{lab}"].cause == "label-sets-request"

    again = recommend(where, engine.endpoint, "--apply")  # from the accepted sizes: nothing moves
    assert again["adjustments"] == []
    assert {d["workload"]: d["outcome"] for d in again["docker"]}[f"docker/{web}"] == "unchanged"


@pytest.mark.slow
def test_a_swarm_service_gets_its_reservations_and_replicas(swarm, image, tag, tmp_path):
    name = f"svc-{tag}"
    sid = service(swarm, name, image, 256, 1.0, replicas=2)
    assert until(lambda: len(running_tasks(swarm, sid)) == 2)
    tasks = [c.name for c in swarm.containers() if c.labels.get("com.docker.swarm.service.id") == sid]
    assert len(tasks) == 2 and all(t.startswith(name + ".") for t in tasks)
    where = tmp_path / "archive.db"
    steady(where, [f"docker/{t}" for t in tasks], cpu=0.2, ram_gib=0.1)

    done = recommend(where, swarm.endpoint, "--apply", "--replicas")
    assert {d["workload"]: d["outcome"] for d in done["docker"]}[f"docker/{name}"] == "applied"
    spec = swarm.api.inspect_service(sid)["Spec"]
    reserved = spec["TaskTemplate"]["Resources"]["Reservations"]
    assert reserved["NanoCPUs"] == math.ceil(0.2 * 1.3 * 1e9)
    assert reserved["MemoryBytes"] == math.ceil(0.1 * 1.3 * GIB)
    # load 0.2 x 2 / (2 x 1.0) = 20 %, under the 40 % band: ceil(2 x 0.2 / 0.6) = 1 replica
    assert spec["Mode"]["Replicated"]["Replicas"] == 1
    assert until(lambda: len(running_tasks(swarm, sid)) == 1, 120.0)  # Swarm carries it out
