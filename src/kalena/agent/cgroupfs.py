"""The read side: what the kernel says about one cgroup, from whichever hierarchy holds each file.

Where each reading comes from (``home`` = the controller's hierarchy, see :mod:`.layout`):

=================  ==========================================  ==============================
reading            cgroup v1                                    cgroup v2
=================  ==========================================  ==============================
CPU usage          ``cpuacct.usage`` (ns)                       ``cpu.stat`` ``usage_usec``
throttled time     ``cpu.stat`` ``throttled_time`` (ns)         ``cpu.stat`` ``throttled_usec``
memory usage       ``memory.usage_in_bytes``                    ``memory.current``
inactive file      ``memory.stat`` ``total_inactive_file``      ``memory.stat`` ``inactive_file``
memory limit       ``memory.limit_in_bytes``                    ``memory.max``
I/O bytes          ``blkio.throttle.io_service_bytes_recursive``  ``io.stat`` rbytes/wbytes
pressure           (none: hybrid hosts use the v2 tree)         ``{cpu,memory,io}.pressure``
=================  ==========================================  ==============================

Working set = usage - inactive file (cAdvisor's and the kubelet's definition): the memory the
kernel cannot reclaim without paging out something the workload is using. Any file that is
missing or malformed reads as ``None`` (missing data), never as 0 and never as a crash: the
caller holds reservations on missing data (issue 4, fail-safe).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from kalena.agent.layout import CgroupTree, Hierarchy
from kalena.agent.parsers import (
    IoBytes,
    ParseError,
    Pressure,
    parse_flat_keyed,
    parse_limit_bytes,
    parse_psi,
    parse_single_int,
    parse_v1_blkio_bytes,
    parse_v2_io_stat,
)

PSI_RESOURCES = ("cpu", "memory", "io")


def read_text(path: Path | str) -> str | None:
    """The file's text, or ``None`` if it cannot be read (gone, no permission, not a file).

    Plain ``os.open``/``os.read``: the agent reads a few hundred small kernel files a second,
    and a buffered file object costs several times more per file than the read itself.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        chunks = []
        while True:
            b = os.read(fd, 65536)
            if not b:
                break
            chunks.append(b)
        return b"".join(chunks).decode()
    except OSError:
        return None
    finally:
        os.close(fd)


def subtree_procs(directory: Path | str) -> list[int] | None:
    """The processes of a cgroup and of every cgroup below it (``None``: no such cgroup).

    A workload's processes may sit in a child cgroup: a Docker batch run's container is a child
    of the run's Kalena cgroup, where the knobs are written."""
    top = read_text(f"{directory}/cgroup.procs")
    if top is None:
        return None
    pids = [int(p) for p in top.split()]
    stack = [str(directory)]
    while stack:
        d = stack.pop()
        try:
            children = [e.path for e in os.scandir(d) if e.is_dir(follow_symlinks=False)]
        except OSError:
            continue
        for c in children:
            pids.extend(int(p) for p in (read_text(f"{c}/cgroup.procs") or "").split())
            stack.append(c)
    return pids


def flat_value(text: str, key: str) -> int | None:
    """The value of ``key`` in a flat-keyed file without parsing the rest (memory.stat is long)."""
    start = 0
    needle = key + " "
    while True:
        i = text.find(needle, start)
        if i < 0:
            return None
        if i == 0 or text[i - 1] == "\n":
            end = text.find("\n", i)
            try:
                return int(text[i + len(needle) : end if end >= 0 else None])
            except ValueError:
                return None
        start = i + 1


@dataclass(frozen=True, slots=True)
class CgroupReading:
    """Raw counters of one cgroup at one instant, kernel units; ``None`` = not available."""

    cpu_usage_ns: int | None = None
    throttled_ns: int | None = None
    memory_usage: int | None = None
    working_set: int | None = None
    memory_limit: float | None = None  # bytes, inf = no limit
    io: IoBytes | None = None

    @property
    def empty(self) -> bool:
        return self.cpu_usage_ns is None and self.memory_usage is None and self.io is None


class CgroupReader(Protocol):
    """What the agent reads about cgroups (faked in unit tests, cgroupfs in the product)."""

    def read(self, name: str, with_limit: bool = True, with_throttling: bool = True) -> CgroupReading: ...

    def pressure(self, name: str, resource: str) -> Pressure | None: ...

    def some_avg10(self, name: str, resource: str) -> float | None: ...

    def system_pressure(self, resource: str) -> Pressure | None: ...

    def procs(self, name: str) -> tuple[int, ...]: ...

    def exists(self, name: str) -> bool: ...

    def memory_events(self, name: str) -> dict[str, int] | None: ...


