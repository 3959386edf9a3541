"""Helpers of the Docker runtime's tests (fixtures are in ``conftest.py``)."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Sequence

import docker
from kalena.docker.engine import Engine

MIB = 2**20


def until(
    check: Callable[[], bool], bound_s: float = 180.0, every: Callable[[], object] | None = None
) -> bool:
    """``check()`` after each ``every()`` (an agent's round, say) until it holds; the bound stops a
    hung test, it is never a speed assertion."""
    end = time.monotonic() + bound_s
    while time.monotonic() < end:
        if every is not None:
            every()
        if check():
            return True
        time.sleep(0.2)
    return check()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def service(
    engine: Engine, name: str, image: str, mem_mib: int, cpu: float, constraints: Sequence[str] = (),
    replicas: int = 1,
) -> str:  # fmt: skip
    """A Swarm service of ``sleep`` tasks reserving ``cpu`` cores and ``mem_mib`` each."""
    spec = docker.types.ContainerSpec(image, command=["sleep", "3600"])
    res = docker.types.Resources(cpu_reservation=int(cpu * 1e9), mem_reservation=mem_mib * MIB)
    template = docker.types.TaskTemplate(
        container_spec=spec, resources=res, placement=docker.types.Placement(constraints=list(constraints))
    )
    mode = docker.types.ServiceMode("replicated", replicas=replicas)
    return str(engine.api.create_service(template, name=name, mode=mode)["ID"])


def running_tasks(engine: Engine, service_id: str) -> list[dict]:
    tasks = engine.api.tasks(filters={"service": service_id})
    return [t for t in tasks if t["Status"]["State"] == "running"]
