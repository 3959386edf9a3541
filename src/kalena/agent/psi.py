"""PSI through the kernel's trigger interface, with polled averages only as a reported fallback.

A trigger is armed by writing ``"<some|full> <stall us> <window us>"`` to a pressure file
opened read-write; the kernel then raises ``POLLPRI`` on that descriptor when the stall time
within any window of that length exceeds the threshold (kernel ``Documentation/accounting/psi.rst``).

Windows: 500 ms is the smallest the kernel accepts and needs CAP_SYS_RESOURCE; without it
(Linux 6.5+) a trigger must use a window that is a multiple of 2 s and is evaluated at the
2 s averaging tick. :meth:`PsiTrigger.open` tries the windows in order and keeps the first the
kernel accepts, so a privileged agent gets 500 ms and a sandboxed one 2 s, and says which.
The stall threshold is a fraction of the window, so both mean the same pressure.

When no trigger can be armed on a file (no PSI in the kernel, a v1-only host, a permission
error), :class:`PolledPressure` reads that file's ``avg10`` once per mitigation round instead and
emits ``psi-poll`` events above the same fraction; :class:`PsiSetup.report` says so.
"""

from __future__ import annotations

import errno
import os
import select
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from kalena.agent.cgroupfs import read_text
from kalena.agent.notify import AgentEvent, Notifier
from kalena.agent.parsers import ParseError, parse_psi

#: Candidate trigger windows in microseconds, shortest first: 500 ms (the kernel's minimum,
#: privileged) then 2 s (the unprivileged granularity).
WINDOWS_US: tuple[int, ...] = (500_000, 2_000_000)


class PsiUnavailable(RuntimeError):
    """No trigger could be armed on a pressure file; the message says why."""


@dataclass(frozen=True, slots=True)
class TriggerSpec:
    """One trigger: ``kind`` (some/full) stalled more than ``stall_fraction`` of the window.

    ``dimension`` is the IR dimension the file speaks for (memory -> ram, cpu -> cpu, io ->
    disk.read); ``acute`` marks triggers whose firing means the OOM killer is near.
    """

    path: Path
    kind: str
    stall_fraction: float
    dimension: str
    acute: bool
    label: str

    def __post_init__(self) -> None:
        if self.kind not in ("some", "full"):
            raise ValueError(f"TriggerSpec.kind must be 'some' or 'full', got {self.kind!r}")
        if not 0 < self.stall_fraction < 1:
            raise ValueError(f"TriggerSpec.stall_fraction must be in (0, 1), got {self.stall_fraction!r}")


class PsiTrigger:
    """An armed trigger: an :class:`~kalena.agent.notify.EventSource` raising ``POLLPRI``."""

    poll_mask = select.POLLPRI

    def __init__(self, spec: TriggerSpec, fd: int, window_us: int, stall_us: int) -> None:
        self.spec = spec
        self.label = spec.label
        self._fd = fd
        self.window_us = window_us
        self.stall_us = stall_us
        self.dead = False
        self.fired = 0

    @classmethod
    def open(cls, spec: TriggerSpec, windows: Iterable[int] = WINDOWS_US) -> PsiTrigger:
        """Arm ``spec`` with the first window the kernel accepts (EINVAL moves to the next)."""
        last: OSError | None = None
        for window in windows:
            stall = max(1, int(window * spec.stall_fraction))
            try:
                fd = os.open(spec.path, os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC)
            except OSError as e:
                raise PsiUnavailable(f"{spec.path}: {e.strerror}") from e
            try:
                os.write(fd, f"{spec.kind} {stall} {window}\0".encode())
                return cls(spec, fd, window, stall)
            except OSError as e:
                os.close(fd)
                last = e
                if e.errno != errno.EINVAL:
                    break
        reason = last.strerror if last is not None else "no window to try"
        raise PsiUnavailable(f"{spec.path}: trigger refused ({reason})")

    @property
    def privileged(self) -> bool:
        """Windows below 2 s (or not a multiple of it) are accepted only with CAP_SYS_RESOURCE."""
        return self.window_us % 2_000_000 != 0

    def describe(self) -> str:
        mode = "privileged" if self.privileged else "unprivileged"
        return (
            f"{self.label}: trigger {self.spec.kind} {self.stall_us}us/{self.window_us}us "
            f"(window {self.window_us / 1e6:g} s, {mode})"
        )

    def fileno(self) -> int:
        return self._fd

    def collect(self, now: float, mono: float, revents: int) -> list[AgentEvent]:
        if revents & select.POLLERR:  # the trigger's cgroup is gone
            self.dead = True
            return []
        if not revents & select.POLLPRI:
            return []
        self.fired += 1
        s = self.spec
        detail = f"{s.kind} > {self.stall_us}us in {self.window_us}us"
        return [AgentEvent("psi", s.label, s.dimension, s.acute, now, mono, detail)]

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


