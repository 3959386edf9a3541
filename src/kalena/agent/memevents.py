"""Memory events as pollable sources: v1 eventfd notifications and v2 ``memory.events`` changes.

* cgroup v1 (``cgroup.event_control``, kernel ``Documentation/admin-guide/cgroup-v1/memory.rst``
  §9-11): write ``"<eventfd> <fd of memory.usage_in_bytes> <bytes>"`` and the eventfd is
  signalled whenever usage crosses the threshold (either way; the source re-reads usage and
  reports only an upward crossing); ``"<eventfd> <fd of memory.oom_control>"`` signals when the
  cgroup hits its limit and the OOM path runs (acute).
* cgroup v2: ``memory.events`` raises ``POLLPRI`` when a counter changes; increments of ``high``
  are pressure, of ``max``/``oom``/``oom_kill`` acute.

Registration writes to ``cgroup.event_control``, so a source may only be created on a cgroup
the writer's scope manages (``check`` is :meth:`CgroupWriter.check`).
"""

from __future__ import annotations

import contextlib
import os
import select
from collections.abc import Callable
from pathlib import Path

from kalena.agent.notify import AgentEvent, drain_eventfd
from kalena.agent.parsers import ParseError, parse_flat_keyed, parse_single_int


class EventfdSource:
    """A v1 memcg eventfd registration (usage threshold or OOM notification)."""

    poll_mask = select.POLLIN

    def __init__(self, label: str, efd: int, target_fd: int, usage_path: Path | None, threshold: int) -> None:
        self.label = label
        self._efd = efd
        self._target = target_fd
        self._usage_path = usage_path
        self.threshold = threshold
        self.dead = False

    @classmethod
    def register(
        cls, memdir: Path, *, threshold: int | None, label: str, check: Callable[[], None]
    ) -> EventfdSource:
        """A usage threshold (``threshold`` bytes) or, with ``threshold=None``, OOM notification."""
        check()
        target = memdir / ("memory.usage_in_bytes" if threshold is not None else "memory.oom_control")
        efd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        tfd = -1
        try:
            tfd = os.open(target, os.O_RDONLY | os.O_CLOEXEC)
            line = f"{efd} {tfd}" + (f" {threshold}" if threshold is not None else "")
            with open(memdir / "cgroup.event_control", "w") as f:
                f.write(line)
        except OSError:
            os.close(efd)
            if tfd >= 0:
                os.close(tfd)
            raise
        usage = target if threshold is not None else None
        return cls(label, efd, tfd, usage, -1 if threshold is None else threshold)

    def fileno(self) -> int:
        return self._efd

    def collect(self, now: float, mono: float, revents: int) -> list[AgentEvent]:
        if drain_eventfd(self._efd) == 0:
            return []
        if self._usage_path is None:
            try:
                oom = parse_flat_keyed(os.pread(self._target, 4096, 0).decode(), "memory.oom_control")
            except (OSError, ParseError):
                self.dead = True  # the cgroup is gone: the kernel signals its eventfds on removal
                return []
            detail = f"under_oom={oom.get('under_oom', 0)} oom_kill={oom.get('oom_kill', 0)}"
            return [AgentEvent("oom", self.label, "ram", True, now, mono, detail)]
        try:
            usage = parse_single_int(os.pread(self._target, 64, 0).decode(), "memory.usage_in_bytes")
        except (OSError, ParseError):
            self.dead = True
            return []
        if usage < self.threshold:  # a downward crossing: pressure eased
            return []
        detail = f"usage {usage} >= threshold {self.threshold}"
        return [AgentEvent("memory-threshold", self.label, "ram", False, now, mono, detail)]

    def close(self) -> None:
        for fd in (self._efd, self._target):
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._efd = self._target = -1


#: v2 memory.events counters and whether an increment is acute.
V2_COUNTERS = {"high": False, "max": True, "oom": True, "oom_kill": True}


class MemoryEventsSource:
    """v2 ``memory.events``: ``POLLPRI`` on change; increments of high/max/oom/oom_kill are events."""

    poll_mask = select.POLLPRI

    def __init__(self, label: str, path: Path, check: Callable[[], None]) -> None:
        check()
        self.label = label
        self._fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        self.dead = False
        self._counts = self._read() or {}

    def _read(self) -> dict[str, int] | None:
        try:
            return parse_flat_keyed(os.pread(self._fd, 4096, 0).decode(), "memory.events")
        except (OSError, ParseError):
            return None

    def fileno(self) -> int:
        return self._fd

    def collect(self, now: float, mono: float, revents: int) -> list[AgentEvent]:
        counts = self._read()
        if counts is None:
            self.dead = True
            return []
        out = []
        for key, acute in V2_COUNTERS.items():
            delta = counts.get(key, 0) - self._counts.get(key, 0)
            if delta > 0:
                detail = f"{key} +{delta}"
                out.append(AgentEvent("memory-events", self.label, "ram", acute, now, mono, detail))
        self._counts = counts
        return out

    def close(self) -> None:
        if self._fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = -1
