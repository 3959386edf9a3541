"""The agent's one writer on a Docker host: cgroup files for batch, the Engine API for production caps.

Batch knobs are written to the run's own Kalena cgroup by the audited
:class:`~kalena.agent.writer.CgroupWriter`, as on any host: a file write takes tens of
microseconds, where ``docker update`` (an HTTP request, then runc rewriting the files) takes
tens of milliseconds (``bench/bench_docker.py`` measures both), and the throttle is the fast path.

A production container is never written to except the anti-starvation CPU cap, and that cap
goes through ``docker update``, so the container's own settings in ``docker inspect`` are the
ones in force: while capped, inspect shows the cap; once restored, exactly what it had. The
field is the one the container uses: ``NanoCpus`` for one started with ``--cpus``, else
``CpuQuota`` (restored to ``-1``, no quota, when it had none; Docker reads ``0`` as "unchanged",
so no quota cannot be written as ``0``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping

from kalena.agent.writer import CgroupWriter, Knob, KnobWrite, WriteRecord
from kalena.docker.engine import Engine, EngineError
from kalena.docker.labels import DEFAULT_CPU_PERIOD_US, ContainerFacts


def update_fields(c: ContainerFacts, cores: float) -> dict[str, int]:
    """The ``docker update`` body that sets container ``c``'s CPU limit to ``cores`` (inf: none)."""
    if c.nano_cpus > 0:
        if math.isinf(cores):
            raise ValueError(f"container {c.name} was started with --cpus; its limit cannot be removed")
        return {"nano_cpus": max(1, round(cores * 1e9))}
    period = c.cpu_period or DEFAULT_CPU_PERIOD_US
    if math.isinf(cores):
        return {"cpu_quota": -1}
    return {"cpu_quota": max(1000, round(cores * period))}


class DockerEnforcer(CgroupWriter):
    """:class:`CgroupWriter` whose CPU-quota writes on production containers are ``docker update``s."""

    def __init__(self, *args: object, engine: Engine, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.engine = engine
        # production cgroup -> its container, as the declaration source last listed them
        self.containers_of: Callable[[], Mapping[str, ContainerFacts]] = dict

    def apply(self, writes: Iterable[KnobWrite]) -> tuple[WriteRecord, ...]:
        through_engine, files = [], []
        containers = self.containers_of()
        for w in writes:
            c = containers.get(w.cgroup)
            (through_engine if c is not None and w.knob is Knob.CPU_QUOTA else files).append(w)
        out = list(super().apply(files))
        for w in through_engine:
            out.append(self._update(containers[w.cgroup], w))
        return tuple(out)

    def _update(self, c: ContainerFacts, w: KnobWrite) -> WriteRecord:
        self.check(w.cgroup)
        old = self.current(w.cgroup, Knob.CPU_QUOTA)
        if old is not None and (old == w.value or (math.isfinite(w.value) and abs(old - w.value) < 1e-6)):
            return self._record(
                "docker-update", w.cgroup, c.name, _text(old), _text(w.value), w.reason, "unchanged"
            )
        try:
            body = update_fields(c, w.value)
            self.engine.update(c.id, **body)
            outcome = "written"
        except (EngineError, ValueError) as e:
            outcome = f"failed: {e}"
            body = {}
        self.forget(w.cgroup)  # runc rewrote the files: the cache no longer knows them
        new = f"{_text(w.value)} {body}" if body else _text(w.value)
        return self._record("docker-update", w.cgroup, c.name, _text(old), new, w.reason, outcome)


def _text(v: float | None) -> str:
    if v is None:
        return "?"
    return "max" if math.isinf(v) else f"{v:.6g}"
