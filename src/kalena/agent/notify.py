"""Kernel notifications in one ``poll``: PSI triggers, memory eventfds, memory.events changes.

Every source is a file descriptor plus the poll bits it waits for and a ``collect`` that turns
readiness into :class:`AgentEvent` records (and clears the readiness). The :class:`Notifier`
is the agent's sleeper: ``wait(timeout)`` returns as soon as any source fires, so a PSI trigger
wakes the mitigation path at once instead of at the next sampling tick.
"""

from __future__ import annotations

import contextlib
import os
import select
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class AgentEvent:
    """One notification. ``dimension`` is an IR dimension (``cpu``, ``ram``, ``disk.read``...).

    ``mono`` is ``time.perf_counter()`` when ``poll`` returned (latency is measured from it);
    ``time`` is the agent clock then.
    """

    kind: str  # "psi", "psi-poll", "memory-threshold", "oom", "memory-events"
    source: str
    dimension: str
    acute: bool
    time: float
    mono: float
    detail: str = ""

    def to_json(self) -> dict[str, object]:
        return {
            "kind": self.kind,
            "source": self.source,
            "dimension": self.dimension,
            "acute": self.acute,
            "time": self.time,
            "detail": self.detail,
        }


class EventSource(Protocol):
    """A pollable kernel notification. ``dead`` turns true once its file is gone."""

    label: str
    poll_mask: int
    dead: bool

    def fileno(self) -> int: ...

    def collect(self, now: float, mono: float, revents: int) -> list[AgentEvent]: ...

    def close(self) -> None: ...


class Notifier:
    """All event sources in one ``select.poll``; the agent loop's interruptible sleeper."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self._poll = select.poll()
        self._sources: dict[int, EventSource] = {}

    @property
    def sources(self) -> tuple[EventSource, ...]:
        return tuple(self._sources.values())

    def add(self, source: EventSource) -> None:
        fd = source.fileno()
        self._sources[fd] = source
        self._poll.register(fd, source.poll_mask)

    def remove(self, source: EventSource) -> None:
        fd = source.fileno()
        if self._sources.pop(fd, None) is not None:
            with contextlib.suppress(KeyError, ValueError):
                self._poll.unregister(fd)
        source.close()

    def wait(self, timeout_s: float) -> list[AgentEvent]:
        """Block up to ``timeout_s`` for any source; return the events of those that fired.

        A source that reports itself ``dead`` (its cgroup was removed: what ``POLLERR`` means
        differs by file kind, so each source decides) is dropped after its events are collected.
        """
        ready = self._poll.poll(max(0, int(timeout_s * 1000)))
        if not ready:
            return []
        mono, now = time.perf_counter(), self.clock()
        out: list[AgentEvent] = []
        for fd, revents in ready:
            src = self._sources.get(fd)
            if src is None:
                continue
            out.extend(src.collect(now, mono, revents))
            if src.dead or revents & select.POLLNVAL:
                self.remove(src)
        return out

    def close(self) -> None:
        for src in list(self._sources.values()):
            self.remove(src)


def drain_eventfd(fd: int) -> int:
    """Read (and so reset) an eventfd counter; 0 if nothing was pending."""
    try:
        return int.from_bytes(os.read(fd, 8), "little")
    except BlockingIOError:
        return 0
