"""The batch task lifecycle (STYLE 8): an explicit transition table and a per-shell record of it.

* ``table.py``: the state diagram, ``TaskState``, ``TransitionReason``, ``TRANSITIONS``,
  ``EDGE_REASONS``, ``eviction_reason``, ``IllegalTransition``;
* ``record.py``: ``Lifecycle`` (vectorised all-or-nothing moves, columnar history; ``restore``
  for records without history, ``forget`` for ended tasks whose id comes back),
  ``Transition``, ``HistoryColumns``;
* ``serial.py``: the JSON form (``"version": 1``), read back strictly.
"""

from kalena.core.lifecycle.record import VERSION, HistoryColumns, Lifecycle, Transition
from kalena.core.lifecycle.table import (
    EDGE_REASONS,
    INITIAL_REASONS,
    LEGAL,
    LEGAL_REASONS,
    REASONS,
    STATES,
    TERMINAL,
    TRANSITIONS,
    IllegalTransition,
    TaskState,
    TransitionReason,
    eviction_reason,
)

__all__ = [
    "EDGE_REASONS",
    "INITIAL_REASONS",
    "LEGAL",
    "LEGAL_REASONS",
    "REASONS",
    "STATES",
    "TERMINAL",
    "TRANSITIONS",
    "VERSION",
    "HistoryColumns",
    "IllegalTransition",
    "Lifecycle",
    "TaskState",
    "Transition",
    "TransitionReason",
    "eviction_reason",
]
