"""The JSON form of a ``Lifecycle``, read back strictly: anything malformed names its key.

::

    {"version": 1,
     "ids": ["a", ...],
     "history": {"task": [0, ...], "state": ["pending", ...], "time": [0.0, ...],
                 "reason": ["submitted", ...]}}

``history`` is the four columns in append order; ``task`` indexes ``ids``. States and reasons
are their stable string values, so the file survives new members and reordered codes. Only a
history that is a legal walk of the table per task is accepted (first entry PENDING with an
initial reason, or any state with ``restored``; times never going backwards): a state file is
never guessed at.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from kalena.core.lifecycle.table import (
    INITIAL_REASONS,
    LEGAL_REASONS,
    REASONS,
    STATES,
    TaskState,
    TransitionReason,
)

_STATE_BY_VALUE = {s.value: s.code for s in STATES}
_REASON_BY_VALUE = {r.value: r.code for r in REASONS}
_INITIAL_CODES = np.array([r.code for r in INITIAL_REASONS])
_COLUMNS = ("task", "state", "time", "reason")


def _keys(obj: Any, where: str, keys: tuple[str, ...]) -> dict[str, Any]:
    if not isinstance(obj, dict):
        raise ValueError(f"{where}: must be an object, got {type(obj).__name__}")
    missing = [k for k in keys if k not in obj]
    if missing:
        raise ValueError(f"{where}.{missing[0]}: missing")
    extra = sorted(set(obj) - set(keys))
    if extra:
        raise ValueError(f"{where}.{extra[0]}: unknown key")
    return obj


def _list(obj: Any, key: str) -> list[Any]:
    if not isinstance(obj, list):
        raise ValueError(f"{key}: must be a list, got {type(obj).__name__}")
    return obj


def _codes(values: list[Any], key: str, table: dict[str, int], dtype: type) -> np.ndarray:
    for i, v in enumerate(values):
        if not isinstance(v, str) or v not in table:
            raise ValueError(f"{key}[{i}]: unknown value {v!r}")
    return np.array([table[v] for v in values], dtype=dtype)


def read_history(data: Any, version: int) -> tuple[list[str], tuple[np.ndarray, ...]]:
    """``(ids, (task, state, time, reason))`` from :meth:`Lifecycle.to_json`'s form, validated."""
    data = _keys(data, "lifecycle", ("version", "ids", "history"))
    v = data["version"]
    if type(v) is not int or v != version:
        raise ValueError(f"version: unknown lifecycle version {v!r} (this code reads {version})")
    ids = _list(data["ids"], "ids")
    seen: set[str] = set()
    for i, x in enumerate(ids):
        if not isinstance(x, str) or x in seen:
            raise ValueError(f"ids[{i}]: {x!r} is not a string or appears twice")
        seen.add(x)
    hist = _keys(data["history"], "history", _COLUMNS)
    cols = {k: _list(hist[k], f"history.{k}") for k in _COLUMNS}
    m = len(cols["task"])
    for k in _COLUMNS:
        if len(cols[k]) != m:
            raise ValueError(f"history.{k}: {len(cols[k])} entries, history.task has {m}")
    for i, t in enumerate(cols["task"]):
        if type(t) is not int or not 0 <= t < len(ids):
            raise ValueError(f"history.task[{i}]: {t!r} is not an index of ids (0..{len(ids) - 1})")
    for i, t in enumerate(cols["time"]):
        if type(t) not in (int, float) or not math.isfinite(t):
            raise ValueError(f"history.time[{i}]: {t!r} is not a finite number")
    task = np.array(cols["task"], dtype=np.int64)
    state = _codes(cols["state"], "history.state", _STATE_BY_VALUE, np.int8)
    time = np.array(cols["time"], dtype=np.float64)
    reason = _codes(cols["reason"], "history.reason", _REASON_BY_VALUE, np.int16)
    _check_walks(ids, task, state, time, reason)
    return list(ids), (task, state, time, reason)


def _check_walks(
    ids: list[str], task: np.ndarray, state: np.ndarray, time: np.ndarray, reason: np.ndarray
) -> None:
    """Every task has a history, each a legal walk of the table in time order (vectorised)."""
    present = np.bincount(task, minlength=len(ids)) > 0
    if not present.all():
        raise ValueError(f"history.task: task {ids[int(np.argmin(present))]!r} has no history")
    if len(task) == 0:
        return
    order = np.argsort(task, kind="stable")
    t, s, when, r = task[order], state[order], time[order], reason[order]
    first = np.r_[True, t[1:] != t[:-1]]
    submitted = (s == TaskState.PENDING.code) & np.isin(r, _INITIAL_CODES)
    bad_start = first & ~submitted & (r != TransitionReason.RESTORED.code)
    if bad_start.any():
        i = int(order[np.argmax(bad_start)])
        raise ValueError(
            f"history.state[{i}]: the history of {ids[task[i]]!r} does not start pending (submitted) "
            "or restored"
        )
    prev = np.r_[0, s[:-1]]
    illegal = ~first & ~LEGAL_REASONS[prev, s, r]
    if illegal.any():
        j = int(np.argmax(illegal))
        i = int(order[j])
        raise ValueError(
            f"history.state[{i}]: illegal transition of {ids[task[i]]!r} from {STATES[prev[j]].value} "
            f"to {STATES[s[j]].value} (reason {REASONS[r[j]].value})"
        )
    back = ~first & (when < np.r_[-np.inf, when[:-1]])
    if back.any():
        i = int(order[np.argmax(back)])
        raise ValueError(f"history.time[{i}]: the time of {ids[task[i]]!r} goes backwards")
