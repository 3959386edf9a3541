"""What the agent knows, in one small JSON file written atomically, so a restart loses nothing.

Written as: temporary file in the same folder -> ``fsync`` -> ``rename`` over the old file ->
``fsync`` of the folder. A crash at any instant leaves either the old or the new file, never a
torn one. The agent saves before every side effect that must not be repeated (write-ahead: an
eviction is recorded before its SIGTERM is sent), so after a SIGKILL it knows which evictions
are in flight and never starts one twice.

Kept: submitted batch jobs and their runs, evictions (in flight and recent), the eviction
history of the harmful-pairing rule, reservations and first-seen times (the estimator's
memory), the batch CPU allowance, the original CPU quota of every production cgroup Kalena
capped (so a restart restores it), the mitigation rounds of escalation, and the
slack-ineligible deadline.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

STATE_VERSION = 1


@dataclass
class JobRecord:
    """A submitted batch job and its current run (``run`` counts incarnations from 1)."""

    name: str
    command: list[str]
    requests: dict[str, float]
    limits: dict[str, float] | None
    priority: int
    submitted_at: float
    slack_memory: bool = False
    grace_s: float | None = None
    run: int = 0
    status: str = "queued"  # queued | running | evicting | done | failed
    workload_id: str | None = None
    cgroup: str | None = None
    pid: int | None = None
    started_at: float | None = None
    not_before: float = 0.0
    exit_code: int | None = None
    why_pending: str | None = None


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


@dataclass
class AgentState:
    node: str
    version: int = STATE_VERSION
    jobs: dict[str, JobRecord] = field(default_factory=dict)
    evictions: list[EvictionRecord] = field(default_factory=list)
    eviction_history: list[tuple[str, str, float]] = field(default_factory=list)
    reservations: dict[str, list[float]] = field(default_factory=dict)
    first_seen: dict[str, float] = field(default_factory=dict)
    previous_allowance: float | None = None
    production_originals: dict[str, float] = field(default_factory=dict)
    mitigation_rounds: list[tuple[float, bool, list[str]]] = field(default_factory=list)
    slack_ineligible_until: float | None = None
    eviction_seq: int = 0
    last_estimate: float | None = None

    def in_flight(self) -> list[EvictionRecord]:
        return [e for e in self.evictions if e.status != "done"]

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> AgentState:
        if data.get("version") != STATE_VERSION:
            raise ValueError(f"state file version {data.get('version')!r} is not {STATE_VERSION}")
        data = dict(data)
        data["jobs"] = {k: JobRecord(**v) for k, v in data.get("jobs", {}).items()}
        data["evictions"] = [EvictionRecord(**e) for e in data.get("evictions", [])]
        data["eviction_history"] = [tuple(x) for x in data.get("eviction_history", [])]
        data["mitigation_rounds"] = [tuple(x) for x in data.get("mitigation_rounds", [])]
        return cls(**data)


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

    def __init__(self, path: Path) -> None:
        self.path = path
        self._last: bytes | None = None
        self.writes = 0

    def load(self) -> AgentState | None:
        """The saved state, or ``None`` if there is none. A corrupt file raises (never guessed at)."""
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return None
        state = AgentState.from_json(_unfinite(json.loads(raw)))
        self._last = raw
        return state

    def save(self, state: AgentState) -> bool:
        data = json.dumps(_finite(state.to_json()), sort_keys=True, separators=(",", ":")).encode()
        if data == self._last:
            return False
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(self.path, data)
        self._last = data
        self.writes += 1
        return True

    def discard_temp_files(self) -> None:
        """Remove temporaries a crash between write and rename left behind."""
        for p in self.path.parent.glob(f".{self.path.name}.tmp-*"):
            with contextlib.suppress(OSError):
                p.unlink()
