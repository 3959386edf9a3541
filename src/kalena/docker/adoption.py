"""Batch work by label: a container made by hand with ``kalena.naughtian.io/tier: batch`` is adopted.

``docker run -l kalena.naughtian.io/tier=batch IMAGE CMD`` (or ``docker create``, which never
runs before Kalena has it) becomes a job named ``adopted-<container>``: its image, command,
labels, priority and requests (the same labels and settings as any container's:
:func:`~kalena.docker.labels.workload_of`) are queued like a ``kalena submit``, and the container
is removed once the job is saved. The job then runs as Kalena's own container under Kalena's
cgroup parent, when and where it fits.

Why replace the container instead of managing it in place: Kalena's batch knobs sit on the run's
cgroup parent, so ``docker inspect`` of a run never contradicts them and a throttle is one
cgroup write (``docker update`` is about 50 times slower: docs/benchmarks.md); a container made
by hand is outside that parent. A ``docker run`` container is stopped after at most one listing
interval of unthrottled running; ``docker create`` avoids even that.

A container whose entrypoint differs from its image's (``--entrypoint``) cannot be re-created from
its command alone: it is reported and left as production. The adoption is crash-safe: the job
records the container's id (``JobRecord.adopted_from``) in the same save that takes it, and a
container whose id a job already holds is only removed, never queued twice.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable

from kalena.agent.actionlog import ActionLog
from kalena.agent.ports import SubmissionSource
from kalena.agent.runtime import Intake, Submission, SubmissionError, parse_submission
from kalena.core.classify import PREFIX
from kalena.docker.engine import Engine, EngineError
from kalena.docker.labels import ContainerFacts, is_batch_label, problem, workload_of

ADOPTED = "adopted-"
#: The container states a hand-made batch container is adopted in (an exited one is left alone).
ADOPTABLE_STATUS = ("created", "running")
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")


def job_name(c: ContainerFacts) -> str:
    return (ADOPTED + _UNSAFE.sub("-", c.name))[:100]


class DockerAdoptions:
    """:class:`~kalena.agent.ports.SubmissionSource`: the queue of ``inner`` (the store's) plus the
    hand-made batch containers the declaration source set aside (its ``adoptable``)."""

    def __init__(
        self,
        inner: SubmissionSource | None,
        engine: Engine,
        adoptable: Callable[[], list[ContainerFacts]],
        known: Callable[[], set[str]],
        log: ActionLog | None,
        clock: Callable[[], float],
    ) -> None:
        """``inner`` and ``log`` may be set later (the agent that makes them needs :meth:`accepts`
        for its first declaration)."""
        self.inner, self.engine, self.adoptable, self.known = inner, engine, adoptable, known
        self.log, self.clock = log, clock
        self._entrypoints: dict[str, tuple[str, ...] | None] = {}
        self._finish: list[ContainerFacts] = []
        self._removed: set[str] = set()  # until the next listing drops them

    def accepts(self, c: ContainerFacts) -> tuple[bool, str | None]:
        """Whether ``c`` is adopted (else it stays production), and the problem that keeps it out."""
        if not is_batch_label(c) or c.status not in ADOPTABLE_STATUS:
            return False, None
        if c.entrypoint and c.entrypoint != self._image_entrypoint(c.image):
            why = "a batch container with its own --entrypoint cannot be adopted; counted as production"
            return False, problem(c.name, "kalena.naughtian.io/tier", why, "batch")
        return True, None

    def _image_entrypoint(self, image: str) -> tuple[str, ...] | None:
        if image not in self._entrypoints:
            try:
                cfg = self.engine.api.inspect_image(image).get("Config") or {}
                raw = cfg.get("Entrypoint")
                self._entrypoints[image] = tuple(raw) if isinstance(raw, list) else ((raw,) if raw else ())
            except Exception:
                return None
        return self._entrypoints[image]

    def submission(self, c: ContainerFacts) -> Submission:
        """The job of ``c`` (raises :class:`SubmissionError` with its problems)."""
        spec, _ = workload_of(c)  # label problems are reported by the declaration source
        req = {d: v for d, v in spec.requests.to_dict(skip_zero=True).items()}
        lim = None if spec.limits is None else spec.limits.to_dict(skip_zero=True)
        raw = {
            "name": job_name(c),
            "command": list(c.cmd) or ["true"],
            "image": c.image,
            "priority": spec.priority,
            "requests": req,
            "limits": lim or None,
            "labels": {k: v for k, v in c.labels.items() if not k.startswith(PREFIX)},
            "slack_memory": spec.slack_memory,
        }
        sub = parse_submission(raw, f"container {c.name}")
        return dataclasses.replace(sub, adopted_from=c.id)

    def new(self) -> Intake:
        if self.inner is None:
            return Intake([], [], [])
        got = self.inner.new()
        subs, problems = list(got.submissions), list(got.problems)
        known = self.known()
        self._finish = []
        for c in self.adoptable():
            if c.id in self._removed:
                continue
            if c.id in known:  # adopted before a crash: only its removal is left
                self._finish.append(c)
                continue
            try:
                subs.append((("adopt", c.id, c.name), f"container {c.name}", self.submission(c)))
            except SubmissionError as e:
                problems.extend(e.problems)
        return Intake(subs, got.cancels, problems)

    def commit(self, outcomes: dict[object, str], save: Callable[[], object]) -> None:
        mine = {t: o for t, o in outcomes.items() if isinstance(t, tuple) and t[:1] == ("adopt",)}
        assert self.inner is not None
        self.inner.commit({t: o for t, o in outcomes.items() if t not in mine}, save)  # saves
        for (_, cid, name), outcome in mine.items():  # type: ignore[misc]
            if outcome == "accepted":
                self._remove(cid, name, f"adopted as job {ADOPTED}{name}")
        for c in self._finish:
            self._remove(c.id, c.name, "adopted before a restart")
        self._finish = []

    def _remove(self, cid: str, name: str, why: str) -> None:
        try:
            removed = self.engine.remove(cid)
        except EngineError as e:
            if self.log is not None:
                self.log.append("warning", self.clock(), what=f"cannot remove adopted container {name}: {e}")
            return
        self._removed.add(cid)
        if self.log is not None:
            self.log.append("adopt", self.clock(), container=name, id=cid, removed=removed, reason=why)
