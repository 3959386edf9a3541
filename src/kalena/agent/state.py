"""What the agent knows, in one small JSON file written atomically, so a restart loses nothing.

Written as: temporary file in the same folder -> ``fsync`` -> ``rename`` over the old file ->
``fsync`` of the folder. A crash at any instant leaves either the old or the new file, never a
torn one. The agent saves before every side effect that must not be repeated (write-ahead: an
eviction is recorded before its SIGTERM is sent), so after a SIGKILL it knows which evictions
are in flight and never starts one twice.

Kept: submitted batch jobs and their runs (a pending job's "why pending": the core's message and
reason codes), the jobs' lifecycle (the core's ``Lifecycle``, one task per job name: every job's
state and its history of (state, time, reason)), evictions (in flight and recent), the
scheduling context (the core's ``ContextKeeper`` as JSON: the eviction history of the
harmful-pairing rule, cooldowns, the slack-ineligible deadline), reservations and first-seen
times (the estimator's memory), the batch CPU allowance, the original CPU quota of every
production cgroup Kalena capped (so a restart restores it) and the mitigation rounds of escalation.

``eviction_history`` and ``slack_ineligible_until`` are read from files written before the keeper
and are folded into it when :class:`~kalena.agent.batch.BatchRuns` takes the state; they stay
empty after that.

Version 2 keeps the lifecycle; version 1 (each job's ``status`` string: queued | running |
evicting | done | failed) is read and upgraded: each job's task is rebuilt in the state its
status names with one ``restored`` entry at the load time (see :func:`restore_lifecycle`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from kalena.core.lifecycle import Lifecycle, TaskState, Transition, TransitionReason
from kalena.core.placement import ContextKeeper

if TYPE_CHECKING:  # the tap is the agent's archiving, which imports this module's neighbours
    from kalena.agent.archiving import ArchiveTap

STATE_VERSION = 2
_READS = (1, STATE_VERSION)  # 1: job statuses as strings, no lifecycle (upgraded on load)

#: A job's state in the agent's words of version 1, kept for the CLI and the action log.
STATUS_WORDS: Mapping[TaskState, str] = MappingProxyType(
    {
        TaskState.PENDING: "queued",
        TaskState.PLACED: "running",  # admitted: the agent starts it in the same pass
        TaskState.STARTING: "running",
        TaskState.RUNNING: "running",
        TaskState.THROTTLED: "running",
        TaskState.EVICTING: "evicting",
        TaskState.EVICTED: "evicting",  # its cgroup is empty; requeued in the same call
        TaskState.REQUEUED: "queued",  # waiting out its cooldown
        TaskState.SUCCEEDED: "done",
        TaskState.FAILED: "failed",
        TaskState.CANCELLED: "cancelled",  # the agent cancels nothing today
    }
)
#: The process is (or, right after a crash, may be) on the node: what ``BatchRuns.running`` holds.
LIVE: tuple[TaskState, ...] = (TaskState.STARTING, TaskState.RUNNING, TaskState.THROTTLED)


@dataclass
class JobRecord:
    """A submitted batch job and its current run (``run`` counts incarnations from 1). Its state
    is not here: it is the job's task in :attr:`AgentState.lifecycle` (``AgentState.task``)."""

    name: str
    command: list[str]
    requests: dict[str, float]
    limits: dict[str, float] | None
    priority: int
    submitted_at: float
    slack_memory: bool = False
    grace_s: float | None = None
    run: int = 0
    workload_id: str | None = None
    cgroup: str | None = None
    pid: int | None = None
    started_at: float | None = None
    not_before: float = 0.0  # a requeued job's cooldown ends then (REQUEUED -> PENDING)
    exit_code: int | None = None
    why_pending: str | None = None  # the core's WhyPending.message ("0/1 nodes are available: ...")
    why_pending_codes: list[str] | None = None  # its stable ReasonCode values, in filter order
    image: str | None = None  # the container image (the Docker runtime; the process runtime has none)
    labels: dict[str, str] | None = None  # the submitter's labels (a container's, in the Docker runtime)
    submission: int | None = None  # its number in the store's queue (None: from the inbox folder)
    adopted_from: str | None = None  # the id of the hand-made container it was adopted from
    host: str | None = None  # the cluster daemon's: the host it is placed on (None: not placed)
    mirrored: int = 0  # the cluster daemon's: its host's steps already in its lifecycle
    cancel_requested: bool = False  # the cluster daemon's: a cancel to forward to its host


