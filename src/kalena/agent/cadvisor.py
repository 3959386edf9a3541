"""cAdvisor's REST API as an optional telemetry source (``--telemetry cadvisor``).

Two endpoints, one request per sampling round:

* ``v2.0`` (default): ``GET /api/v2.0/stats/<root>?type=name&recursive=true&count=1`` returns a
  map ``container name -> [stats]``; each stat has ``timestamp``, ``has_cpu``/``cpu``,
  ``has_memory``/``memory``, ``has_diskio``/``diskio`` (the ``cpu``, ``memory`` and ``diskio``
  objects are cAdvisor's v1 types, ``info/v2/container.go``);
* ``v1.3``: ``GET /api/v1.3/subcontainers/<root>`` returns a list of ``ContainerInfo`` objects
  (``name``, ``stats``: the same v1 objects, without the ``has_*`` flags).

Counters used: ``cpu.usage.total`` (cumulative ns), ``memory.working_set`` (bytes),
``diskio.io_service_bytes[].stats.Read/Write`` (cumulative bytes, summed over devices), and the
sample's own ``timestamp`` (RFC 3339), so rates use cAdvisor's clock, not the agent's. A
request that fails or a container absent from the answer yields no counters for that workload
(missing data: its reservation is held).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Callable, Collection, Mapping
from datetime import datetime
from typing import Any

from kalena.agent.telemetry import Counters

API_VERSIONS = ("v2.0", "v1.3")


def _timestamp(text: str) -> float:
    """RFC 3339 with up to 9 fractional digits (Python keeps microseconds)."""
    return datetime.fromisoformat(text).timestamp()


def counters_from_stat(stat: Mapping[str, Any]) -> Counters:
    """One cAdvisor stats sample (v1.3 ``ContainerStats`` or v2.0 ``DeprecatedContainerStats``)."""
    has = {k: stat.get(f"has_{k}", True) for k in ("cpu", "memory", "diskio")}
    cpu = stat.get("cpu") if has["cpu"] else None
    mem = stat.get("memory") if has["memory"] else None
    dio = stat.get("diskio") if has["diskio"] else None
    cpu_ns = None
    if cpu and "usage" in cpu and "total" in cpu["usage"]:
        cpu_ns = int(cpu["usage"]["total"])
    ws = int(mem["working_set"]) if mem and "working_set" in mem else None
    read = write = None
    if dio is not None and "io_service_bytes" in dio:
        entries = dio["io_service_bytes"] or []
        read = sum(int(e.get("stats", {}).get("Read", 0)) for e in entries)
        write = sum(int(e.get("stats", {}).get("Write", 0)) for e in entries)
    return Counters(_timestamp(stat["timestamp"]), cpu_ns, ws, read, write, None)


class CadvisorError(RuntimeError):
    """The endpoint could not be read or did not answer in the expected shape."""


class CadvisorClient:
    """A small client for one cAdvisor (``base_url`` such as ``http://127.0.0.1:4194``)."""

    def __init__(self, base_url: str, api: str = "v2.0", root: str = "/", timeout_s: float = 2.0) -> None:
        if api not in API_VERSIONS:
            raise ValueError(f"cadvisor api must be one of {API_VERSIONS}, got {api!r}")
        self.base_url = base_url.rstrip("/")
        self.api = api
        self.root = "/" + root.strip("/")
        self.timeout_s = timeout_s

    def url(self) -> str:
        path = self.root.rstrip("/")
        if self.api == "v2.0":
            return f"{self.base_url}/api/v2.0/stats{path or '/'}?type=name&recursive=true&count=1"
        return f"{self.base_url}/api/v1.3/subcontainers{path}/"

    def _get(self) -> Any:
        try:
            with urllib.request.urlopen(self.url(), timeout=self.timeout_s) as resp:
                return json.loads(resp.read())
        except (urllib.error.URLError, OSError, ValueError) as e:
            raise CadvisorError(f"{self.url()}: {e}") from e

    def latest(self) -> dict[str, Counters]:
        """Container name -> counters of its most recent sample."""
        payload = self._get()
        out: dict[str, Counters] = {}
        try:
            if self.api == "v2.0":
                items = [(name, stats) for name, stats in payload.items()]
            else:
                items = [(c["name"], c.get("stats") or []) for c in payload]
            for name, stats in items:
                if stats:
                    out[name] = counters_from_stat(stats[-1])
        except (AttributeError, KeyError, TypeError, ValueError) as e:
            raise CadvisorError(f"{self.url()}: unexpected payload ({e})") from e
        return out


class CadvisorTelemetry:
    """:class:`~kalena.agent.telemetry.TelemetrySource` over cAdvisor.

    ``container_of`` maps a cgroup name to cAdvisor's container name: a mapping, or a function
    (the agent passes its tree's absolute path of the cgroup, which is how cAdvisor names raw
    cgroups); names it does not know are used as they are. A failed request returns no counters
    at all for the round (``last_error`` says why).
    """

    name = "cadvisor"

    def __init__(
        self, client: CadvisorClient, container_of: Mapping[str, str] | Callable[[str], str] | None = None
    ) -> None:
        self.client = client
        if callable(container_of):
            self._name = container_of
        else:
            table = dict(container_of or {})
            self._name = lambda cg: table.get(cg, cg)
        self.last_error: str | None = None

    def counters(
        self, cgroups: Mapping[str, str], now: float, throttling: Collection[str] = ()
    ) -> dict[str, Counters]:
        try:
            latest = self.client.latest()
        except CadvisorError as e:
            self.last_error = str(e)
            return {}
        self.last_error = None
        out = {}
        for wid, cg in cgroups.items():
            c = latest.get(self._name(cg))
            if c is not None:
                out[wid] = c
        return out
