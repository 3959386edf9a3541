"""The process runtime: a tiny Borglet that runs submitted batch commands in their own cgroups.

Submission is a spool folder (``<state-dir>/inbox``): ``kalena agent submit`` writes one JSON
file per job atomically, the agent takes it into its state file and then deletes it, so a job
is never lost or run twice across a crash. A malformed submission is reported (file, key,
value) and moved to ``inbox/rejected``; nothing of it runs.

A job's process is started inside its cgroup in every hierarchy (the child writes its own pid
to each ``cgroup.procs`` before ``exec``, so not one instruction runs outside), in its own
session, with output appended to ``<state-dir>/jobs/<workload>.log``. Whether a run is alive
is read from its cgroup (empty = done), which also holds after an agent restart, when the
process is no longer the agent's child.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    ValidationError,
)

from kalena.agent.cgroupfs import CgroupReader
from kalena.agent.layout import BATCH_PARENT
from kalena.agent.state import JobRecord, write_atomic
from kalena.agent.writer import CgroupWriter
from kalena.core.enforcement import BATCH_OOM_SCORE_ADJ
from kalena.core.quantity import QuantityError, parse_quantity
from kalena.core.resources import DIMS
from kalena.ir.errors import MISSING, Problem, ProblemLog, key_path
from kalena.ir.yamlio import parse_json, read_text

_Q = StrictInt | StrictFloat | StrictStr


class _Submission(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: StrictStr = Field(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    command: list[StrictStr] = Field(min_length=1)
    requests: dict[StrictStr, _Q] = Field(default_factory=dict)
    limits: dict[StrictStr, _Q] | None = None
    priority: StrictInt = Field(default=0, ge=0)
    slack_memory: StrictBool = False
    grace_s: StrictFloat | StrictInt | None = Field(default=None, ge=0)
    image: StrictStr | None = Field(default=None, min_length=1, max_length=512)
    labels: dict[StrictStr, StrictStr] = Field(default_factory=dict, max_length=64)


#: Label keys of this prefix are Kalena's own (classification, its bookkeeping): not the submitter's.
RESERVED_LABEL_PREFIX = "kalena.naughtian.io/"
_LABEL_KEY = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._/-]{0,253}[A-Za-z0-9])?$")


@dataclass(frozen=True, slots=True)
class Submission:
    name: str
    command: tuple[str, ...]
    requests: dict[str, float]
    limits: dict[str, float] | None
    priority: int
    slack_memory: bool = False
    grace_s: float | None = None
    image: str | None = None
    labels: dict[str, str] = field(default_factory=dict)
    adopted_from: str | None = None  # the hand-made container it was adopted from (never from a file)

    def to_json(self) -> dict[str, Any]:
        return {
            "image": self.image,
            "labels": dict(self.labels),
            "name": self.name,
            "command": list(self.command),
            "requests": self.requests,
            "limits": self.limits,
            "priority": self.priority,
            "slack_memory": self.slack_memory,
            "grace_s": self.grace_s,
        }

    def job(self, now: float) -> JobRecord:
        return JobRecord(
            self.name,
            list(self.command),
            dict(self.requests),
            None if self.limits is None else dict(self.limits),
            self.priority,
            now,
            self.slack_memory,
            self.grace_s,
            image=self.image,
            labels=dict(self.labels) or None,
            adopted_from=self.adopted_from,
        )


def parse_submission(data: Any, file: str) -> Submission:
    """Validate one submission; raise ``ValueError`` carrying :class:`Problem` records."""
    try:
        doc = _Submission.model_validate(data)
    except ValidationError as e:
        probs = [
            Problem(file, key_path(err["loc"]), err["msg"], err.get("input", MISSING)) for err in e.errors()
        ]
        raise SubmissionError(probs) from None
    probs: list[Problem] = []

    def dims(raw: dict[str, Any], key: str) -> dict[str, float]:
        out = {}
        for d, v in raw.items():
            if d not in DIMS:
                probs.append(Problem(file, f"{key}.{d}", "unknown dimension", d))
                continue
            try:
                out[d] = parse_quantity(v, d)
            except QuantityError as err:
                probs.append(Problem(file, f"{key}.{d}", str(err), v))
        return out

    req = dims(doc.requests, "requests")
    lim = None if doc.limits is None else dims(doc.limits, "limits")
    if req.get("gpu", 0) > 0:
        probs.append(Problem(file, "requests.gpu", "batch never gets a GPU (non-reclaimable)", req["gpu"]))
    for d, v in (lim or {}).items():
        if 0 < v < req.get(d, 0):
            probs.append(Problem(file, f"limits.{d}", f"is below the request {req[d]:g}", v))
    for k, v in doc.labels.items():
        if k.startswith(RESERVED_LABEL_PREFIX):
            why = f"keys under {RESERVED_LABEL_PREFIX} are Kalena's own"
            probs.append(Problem(file, f"labels.{k}", why, k))
        elif not _LABEL_KEY.match(k):
            probs.append(Problem(file, f"labels.{k}", "not a label key (letters, digits, . _ / -)", k))
        elif len(v) > 4096:
            probs.append(Problem(file, f"labels.{k}", "longer than 4096 characters", v[:40] + "..."))
    if probs:
        raise SubmissionError(probs)
    grace = None if doc.grace_s is None else float(doc.grace_s)
    return Submission(
        doc.name,
        tuple(doc.command),
        req,
        lim,
        doc.priority,
        doc.slack_memory,
        grace,
        doc.image,
        dict(doc.labels),
    )


class SubmissionError(ValueError):
    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        super().__init__("\n".join(p.render() for p in problems))


def submit(inbox: Path, sub: Submission) -> Path:
    """Drop ``sub`` into the agent's inbox, atomically (the agent never reads half a file) and
    only if no job of that name is queued there: ``FileExistsError`` otherwise, nothing replaced."""
    inbox.mkdir(exist_ok=True)
    path = inbox / f"{sub.name}.json"
    staged = inbox / f".{sub.name}.json.new"
    write_atomic(staged, json.dumps(sub.to_json(), sort_keys=True).encode())
    try:
        os.link(staged, path)  # creates the name only if it is free, in one step
    finally:
        staged.unlink(missing_ok=True)
    return path


#: The largest job file read from the inbox: a command line and a few quantities need far less.
MAX_JOB_BYTES = 1 << 20


def read_inbox(inbox: Path) -> tuple[list[tuple[Path, Submission]], list[Problem]]:
    """Every valid submission waiting (oldest first) and the problems of the invalid ones.

    Invalid files are moved to ``inbox/rejected`` at once; valid ones stay until
    :func:`take` removes them (after the agent recorded them in its state file).
    """
    if not inbox.is_dir():
        return [], []
    ok: list[tuple[Path, Submission]] = []
    problems: list[Problem] = []
    files = sorted(
        (p for p in inbox.glob("*.json") if p.is_file()), key=lambda p: (p.stat().st_mtime, p.name)
    )
    for p in files:
        log = ProblemLog(str(p))
        text = read_text(p, log, max_bytes=MAX_JOB_BYTES)
        parsed, data = parse_json(text, log) if text is not None else (False, None)
        if not parsed:
            problems.extend(log.problems)
            _reject(p)
            continue
        try:
            ok.append((p, parse_submission(data, str(p))))
        except SubmissionError as e:
            problems.extend(e.problems)
            _reject(p)
    return ok, problems


def _reject(p: Path) -> None:
    rejected = p.parent / "rejected"
    rejected.mkdir(exist_ok=True)
    with contextlib.suppress(OSError):
        p.replace(rejected / p.name)


def take(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        path.unlink()


@dataclass(frozen=True, slots=True)
class Intake:
    """What a submission source has waiting: valid submissions (each with its token and where it
    came from), cancel requests (token, job name), and the problems of what was rejected outright."""

    submissions: list[tuple[object, str, Submission]]
    cancels: list[tuple[object, str]]
    problems: list[Problem]


class InboxSubmissions:
    """:class:`~kalena.agent.ports.SubmissionSource` over the spool folder (module docstring):
    a submission's file is deleted only after the state holding the job was saved."""

    def __init__(self, inbox: Path) -> None:
        self.inbox = inbox

    def new(self) -> Intake:
        subs, problems = read_inbox(self.inbox)
        return Intake([(path, str(path), sub) for path, sub in subs], [], problems)

    def commit(self, outcomes: dict[object, str], save: Callable[[], object]) -> None:
        save()  # recorded before the files go: never lost, never taken twice
        for path in outcomes:
            take(path)  # type: ignore[arg-type]


