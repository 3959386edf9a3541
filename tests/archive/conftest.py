"""A real PostgreSQL server for the archive's tests: initdb into a temporary folder, listening on a
Unix socket only (no TCP port), trust authentication for the one local user; stopped at the end.
``scripts/setup-and-test.sh`` installs PostgreSQL; where it is absent the PostgreSQL half skips
with that reason (SQLite always runs)."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # archive_testlib, crash_writer


def _bin(name: str) -> str | None:
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    return found[-1] if found else shutil.which(name)


def _as_server_user(cmd: list[str]) -> list[str]:
    """PostgreSQL refuses to run as root: as root, run it as the package's ``postgres`` user."""
    if os.geteuid() != 0:
        return cmd
    return ["runuser", "-u", "postgres", "--", *cmd]


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[str]:
    """The socket folder of a running server (user ``kalena``)."""
    initdb, pg_ctl = _bin("initdb"), _bin("pg_ctl")
    if initdb is None or pg_ctl is None:
        pytest.skip(
            "no PostgreSQL server binaries (scripts/setup-and-test.sh installs the postgresql package)"
        )
    home = Path(tempfile.mkdtemp(prefix="kalena-pg-"))
    home.chmod(0o755)
    data = home / "data"
    if os.geteuid() == 0:
        shutil.chown(home, "postgres", "postgres")
    run = {"check": True, "capture_output": True, "text": True, "timeout": 120}
    try:
        subprocess.run(
            _as_server_user([initdb, "-D", str(data), "-U", "kalena", "--auth=trust", "-E", "UTF8"]), **run
        )
        opts = f"-k {home} -c listen_addresses='' -c fsync=on -c synchronous_commit=on"
        subprocess.run(
            _as_server_user(
                [pg_ctl, "-D", str(data), "-l", str(home / "log"), "-o", opts, "-w", "-t", "60", "start"]
            ),
            **run,
        )
    except subprocess.CalledProcessError as e:
        log = (home / "log").read_text() if (home / "log").exists() else ""
        shutil.rmtree(home, ignore_errors=True)
        raise RuntimeError(f"PostgreSQL did not start: {e.stderr}{log}") from None
    try:
        yield str(home)
    finally:
        subprocess.run(_as_server_user([pg_ctl, "-D", str(data), "-m", "immediate", "-w", "stop"]),
                       capture_output=True, timeout=60)  # fmt: skip
        shutil.rmtree(home, ignore_errors=True)


@pytest.fixture
def postgres_url(postgres_server: str) -> str:
    """A fresh database on the server, as the URL the archive takes."""
    import psycopg

    name = "t" + uuid.uuid4().hex[:12]
    with psycopg.connect(f"host={postgres_server} user=kalena dbname=postgres", autocommit=True) as db:
        db.execute(f"CREATE DATABASE {name}")
    return f"postgresql://kalena@/{name}?host={postgres_server}"


@pytest.fixture(params=["sqlite", "postgresql"])
def archive_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Each archive test on both backends."""
    if request.param == "sqlite":
        return str(tmp_path / "archive.db")
    return str(request.getfixturevalue("postgres_url"))
