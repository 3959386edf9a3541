"""The batch task lifecycle (STYLE 8): an explicit transition table and a per-shell record of it.

* ``table.py``: the state diagram, ``TaskState``, ``TransitionReason``, ``TRANSITIONS``,
  ``EDGE_REASONS``, ``eviction_reason``, ``IllegalTransition``;
* ``record.py``: ``Lifecycle`` (vectorised all-or-nothing moves, columnar history; ``restore``
  for records without history, ``forget`` for ended tasks whose id comes back),
  ``Transition``, ``HistoryColumns``;
* ``serial.py``: the JSON form (``"version": 1``), read back strictly;
* ``lost.py``: the rate at which a cluster shell requeues the runs of lost nodes.
"""

from kalena.core.lifecycle.lost import LostRequeueConfig, RequeueBucket, take_lost
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
    "LostRequeueConfig",
    "RequeueBucket",
    "TaskState",
    "Transition",
    "TransitionReason",
    "eviction_reason",
    "take_lost",
]
