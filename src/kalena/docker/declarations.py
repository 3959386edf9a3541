"""The node's declaration from its Docker engine: every running container a workload, kept current.

:class:`DockerDeclarations` is the agent's :class:`~kalena.agent.ports.DeclarationSource` on a
Docker host. The node is the engine's host (its name, ``NCPU`` cores and ``MemTotal`` of memory)
unless a declaration file names it and its capacity; every running container that is not one of
Kalena's own batch runs is production, with the requests and limits of
:func:`~kalena.docker.labels.workload_of` and the cgroup its first process is in. The container
event stream (:class:`~kalena.docker.engine.EventWatch`) says when to list again; the engine is
also listed every ``relist_s`` in case an event was missed.

A declaration is applied whole or not at all, as a file's is: when the running production asks
for more than the node has, the problem is reported and the previous declaration stays.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Mapping

from kalena.agent.declaration import Adopted, Declaration, DeclarationError, over_capacity
from kalena.agent.layout import CgroupLayout
from kalena.core.classify import TIER
from kalena.core.model import NodeSpec, Tier
from kalena.core.resources import Resources
from kalena.docker.cgroups import container_cgroup
from kalena.docker.engine import Engine, EngineError, EventWatch
from kalena.docker.labels import (
    DEFAULT_CPU_PERIOD_US,
    SWARM_CONSTRAINTS,
    SWARM_SERVICE,
    ContainerFacts,
    is_batch_label,
    problem,
    swarm_constraints,
    swarm_reservations,
    workload_of,
)
from kalena.ir.errors import Problem

GIB = float(2**30)


def host_node(info: Mapping[str, object]) -> NodeSpec:
    """The engine's host as a node: its name, cores and memory (other dimensions unbounded)."""
    cpus = float(info.get("NCPU") or 0)  # type: ignore[arg-type]
    mem = float(info.get("MemTotal") or 0) / GIB  # type: ignore[arg-type]
    cap = Resources.from_mapping({"cpu": cpus, "ram": mem}, default=math.inf)
    return NodeSpec(str(info.get("Name") or "docker-host"), allocatable=cap)


def uncapped(c: ContainerFacts, original: float) -> ContainerFacts:
    """``c`` with the CPU limit it had before Kalena's anti-starvation cap (``inf``: none), so a
    cap never changes the workload's request or limit in the ledger (the restoration invariant)."""
    if math.isinf(original):
        return dataclasses.replace(c, nano_cpus=0, cpu_quota=0)
    if c.nano_cpus > 0:
        return dataclasses.replace(c, nano_cpus=round(original * 1e9))
    return dataclasses.replace(c, cpu_quota=round(original * (c.cpu_period or DEFAULT_CPU_PERIOD_US)))


class DockerDeclarations:
    """:class:`~kalena.agent.ports.DeclarationSource` over one engine (module docstring)."""

    def __init__(
        self,
        engine: Engine,
        layout: CgroupLayout,
        *,
        base: Declaration | None = None,
        watch: EventWatch | None = None,
        capped: Callable[[], Mapping[str, float]] = dict,
        on_problems: Callable[[tuple[str, ...]], None] | None = None,
        relist_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
        adopt: Callable[[ContainerFacts], tuple[bool, str | None]] | None = None,
    ) -> None:
        self.engine, self.layout, self.base, self.watch = engine, layout, base, watch
        self.adopt = adopt
        self.adoptable: list[ContainerFacts] = []  # hand-made batch containers set aside for adoption
        self.capped, self.on_problems = capped, on_problems
        self.relist_s, self.clock = relist_s, clock
        self.current: Declaration | None = None
        self.containers: dict[str, ContainerFacts] = {}  # production cgroup -> container
        self.problems: tuple[str, ...] = ()
        self._listed_at = -math.inf

    @property
    def source(self) -> str:
        return f"docker engine {self.engine.endpoint}"

    def build(self) -> Declaration:
        """List the engine now; raises :class:`DeclarationError` (or ``EngineError``)."""
        info = self.engine.info()
        node = self.base.node if self.base is not None else host_node(info)
        adopted = list(self.base.workloads) if self.base is not None else []
        problems: list[str] = []
        containers: dict[str, ContainerFacts] = {}
        capped = self.capped()
        adoptable = []
        if self.adopt is not None:  # created ones too: adopted before they ever run
            for c in self.engine.containers(all=True, label=f"{TIER}=batch"):
                ok, why = self.adopt(c)
                if ok:
                    adoptable.append(c)
                elif why is not None:
                    problems.append(why)
        aside = {c.id for c in adoptable}
        services = self.engine.services()  # Swarm: the services' reservations (on a manager)
        swarm_worker = (info.get("Swarm") or {}).get("LocalNodeState") == "active" and not services
        for c in sorted(self.engine.containers(), key=lambda c: c.name):
            if c.managed or not c.running or c.id in aside:
                continue
            cg = container_cgroup(c.pid, self.layout)
            if cg is None:
                continue  # it stopped between the listing and now: the next listing has it right
            if cg in capped:
                c = uncapped(c, capped[cg])
            service = services.get(c.labels.get(SWARM_SERVICE, ""))
            spec, probs = workload_of(c, swarm_reservations(service) if service else None)
            problems.extend(probs)
            if service is not None and swarm_constraints(service):
                labels = {**spec.labels, SWARM_CONSTRAINTS: "; ".join(swarm_constraints(service))}
                spec = dataclasses.replace(spec, labels=labels)
            elif service is None and SWARM_SERVICE in c.labels and swarm_worker:
                problems.append(
                    problem(
                        c.name,
                        SWARM_SERVICE,
                        "a swarm worker cannot read its service's reservations; its own settings and "
                        "Kalena's labels are its requests",
                        c.labels[SWARM_SERVICE],
                    )
                )
            if is_batch_label(c) and self.adopt is None:
                problems.append(
                    problem(
                        c.name,
                        "kalena.naughtian.io/tier",
                        "a batch container Kalena did not start is counted as production (never evicted)",
                        "batch",
                    )
                )
            if spec.tier is not Tier.SERVICE:
                spec = dataclasses.replace(spec, tier=Tier.SERVICE)
            adopted.append(Adopted(spec, cg, started_at=c.started_at))
            containers[cg] = c
        decl = Declaration(node, self.base.memory_limit if self.base else None, tuple(adopted), self.source)
        over = over_capacity(decl, self.source, "containers", "running production requests")
        self._report(tuple(problems))
        if over:
            raise DeclarationError(over)
        self.containers = containers
        self.adoptable = adoptable
        return decl

    def _report(self, problems: tuple[str, ...]) -> None:
        if problems != self.problems:
            self.problems = problems
            if self.on_problems is not None and problems:
                self.on_problems(problems)

    def changed(self) -> Declaration | DeclarationError | None:
        now = self.clock()
        events = self.watch.take() if self.watch is not None else False
        if not events and now - self._listed_at < self.relist_s:
            return None
        self._listed_at = now
        try:
            decl = self.build()
        except DeclarationError as e:
            return e
        except EngineError as e:
            return DeclarationError([Problem(self.source, "engine", str(e), self.engine.endpoint)])
        if decl == self.current:
            return None
        self.current = decl
        return decl
