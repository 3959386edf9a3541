"""The archive's two databases behind one small interface: SQLite (the default) and PostgreSQL.

Both speak the same SQL here; what differs is named once per backend: the placeholder, the few
type names, how a transaction takes its lock and how the connection is made. A returned commit is
durable on both (SQLite: WAL with ``synchronous=FULL``; PostgreSQL: its default
``synchronous_commit=on``), which is what "acknowledged" means to the archive's writers.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

#: A busy database (another writer's transaction) is waited for this long before an error.
BUSY_TIMEOUT_MS = 30_000


class ArchiveError(Exception):
    """The archive cannot be used (cannot connect, not an archive, a newer schema)."""


class Backend:
    """One connection. ``sql`` statements use ``?`` placeholders and the ``{blob}``/``{serial}``
    type tokens; each backend rewrites them."""

    name: str
    blob: str
    serial: str
    where: str

    def execute(self, sql: str, args: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        raise NotImplementedError

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        raise NotImplementedError

    def transaction(self, lock: bool = True) -> contextlib.AbstractContextManager[None]:
        """One transaction; ``lock``: hold the archive's write lock from its start (every writer
        does; only creating the schema, before the lock's table exists, does not)."""
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def ddl(self, sql: str) -> str:
        return sql.replace("{blob}", self.blob).replace("{serial}", self.serial)


class SqliteBackend(Backend):
    name = "sqlite"
    blob = "BLOB"
    serial = "INTEGER PRIMARY KEY AUTOINCREMENT"

    def __init__(self, path: Path) -> None:
        self.where = str(path)
        if path.is_dir():
            raise ArchiveError(f"{path}: is a folder, not an archive")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self.db = sqlite3.connect(path, isolation_level=None, timeout=BUSY_TIMEOUT_MS / 1000)
            self.db.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
            mode = self.db.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise ArchiveError(f"{path}: cannot use write-ahead logging (journal mode {mode})")
            self.db.execute("PRAGMA synchronous=FULL")
        except sqlite3.DatabaseError as e:
            raise ArchiveError(f"{path}: not an SQLite database ({e})") from None
        except OSError as e:
            raise ArchiveError(f"{path}: cannot open: {e.strerror}") from None

    def execute(self, sql: str, args: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        return self.db.execute(sql, tuple(args)).fetchall()

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        self.db.executemany(sql, rows)

    @contextlib.contextmanager
    def transaction(self, lock: bool = True) -> Iterator[None]:
        self.db.execute("BEGIN IMMEDIATE")  # the write lock at once: no upgrade deadlock
        try:
            yield
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        self.db.execute("COMMIT")

    def close(self) -> None:
        self.db.close()


class PostgresBackend(Backend):
    name = "postgresql"
    blob = "BYTEA"
    serial = "BIGSERIAL PRIMARY KEY"

    def __init__(self, url: str) -> None:
        try:
            import psycopg
        except ImportError:
            raise ArchiveError(
                "a PostgreSQL archive needs the psycopg package: pip install 'kalena[postgres]'"
            ) from None
        self.where = _redacted(url)
        try:
            self.db = psycopg.connect(url, autocommit=True)
        except psycopg.Error as e:
            raise ArchiveError(f"{self.where}: cannot connect ({str(e).strip()})") from None

    @staticmethod
    def _sql(sql: str) -> str:
        return sql.replace("%", "%%").replace("?", "%s")

    def execute(self, sql: str, args: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        cur = self.db.execute(self._sql(sql), tuple(args))  # type: ignore[arg-type]
        return list(cur.fetchall()) if cur.description is not None else []

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        with self.db.cursor() as cur:
            cur.executemany(self._sql(sql), rows)  # type: ignore[arg-type]

    @contextlib.contextmanager
    def transaction(self, lock: bool = True) -> Iterator[None]:
        with self.db.transaction():
            if lock:  # one writer at a time, as SQLite's BEGIN IMMEDIATE gives
                self.db.execute("LOCK TABLE archive_meta IN SHARE ROW EXCLUSIVE MODE")
            else:  # creating the schema: two first starts must not both create it
                self.db.execute("SELECT pg_advisory_xact_lock(4171)")
            yield

    def close(self) -> None:
        self.db.close()


def _redacted(url: str) -> str:
    """The URL without its password (it goes into error messages)."""
    head, sep, rest = url.partition("://")
    if not sep or "@" not in rest:
        return url
    cred, _, host = rest.rpartition("@")
    user = cred.split(":", 1)[0]
    return f"{head}://{user}:***@{host}" if ":" in cred else url


def connect(where: str | Path) -> Backend:
    """``postgresql://...`` (or ``postgres://``): a PostgreSQL server; anything else: an SQLite file."""
    text = str(where)
    if text.startswith(("postgresql://", "postgres://")):
        return PostgresBackend(text)
    return SqliteBackend(Path(text.removeprefix("sqlite://")))