class FsCgroupReader:
    """:class:`CgroupReader` over the cgroup filesystem of ``tree.layout``.

    ``proc_pressure`` is the system PSI folder (``/proc/pressure``; a test may point it elsewhere).
    """

    def __init__(self, tree: CgroupTree, proc_pressure: Path = Path("/proc/pressure")) -> None:
        self.tree = tree
        lay = tree.layout
        self._cpuacct = lay.home("cpuacct")
        self._cpu = lay.home("cpu")
        self._memory = lay.home("memory")
        self._io = lay.home("blkio") or lay.home("io")
        self._v2 = lay.v2
        self.proc_pressure = proc_pressure
        self._dirs: dict[tuple[Path, str], str] = {}

    def _dir(self, h: Hierarchy, name: str) -> str:
        """The cgroup's directory as a string, resolved once (a Path per file costs more than the read)."""
        key = (h.mount_point, name)
        d = self._dirs.get(key)
        if d is None:
            d = self._dirs[key] = str(self.tree.dir(h, name))
        return d

    def _file(self, h: Hierarchy | None, name: str, filename: str) -> str | None:
        if h is None:
            return None
        return read_text(f"{self._dir(h, name)}/{filename}")

    # -- readings -------------------------------------------------------------------------------
    def cpu_usage_ns(self, name: str) -> int | None:
        h = self._cpuacct
        if h is None:
            return None
        if h.version == 1:
            text = self._file(h, name, "cpuacct.usage")
            try:
                return None if text is None else parse_single_int(text, "cpuacct.usage")
            except ParseError:
                return None
        text = self._file(h, name, "cpu.stat")
        us = None if text is None else flat_value(text, "usage_usec")
        return None if us is None else us * 1000

    def throttled_ns(self, name: str) -> int | None:
        h = self._cpu
        text = self._file(h, name, "cpu.stat")
        if h is None or text is None:
            return None
        if h.version == 1:
            return flat_value(text, "throttled_time")
        us = flat_value(text, "throttled_usec")
        return None if us is None else us * 1000

    def memory(self, name: str, with_limit: bool = True) -> tuple[int | None, int | None, float | None]:
        """(usage, working set, limit) in bytes (the limit only ``with_limit``)."""
        h = self._memory
        if h is None:
            return None, None, None
        v1 = h.version == 1
        usage_t = self._file(h, name, "memory.usage_in_bytes" if v1 else "memory.current")
        try:
            usage = None if usage_t is None else parse_single_int(usage_t, "memory usage")
        except ParseError:
            usage = None
        ws = None
        if usage is not None:
            stat_t = self._file(h, name, "memory.stat")
            try:
                stat = None if stat_t is None else parse_flat_keyed(stat_t, "memory.stat")
                inactive = (
                    None if stat is None else stat.get("total_inactive_file" if v1 else "inactive_file")
                )
            except ParseError:
                inactive = None
            if inactive is not None:
                ws = max(0, usage - inactive)
        limit_t = self._file(h, name, "memory.limit_in_bytes" if v1 else "memory.max")
        try:
            limit = None if limit_t is None else parse_limit_bytes(limit_t)
        except ParseError:
            limit = None
        return usage, ws, limit

    def io_bytes(self, name: str) -> IoBytes | None:
        h = self._io
        if h is None:
            return None
        try:
            if h.version == 1:
                text = self._file(h, name, "blkio.throttle.io_service_bytes_recursive")
                return None if text is None else parse_v1_blkio_bytes(text)
            text = self._file(h, name, "io.stat")
            return None if text is None else parse_v2_io_stat(text)
        except ParseError:
            return None

    def read(self, name: str, with_limit: bool = True, with_throttling: bool = True) -> CgroupReading:
        """Every reading of ``name``; the memory limit (constant between rounds) only ``with_limit``,
        the throttled time (anti-starvation needs it for batch only) only ``with_throttling``."""
        usage, ws, limit = self.memory(name, with_limit)
        return CgroupReading(
            cpu_usage_ns=self.cpu_usage_ns(name),
            throttled_ns=self.throttled_ns(name) if with_throttling else None,
            memory_usage=usage,
            working_set=ws,
            memory_limit=limit,
            io=self.io_bytes(name),
        )

    # -- pressure and events --------------------------------------------------------------------
    def pressure(self, name: str, resource: str) -> Pressure | None:
        """Per-cgroup PSI (v2 tree only; ``None`` on a v1-only host or a missing file)."""
        text = self._file(self._v2, name, f"{resource}.pressure")
        try:
            return None if text is None else parse_psi(text)
        except ParseError:
            return None

    def some_avg10(self, name: str, resource: str) -> float | None:
        """The ``some avg10`` percentage alone (read for every production cgroup each round)."""
        text = self._file(self._v2, name, f"{resource}.pressure")
        if text is None or not text.startswith("some avg10="):
            return None
        end = text.find(" ", 11)
        try:
            return float(text[11:end])
        except ValueError:
            return None

    def system_pressure(self, resource: str) -> Pressure | None:
        text = read_text(self.proc_pressure / resource)
        try:
            return None if text is None else parse_psi(text)
        except ParseError:
            return None

    def memory_events(self, name: str) -> dict[str, int] | None:
        """v2 ``memory.events`` (low/high/max/oom/oom_kill) or v1 ``memory.oom_control`` counters."""
        h = self._memory
        if h is None:
            return None
        text = self._file(h, name, "memory.oom_control" if h.version == 1 else "memory.events")
        try:
            return None if text is None else parse_flat_keyed(text, "memory events")
        except ParseError:
            return None

    # -- membership -----------------------------------------------------------------------------
    def procs_hierarchy(self, name: str) -> Hierarchy | None:
        """Where to list a cgroup's processes: v2 when the cgroup exists there, else memory, else any."""
        candidates = [self._v2, self._memory, *self.tree.layout.hierarchies]
        for h in candidates:
            if h is not None and self.tree.dir(h, name).is_dir():
                return h
        return None

    def procs(self, name: str) -> tuple[int, ...]:
        """The cgroup's processes, its descendants' included."""
        h = self.procs_hierarchy(name)
        return () if h is None else tuple(subtree_procs(self._dir(h, name)) or ())

    def exists(self, name: str) -> bool:
        return any(self.tree.dir(h, name).is_dir() for h in self.tree.layout.hierarchies)
