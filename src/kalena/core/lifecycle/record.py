"""``Lifecycle``: a shell's record of every batch task, its state and its history.

Like the core's ``Ledger`` it is state owned by one shell and changed only through its methods
(:meth:`Lifecycle.add`, :meth:`Lifecycle.move`, and the rarer :meth:`Lifecycle.restore` and
:meth:`Lifecycle.forget`). Tasks get consecutive int handles in the order they are added
(stable across a JSON round trip; ``forget`` renumbers, keeping the order). Per task: its
state code and the time it entered that state. The history is four append-only columns (task
handle, state code, time, reason code) that double when full, so a move of ``k`` tasks costs a
handful of NumPy operations on ``k`` elements: the simulator moves 10,000 tasks in one call,
not 10,000 calls.

Why ``forget`` rather than one task per incarnation: a shell whose ids are names its users
choose (the node agent's job names) may see a name submitted again once its task ended; the
ended task's record goes with it, so the record stays one task per name and its size bounded.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from kalena.core.lifecycle.serial import read_history
from kalena.core.lifecycle.table import (
    INITIAL_REASONS,
    LEGAL_REASONS,
    REASONS,
    STATES,
    TERMINAL,
    IllegalTransition,
    TaskState,
    TransitionReason,
)

VERSION = 1  # of the JSON form
_STATE_VALUES = np.array([s.value for s in STATES])
_REASON_VALUES = np.array([r.value for r in REASONS])
_TERMINAL_CODES = np.array([s.code for s in TERMINAL])


@dataclass(frozen=True, slots=True)
class Transition:
    """One history entry: the task entered ``state`` at ``time`` because of ``reason``."""

    state: TaskState
    time: float
    reason: TransitionReason


@dataclass(frozen=True, eq=False)
class HistoryColumns:
    """The whole history as read-only columns in append order, for bulk analysis (metrics)."""

    task: np.ndarray  # int64 handles
    state: np.ndarray  # int8 codes (STATES[code])
    time: np.ndarray  # float64
    reason: np.ndarray  # int16 codes (REASONS[code])


def _fit(a: np.ndarray, need: int) -> np.ndarray:
    """``a`` itself if it holds ``need`` elements, else a copy doubled until it does."""
    if need <= len(a):
        return a
    size = max(len(a), 1)
    while size < need:
        size *= 2
    out = np.zeros(size, dtype=a.dtype)
    out[: len(a)] = a
    return out


def _time(now: float) -> float:
    now = float(now)
    if not math.isfinite(now):
        raise ValueError(f"now must be finite (the history is JSON), got {now!r}")
    return now


class Lifecycle:
    """Every batch task of one shell: state, time entered, history (see the module docstring)."""

    __hash__ = None  # type: ignore[assignment]  # mutable, compared by content

    def __init__(self, capacity: int = 64) -> None:
        if capacity < 0:
            raise ValueError(f"capacity must be >= 0, got {capacity}")
        self._ids: list[str] = []
        self._handle: dict[str, int] = {}
        self._state = np.zeros(capacity, dtype=np.int8)
        self._since = np.zeros(capacity)
        self._counts = np.zeros(len(STATES), dtype=np.int64)
        self._h_task = np.zeros(capacity, dtype=np.int64)
        self._h_state = np.zeros(capacity, dtype=np.int8)
        self._h_time = np.zeros(capacity)
        self._h_reason = np.zeros(capacity, dtype=np.int16)
        self._n_hist = 0
        #: History entries ever appended by this object (never lowered by ``forget``; not saved): a
        #: shell that saves what changed compares it before and after.
        self.appended = 0

    # changes --------------------------------------------------------------------------------
    def add(
        self, ids: Sequence[str], now: float, reason: TransitionReason = TransitionReason.SUBMITTED
    ) -> np.ndarray:
        """New tasks, all PENDING at ``now``; returns their handles. A known or repeated id raises."""
        new = self._new_ids(ids)
        now = _time(now)
        if reason not in INITIAL_REASONS:
            raise IllegalTransition(new, [None] * len(new), TaskState.PENDING, reason)
        return self._enter(new, np.full(len(new), TaskState.PENDING.code, dtype=np.int8), now, reason)

    def restore(self, ids: Sequence[str], states: Sequence[TaskState], now: float) -> np.ndarray:
        """New tasks entering ``states[i]`` at ``now`` with reason RESTORED; returns their handles.

        For a shell rebuilding its record from a form that kept each task's state but no history
        (see ``table.py``): the one entry says what was known and when it was rebuilt.
        """
        new = self._new_ids(ids)
        now = _time(now)
        states = list(states)
        if len(states) != len(new) or not all(isinstance(s, TaskState) for s in states):
            raise TypeError(f"states must be {len(new)} TaskState values, got {states[:10]!r}")
        codes = np.array([s.code for s in states], dtype=np.int8)
        return self._enter(new, codes, now, TransitionReason.RESTORED)

    def _new_ids(self, ids: Sequence[str]) -> list[str]:
        if isinstance(ids, str):
            raise TypeError(f"ids must be a sequence of ids, not one string ({ids!r})")
        new = list(ids)
        if not all(isinstance(i, str) for i in new):
            raise TypeError("task ids must be strings")
        dup = sorted({i for i in new if i in self._handle} | {i for i, c in Counter(new).items() if c > 1})
        if dup:
            raise ValueError(f"task id(s) added twice: {dup[:10]}")
        return new

    def _enter(self, new: list[str], codes: np.ndarray, now: float, reason: TransitionReason) -> np.ndarray:
        first, k = len(self._ids), len(new)
        handles = np.arange(first, first + k, dtype=np.int64)
        self._state = _fit(self._state, first + k)
        self._since = _fit(self._since, first + k)
        self._ids.extend(new)
        self._handle.update(zip(new, range(first, first + k), strict=True))
        self._state[handles] = codes
        self._since[handles] = now
        self._counts += np.bincount(codes, minlength=len(STATES))
        self._append(handles, codes, now, reason.code)
        return handles

    def forget(self, handles: np.ndarray | Sequence[int] | int) -> np.ndarray:
        """Drop terminal tasks and their history, so their ids may be added again.

        The other tasks keep their states and histories; their handles are renumbered to stay
        consecutive, in the same order. Returns the map old handle -> new handle (``-1``:
        forgotten). A task that is not terminal, or named twice, raises ``ValueError`` and
        nothing is forgotten. History columns read before stay as they were (new arrays).
        """
        h = self._checked(handles)
        n = len(self._ids)
        if len(h) == 0:
            return np.arange(n, dtype=np.int64)
        if len(np.unique(h)) != len(h):
            raise ValueError(f"forget names task(s) twice: {sorted({self._ids[i] for i in h})[:10]}")
        src = self._state[h]
        live = ~np.isin(src, _TERMINAL_CODES)
        if live.any():
            shown = zip(h[live][:10].tolist(), src[live][:10].tolist(), strict=True)
            named = ", ".join(f"{self._ids[i]!r} ({STATES[c].value})" for i, c in shown)
            raise ValueError(f"only terminal tasks may be forgotten: {named}")
        keep = np.ones(n, dtype=bool)
        keep[h] = False
        remap = np.full(n, -1, dtype=np.int64)
        remap[keep] = np.arange(int(keep.sum()))
        rows = keep[self._h_task[: self._n_hist]]
        self._h_task = remap[self._h_task[: self._n_hist][rows]]
        self._h_state = self._h_state[: self._n_hist][rows]
        self._h_time = self._h_time[: self._n_hist][rows]
        self._h_reason = self._h_reason[: self._n_hist][rows]
        self._n_hist = len(self._h_task)
        self._state = self._state[:n][keep]
        self._since = self._since[:n][keep]
        self._counts -= np.bincount(src, minlength=len(STATES))
        self._ids = [i for i, k in zip(self._ids, keep.tolist(), strict=True) if k]
        self._handle = {i: j for j, i in enumerate(self._ids)}
        return remap

    def move(
        self, handles: np.ndarray | Sequence[int] | int, to: TaskState, now: float, reason: TransitionReason
    ) -> None:
        """Move every task of ``handles`` to ``to`` at ``now``: all of them, or none.

        Raises :class:`IllegalTransition` listing every task whose (state, ``to``, ``reason``) the
        table forbids, and ``ValueError`` if a task is named twice or ``now`` is before the time
        a task entered its current state; in each case nothing moves.
        """
        h = self._checked(handles)
        now = _time(now)
        if len(h) == 0:
            return
        if len(h) > 1:
            ordered = np.sort(h)
            twice = ordered[1:][ordered[1:] == ordered[:-1]]
            if len(twice):
                raise ValueError(f"a move names task(s) twice: {[self._ids[i] for i in twice[:10]]}")
        src = self._state[h]
        bad = ~LEGAL_REASONS[src, to.code, reason.code]
        if bad.any():
            raise IllegalTransition([self._ids[i] for i in h[bad]], [STATES[c] for c in src[bad]], to, reason)
        back = self._since[h] > now
        if back.any():
            named = [(self._ids[i], float(self._since[i])) for i in h[back][:10]]
            raise ValueError(f"time goes backwards: now={now!r} is before the last transition of {named}")
        self._counts -= np.bincount(src, minlength=len(STATES))
        self._counts[to.code] += len(h)
        self._state[h] = to.code
        self._since[h] = now
        self._append(h, to.code, now, reason.code)

    def _append(self, h: np.ndarray, state: int | np.ndarray, now: float, reason: int) -> None:
        a, b = self._n_hist, self._n_hist + len(h)
        self._h_task = _fit(self._h_task, b)
        self._h_state = _fit(self._h_state, b)
        self._h_time = _fit(self._h_time, b)
        self._h_reason = _fit(self._h_reason, b)
        self._h_task[a:b] = h
        self._h_state[a:b] = state
        self._h_time[a:b] = now
        self._h_reason[a:b] = reason
        self._n_hist = b
        self.appended += len(h)

    def _checked(self, handles: np.ndarray | Sequence[int] | int) -> np.ndarray:
        h = np.asarray(handles).reshape(-1)
        if h.size == 0:
            return np.zeros(0, dtype=np.int64)
        if h.dtype.kind not in "iu":  # a bool mask or floats passed by mistake
            raise TypeError(f"handles must be integers, got dtype {h.dtype}")
        h = h.astype(np.int64, copy=False)
        if h.min() < 0 or h.max() >= len(self._ids):
            raise IndexError(f"handles must be in 0..{len(self._ids) - 1}, got {h.min()}..{h.max()}")
        return h

    # reads ----------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._ids)

    def handle(self, task_id: str) -> int:
        try:
            return self._handle[task_id]
        except KeyError:
            raise KeyError(f"unknown task id {task_id!r}") from None

    def handles(self, ids: Sequence[str]) -> np.ndarray:
        return np.array([self.handle(i) for i in ids], dtype=np.int64)

    def id_of(self, handle: int) -> str:
        return self._ids[int(self._checked(handle)[0])]

    def state(self, handles: np.ndarray | Sequence[int] | int) -> np.ndarray:
        """State codes (a copy): compare with ``TaskState.X.code``."""
        return self._state[self._checked(handles)]

    def state_of(self, task_id: str) -> TaskState:
        return STATES[self._state[self.handle(task_id)]]

    def entered(self, handles: np.ndarray | Sequence[int] | int) -> np.ndarray:
        """When each task entered its current state (a started run's start, a cooldown's start)."""
        return self._since[self._checked(handles)]

    def in_state(self, state: TaskState) -> np.ndarray:
        """Handles of the tasks in ``state``, ascending (O(tasks))."""
        return np.flatnonzero(self._state[: len(self._ids)] == state.code)

    def ids_in(self, *states: TaskState) -> list[str]:
        """Ids of the tasks in any of ``states``, by ascending handle (one O(tasks) pass)."""
        codes = self._state[: len(self._ids)]
        mask = codes == states[0].code if states else np.zeros(len(codes), dtype=bool)
        for s in states[1:]:
            mask |= codes == s.code
        ids = self._ids
        return [ids[h] for h in np.flatnonzero(mask).tolist()]

    def counts(self) -> dict[TaskState, int]:
        """Tasks per state, every state present (kept incrementally: O(states))."""
        return {s: int(c) for s, c in zip(STATES, self._counts, strict=True)}

    def history(self, task: str | int) -> tuple[Transition, ...]:
        """The task's transitions, oldest first (O(history): for reports, not the hot loop)."""
        h = self.handle(task) if isinstance(task, str) else int(self._checked(task)[0])
        rows = np.flatnonzero(self._h_task[: self._n_hist] == h)
        return tuple(
            Transition(STATES[s], t, REASONS[r])
            for s, t, r in zip(
                self._h_state[rows].tolist(),
                self._h_time[rows].tolist(),
                self._h_reason[rows].tolist(),
                strict=True,
            )
        )

    def history_columns(self) -> HistoryColumns:
        cols = []
        for a in (self._h_task, self._h_state, self._h_time, self._h_reason):
            v = a[: self._n_hist]
            v.flags.writeable = False  # appends go past the view's end: its content never changes
            cols.append(v)
        return HistoryColumns(*cols)

    # equality and JSON ----------------------------------------------------------------------
    def _by_task(self) -> tuple[np.ndarray, ...]:
        """The history sorted by task, each task's entries in their order (interleaving ignored)."""
        m = self._n_hist
        order = np.argsort(self._h_task[:m], kind="stable")
        return tuple(a[:m][order] for a in (self._h_task, self._h_state, self._h_time, self._h_reason))

    def __eq__(self, other: object) -> bool:
        """Same ids in the same order, same states, same history per task."""
        if not isinstance(other, Lifecycle):
            return NotImplemented
        n = len(self._ids)
        return (
            self._ids == other._ids
            and np.array_equal(self._state[:n], other._state[:n])
            and all(np.array_equal(a, b) for a, b in zip(self._by_task(), other._by_task(), strict=True))
        )

    def __repr__(self) -> str:
        shown = ", ".join(f"{c} {s.value}" for s, c in self.counts().items() if c)
        return f"Lifecycle({len(self)} tasks{': ' + shown if shown else ''})"

    def to_json(self) -> dict[str, Any]:
        """Plain JSON types; the current states are the last history entry of each task."""
        m = self._n_hist
        return {
            "version": VERSION,
            "ids": list(self._ids),
            "history": {
                "task": self._h_task[:m].tolist(),
                "state": _STATE_VALUES[self._h_state[:m]].tolist(),
                "time": self._h_time[:m].tolist(),
                "reason": _REASON_VALUES[self._h_reason[:m]].tolist(),
            },
        }

    @classmethod
    def from_json(cls, data: Any) -> Lifecycle:
        """The inverse of :meth:`to_json`. The history must be a legal walk per task from its
        ``add`` (or ``restore``); anything else raises ``ValueError`` naming the key (never
        guessed at)."""
        ids, (task, state, time, reason) = read_history(data, VERSION)
        n, m = len(ids), len(task)
        lc = cls(capacity=max(n, m, 1))
        lc._ids = ids
        lc._handle = {i: h for h, i in enumerate(ids)}
        if m == 0:
            return lc
        order = np.argsort(task, kind="stable")
        ordered = task[order]
        is_last = np.r_[ordered[1:] != ordered[:-1], True]
        last = order[is_last]  # each task's last entry, tasks ascending (every task has one)
        lc._state[:n] = state[last]
        lc._since[:n] = time[last]
        lc._counts = np.bincount(lc._state[:n], minlength=len(STATES)).astype(np.int64)
        lc._h_task[:m], lc._h_state[:m], lc._h_time[:m], lc._h_reason[:m] = task, state, time, reason
        lc._n_hist = m
        return lc
