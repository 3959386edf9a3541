"""Kalena's embedded store (SQLite, WAL): the queue, the jobs' lifecycle histories, the agent's
events and the usage and reservation series. See :mod:`kalena.store.db`."""

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
