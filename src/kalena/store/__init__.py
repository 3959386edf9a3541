"""Kalena's embedded store (SQLite, WAL): the queue, the jobs' lifecycle histories, the agent's
events (the usage archive keeps its tables in the same file: :mod:`kalena.archive`). See
:mod:`kalena.store.db`."""

from kalena.store.db import (
    ENDED,
    EventRow,
    JobRow,
    Pending,
    Store,
    StoreConflict,
    StoreError,
    TransitionRow,
)

__all__ = [
    "ENDED",
    "EventRow",
    "JobRow",
    "Pending",
    "Store",
    "StoreConflict",
    "StoreError",
    "TransitionRow",
]
