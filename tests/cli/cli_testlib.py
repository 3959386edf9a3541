"""The ``kalena`` command as a real subprocess, for the CLI tests."""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path


def run_kalena(
    args: list[str], cwd: Path, *, timeout: float, memory_bytes: int | None = None
) -> subprocess.CompletedProcess[str]:
    """``python -m kalena.cli.main ARGS`` from ``cwd``, 200 columns wide; with ``memory_bytes``,
    under that address-space limit (and one BLAS thread, whose buffers would count against it)."""
    env = dict(os.environ, COLUMNS="200")
    limit = None
    if memory_bytes is not None:
        env["OPENBLAS_NUM_THREADS"] = "1"

        def limit() -> None:
            resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))

    return subprocess.run(
        [sys.executable, "-m", "kalena.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        preexec_fn=limit,
        env=env,
        cwd=cwd,
    )


def process_group(pgid: int) -> list[str]:
    """The command lines of the live processes in process group ``pgid`` (from /proc)."""
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            fields = (d / "stat").read_text().rsplit(")", 1)[1].split()  # state, ppid, pgrp, ...
            if int(fields[2]) == pgid and fields[0] != "Z":
                out.append((d / "cmdline").read_bytes().replace(b"\0", b" ").decode())
        except (OSError, ValueError, IndexError):
            continue  # (gone meanwhile)
    return out


def interrupt_kalena(
    args: list[str], cwd: Path, *, working: Callable[[list[str]], bool]
) -> tuple[int, str, float]:
    """``kalena ARGS`` in its own process group, sent Ctrl-C (SIGINT to the whole group, as a
    terminal does) once ``working(command lines of the group)`` holds and two seconds more have
    passed; its exit code, its stderr and the seconds from Ctrl-C to its exit, after every
    process of the group has ended (or a wide deadline, which fails)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "kalena.cli.main", *args],
        stderr=subprocess.PIPE,
        text=True,
        cwd=cwd,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120  # (wide: a loaded machine spawns slowly)
        while not working(process_group(proc.pid)) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert working(process_group(proc.pid)), "the workers never started"
        time.sleep(2.0)  # (the workers are at work)
        os.killpg(proc.pid, signal.SIGINT)
        t0 = time.monotonic()
        _, err = proc.communicate(timeout=120)
        took = time.monotonic() - t0
        deadline = time.monotonic() + 30
        while process_group(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert process_group(proc.pid) == [], "a process of the command outlived it"
    finally:
        if proc.poll() is None or process_group(proc.pid):
            os.killpg(proc.pid, signal.SIGKILL)
    return proc.returncode, err, took
