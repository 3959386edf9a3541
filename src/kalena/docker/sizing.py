"""The Stationkeeper's sizes on a Docker host or a Swarm (``kalena recommend --docker``).

What is sized is what the engine runs as production (batch and Kalena's own runs are not):

* each **Swarm service** (on a manager), one declaration ``NAMESPACE/SERVICE`` whose per-replica
  requests are its reservations (``--reserve-cpu``, ``--reserve-memory``) and whose replica count
  the replica loop may move (replicated mode only); its pods in the archive are its tasks'
  containers (``SERVICE.SLOT.TASK``), past and present, pooled;
* each **plain container**, one declaration ``NAMESPACE/CONTAINER`` with one replica, whose
  requests are :func:`~kalena.docker.labels.workload_of`'s (labels, else ``--cpu-shares`` / 1024
  and ``--memory-reservation``).

Applying (opt-in) writes those same settings, one request per target so a target is changed whole
or not at all: a service gets ``docker service update --reserve-cpu --reserve-memory
[--replicas]`` (Swarm then rolls its tasks), a container ``docker update --cpu-shares
--memory-reservation`` (in place, no restart). A request a container's label sets is not the
container's own setting and a running container's labels cannot change, so that one is refused
with the reason instead of written where it would not count. The agent's anti-starvation cap
writes the cpu *limit*; sizing writes requests only, so the two never touch the same field.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kalena.docker.engine import Engine, EngineError
from kalena.docker.labels import (
    GIB,
    REQUEST,
    SWARM_SERVICE,
    ContainerFacts,
    is_batch_label,
    namespace_of,
    swarm_reservations,
    workload_of,
)
from kalena.ir.document import DeclDoc, WorkloadsDoc

#: Docker's cpu shares for one core (``--cpu-shares`` 1024 is one core's request, as Kubernetes maps it).
SHARES_PER_CORE = 1024
#: Docker refuses a memory reservation under 6 MiB, as it does a limit.
MIN_MEMORY_BYTES = 6 * 2**20
#: The setting that sizes each dimension.
_KNOB = {"cpu": "cpu", "ram": "memory"}


@dataclass(frozen=True, slots=True)
class Target:
    """What one declaration is on the engine: a Swarm service or a plain container."""

    kind: str  # "service" | "container"
    ref: str  # the service's or container's id
    name: str
    label_requests: frozenset[str] = frozenset()  # dimensions a container's labels set ("cpu", "ram")


@dataclass(frozen=True, slots=True)
class DockerPlan:
    """The engine's production as a Workloads document, with each declaration's target and the
    archive ids of its pods (``decl_of_pod``: the declaration of each id)."""

    doc: WorkloadsDoc
    targets: dict[str, Target]
    ids: list[str]
    decl_of_pod: np.ndarray
    replicable: np.ndarray  # (declarations,) bool: the replica loop may move it (replicated service)


@dataclass(frozen=True, slots=True)
class Applied:
    """What became of one declaration's settings on the engine."""

    workload: str
    outcome: str  # "applied", "unchanged", or why not: "label-sets-request", "failed: ...", "gone"
    fields: dict[str, Any] = field(default_factory=dict)


def _requests_of(c: ContainerFacts) -> dict[str, float]:
    spec, _ = workload_of(c)
    return {d: spec.requests[d] for d in ("cpu", "ram") if 0 < spec.requests[d] < math.inf}