class PolledPressure:
    """The fallback for one spec: its file's ``avg10`` read each round (not a kernel trigger)."""

    def __init__(self, spec: TriggerSpec, reason: str) -> None:
        self.spec = spec
        self.reason = reason

    def check(self, now: float, mono: float) -> list[AgentEvent]:
        text = read_text(self.spec.path)
        if text is None:
            return []
        try:
            p = parse_psi(text)
        except ParseError:
            return []
        line = p.some if self.spec.kind == "some" else p.full
        if line is None or line.avg10 < 100 * self.spec.stall_fraction:
            return []
        s = self.spec
        detail = f"{s.kind} avg10 {line.avg10:g}% >= {100 * s.stall_fraction:g}% (polled)"
        return [AgentEvent("psi-poll", s.label, s.dimension, s.acute, now, mono, detail)]

    def describe(self) -> str:
        return f"{self.spec.label}: polling avg10 each round (fallback: {self.reason})"


@dataclass
class PsiSetup:
    """The triggers armed and the specs that fell back to polling."""

    triggers: list[PsiTrigger] = field(default_factory=list)
    polled: list[PolledPressure] = field(default_factory=list)

    def report(self) -> list[str]:
        return [t.describe() for t in self.triggers] + [p.describe() for p in self.polled]

    @property
    def window_s(self) -> float | None:
        """The shortest trigger window in use (``None`` when only polling)."""
        shortest = min((t.window_us for t in self.triggers), default=None)
        return None if shortest is None else shortest / 1e6

    def poll_fallbacks(self, now: float, mono: float) -> list[AgentEvent]:
        out: list[AgentEvent] = []
        for p in self.polled:
            out.extend(p.check(now, mono))
        return out

    def retry(self, notifier: Notifier, windows: Iterable[int] = WINDOWS_US) -> int:
        """Try again to arm the polled specs (a cgroup created after the agent started); returns
        how many became triggers."""
        still, armed = [], 0
        for p in self.polled:
            try:
                t = PsiTrigger.open(p.spec, tuple(windows))
            except PsiUnavailable:
                still.append(p)
                continue
            notifier.add(t)
            self.triggers.append(t)
            armed += 1
        self.polled = still
        return armed

    def close(self, notifier: Notifier) -> None:
        for t in self.triggers:
            notifier.remove(t)
        self.triggers.clear()


def arm(specs: Iterable[TriggerSpec], notifier: Notifier, windows: Iterable[int] = WINDOWS_US) -> PsiSetup:
    """Arm every spec on ``notifier``; those the kernel refuses fall back to polling."""
    setup = PsiSetup()
    windows = tuple(windows)
    for spec in specs:
        try:
            t = PsiTrigger.open(spec, windows)
        except PsiUnavailable as e:
            setup.polled.append(PolledPressure(spec, str(e)))
            continue
        notifier.add(t)
        setup.triggers.append(t)
    return setup
