"""Telemetry: cumulative counters from a source, turned into usage in IR units.

A :class:`TelemetrySource` returns :class:`Counters` per workload (the cgroup filesystem by
default, cAdvisor's REST API as an option, :mod:`.cadvisor`); :class:`UsageMeter` turns two
consecutive counters into usage:

    cpu   = (cpu_ns(t) - cpu_ns(t')) / (t - t') / 1e9        cores
    ram   = working_set(t) / 2**30                           GiB (a level, not a rate)
    disk  = (bytes(t) - bytes(t')) / (t - t') / 1e6          MB/s (IR's disk.read / disk.write)

A dimension with no data (first sample, a counter that went backwards because the workload
restarted, a file that could not be read) is simply absent, which the core reads as NaN: the
estimator holds the reservation and the snapshot counts the reservation instead (fail-safe:
missing data never releases slack).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from kalena.agent.cgroupfs import CgroupReader

GIB = float(2**30)


@dataclass(frozen=True, slots=True)
class Counters:
    """One workload's counters at ``time`` (seconds; the source's own timestamp when it has one)."""

    time: float
    cpu_ns: int | None = None
    working_set: int | None = None
    io_read: int | None = None
    io_write: int | None = None
    throttled_ns: int | None = None


class TelemetrySource(Protocol):
    """Counters per workload id, for the cgroups given (workload id -> cgroup name).

    ``throttling`` names the workloads whose throttled time is wanted (batch, for
    anti-starvation); a source may return it for others too, or for none if it cannot.
    """

    name: str

    def counters(
        self, cgroups: Mapping[str, str], now: float, throttling: Collection[str] = ()
    ) -> dict[str, Counters]: ...


class CgroupfsTelemetry:
    """The default source: read each cgroup's files directly (timestamps = the agent clock)."""

    name = "cgroupfs"

    def __init__(self, reader: CgroupReader) -> None:
        self.reader = reader

    def counters(
        self, cgroups: Mapping[str, str], now: float, throttling: Collection[str] = ()
    ) -> dict[str, Counters]:
        out = {}
        for wid, cg in cgroups.items():
            r = self.reader.read(cg, with_limit=False, with_throttling=wid in throttling)
            if r.empty:
                continue
            out[wid] = Counters(
                now,
                r.cpu_usage_ns,
                r.working_set,
                None if r.io is None else r.io.read,
                None if r.io is None else r.io.write,
                r.throttled_ns,
            )
        return out


def _rate(new: int | None, old: int | None, dt: float, scale: float) -> float | None:
    if new is None or old is None or dt <= 0 or new < old:
        return None
    return (new - old) / dt / scale


class UsageMeter:
    """Usage per workload from consecutive counters, and throttled time over a rolling window.

    ``window_s`` bounds the throttling history kept per workload (the anti-starvation window).
    """

    def __init__(self, window_s: float = 300.0) -> None:
        self.window_s = window_s
        self._last: dict[str, Counters] = {}
        self._throttle: dict[str, deque[tuple[float, int]]] = {}

    def update(self, counters: Mapping[str, Counters]) -> dict[str, dict[str, float]]:
        """Usage dictionaries (``{"cpu": cores, "ram": GiB, ...}``, missing dimensions absent)."""
        out: dict[str, dict[str, float]] = {}
        for wid, c in counters.items():
            prev = self._last.get(wid)
            usage: dict[str, float] = {}
            if c.working_set is not None:
                usage["ram"] = c.working_set / GIB
            if prev is not None:
                dt = c.time - prev.time
                for dim, new, old, scale in (
                    ("cpu", c.cpu_ns, prev.cpu_ns, 1e9),
                    ("disk.read", c.io_read, prev.io_read, 1e6),
                    ("disk.write", c.io_write, prev.io_write, 1e6),
                ):
                    v = _rate(new, old, dt, scale)
                    if v is not None:
                        usage[dim] = v
            self._last[wid] = c
            if c.throttled_ns is not None:
                hist = self._throttle.setdefault(wid, deque())
                if hist and c.throttled_ns < hist[-1][1]:
                    hist.clear()  # the counter restarted (a new cgroup under the same name)
                hist.append((c.time, c.throttled_ns))
                while len(hist) > 2 and hist[1][0] <= c.time - self.window_s:
                    hist.popleft()
            out[wid] = usage
        return out

    def throttled_s(self) -> dict[str, float]:
        """Seconds each workload was throttled over the last ``window_s`` (from its history).

        The history keeps one entry at or before the window's start as the baseline, so the
        span measured is the window rounded up to the sampling interval.
        """
        return {wid: (h[-1][1] - h[0][1]) / 1e9 for wid, h in self._throttle.items() if len(h) >= 2}

    def forget(self, wid: str) -> None:
        self._last.pop(wid, None)
        self._throttle.pop(wid, None)


def host_memory(proc: Path = Path("/proc")) -> tuple[float | None, float | None]:
    """(used, total) bytes of the host: ``MemTotal - MemAvailable`` and ``MemTotal`` (meminfo kB)."""
    try:
        fields = {}
        for line in (proc / "meminfo").read_text().splitlines():
            key, _, rest = line.partition(":")
            parts = rest.split()
            if parts:
                fields[key] = float(parts[0]) * 1024
    except (OSError, ValueError):
        return None, None
    total, avail = fields.get("MemTotal"), fields.get("MemAvailable")
    if total is None or avail is None:
        return None, total
    return total - avail, total
