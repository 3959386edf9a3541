"""Docker containers as Kalena workloads: their labels and their own settings -> ``WorkloadSpec``.

The classification keys are the SPEC's (``kalena.naughtian.io/tier``, ``priority``,
``slack-cpu``, ``slack-memory``, ``reclaim``, ``startup-grace``), read by the core's
:func:`~kalena.core.classify.classify`, the same function the Kubernetes shell calls. An
unlabelled container is production (service tier). Requests and limits come from labels where
given (``kalena.naughtian.io/request.cpu: 500m``, ``kalena.naughtian.io/limit.ram: 1Gi``, any of
the eight dimensions), otherwise from the container's own settings:

* cpu limit: ``--cpus`` (``NanoCpus``), else ``--cpu-quota`` / ``--cpu-period``;
* cpu request: ``--cpu-shares`` / 1024 (Kubernetes' own mapping of a request to shares), else
  the cpu limit;
* ram limit: ``--memory``; ram request: ``--memory-reservation``, else the ram limit;
* a Swarm task's container: its service's reservations (``--reserve-cpu``, ``--reserve-memory``)
  are its requests, read from the Swarm API on a manager (a worker's engine cannot answer for
  services: there the container's own settings and Kalena's labels apply).

A request without a limit stays without a limit (the node's capacity is the ceiling), and a
limit without a request gives the request (as Kubernetes defaults a request to its limit). A
container with neither asks for nothing: its reservation follows its measured use from the
first sample once its startup grace (from the container's own start time) is over.

Every malformed label is reported as ``container NAME: label KEY: MESSAGE (value: VALUE)``; a bad
classification value makes the container service-tier with defaults (bad input never makes
anything evictable), a bad quantity is ignored in favour of the container's settings.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from kalena.core.classify import PREFIX, TIER, classify
from kalena.core.model import Tier, WorkloadSpec
from kalena.core.quantity import QuantityError, parse_quantity
from kalena.core.resources import DIMS, Resources

REQUEST = PREFIX + "request."
LIMIT = PREFIX + "limit."
#: On the batch containers Kalena starts: who started it, for which job and run (attempt).
MANAGED_BY = PREFIX + "managed-by"
MANAGER = "kalena"
JOB = PREFIX + "job"
RUN = PREFIX + "run"
WORKLOAD = PREFIX + "workload"
#: The namespace of a workload id, from Swarm stacks and Compose projects (else ``docker``).
NAMESPACE_LABELS = ("com.docker.stack.namespace", "com.docker.compose.project")
DEFAULT_NAMESPACE = "docker"
#: CFS period Docker uses when a container sets a quota without one (microseconds).
DEFAULT_CPU_PERIOD_US = 100_000
GIB = float(2**30)


def _int(raw: Any) -> int:
    return int(raw) if isinstance(raw, int | float) and not isinstance(raw, bool) else 0


def _strings(raw: Any) -> tuple[str, ...]:
    """``Config.Cmd`` / ``Entrypoint``: a list of strings (a string is one shell-form word)."""
    if isinstance(raw, str):
        return (raw,)
    if isinstance(raw, list):
        return tuple(str(x) for x in raw)
    return ()


def _started(text: Any) -> float | None:
    """``State.StartedAt`` (RFC 3339, nanoseconds) as epoch seconds; Docker's zero time is ``None``."""
    if not isinstance(text, str) or text.startswith("0001-"):
        return None
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        return None


@dataclass(frozen=True, slots=True)
class ContainerFacts:
    """What Kalena needs of one ``docker inspect`` answer."""

    id: str
    name: str
    image: str
    labels: Mapping[str, str] = field(default_factory=dict)
    running: bool = False
    pid: int = 0
    started_at: float | None = None
    exit_code: int | None = None
    oom_killed: bool = False
    nano_cpus: int = 0
    cpu_quota: int = 0
    cpu_period: int = 0
    cpu_shares: int = 0
    memory: int = 0
    memory_reservation: int = 0
    cgroup_parent: str = ""
    stop_signal: str = ""
    status: str = ""  # created | running | paused | restarting | removing | exited | dead
    cmd: tuple[str, ...] = ()
    entrypoint: tuple[str, ...] = ()

    @classmethod
    def from_inspect(cls, data: Mapping[str, Any]) -> ContainerFacts:
        state = data.get("State") or {}
        hc = data.get("HostConfig") or {}
        cfg = data.get("Config") or {}
        labels = cfg.get("Labels") or {}
        running = bool(state.get("Running"))
        return cls(
            id=str(data.get("Id", "")),
            name=str(data.get("Name", "")).lstrip("/"),
            image=str(cfg.get("Image", "")),
            labels={str(k): str(v) for k, v in labels.items()},
            running=running,
            pid=_int(state.get("Pid")),
            started_at=_started(state.get("StartedAt")),
            exit_code=None if running else _int(state.get("ExitCode")),
            oom_killed=bool(state.get("OOMKilled")),
            nano_cpus=_int(hc.get("NanoCpus")),
            cpu_quota=_int(hc.get("CpuQuota")),
            cpu_period=_int(hc.get("CpuPeriod")),
            cpu_shares=_int(hc.get("CpuShares")),
            memory=_int(hc.get("Memory")),
            memory_reservation=_int(hc.get("MemoryReservation")),
            cgroup_parent=str(hc.get("CgroupParent") or ""),
            stop_signal=str(cfg.get("StopSignal") or ""),
            status=str(state.get("Status") or ""),
            cmd=_strings(cfg.get("Cmd")),
            entrypoint=_strings(cfg.get("Entrypoint")),
        )

    @property
    def managed(self) -> bool:
        """A batch container Kalena started (its labels say which job and run)."""
        return self.labels.get(MANAGED_BY) == MANAGER

    @property
    def cpu_limit(self) -> float | None:
        """The container's own CPU limit in cores (``None``: none)."""
        if self.nano_cpus > 0:
            return self.nano_cpus / 1e9
        if self.cpu_quota > 0:
            return self.cpu_quota / (self.cpu_period or DEFAULT_CPU_PERIOD_US)
        return None

    @property
    def namespace(self) -> str:
        return namespace_of(self.labels)

    @property
    def workload_id(self) -> str:
        return f"{self.namespace}/{self.name}"


