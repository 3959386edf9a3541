"""The node agent's ports: what it needs from the node, as protocols, and where each is implemented.

The agent (:mod:`.loop`) observes the node, asks the core and carries the decision out only
through these. A Kubernetes DaemonSet agent, a Docker daemon or a test supplies its own
implementations; the loop does not change.

* :class:`Runtime`: start a batch run, tell whether it finished, stop or kill it (an eviction),
  forget and clean it up; :class:`~.runtime.ProcessRuntime` (processes in their own cgroups),
  :class:`kalena.docker.runtime.DockerRuntime` (containers through the Engine API).
* :class:`Enforcer`: apply knobs, create and remove cgroups, signal and kill, one record per
  write; :class:`~.writer.CgroupWriter` (one cached, ordered, audited writer).
* :data:`ObservationSource`: usage counters of the residents (cpu time, memory, I/O, throttled
  time); :class:`~.telemetry.CgroupfsTelemetry`, :class:`~.cadvisor.CadvisorTelemetry`.
* :class:`StatePort`: the state saved before each side effect; a JSON file or the store.
* :class:`SubmissionSource`: batch submissions and cancel requests, taken together with the
  save of the state that holds them; the inbox folder, the store's queue.
* :class:`DeclarationSource`: the node's declaration when it changed (applied whole or not at
  all); :class:`FileDeclarations` (a YAML file, by mtime), :class:`FixedDeclaration`.
* :class:`PlacedSource` (an enforce-only agent's): the batch a cluster scheduler placed on this
  node and its runtime started (:class:`PlacedRun`); :class:`kalena.k8s.agent.NodePods`.
* :class:`Disruptor` (optional): where evicting is the cluster's to do, not a signal to processes
  (Kubernetes: the Eviction API, which respects PodDisruptionBudgets);
  :class:`kalena.k8s.agent.EvictionApi`.

Reading the kernel's pressure (PSI averages, the root cgroup's memory) stays with the cgroup
reader (:class:`~.cgroupfs.CgroupReader`, already a protocol), and notifications with the
:class:`~.notify.Notifier`: both are sources the loop already takes as parameters.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

from kalena.agent.declaration import Declaration, DeclarationError, load_declaration
from kalena.agent.runtime import Intake
from kalena.agent.state import AgentState, JobRecord
from kalena.agent.telemetry import TelemetrySource
from kalena.agent.writer import KnobWrite, ManagedScope, WriteRecord


class Runtime(Protocol):
    """What runs batch work on the node."""

    def start(self, job: JobRecord, reason: str) -> int | None:
        """Start the job's current run; returns its process id (raises ``OSError``/``ValueError``),
        or ``None`` when the start is still under way after a short wait (a slow container start
        must not hold the round): the run stays STARTING, :meth:`started` says ``"starting"``, and
        calling this again (it never starts the run twice) gives the pid, raises, or says ``None``
        again."""
        ...

    def finished(self, job: JobRecord) -> tuple[bool, int | None]:
        """``(done, exit code)`` of the job's current run (code ``None``: unknown)."""
        ...

    def release(self, workload_id: str) -> int | None:
        """Forget a run whose processes are gone; its exit code if known."""
        ...

    def cleanup(self, cgroup: str, reason: str) -> None:
        """Remove what the run left behind."""
        ...

    def terminate(self, job: JobRecord, reason: str) -> None:
        """Ask the job's current run to stop (SIGTERM, or the runtime's stop signal)."""
        ...

    def kill(self, job: JobRecord, reason: str) -> None:
        """End the job's current run now: SIGKILL to all of it, whatever is left in its cgroup
        included (callers do not kill again)."""
        ...

    def sweep(self, keep: Collection[str], reason: str) -> tuple[str, ...]:
        """Kill and remove every batch run on the node whose cgroup is not in ``keep`` (what a
        crash, or an agent with another state, left behind: it runs outside the ledger); returns
        the runs removed."""
        ...

    def started(self, job: JobRecord) -> bool | Literal["starting"] | None:
        """Whether the job's current run was ever started (``None``: the runtime cannot tell;
        ``"starting"``: a :meth:`start` of this runtime's is under way, or its answer not taken
        yet). Asked each round for a run left STARTING: a start under way is asked again through
        :meth:`start`; after a crash, a run never started is started now, one started runs or
        ended on its own."""
        ...

    def oom_killed(self, job: JobRecord) -> bool | None:
        """Whether the kernel's OOM killer ended the run (``None``: the runtime cannot tell; the
        agent reads the run's cgroup)."""
        ...