def docker_plan(engine: Engine, archived: Sequence[str]) -> DockerPlan:
    """The engine's running production (module docstring) and which of ``archived`` (the archive's
    workload ids) are each one's pods (raises ``EngineError``)."""
    decls: list[DeclDoc] = []
    targets: dict[str, Target] = {}
    replicable: list[bool] = []
    pods: list[tuple[str, int]] = []
    services = engine.services()
    by_prefix: dict[str, int] = {}
    for sid, svc in sorted(services.items(), key=lambda kv: str(kv[1].get("Spec", {}).get("Name", ""))):
        spec = svc.get("Spec") or {}
        name = str(spec.get("Name") or sid)
        ns = namespace_of(spec.get("Labels") or {})
        replicated = (spec.get("Mode") or {}).get("Replicated")
        reps = int((replicated or {}).get("Replicas") or 1)
        decl = DeclDoc(ns, name, replicas=max(1, reps), requests=swarm_reservations(svc))
        by_prefix[f"{ns}/{name}."] = len(decls)
        targets[decl.full_name] = Target("service", sid, name)
        replicable.append(replicated is not None)
        decls.append(decl)
    task = re.compile(r"^(.*/.*\.)[^./]+\.[^./]+$")  # NAMESPACE/SERVICE.SLOT.TASK
    for c in sorted(engine.containers(), key=lambda c: c.name):
        if c.managed or is_batch_label(c) or SWARM_SERVICE in c.labels:
            continue  # batch, Kalena's own runs, and a service's tasks (sized with their service)
        decl = DeclDoc(c.namespace, c.name, replicas=1, requests=_requests_of(c))
        label_set = frozenset(d for d in ("cpu", "ram") if REQUEST + d in c.labels)
        targets[decl.full_name] = Target("container", c.id, c.name, label_set)
        replicable.append(False)
        pods.append((c.workload_id, len(decls)))
        decls.append(decl)
    for wid in archived:
        m = task.match(wid)
        if m is not None and m.group(1) in by_prefix:
            pods.append((wid, by_prefix[m.group(1)]))
    doc = WorkloadsDoc(file=f"docker engine {engine.endpoint}", legacy=False, declarations=tuple(decls))
    return DockerPlan(
        doc,
        targets,
        [p for p, _ in pods],
        np.array([i for _, i in pods], dtype=np.int64),
        np.array(replicable, dtype=bool),
    )


def apply_sizes(
    engine: Engine, plan: DockerPlan, settings: Mapping[str, Mapping[str, float]]
) -> list[Applied]:
    """Write each declaration's settings (``cpu`` cores and ``memory`` GiB per replica, ``replicas``)
    onto its service or container (module docstring); one engine request per target."""
    out = []
    for workload, want in sorted(settings.items()):
        target = plan.targets.get(workload)
        if target is None:
            out.append(Applied(workload, "gone"))  # accepted earlier for something no longer running
        elif target.kind == "service":
            out.append(_service(engine, workload, target, want))
        else:
            out.append(_container(engine, workload, target, want))
    return out


def _cores_nano(cores: float) -> int:
    return max(1, math.ceil(cores * 1e9))


def _bytes(gib: float) -> int:
    return max(MIN_MEMORY_BYTES, math.ceil(gib * GIB))


def _service(engine: Engine, workload: str, target: Target, want: Mapping[str, float]) -> Applied:
    svc = engine.services().get(target.ref)
    if svc is None:
        return Applied(workload, "gone")
    spec = svc["Spec"]
    res = spec.setdefault("TaskTemplate", {}).setdefault("Resources", {})
    reserved = dict(res.get("Reservations") or {})
    new = dict(reserved)
    if "cpu" in want:
        new["NanoCPUs"] = _cores_nano(want["cpu"])
    if "memory" in want:
        new["MemoryBytes"] = _bytes(want["memory"])
    fields: dict[str, Any] = {k: new[k] for k in ("NanoCPUs", "MemoryBytes") if k in new}
    replicated = (spec.get("Mode") or {}).get("Replicated")
    if "replicas" in want and replicated is not None:
        fields["Replicas"] = int(want["replicas"])
    if new == reserved and ("Replicas" not in fields or replicated.get("Replicas") == fields["Replicas"]):
        return Applied(workload, "unchanged", fields)
    res["Reservations"] = new
    if "Replicas" in fields:
        replicated["Replicas"] = fields["Replicas"]
    try:
        engine.update_service(target.ref, int(svc["Version"]["Index"]), spec)
    except EngineError as e:
        return Applied(workload, f"failed: {e}", fields)
    return Applied(workload, "applied", fields)


def _container(engine: Engine, workload: str, target: Target, want: Mapping[str, float]) -> Applied:
    labelled = sorted(d for d in target.label_requests if _KNOB[d] in want)
    if labelled:  # written, it would not count: the label is the request
        keys = ", ".join(REQUEST + d for d in labelled)
        return Applied(workload, f"label-sets-request: {keys} (recreate the container with the new value)")
    c = engine.inspect(target.ref)
    if c is None or not c.running:
        return Applied(workload, "gone")
    body: dict[str, int] = {}
    if "cpu" in want:
        body["cpu_shares"] = max(2, round(want["cpu"] * SHARES_PER_CORE))  # the kernel's floor is 2
    if "memory" in want:
        body["memory_reservation"] = _bytes(want["memory"])
    now = {"cpu_shares": c.cpu_shares, "memory_reservation": c.memory_reservation}
    if all(now[k] == v for k, v in body.items()):
        return Applied(workload, "unchanged", body)
    try:
        engine.update(target.ref, **body)
    except EngineError as e:
        return Applied(workload, f"failed: {e}", body)
    return Applied(workload, "applied", body)
