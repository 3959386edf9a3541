"""The usage archive (seed 000 §5.5): usage, reservations and events of every workload, rolled up
over days, on SQLite (default) or PostgreSQL. See :mod:`kalena.archive.store`."""

from kalena.archive.backends import ArchiveError
from kalena.archive.store import Archive, ArchiveEvent, Compacted, Retention, Window

__all__ = ["Archive", "ArchiveError", "ArchiveEvent", "Compacted", "Retention", "Window"]