class StatePort(Protocol):
    """Where the agent's state is saved before every side effect that must not be repeated:
    :class:`~.state.StateStore` (a JSON file written atomically), :class:`~.dbstate.DbStateStore`
    (Kalena's SQLite store, with the jobs' history, the queue and the series)."""

    def load(self, now: float | None = None) -> AgentState | None: ...

    def save(self, state: AgentState) -> bool: ...

    def discard_temp_files(self) -> None: ...

    def record_series(
        self,
        now: float,
        usage: Mapping[str, Mapping[str, float]],
        reservations: Mapping[str, list[float]],
        throttled_s: Mapping[str, float] | None = None,
    ) -> None: ...

    def record_node(self, now: float, status: Mapping[str, Any]) -> None: ...


class SubmissionSource(Protocol):
    """Where batch submissions and cancel requests come from: the inbox folder
    (:class:`~.runtime.InboxSubmissions`) or the store's queue (:class:`~.dbstate.DbSubmissions`)."""

    def new(self) -> Intake:
        """What is waiting (nothing of it is taken yet)."""
        ...

    def commit(self, outcomes: dict[object, str], save: Callable[[], object]) -> None:
        """Mark the tokens of ``outcomes`` taken (each with what became of it) together with
        ``save`` (which saves the state now holding them): after a crash at any instant, each
        is either taken and in the saved state, or still waiting."""
        ...


class Enforcer(Protocol):
    """The agent's one writer to the node: every change carries its reason and leaves a record."""

    scope: ManagedScope

    def apply(self, writes: Iterable[KnobWrite]) -> tuple[WriteRecord, ...]: ...

    def create(self, name: str, reason: str) -> tuple[WriteRecord, ...]: ...

    def remove(self, name: str, reason: str) -> tuple[WriteRecord, ...]: ...

    def forget(self, name: str) -> None: ...

    def check(self, name: str) -> None: ...

    def procs_files(self, name: str) -> tuple[Path, ...]: ...

    def signal(
        self, name: str, sig: int, reason: str, only: Collection[int] | None = None
    ) -> tuple[int, ...]: ...

    def kill(self, name: str, reason: str) -> tuple[int, ...]: ...


#: Cumulative usage counters per resident (missing telemetry: the resident is left out). The
#: telemetry module's protocol is this port; named here with the others.
ObservationSource = TelemetrySource


class DeclarationSource(Protocol):
    """The node's declaration: the current one, and a new one when it changed."""

    def changed(self) -> Declaration | DeclarationError | None:
        """A new declaration, its problems (nothing of it applies), or ``None``: unchanged."""
        ...


class FileDeclarations:
    """A declaration file, re-read when its modification time changes."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._mtime = self._stat()

    def _stat(self) -> float | None:
        try:
            return self.path.stat().st_mtime
        except OSError:
            return None

    def changed(self) -> Declaration | DeclarationError | None:
        m = self._stat()
        if m == self._mtime:
            return None
        self._mtime = m
        try:
            return load_declaration(self.path)
        except DeclarationError as e:
            return e


class FixedDeclaration:
    """A declaration that never changes (a test, or a shell that rebuilds the agent instead)."""

    def changed(self) -> Declaration | DeclarationError | None:
        return None


@dataclass(frozen=True, slots=True)
class PlacedRun:
    """A batch run a cluster scheduler placed on this node and its runtime started (a Kubernetes
    pod): the agent enforces on it, it never starts or requeues it. ``workload_id`` is how the
    cluster names it (``namespace/name``), and so its reservation report's key."""

    workload_id: str
    cgroup: str  # absolute: where the runtime put it (the kubelet's pod cgroup)
    requests: Mapping[str, float]
    limits: Mapping[str, float] | None
    priority: int
    started_at: float
    owner: str  # its equivalence class (its controller): the harmful-pairing and cooldown key
    grace_s: float | None = None  # its own termination grace (``None``: the policy's)
    uid: str = ""  # the cluster's identity of this incarnation (a pod made again is another run)


class PlacedSource(Protocol):
    """The batch placed on this node by a cluster scheduler (module docstring)."""

    def placed(self) -> Sequence[PlacedRun] | None:
        """What runs now; ``None``: unknown (the source lost the cluster): nothing is concluded."""
        ...


@dataclass(frozen=True, slots=True)
class Disruption:
    """The cluster's answer to one eviction: ``accepted`` (or already gone), else refused with why;
    ``overridden``: a refusal the limit-breach override went past (the why says what it broke)."""

    accepted: bool
    detail: str
    overridden: bool = False


class Disruptor(Protocol):
    """Evicts a workload the cluster's way (module docstring)."""

    def evict(self, workload: str, grace_s: float, override: bool, reason: str) -> Disruption:
        """Ask for ``workload`` to go within ``grace_s``. ``override``: the limit-breach override
        applies (seed 000 §3.3: it takes precedence over everything), so a refusal is gone past
        and said; otherwise a refusal is respected and the eviction asked again later."""
        ...

    def kill(self, workload: str, reason: str) -> None:
        """The grace of an accepted eviction is over: end it now (no second ask: the cluster
        charged its budget when it accepted)."""
        ...