class ProcessRuntime:
    """Starts, watches and cleans up batch runs (evictions go through the agent's executor)."""

    def __init__(self, writer: CgroupWriter, reader: CgroupReader, log_dir: Path | None = None) -> None:
        self.writer = writer
        self.reader = reader
        self.log_dir = log_dir
        self._children: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, job: JobRecord, reason: str) -> int:
        """Create the run's cgroup and start its command inside it; returns the pid."""
        assert job.cgroup is not None and job.workload_id is not None
        if job.image is not None:
            raise ValueError(f"the process runtime runs commands, not images (image: {job.image!r})")
        self.writer.create(job.cgroup, reason)
        files = self.writer.procs_files(job.cgroup)

        def enter() -> None:
            for f in files:
                with open(f, "w") as fh:
                    fh.write(str(os.getpid()))
            # the kernel's OOM killer takes batch first (raising one's own score needs no privilege)
            with open("/proc/self/oom_score_adj", "w") as fh:
                fh.write(str(BATCH_OOM_SCORE_ADJ))

        out: Any = subprocess.DEVNULL
        if self.log_dir is not None:
            self.log_dir.mkdir(parents=True, exist_ok=True)
            out = open(self.log_dir / f"{job.workload_id.replace('/', '_')}.log", "ab")  # noqa: SIM115
        try:
            p = subprocess.Popen(
                job.command,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                preexec_fn=enter,
                start_new_session=True,
                close_fds=True,
            )
        finally:
            if out is not subprocess.DEVNULL:
                out.close()
        self._children[job.workload_id] = p
        return p.pid

    def finished(self, job: JobRecord) -> tuple[bool, int | None]:
        """(done, exit code): the agent's own child is polled; otherwise the cgroup is read."""
        assert job.workload_id is not None and job.cgroup is not None
        child = self._children.get(job.workload_id)
        if child is not None:
            code = child.poll()
            if code is None:
                return False, None
            del self._children[job.workload_id]
            return self.empty(job.cgroup), code
        return self.empty(job.cgroup), None

    def empty(self, cgroup: str) -> bool:
        return not self.reader.procs(cgroup)

    def release(self, workload_id: str) -> int | None:
        """Forget a run (its cgroup is empty); reap the child if it is ours. Returns its exit code."""
        child = self._children.pop(workload_id, None)
        if child is None:
            return None
        with contextlib.suppress(subprocess.TimeoutExpired):
            return child.wait(1.0)
        return None

    def cleanup(self, cgroup: str, reason: str) -> None:
        if self.reader.exists(cgroup):
            self.writer.remove(cgroup, reason)

    def terminate(self, job: JobRecord, reason: str) -> None:
        """SIGTERM to every process of the run's cgroup."""
        assert job.cgroup is not None
        self.writer.signal(job.cgroup, signal.SIGTERM, reason)

    def kill(self, job: JobRecord, reason: str) -> None:
        assert job.cgroup is not None
        self.writer.kill(job.cgroup, reason)

    def sweep(self, keep: Collection[str], reason: str) -> tuple[str, ...]:
        """The run cgroups under the batch parent (in any hierarchy) that ``keep`` does not name."""
        found: set[str] = set()
        for h in self.writer.tree.layout.hierarchies:
            parent = self.writer.tree.dir(h, BATCH_PARENT)
            if parent.is_dir():
                found.update(f"{BATCH_PARENT}/{d.name}" for d in parent.iterdir() if d.is_dir())
        gone = tuple(sorted(found - set(keep)))
        for name in gone:
            self.writer.kill(name, reason)
            self.writer.remove(name, reason)
        return gone

    def started(self, job: JobRecord) -> bool | None:
        """Something ran in the run's cgroup: its CPU time is above zero (an exec alone takes some).
        A crash after the cgroup was made but before the process started leaves it at zero."""
        assert job.cgroup is not None
        if not self.reader.exists(job.cgroup):
            return False
        used = self.reader.read(job.cgroup, with_limit=False, with_throttling=False).cpu_usage_ns
        return None if used is None else used > 0

    def oom_killed(self, job: JobRecord) -> bool | None:
        return None  # the run's cgroup counts it (BatchRuns reads it)
