"""The ``kalena`` command as a real subprocess, for the CLI tests."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
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
