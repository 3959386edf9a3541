"""The Docker runtime: the agent's batch runs as containers, started and stopped through the Engine API.

Each run of a job is one container named ``kalena-<job>.<run>`` with Kalena's labels (managed by
Kalena, the job, the run, the workload id, tier batch, priority), so an agent restarted after a
crash finds its own containers by name instead of starting a second one for the same run. The
container's ``--cgroup-parent`` is the run's Kalena cgroup, created and given its knobs (quota
at the request, batch weight, memory envelope) before the container exists, so it never runs
unthrottled (:mod:`kalena.docker.cgroups` says why the knobs sit on the parent).

An eviction is ``docker stop`` in two calls: the container's stop signal (SIGTERM unless the
image says otherwise) through the Engine API at once, SIGKILL at the evictor's recorded
deadline (to the processes of the run's cgroup: see :meth:`DockerRuntime.kill`); the evictor,
not a blocking ``stop``, keeps the grace period, so an agent restarted mid-grace resumes it. A
finished run's container is removed with its cgroups.

A start runs on a worker thread, and the agent's round waits for it at most :data:`START_WAIT_S`:
on a busy machine a batch container starts slowly (runc's init runs in the run's cgroup, under
parents of the minimal CPU weight), and the engine holds the container through its start (an
inspect, a kill or a remove waits for it to end). A start still under way leaves the run STARTING;
the agent asks again each round and the container is never started twice. A stop or a cleanup
asked meanwhile is carried out once the start has answered; the round throttles the run all
along, since its knobs are on its cgroup parent before the start.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any, Literal

from kalena.agent.actionlog import ActionLog
from kalena.agent.layout import BATCH_PARENT, CgroupTree
from kalena.agent.state import JobRecord
from kalena.agent.writer import CgroupWriter
from kalena.core.classify import PRIORITY, TIER
from kalena.core.enforcement import BATCH_OOM_SCORE_ADJ
from kalena.docker.cgroups import batch_parent, remove_leftovers
from kalena.docker.engine import Engine, EngineError
from kalena.docker.labels import JOB, MANAGED_BY, MANAGER, RUN, WORKLOAD

GIB = float(2**30)
#: How long a round waits for the container starts it issued (they share the wait): most answer
#: well within it and run in the round that admitted them, but one starved of CPU can take many
#: seconds, and the round must go on throttling and evicting meanwhile.
START_WAIT_S = 1.5
#: How long a start's worker waits for the engine's answer: far beyond any start seen on a loaded
#: machine; an engine silent for that long is stuck, and the run fails.
START_TIMEOUT_S = 600.0


def container_name(run_cgroup: str) -> str:
    """``batch/job-1.2`` -> ``kalena-job-1.2`` (a run's cgroup is its workload id)."""
    prefix = BATCH_PARENT + "/"
    if not run_cgroup.startswith(prefix):
        raise ValueError(f"{run_cgroup!r} is not a batch run's cgroup")
    return "kalena-" + run_cgroup[len(prefix) :]


@dataclass
class _Start:
    """One container start on its worker thread: its answer, and what the agent asked meanwhile."""

    cgroup: str
    done: threading.Event = field(default_factory=threading.Event)  # answered, and what was asked done
    answered: bool = False  # the engine's start returned: the agent may act on the container itself
    pid: int = 0
    error: BaseException | None = None
    stops: list[tuple[str | None, str]] = field(default_factory=list)  # (signal, None: its own; reason)
    cleanup: str | None = None  # the reason of a cleanup asked meanwhile
    # (time, action, reason, fields): logged by the agent's thread (the log is the store's)
    audits: list[tuple[float, str, str, dict[str, Any]]] = field(default_factory=list)


class DockerRuntime:
    """:class:`~kalena.agent.ports.Runtime` on one Docker Engine."""

    def __init__(
        self,
        engine: Engine,
        writer: CgroupWriter,
        tree: CgroupTree,
        log: ActionLog | None = None,
        start_wait_s: float = START_WAIT_S,
    ):
        self.engine = engine
        self.writer = writer
        self.tree = tree
        self.log = log
        self.start_wait_s = start_wait_s
        self._starts: dict[str, _Start] = {}  # container -> its start, until the agent took its answer
        self._lock = threading.Lock()  # a start's answered / stops / cleanup (its worker reads them)
        self._wait_until = -math.inf  # (monotonic) the end of the wait the starts issued now share

    def _audit(self, action: str, name: str, reason: str, at: float | None = None, **extra: object) -> None:
        if self.log is not None:
            now = self.writer.clock() if at is None else at
            self.log.append("docker", now, action=action, container=name, reason=reason, **extra)

    def start(self, job: JobRecord, reason: str) -> int | None:
        """Create (unless a crash left it created) and start the run's container on a worker thread;
        its first pid once the start answered, ``None`` while it is under way after the round's
        wait (:data:`START_WAIT_S`). Called again for a start under way it does not wait and never
        starts the container again: ``None`` still, its pid, or the start's error raised."""
        assert job.cgroup is not None and job.workload_id is not None
        self._settle()
        name = container_name(job.cgroup)
        with self._lock:
            s = self._starts.get(name)
        if s is None:
            s = _Start(job.cgroup)
            made = self._creation(job)  # read here: the job record is the agent thread's
            with self._lock:
                self._starts[name] = s
            threading.Thread(
                target=self._bring_up, args=(name, s, made, reason), name=f"kalena-{name}", daemon=True
            ).start()
            self._wait(s)
        if not s.done.is_set():
            return None
        with self._lock:
            self._starts.pop(name, None)
        self._flush(name, s)
        if s.error is not None:
            raise s.error
        return s.pid

    def _wait(self, s: _Start) -> None:
        """Wait for ``s`` until the end of the current wait (the starts issued together share it:
        a round admitting many slow starts waits :data:`START_WAIT_S` once, not once for each)."""
        now = time.monotonic()
        if now >= self._wait_until:
            self._wait_until = now + self.start_wait_s
        s.done.wait(self._wait_until - now)

    def _creation(self, job: JobRecord) -> dict[str, Any]:
        """What the run's container is created with (if it must be)."""
        assert job.cgroup is not None and job.workload_id is not None
        ram_limit = (job.limits or {}).get("ram", 0.0)
        labels = {
            **(job.labels or {}),  # the submitter's (none under Kalena's prefix: checked at submit)
            MANAGED_BY: MANAGER,
            JOB: job.name,
            RUN: str(job.run),
            WORKLOAD: job.workload_id,
            TIER: "batch",
            PRIORITY: str(job.priority),
        }
        host: dict[str, Any] = {
            "cgroup_parent": batch_parent(self.tree, job.cgroup),
            "oom_score_adj": BATCH_OOM_SCORE_ADJ,  # the kernel's OOM killer takes batch first
        }
        if ram_limit > 0:  # the container's own envelope, shown by inspect (Kalena's is the parent's)
            host["mem_limit"] = int(ram_limit * GIB)
        return {"image": job.image, "command": list(job.command), "labels": labels, "host": host}

    def _bring_up(self, name: str, s: _Start, made: dict[str, Any], reason: str) -> None:
        """The worker: start the container, then carry out what the agent asked while it started."""
        try:
            s.pid = self._up(name, s, made, reason)
        except Exception as e:  # whatever ended the start is its answer (raised in the agent's thread)
            s.error = e
        with self._lock:
            s.answered = True
            stops, cleanup = list(s.stops), s.cleanup
        try:
            if cleanup is not None:  # the run is over for the agent: whatever the start did, it goes
                removed = self.engine.remove(name)
                if removed:
                    s.audits.append((self.writer.clock(), "remove", cleanup, {}))
                # its empty cgroups too (plain rmdirs below Kalena's root): the agent may call
                # nothing of this runtime's for a long while (the writer's log is the agent thread's)
                remove_leftovers(self.tree, s.cgroup)
            else:
                for sig, why in stops:
                    sig = sig or self._stop_signal(name)
                    sent = self.engine.kill(name, sig)
                    s.audits.append((self.writer.clock(), "kill", why, {"signal": sig, "sent": sent}))
        except Exception as e:  # the agent's next stop or cleanup of the run tries again
            s.audits.append((self.writer.clock(), "failed", reason, {"error": str(e)}))
        finally:
            s.done.set()

    def _up(self, name: str, s: _Start, made: dict[str, Any], reason: str) -> int:
        # the listing, not an inspect: a start the engine still runs for a crashed agent holds the
        # container, and this start then waits for that one (the engine starts it once)
        state = self.engine.status(name)
        if state is None:
            image = made["image"]
            if not image:
                raise ValueError("a job for the Docker runtime needs an image (--image)")
            if not self.engine.has_image(image):
                raise ValueError(f"image {image!r} is not on this host (docker pull or docker load it)")
            try:
                self.engine.create(name, image, made["command"], made["labels"], **made["host"])
            except EngineError as e:
                raise ValueError(str(e)) from None
            said = {"image": image, "cgroup_parent": made["host"]["cgroup_parent"]}
            s.audits.append((self.writer.clock(), "create", reason, said))
            state = "created"
        if state == "created":  # never started
            try:
                self.engine.start(name, timeout_s=START_TIMEOUT_S)
            except EngineError as e:
                raise ValueError(str(e)) from None
            s.audits.append((self.writer.clock(), "start", reason, {}))
        facts = self.engine.inspect(name)
        return 0 if facts is None else facts.pid

    def _flush(self, name: str, s: _Start) -> None:
        """Log what an answered start's worker did."""
        for at, action, why, extra in s.audits:
            self._audit(action, name, why, at=at, **extra)
        s.audits.clear()

    def _settle(self) -> None:
        """Finish what answered starts left to the agent's thread: their log lines, and the cgroups
        of the runs cleaned up while they started (their workers removed the containers)."""
        with self._lock:
            over = [(n, s) for n, s in self._starts.items() if s.cleanup is not None and s.done.is_set()]
            for n, _ in over:
                del self._starts[n]
        for name, s in over:
            self._flush(name, s)
            self._remove_cgroups(s.cgroup, s.cleanup or "")  # what its worker could not remove
            self.writer.forget(s.cgroup)

    def _untaken(self, job: JobRecord) -> _Start | None:
        """The run's start, until the agent has taken its answer (the run is STARTING until then:
        it has not finished, whatever its container did)."""
        assert job.cgroup is not None
        with self._lock:
            s = self._starts.get(container_name(job.cgroup))
        return s if s is not None and s.cleanup is None else None

    def _queue_stop(self, job: JobRecord, sig: str | None, reason: str) -> bool:
        """Ask for ``sig`` (``None``: the container's stop signal) once the run's start has answered,
        if it has not yet; ``False`` if it has (the caller signals the container itself)."""
        assert job.cgroup is not None
        with self._lock:
            s = self._starts.get(container_name(job.cgroup))
            if s is None or s.answered:
                return False
            s.stops.append((sig, reason))
        return True

    def finished(self, job: JobRecord) -> tuple[bool, int | None]:
        assert job.cgroup is not None
        self._settle()
        if self._untaken(job) is not None:
            return False, None
        facts = self.engine.inspect(container_name(job.cgroup))
        if facts is None:
            return True, None
        if facts.running:
            return False, None
        return True, facts.exit_code

    def oom_killed(self, job: JobRecord) -> bool | None:
        assert job.cgroup is not None
        if self._untaken(job) is not None:
            return None
        facts = self.engine.inspect(container_name(job.cgroup))
        return None if facts is None else facts.oom_killed

    def release(self, workload_id: str) -> int | None:
        return None  # the engine keeps the exit code; nothing of ours to reap

    def cleanup(self, cgroup: str, reason: str) -> None:
        """Remove the run's container, its Kalena cgroup, and what runc left elsewhere. Asked while
        the container starts, its worker removes it once the start answered, and a later call of
        the agent's removes the cgroups."""
        self._settle()
        name = container_name(cgroup)
        with self._lock:
            s = self._starts.get(name)
            if s is not None:
                s.cleanup = reason  # its log lines and cgroups are settled once it is done
                if not s.answered:
                    return
        if self.engine.remove(name):
            self._audit("remove", name, reason)
        self._remove_cgroups(cgroup, reason)

    def _remove_cgroups(self, cgroup: str, reason: str) -> None:
        if any(self.tree.dir(h, cgroup).is_dir() for h in self.tree.layout.hierarchies):
            self.writer.remove(cgroup, reason)
        remove_leftovers(self.tree, cgroup)

    def terminate(self, job: JobRecord, reason: str) -> None:
        assert job.cgroup is not None
        name = container_name(job.cgroup)
        if self._queue_stop(job, None, reason):
            self._audit("kill", name, reason, signal="its stop signal", sent=False, queued="until started")
            return
        sig = self._stop_signal(name)
        sent = self.engine.kill(name, sig)
        self._audit("kill", name, reason, signal=sig, sent=sent)

    def _stop_signal(self, name: str) -> str:
        """The container's stop signal (its image's ``STOPSIGNAL``), SIGTERM unless it says otherwise."""
        facts = self.engine.inspect(name)
        return (facts.stop_signal if facts is not None else "") or "SIGTERM"

    def kill(self, job: JobRecord, reason: str) -> None:
        """SIGKILL to every process of the run at once, through its cgroup (the kernel's): the
        Engine API's kill waits for the container to exit, which a batch process starved of CPU
        does only in the gaps (dockerd gives up after about 10 s, with an error). Only a run with
        nothing in its cgroup is left to the engine's kill (which then answers at once). A start
        under way dies with runc's init, which is in the cgroup; the engine's kill follows its
        answer."""
        assert job.cgroup is not None
        name = container_name(job.cgroup)
        queued = self._queue_stop(job, "SIGKILL", reason)
        pids = self.writer.pids(job.cgroup)
        if pids:
            self.writer.kill(job.cgroup, reason)
        if queued:
            self._audit("kill", name, reason, signal="SIGKILL", sent=False, queued="until started")
        elif pids:
            self._audit("kill", name, reason, signal="SIGKILL", sent=True, via="cgroup")
        else:
            sent = self.engine.kill(name, "SIGKILL")
            self._audit("kill", name, reason, signal="SIGKILL", sent=sent)

    def sweep(self, keep: Collection[str], reason: str) -> tuple[str, ...]:
        """Kalena's containers on the engine (by label) in this agent's tree (their cgroup parent
        under its root: another agent's, with another root, are not this one's) whose run ``keep``
        does not name."""
        self._settle()
        gone = []
        for facts in self.engine.containers(all=True, label=f"{MANAGED_BY}={MANAGER}"):
            name = facts.name.lstrip("/")
            if not name.startswith("kalena-"):
                continue
            cgroup = f"{BATCH_PARENT}/{name[len('kalena-') :]}"
            if cgroup in keep or facts.cgroup_parent != batch_parent(self.tree, cgroup):
                continue
            if facts.running:
                sent = self.engine.kill(name, "SIGKILL")
                self._audit("kill", name, reason, signal="SIGKILL", sent=sent)
            self.cleanup(cgroup, reason)
            gone.append(cgroup)
        return tuple(gone)

    def started(self, job: JobRecord) -> bool | Literal["starting"] | None:
        """``"starting"`` for a start of this runtime whose answer the agent has not taken (through
        :meth:`start`); else whether its container exists and was started. A crash between saving
        STARTING and creating or starting it leaves none, or one never started (``created``: the
        listing, which answers while the engine still runs a start, where an inspect would wait)."""
        assert job.cgroup is not None
        self._settle()
        name = container_name(job.cgroup)
        with self._lock:
            if name in self._starts:
                return "starting"
        state = self.engine.status(name)
        return state is not None and state != "created"