@dataclass
class EvictionRecord:
    """One eviction: SIGTERM at ``started_at``, SIGKILL at ``deadline`` unless the cgroup emptied."""

    id: str
    workload: str
    cgroup: str
    tier: str
    cause: str
    started_at: float
    deadline: float
    pids: list[int]
    status: str = "terminating"  # terminating | killed | done
    logged: bool = False
    requeue_until: float | None = None
    job: str | None = None
    finished_at: float | None = None
    # the cluster's last refusal (a Kubernetes PodDisruptionBudget), retried each round; None: none
    refused: str | None = None


@dataclass
class AgentState:
    """What the agent keeps. A job's state is in ``lifecycle`` (task id = job name), never in
    its :class:`JobRecord`: change it with :meth:`submit` and :meth:`move` only."""

    node: str
    version: int = STATE_VERSION
    jobs: dict[str, JobRecord] = field(default_factory=dict)
    lifecycle: Lifecycle = field(default_factory=Lifecycle)
    evictions: list[EvictionRecord] = field(default_factory=list)
    eviction_history: list[tuple[str, str, float]] = field(default_factory=list)  # legacy: see above
    reservations: dict[str, list[float]] = field(default_factory=dict)
    first_seen: dict[str, float] = field(default_factory=dict)
    production_originals: dict[str, float] = field(default_factory=dict)
    # cgroup v1: batch runs' descendants lowered with their run -> their own quota (knobs.nested_writes)
    nested_originals: dict[str, float] = field(default_factory=dict)
    round_state: dict[str, Any] | None = None  # the core round's RoundState (kalena.core.controller)
    slack_ineligible_until: float | None = None  # legacy: see above
    placement_context: dict[str, Any] | None = None  # the ContextKeeper's JSON (BatchRuns keeps it)
    eviction_seq: int = 0
    last_estimate: float | None = None

    def in_flight(self) -> list[EvictionRecord]:
        return [e for e in self.evictions if e.status != "done"]

    def slack_deadline(self) -> float | None:
        """Until when escalation made the node slack-ineligible (``None``: never): the keeper's
        deadline, or a legacy ``slack_ineligible_until`` not yet folded into it."""
        if self.slack_ineligible_until is not None:
            return self.slack_ineligible_until
        if self.placement_context is None:
            return None
        until = float(ContextKeeper.from_json(self.placement_context).ineligible_until[0])
        return None if until == float("-inf") else until

    # -- the jobs' lifecycle ----------------------------------------------------------------------
    def task(self, name: str) -> TaskState:
        return self.lifecycle.state_of(name)

    def status(self, name: str) -> str:
        """The job's state in the words of :data:`STATUS_WORDS` (CLI output, action log lines)."""
        return STATUS_WORDS[self.task(name)]

    def history(self, name: str) -> tuple[Transition, ...]:
        return self.lifecycle.history(name)

    def names_in(self, *states: TaskState) -> list[str]:
        """The jobs in any of ``states``, in the order they were submitted."""
        return self.lifecycle.ids_in(*states)

    def submit(self, job: JobRecord, now: float) -> None:
        """A new job, PENDING (``submitted``). A job of that name must have ended (terminal):
        its task and history are forgotten first, so the new one starts a fresh history; its run
        numbers go on from the old job's, so a workload id never names two runs."""
        if job.name in self.jobs:
            self.lifecycle.forget(self.lifecycle.handle(job.name))  # raises unless it ended
            job.run = max(job.run, self.jobs[job.name].run)
        self.lifecycle.add([job.name], now)
        self.jobs[job.name] = job

    def forget(self, names: list[str]) -> None:
        """Drop ended jobs and their histories (an enforce-only agent's pods, long gone)."""
        if names:
            self.lifecycle.forget([self.lifecycle.handle(n) for n in names])  # raises unless all ended
            for n in names:
                del self.jobs[n]

    def move(self, name: str, to: TaskState, now: float, reason: TransitionReason) -> None:
        """One job's transition; a move the core's table forbids raises ``IllegalTransition``."""
        h = self.lifecycle.handle(name)
        # the agent's clock is the wall clock, which NTP may step back: an entry is never put
        # before the previous one (the lifecycle rejects time going backwards)
        self.lifecycle.move(h, to, max(now, float(self.lifecycle.entered(h)[0])), reason)

    # -- JSON -------------------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out["jobs"] = {k: dataclasses.asdict(j) for k, j in self.jobs.items()}
        out["evictions"] = [dataclasses.asdict(e) for e in self.evictions]
        out["lifecycle"] = self.lifecycle.to_json()
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any], now: float | None = None) -> AgentState:
        """The state of :meth:`to_json`. A version 1 file is upgraded: its lifecycle is rebuilt
        at ``now`` (default: the wall clock, the agent's clock in production)."""
        version = data.get("version")
        if type(version) is not int or version not in _READS:
            raise ValueError(f"state file version {version!r} is not {STATE_VERSION} (nor 1, upgraded)")
        if version != 1 and "lifecycle" not in data:
            raise ValueError("lifecycle: missing")
        data = dict(data)
        jobs = {k: dict(v) for k, v in data.get("jobs", {}).items()}
        # version 1's status field defaulted to "queued"
        words = {k: v.pop("status", "queued") for k, v in jobs.items()} if version == 1 else {}
        data["jobs"] = {k: _job(k, v) for k, v in jobs.items()}
        data["evictions"] = [EvictionRecord(**e) for e in data.get("evictions", [])]
        data["eviction_history"] = [tuple(x) for x in data.get("eviction_history", [])]
        _check_context(data.get("placement_context"), data.get("node"))
        # written by agents before the core round: their allowance and rounds are cheap to lose
        data.pop("mitigation_rounds", None)
        data.pop("previous_allowance", None)
        if version == 1:
            at = time.time() if now is None else now
            data["lifecycle"] = restore_lifecycle(data["jobs"], words, data["evictions"], at)
            data["version"] = STATE_VERSION
        else:
            data["lifecycle"] = _lifecycle_of(data["lifecycle"], data["jobs"])
        return cls(**data)


