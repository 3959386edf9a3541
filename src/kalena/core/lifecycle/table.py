"""The batch task lifecycle as data: states, stable reason codes and the one transition table.

The main line, then every other edge (``LIVE`` = STARTING, RUNNING or THROTTLED: its process is
on the node; ``EVICT`` = evicted-ledger-breach | evicted-limit-breach | escalation-drain |
readmission-rejected)::

    submitted -> PENDING --admitted--> PLACED --start-requested--> STARTING --started--> RUNNING
                    ^                    |                                              |    ^
                    +-----unplaced-------+                                    throttled |    | unthrottled
                                                                                        v    |
                                                                                      THROTTLED

    LIVE --EVICT--> EVICTING --exited | grace-expired | killed-oom--> EVICTED
    LIVE --EVICT | killed-oom | exit-error | start-failed*----------> EVICTED   (no grace, or to retry)
    PLACED --EVICT--> EVICTED                                                   (nothing started: no grace)
    LIVE --finished--> SUCCEEDED
    LIVE --exit-error | killed-oom | start-failed*--> FAILED                    (not to retry)
    EVICTED --requeued--> REQUEUED --cooldown-over--> PENDING
    EVICTED --requeued--> PENDING                                               (no cluster-wide cooldown)
    EVICTED --given-up--> FAILED
    every non-terminal state --cancelled--> CANCELLED
    (* start-failed only from STARTING)
    restored -> any state                                                        (first entry only)

``restored`` is no edge: it is the first entry of a task a shell rebuilt from a record that
kept states but no history (the node agent's state files before the lifecycle), entered in the
state that record gave, at the time it was rebuilt (``Lifecycle.restore``). Inventing the
walk that led there would put made-up times and reasons in the history.

Why REQUEUED is a state and not "pending with a not-before": ``in_state(PENDING)`` must be
exactly the set a scheduling pass may consider, without every reader also comparing a
deadline with ``now``; and the cooldown's end is then a transition (``cooldown-over``) in the
history, so "why was it not placed for ten minutes" is answered by the record. A cooldown
that only bars some nodes (the simulator's, per node) does not keep the task out of the
queue: that task goes EVICTED -> PENDING and the placement filter reports the cooldown.

Why STARTING does not move to THROTTLED: throttling is about a running process's quota
against its demand; a task still starting makes no progress either way, so the shell records
``started`` first and then ``throttled`` (same ``now`` is fine) if its quota is still low.

Values are stable strings (metrics and the agent's state file keep them): add members at
the end, never rename. The integer codes (``.code``) are positions, for NumPy columns only.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from types import MappingProxyType

import numpy as np

from kalena.core.enforcement.records import EvictionCause


class TaskState(enum.Enum):
    """Where a batch task is. Exactly one at a time; the last three are terminal."""

    PENDING = "pending"  # waiting for a scheduling pass that may place it
    PLACED = "placed"  # the ledger accepted its PlaceBatch; its process is not started yet
    STARTING = "starting"  # its process/container is being started (startup grace: no progress)
    RUNNING = "running"  # running with the cpu quota it wants
    THROTTLED = "throttled"  # running with a quota below what it wants (the throttle policy)
    EVICTING = "evicting"  # SIGTERM sent, its grace period running
    EVICTED = "evicted"  # gone from the node, its work lost; the shell requeues it or gives up
    REQUEUED = "requeued"  # waiting out its eviction cooldown; not schedulable until it ends
    SUCCEEDED = "succeeded"  # ran to completion
    FAILED = "failed"  # its run ended badly and will not be retried
    CANCELLED = "cancelled"  # removed by its owner or an operator

    @property
    def code(self) -> int:
        """Its position: the value in a NumPy state column."""
        return _STATE_CODE[self]

    @property
    def terminal(self) -> bool:
        return self in TERMINAL


class TransitionReason(enum.Enum):
    """Why a task changed state. Stable strings; add at the end, never rename."""

    SUBMITTED = "submitted"  # new task (the only way in)
    ADMITTED = "admitted"  # PlaceBatch accepted
    UNPLACED = "unplaced"  # the shell gave the placement back before starting it (bind failed)
    START_REQUESTED = "start-requested"  # process/container creation asked for
    STARTED = "started"  # up and past its startup grace (a shell without one moves at once)
    START_FAILED = "start-failed"  # the process or container could not be started
    THROTTLED = "throttled"  # its quota went below what it wants
    UNTHROTTLED = "unthrottled"  # its quota covers what it wants again
    EVICTED_LEDGER_BREACH = "evicted-ledger-breach"  # EvictionCause.RESERVATION_LEDGER_BREACH
    EVICTED_LIMIT_BREACH = "evicted-limit-breach"  # EvictionCause.LIMIT_BREACH
    ESCALATION_DRAIN = "escalation-drain"  # EvictionCause.ESCALATION_DRAIN
    READMISSION_REJECTED = "readmission-rejected"  # a rebuilt ledger cannot hold the run (agent)
    EXITED = "exited"  # its processes left within the eviction grace
    GRACE_EXPIRED = "grace-expired"  # SIGKILLed at the end of its grace (or at once: grace 0)
    KILLED_OOM = "killed-oom"  # the kernel's OOM killer
    EXIT_ERROR = "exit-error"  # exited with an error (RemovalCause.FAILED)
    FINISHED = "finished"  # ran to completion (RemovalCause.FINISHED)
    REQUEUED = "requeued"  # an ended run goes back to the queue, its work lost
    COOLDOWN_OVER = "cooldown-over"  # its requeue cooldown ended
    GIVEN_UP = "given-up"  # the shell will not retry it (retry limit)
    CANCELLED = "cancelled"  # owner or operator (RemovalCause.DELETED)
    RESTORED = "restored"  # only a task's first entry, in any state: see Lifecycle.restore
    NODE_LOST = "node-lost"  # its node stopped answering: the run is taken as gone (a cluster shell)

    @property
    def code(self) -> int:
        return _REASON_CODE[self]


STATES: tuple[TaskState, ...] = tuple(TaskState)  # STATES[code] is the state
REASONS: tuple[TransitionReason, ...] = tuple(TransitionReason)
_STATE_CODE: Mapping[TaskState, int] = MappingProxyType({s: i for i, s in enumerate(STATES)})
_REASON_CODE: Mapping[TransitionReason, int] = MappingProxyType({r: i for i, r in enumerate(REASONS)})

TERMINAL: frozenset[TaskState] = frozenset({TaskState.SUCCEEDED, TaskState.FAILED, TaskState.CANCELLED})
INITIAL_REASONS: frozenset[TransitionReason] = frozenset({TransitionReason.SUBMITTED})


def _edges() -> dict[tuple[TaskState, TaskState], frozenset[TransitionReason]]:
    s, r = TaskState, TransitionReason
    live = (s.STARTING, s.RUNNING, s.THROTTLED)
    evict = {r.EVICTED_LEDGER_BREACH, r.EVICTED_LIMIT_BREACH, r.ESCALATION_DRAIN, r.READMISSION_REJECTED}
    ended = {r.KILLED_OOM, r.EXIT_ERROR}  # a run that ended on its own, badly
    edges: dict[tuple[TaskState, TaskState], set[TransitionReason]] = {
        (s.PENDING, s.PLACED): {r.ADMITTED},
        (s.PLACED, s.PENDING): {r.UNPLACED},
        (s.PLACED, s.STARTING): {r.START_REQUESTED},
        (s.PLACED, s.EVICTED): evict | {r.NODE_LOST},  # a ledger resident: a victim before it starts
        (s.STARTING, s.RUNNING): {r.STARTED},
        (s.RUNNING, s.THROTTLED): {r.THROTTLED},
        (s.THROTTLED, s.RUNNING): {r.UNTHROTTLED},
        (s.EVICTING, s.EVICTED): {r.EXITED, r.GRACE_EXPIRED, r.KILLED_OOM, r.NODE_LOST},
        (s.EVICTED, s.REQUEUED): {r.REQUEUED},
        (s.EVICTED, s.PENDING): {r.REQUEUED},
        (s.EVICTED, s.FAILED): {r.GIVEN_UP},
        (s.REQUEUED, s.PENDING): {r.COOLDOWN_OVER},
    }
    for state in live:
        first = {r.START_FAILED} if state is s.STARTING else set()
        edges[state, s.EVICTING] = set(evict)
        edges[state, s.EVICTED] = evict | ended | first | {r.NODE_LOST}
        edges[state, s.SUCCEEDED] = {r.FINISHED}
        edges[state, s.FAILED] = ended | first
    for state in STATES:
        if state not in TERMINAL:
            edges[state, s.CANCELLED] = {r.CANCELLED}
    return {k: frozenset(v) for k, v in edges.items()}


#: The allowed reasons of every legal (from, to) edge; an edge not in it is illegal.
EDGE_REASONS: Mapping[tuple[TaskState, TaskState], frozenset[TransitionReason]] = MappingProxyType(_edges())

#: The transition table: the states each state may move to.
TRANSITIONS: Mapping[TaskState, frozenset[TaskState]] = MappingProxyType(
    {a: frozenset(b for (f, b) in EDGE_REASONS if f is a) for a in STATES}
)


def _cube() -> np.ndarray:
    """``(S, S, R)`` bool: ``[from, to, reason]`` is legal; one fancy index checks a whole move."""
    cube = np.zeros((len(STATES), len(STATES), len(REASONS)), dtype=bool)
    for (a, b), reasons in EDGE_REASONS.items():
        cube[a.code, b.code, [x.code for x in reasons]] = True
    cube.setflags(write=False)
    return cube


LEGAL_REASONS = _cube()
#: ``(S, S)`` bool, ``[from, to]``: the table as a matrix (``LEGAL_REASONS.any(axis=2)``).
LEGAL = LEGAL_REASONS.any(axis=2)
LEGAL.setflags(write=False)

_EVICTION_REASON: Mapping[EvictionCause, TransitionReason] = MappingProxyType(
    {
        EvictionCause.RESERVATION_LEDGER_BREACH: TransitionReason.EVICTED_LEDGER_BREACH,
        EvictionCause.LIMIT_BREACH: TransitionReason.EVICTED_LIMIT_BREACH,
        EvictionCause.ESCALATION_DRAIN: TransitionReason.ESCALATION_DRAIN,
        EvictionCause.READMISSION_REJECTED: TransitionReason.READMISSION_REJECTED,
    }
)


def eviction_reason(cause: EvictionCause) -> TransitionReason:
    """The reason code of a ``Victim``'s move to EVICTING (or straight to EVICTED)."""
    return _EVICTION_REASON[cause]


class IllegalTransition(Exception):
    """A move the table forbids: a bug in the shell, never expected infeasibility.

    ``from_states[i]`` is the state of ``ids[i]`` (``None``: the task was being added).
    """

    SHOWN = 10  # offenders named in the message; all of them are in ``ids``

    def __init__(
        self,
        ids: Sequence[str],
        from_states: Sequence[TaskState | None],
        to: TaskState,
        reason: TransitionReason,
    ) -> None:
        self.ids, self.from_states = tuple(ids), tuple(from_states)
        self.to, self.reason = to, reason
        named = ", ".join(
            f"{i!r} ({'new' if f is None else f.value})"
            for i, f in zip(self.ids[: self.SHOWN], self.from_states, strict=False)
        )
        more = f" and {len(self.ids) - self.SHOWN} more" if len(self.ids) > self.SHOWN else ""
        super().__init__(
            f"illegal transition to {to.value} (reason {reason.value}) "
            f"for {len(self.ids)} task(s): {named}{more}"
        )
