"""The Docker runtime: the agent's batch runs as containers, started and stopped through the Engine API.

Each run of a job is one container named ``kalena-<job>.<run>`` with Kalena's labels (managed by
Kalena, the job, the run, the workload id, tier batch, priority), so an agent restarted after a
crash finds its own containers by name instead of starting a second one for the same run. The
container's ``--cgroup-parent`` is the run's Kalena cgroup, created and given its knobs (quota
at the request, batch weight, memory envelope) before the container exists, so it never runs
unthrottled (:mod:`kalena.docker.cgroups` says why the knobs sit on the parent).

An eviction is ``docker stop`` in two calls: the container's stop signal (SIGTERM unless the
image says otherwise) through the Engine API at once, SIGKILL at the evictor's recorded
deadline; the evictor, not a blocking ``stop``, keeps the grace period, so an agent restarted
mid-grace resumes it. A finished run's container is removed with its cgroups.
"""

from __future__ import annotations

from collections.abc import Collection

from kalena.agent.actionlog import ActionLog
from kalena.agent.layout import BATCH_PARENT, CgroupTree
from kalena.agent.state import JobRecord
from kalena.agent.writer import CgroupWriter
from kalena.core.classify import PRIORITY, TIER
from kalena.docker.cgroups import batch_parent, remove_leftovers
from kalena.docker.engine import Engine, EngineError
from kalena.docker.labels import JOB, MANAGED_BY, MANAGER, RUN, WORKLOAD

GIB = float(2**30)


def container_name(run_cgroup: str) -> str:
    """``batch/job-1.2`` -> ``kalena-job-1.2`` (a run's cgroup is its workload id)."""
    prefix = BATCH_PARENT + "/"
    if not run_cgroup.startswith(prefix):
        raise ValueError(f"{run_cgroup!r} is not a batch run's cgroup")
    return "kalena-" + run_cgroup[len(prefix) :]


class DockerRuntime:
    """:class:`~kalena.agent.ports.Runtime` on one Docker Engine."""

    def __init__(self, engine: Engine, writer: CgroupWriter, tree: CgroupTree, log: ActionLog | None = None):
        self.engine = engine
        self.writer = writer
        self.tree = tree
        self.log = log

    def _audit(self, action: str, name: str, reason: str, **extra: object) -> None:
        if self.log is not None:
            now = self.writer.clock()
            self.log.append("docker", now, action=action, container=name, reason=reason, **extra)

    def start(self, job: JobRecord, reason: str) -> int:
        """Create (unless a crash left it created) and start the run's container; its first pid."""
        assert job.cgroup is not None and job.workload_id is not None
        name = container_name(job.cgroup)
        facts = self.engine.inspect(name)
        if facts is None:
            if not job.image:
                raise ValueError("a job for the Docker runtime needs an image (--image)")
            if not self.engine.has_image(job.image):
                raise ValueError(f"image {job.image!r} is not on this host (docker pull or docker load it)")
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
            host = {"cgroup_parent": batch_parent(self.tree, job.cgroup)}
            if ram_limit > 0:  # the container's own envelope, shown by inspect (Kalena's is the parent's)
                host["mem_limit"] = int(ram_limit * GIB)
            try:
                self.engine.create(name, job.image, list(job.command), labels, **host)
            except EngineError as e:
                raise ValueError(str(e)) from None
            self._audit("create", name, reason, image=job.image, cgroup_parent=host["cgroup_parent"])
            facts = self.engine.inspect(name)
        if facts is None:
            raise ValueError(f"container {name} vanished right after it was created")
        if not facts.running and facts.started_at is None:
            try:
                self.engine.start(name)
            except EngineError as e:
                raise ValueError(str(e)) from None
            self._audit("start", name, reason)
            facts = self.engine.inspect(name)
        return 0 if facts is None else facts.pid

    def finished(self, job: JobRecord) -> tuple[bool, int | None]:
        assert job.cgroup is not None
        facts = self.engine.inspect(container_name(job.cgroup))
        if facts is None:
            return True, None
        if facts.running:
            return False, None
        return True, facts.exit_code

    def oom_killed(self, job: JobRecord) -> bool | None:
        assert job.cgroup is not None
        facts = self.engine.inspect(container_name(job.cgroup))
        return None if facts is None else facts.oom_killed

    def release(self, workload_id: str) -> int | None:
        return None  # the engine keeps the exit code; nothing of ours to reap

    def cleanup(self, cgroup: str, reason: str) -> None:
        """Remove the run's container, its Kalena cgroup, and what runc left elsewhere."""
        name = container_name(cgroup)
        if self.engine.remove(name):
            self._audit("remove", name, reason)
        if any(self.tree.dir(h, cgroup).is_dir() for h in self.tree.layout.hierarchies):
            self.writer.remove(cgroup, reason)
        remove_leftovers(self.tree, cgroup)

    def terminate(self, job: JobRecord, reason: str) -> None:
        assert job.cgroup is not None
        name = container_name(job.cgroup)
        facts = self.engine.inspect(name)
        sig = (facts.stop_signal if facts is not None else "") or "SIGTERM"
        sent = self.engine.kill(name, sig)
        self._audit("kill", name, reason, signal=sig, sent=sent)

    def kill(self, job: JobRecord, reason: str) -> None:
        assert job.cgroup is not None
        name = container_name(job.cgroup)
        sent = self.engine.kill(name, "SIGKILL")
        self._audit("kill", name, reason, signal="SIGKILL", sent=sent)
        if self.writer.pids(job.cgroup):  # a process that left the container's cgroup for the run's
            self.writer.kill(job.cgroup, reason)

    def sweep(self, keep: Collection[str], reason: str) -> tuple[str, ...]:
        """Kalena's containers on the engine (by label) in this agent's tree (their cgroup parent
        under its root: another agent's, with another root, are not this one's) whose run ``keep``
        does not name."""
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

    def started(self, job: JobRecord) -> bool | None:
        """Its container exists and was started (the engine keeps ``StartedAt``); a crash between
        saving STARTING and creating or starting it leaves none, or one never started."""
        assert job.cgroup is not None
        facts = self.engine.inspect(container_name(job.cgroup))
        return facts is not None and (facts.running or facts.started_at is not None)