def _check_context(raw: Any, node: Any) -> None:
    """The keeper's JSON parses, over this agent's one node (never guessed at, as the rest)."""
    if raw is None:
        return
    try:
        keeper = ContextKeeper.from_json(raw)
    except ValueError as e:
        raise ValueError(f"placement_context: {e}") from None
    if keeper.nodes != (node,):
        raise ValueError(
            f"placement_context.nodes: must be [{node!r}] (this node), got {list(keeper.nodes)!r}"
        )


def _job(name: str, raw: dict[str, Any]) -> JobRecord:
    try:
        return JobRecord(**raw)
    except TypeError as e:  # an unknown or missing field (a status string in a version 2 file)
        raise ValueError(f"jobs.{name}: {e}") from None


def _lifecycle_of(raw: Any, jobs: Mapping[str, JobRecord]) -> Lifecycle:
    lc = Lifecycle.from_json(raw)
    ids = {lc.id_of(h) for h in range(len(lc))}
    if ids != set(jobs):
        odd = sorted(ids ^ set(jobs))[:10]
        raise ValueError(f"lifecycle.ids: not the jobs' names (in one but not the other: {odd})")
    return lc


def restore_lifecycle(
    jobs: Mapping[str, JobRecord],
    words: Mapping[str, str],
    evictions: list[EvictionRecord],
    now: float,
) -> Lifecycle:
    """The lifecycle of a version 1 file: each job in the state its status names, entered at
    ``now`` with reason ``restored`` (its history before is unknown; none is made up).

    queued -> PENDING, or REQUEUED while its cooldown (``not_before``) runs; running -> RUNNING
    (the next round says if it is throttled); evicting -> EVICTING; done -> SUCCEEDED; failed ->
    FAILED. A run with an eviction in flight is EVICTING whatever its status says: a version 1
    agent recorded the eviction before the status (a crash in between left "running").
    """
    evicting = {e.workload for e in evictions if e.status != "done"}
    states = []
    for name, job in jobs.items():
        word = words[name]
        if word == "queued":
            state = TaskState.REQUEUED if job.not_before > now else TaskState.PENDING
        elif word in ("running", "evicting") and job.workload_id in evicting:
            state = TaskState.EVICTING
        elif word in _RESTORED:
            state = _RESTORED[word]
        else:
            raise ValueError(f"jobs.{name}.status: unknown status (value: {word!r})")
        states.append(state)
    lc = Lifecycle()
    lc.restore(list(jobs), states, now)
    return lc


