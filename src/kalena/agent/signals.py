"""From kernel notifications and pressure averages to the core's ``NodeConditions``.

Which files are watched (the most specific source the host offers, so that another tenant's
pressure on a shared host does not pass for this node's):

* ram: Kalena's root cgroup ``memory.pressure`` (v2 tree), else ``/proc/pressure/memory``;
  ``some`` above ``memory_some_fraction`` triggers, ``full`` above ``memory_full_fraction``
  is acute;
* cpu: each production cgroup's ``cpu.pressure`` (production waiting for a CPU is the harm;
  batch's own stall under its quota is the intended effect and must not count), else
  ``/proc/pressure/cpu``;
* io: the root's ``io.pressure``, else ``/proc/pressure/io``, mapped to disk.read and disk.write
  (advisory).

Memory events (v1 usage threshold and OOM eventfds, v2 ``memory.events``) count as triggers on
ram; OOM and ``max`` are acute. Node memory against its limit is the core round's rule (``policy.round``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from kalena.agent.cgroupfs import CgroupReader
from kalena.agent.config import AgentConfig
from kalena.agent.layout import CgroupTree
from kalena.agent.notify import AgentEvent
from kalena.agent.psi import TriggerSpec
from kalena.core.enforcement import NodeConditions
from kalena.core.resources import DIM_INDEX, NDIM

IO_DIMS = ("disk.read", "disk.write")
MEMORY_KINDS = frozenset({"memory-threshold", "memory-events", "oom"})


def trigger_specs(
    tree: CgroupTree,
    production: Mapping[str, str],
    config: AgentConfig,
    proc_pressure: Path = Path("/proc/pressure"),
) -> list[TriggerSpec]:
    """The triggers to arm for this node (``production`` maps workload id -> cgroup)."""
    v2 = tree.layout.v2
    specs: list[TriggerSpec] = []
    if v2 is not None:
        root = tree.dir(v2, "")
        mem, io, where = root / "memory.pressure", root / "io.pressure", "root"
    else:
        mem, io, where = proc_pressure / "memory", proc_pressure / "io", "system"
    specs.append(TriggerSpec(mem, "some", config.memory_some_fraction, "ram", False, f"{where}:memory:some"))
    specs.append(TriggerSpec(mem, "full", config.memory_full_fraction, "ram", True, f"{where}:memory:full"))
    specs.append(TriggerSpec(io, "some", config.io_some_fraction, "disk.read", False, f"{where}:io:some"))
    if v2 is not None and production:
        for wid, cg in sorted(production.items()):
            path = tree.dir(v2, cg) / "cpu.pressure"
            specs.append(TriggerSpec(path, "some", config.cpu_some_fraction, "cpu", False, f"{wid}:cpu:some"))
    else:
        cpu = proc_pressure / "cpu"
        specs.append(TriggerSpec(cpu, "some", config.cpu_some_fraction, "cpu", False, "system:cpu:some"))
    return specs


@dataclass(frozen=True, slots=True)
class PsiAverages:
    """avg10 as fractions in [0, 1] (NaN = unknown) for the core's ``psi_some`` / ``psi_full``."""

    cpu_some: float = math.nan
    ram_some: float = math.nan
    ram_full: float = math.nan
    io_some: float = math.nan


def read_averages(reader: CgroupReader, production_cgroups: Iterable[str], has_v2: bool) -> PsiAverages:
    """avg10 of the same files the triggers watch (the highest production cpu ``some``)."""

    def frac(p, kind: str) -> float:
        line = None if p is None else (p.some if kind == "some" else p.full)
        return math.nan if line is None else min(1.0, line.avg10 / 100.0)

    mem = reader.pressure("", "memory") if has_v2 else reader.system_pressure("memory")
    io = reader.pressure("", "io") if has_v2 else reader.system_pressure("io")
    cpu = math.nan
    if has_v2:
        for cg in production_cgroups:
            v = reader.some_avg10(cg, "cpu")
            if v is not None:
                cpu = min(1.0, v / 100.0) if math.isnan(cpu) else max(cpu, min(1.0, v / 100.0))
    if math.isnan(cpu):
        cpu = frac(reader.system_pressure("cpu"), "some")
    return PsiAverages(cpu, frac(mem, "some"), frac(mem, "full"), frac(io, "some"))


def conditions(events: Iterable[AgentEvent], psi: PsiAverages, config: AgentConfig) -> NodeConditions:
    """``NodeConditions`` for one mitigation round: the kernel's notifications and averages. The
    node's own memory use against its limit is the core round's rule (``node_used``), not this."""
    triggered = np.zeros(NDIM, dtype=bool)
    acute = np.zeros(NDIM, dtype=bool)
    memory_events = 0
    for e in events:
        dims = IO_DIMS if e.dimension in IO_DIMS else (e.dimension,)
        for d in dims:
            triggered[DIM_INDEX[d]] = True
            if e.acute:
                acute[DIM_INDEX[d]] = True
        if e.kind in MEMORY_KINDS:
            memory_events += 1
    some = np.full(NDIM, np.nan)
    full = np.full(NDIM, np.nan)
    some[DIM_INDEX["cpu"]] = psi.cpu_some
    some[DIM_INDEX["ram"]] = psi.ram_some
    full[DIM_INDEX["ram"]] = psi.ram_full
    for d in IO_DIMS:
        some[DIM_INDEX[d]] = psi.io_some
    return NodeConditions(triggered, acute, some, full, memory_events)
