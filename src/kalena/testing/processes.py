"""A command in a process group of its own, so that nothing it started outlives it.

``subprocess.run(..., timeout=...)`` kills only the process it started. A benchmark's workers, a
compiler's passes or a control plane's servers are its grandchildren: on a timeout they would go on
running, orphaned, and hold the CPU (or cgroups, or ports) the next test needs.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Sequence


def run_group(
    cmd: Sequence[str], *, timeout: float, cwd: str | None = None, grace: float = 0.0
) -> subprocess.CompletedProcess[str]:
    """``subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)``, with ``cmd`` in a
    new process group (session). On timeout the whole group gets SIGTERM and, ``grace`` seconds
    later (at once with 0), SIGKILL; then ``TimeoutExpired`` is raised with what it wrote. When
    the command ends, whatever it left running in its group is killed too."""
    with subprocess.Popen(
        list(cmd),
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    ) as p:
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            out, err = _end_group(p, grace)
            raise subprocess.TimeoutExpired(list(cmd), timeout, out, err) from None
        finally:
            _signal_group(p.pid, signal.SIGKILL)  # (leftovers of a command that ended)
    return subprocess.CompletedProcess(list(cmd), p.returncode, out, err)


def _end_group(p: subprocess.Popen[str], grace: float) -> tuple[str, str]:
    if grace > 0:
        _signal_group(p.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            return p.communicate(timeout=grace)  # (communicate, not wait: the pipes must drain)
    _signal_group(p.pid, signal.SIGKILL)
    return p.communicate()


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):  # (nobody left in the group)
        os.killpg(pgid, sig)