_RESTORED = {
    "running": TaskState.RUNNING,
    "evicting": TaskState.EVICTING,
    "done": TaskState.SUCCEEDED,
    "failed": TaskState.FAILED,
}


def _finite(obj: Any) -> Any:
    """JSON has no infinity: write it as the string "inf" (read back by :func:`_unfinite`)."""
    if isinstance(obj, float) and obj in (float("inf"), float("-inf")):
        return "inf" if obj > 0 else "-inf"
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_finite(v) for v in obj]
    return obj


def _unfinite(obj: Any) -> Any:
    if obj in ("inf", "-inf"):
        return float(obj)
    if isinstance(obj, dict):
        return {k: _unfinite(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_unfinite(v) for v in obj]
    return obj


def state_bytes(state: AgentState) -> bytes:
    """The saved form of ``state``: compact, sorted JSON (equal states give equal bytes)."""
    return json.dumps(_finite(state.to_json()), sort_keys=True, separators=(",", ":")).encode()


def state_of_bytes(raw: bytes | str, now: float | None = None) -> AgentState:
    """The state of :func:`state_bytes`; raises ``ValueError`` on anything else."""
    try:
        return AgentState.from_json(_unfinite(json.loads(raw)), now)
    except RecursionError:
        raise ValueError("nested too deeply to be a state file") from None


def write_atomic(path: Path, data: bytes) -> None:
    """``data`` to ``path`` via temp file + fsync + rename + fsync of the folder."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    dfd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


class StateStore:
    """Load and save :class:`AgentState` at ``path``; a save of identical content is skipped."""

    def __init__(self, path: Path, tap: ArchiveTap | None = None) -> None:
        self.path = path
        self.tap = tap
        self._last: bytes | None = None
        self.writes = 0

    def load(self, now: float | None = None) -> AgentState | None:
        """The saved state, or ``None`` if there is none. A corrupt file raises (never guessed at).
        ``now``: the load time, stamped on the lifecycle rebuilt from a version 1 file."""
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return None
        state = state_of_bytes(raw, now)
        self._last = raw
        return state

    def save(self, state: AgentState) -> bool:
        data = state_bytes(state)
        if data == self._last:
            return False
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(self.path, data)
        self._last = data
        self.writes += 1
        return True

    def record_series(
        self,
        now: float,
        usage: Mapping[str, Mapping[str, float]],
        reservations: Mapping[str, list[float]],
        throttled_s: Mapping[str, float] | None = None,
    ) -> None:
        """The state file keeps no usage, reservation or throttled-time series; the archive tap, if
        any, writes them to its usage archive (on Kalena's store they go into the store:
        :mod:`.dbstate`)."""
        if self.tap is not None:
            self.tap.series(now, usage, reservations, throttled_s)

    def record_node(self, now: float, status: Mapping[str, Any]) -> None:
        """Nor the node's slack view (the store does)."""
        return None

    def discard_temp_files(self) -> None:
        """Remove temporaries a crash between write and rename left behind."""
        for p in self.path.parent.glob(f".{self.path.name}.tmp-*"):
            with contextlib.suppress(OSError):
                p.unlink()
