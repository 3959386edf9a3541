"""Usage from the Engine API's stats, only where a container's cgroup cannot be read.

The cgroup files are the agent's source: they are read in microseconds, they carry PSI and the
throttled time, and they are what the kernel enforces. The stats API asks the engine, which
reads the same files, a few milliseconds per container and no PSI; it serves the containers
whose cgroup this agent cannot read (an agent in its own mount namespace without the host's
cgroups, a cgroup path the engine's driver lays out where this host's layout does not look).
Each such container is said once in the action log, and again when its files come back.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Mapping
from datetime import datetime
from typing import Any

from kalena.agent.actionlog import ActionLog
from kalena.agent.telemetry import Counters, TelemetrySource
from kalena.docker.engine import Engine
from kalena.docker.labels import ContainerFacts


def _timestamp(text: str | None, default: float) -> float:
    if not text or text.startswith("0001-"):
        return default
    head, _, frac = text.rstrip("Z").partition(".")
    # the engine writes nanoseconds; Python reads microseconds
    return datetime.fromisoformat(f"{head}.{(frac + '000000')[:6]}+00:00").timestamp()


def counters_from_stats(stats: Mapping[str, Any], now: float) -> Counters:
    """One ``GET /containers/{id}/stats?stream=false&one-shot=true`` answer, cgroup v1 or v2."""
    cpu = ((stats.get("cpu_stats") or {}).get("cpu_usage") or {}).get("total_usage")
    mem = stats.get("memory_stats") or {}
    working_set = None
    if "usage" in mem:
        inner = mem.get("stats") or {}
        # the working set as the kubelet and cgroupfs count it: usage less inactive file pages
        inactive = inner.get("inactive_file", inner.get("total_inactive_file", 0))
        working_set = max(0, int(mem["usage"]) - int(inactive or 0))
    read = write = None
    entries = (stats.get("blkio_stats") or {}).get("io_service_bytes_recursive")
    if entries is not None:
        read = sum(int(e.get("value", 0)) for e in entries if str(e.get("op", "")).lower() == "read")
        write = sum(int(e.get("value", 0)) for e in entries if str(e.get("op", "")).lower() == "write")
    t = _timestamp(stats.get("read"), now)
    return Counters(t, None if cpu is None else int(cpu), working_set, read, write, None)


class StatsFallback:
    """A :class:`~kalena.agent.telemetry.TelemetrySource`: ``inner`` (the cgroup files) first, the
    engine's stats for the production containers it returned nothing for (``containers``: cgroup
    -> container, the declarations' latest listing)."""

    def __init__(
        self,
        inner: TelemetrySource,
        engine: Engine,
        containers: Callable[[], Mapping[str, ContainerFacts]],
        log: ActionLog | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.inner, self.engine, self.containers, self.log, self.clock = inner, engine, containers, log, clock
        self.name = f"{inner.name}, else the engine's stats"
        self.said: dict[str, str] = {}  # container -> what was said of it (its source now)

    def counters(
        self, cgroups: Mapping[str, str], now: float, throttling: Collection[str] = ()
    ) -> dict[str, Counters]:
        out = self.inner.counters(cgroups, now, throttling)
        known = self.containers()
        now_said: dict[str, str] = {}
        for wid, cg in cgroups.items():
            c = known.get(cg)
            if c is None:
                continue
            if wid in out:
                if c.name in self.said:  # its files are back
                    self._say(c, f"its cgroup {cg} is read again")
                continue
            try:
                raw = self.engine.api.stats(c.id, stream=False, one_shot=True)
                out[wid] = counters_from_stats(raw, now)
                key, what = "stats", f"its cgroup {cg} cannot be read here; usage from the engine's stats API"
            except Exception as e:  # an engine error, or a container gone since the listing
                key, what = "none", f"its cgroup {cg} cannot be read here, nor its stats: {e}"
            if self.said.get(c.name) != key:  # said once, and again when it changes
                self._say(c, what)
            now_said[c.name] = key
        self.said = now_said
        return out

    def _say(self, c: ContainerFacts, what: str) -> None:
        if self.log is not None:
            self.log.append("telemetry", self.clock(), container=c.name, what=f"container {c.name}: {what}")