def namespace_of(labels: Mapping[str, str]) -> str:
    """The namespace a container's or Swarm service's labels give (its stack or Compose project)."""
    for key in NAMESPACE_LABELS:
        if labels.get(key):
            return labels[key]
    return DEFAULT_NAMESPACE


def settings_resources(c: ContainerFacts) -> tuple[dict[str, float], dict[str, float]]:
    """(requests, limits) from the container's own settings (module docstring), in IR units."""
    req: dict[str, float] = {}
    lim: dict[str, float] = {}
    cpu_lim = c.cpu_limit
    if cpu_lim is not None:
        lim["cpu"] = cpu_lim
    if c.cpu_shares > 0:
        req["cpu"] = c.cpu_shares / 1024
    elif cpu_lim is not None:
        req["cpu"] = cpu_lim
    if c.memory > 0:
        lim["ram"] = c.memory / GIB
    if c.memory_reservation > 0:
        req["ram"] = c.memory_reservation / GIB
    elif c.memory > 0:
        req["ram"] = c.memory / GIB
    return req, lim


def problem(container: str, key: str, message: str, value: object) -> str:
    return f"container {container}: label {key}: {message} (value: {value!r})"


def _label_quantities(c: ContainerFacts, prefix: str, problems: list[str]) -> dict[str, float]:
    out: dict[str, float] = {}
    for key, raw in c.labels.items():
        if not key.startswith(prefix):
            continue
        dim = key[len(prefix) :]
        if dim not in DIMS:
            problems.append(problem(c.name, key, f"unknown dimension; use one of {', '.join(DIMS)}", raw))
            continue
        try:
            v = parse_quantity(raw, dim)
        except QuantityError as e:
            problems.append(problem(c.name, key, f"{e}; the container's own setting is used", raw))
            continue
        if not math.isfinite(v) or v < 0:
            problems.append(problem(c.name, key, "must be a finite quantity >= 0", raw))
            continue
        out[dim] = v
    return out


#: On the containers of Swarm tasks: the service they belong to.
SWARM_SERVICE = "com.docker.swarm.service.id"
#: Where a Swarm task's placement constraints are kept in its workload's labels (informational).
SWARM_CONSTRAINTS = "com.docker.swarm.constraints"


def swarm_reservations(service: Mapping[str, Any]) -> dict[str, float]:
    """A Swarm service's reservations (``--reserve-cpu``, ``--reserve-memory``) in IR units."""
    spec = service.get("Spec") or {}
    res = ((spec.get("TaskTemplate") or {}).get("Resources") or {}).get("Reservations") or {}
    out = {}
    if _int(res.get("NanoCPUs")) > 0:
        out["cpu"] = _int(res["NanoCPUs"]) / 1e9
    if _int(res.get("MemoryBytes")) > 0:
        out["ram"] = _int(res["MemoryBytes"]) / GIB
    return out


def swarm_constraints(service: Mapping[str, Any]) -> list[str]:
    spec = service.get("Spec") or {}
    placement = (spec.get("TaskTemplate") or {}).get("Placement") or {}
    return [str(x) for x in placement.get("Constraints") or []]


def workload_of(
    c: ContainerFacts, reserved: Mapping[str, float] | None = None
) -> tuple[WorkloadSpec, tuple[str, ...]]:
    """The container as a workload, and every problem of its labels (module docstring).
    ``reserved``: what its Swarm service reserves (IR units), the request where no label says."""
    problems: list[str] = []
    cls = classify(c.workload_id, c.labels)
    problems.extend(
        problem(c.name, p.key, f"{p.reason}; treated as service with defaults", p.value) for p in cls.problems
    )
    req, lim = settings_resources(c)
    req.update(reserved or {})  # Swarm schedules by reservations: they are its requests
    label_req = _label_quantities(c, REQUEST, problems)
    label_lim = _label_quantities(c, LIMIT, problems)
    for dim, v in label_lim.items():
        lim[dim] = v
        if dim not in label_req and dim in req and req[dim] > v:
            req[dim] = v  # a limit label below the setting's request: the request follows it
    for dim, v in label_req.items():
        if dim in lim and 0 < lim[dim] < v:
            problems.append(
                problem(c.name, REQUEST + dim, f"is above the limit {lim[dim]:g}; the limit is used", v)
            )
            v = lim[dim]
        req[dim] = v
    for dim in lim:
        req.setdefault(dim, lim[dim])  # Kubernetes' rule: a limit alone is also the request
    spec = WorkloadSpec(
        id=c.workload_id,
        requests=Resources.from_mapping(req),
        limits=Resources.from_mapping(lim) if lim else None,
        tier=cls.tier,
        priority=cls.priority,
        namespace=c.namespace,
        labels=dict(c.labels),
        image=c.image,
        owner=c.workload_id,
        slack_cpu=cls.slack_cpu,
        slack_memory=cls.slack_memory,
        reclaim_disabled=cls.reclaim_disabled,
        startup_grace_s=cls.startup_grace_s,
    )
    return spec, tuple(problems)


def is_batch_label(c: ContainerFacts) -> bool:
    """Labelled batch by hand (not one of Kalena's own runs)."""
    return not c.managed and c.labels.get(TIER, "").strip().lower() == Tier.BATCH.value
