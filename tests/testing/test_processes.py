"""run_group: a command's grandchildren end with it, on a timeout and when it exits (real processes)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kalena.testing.processes import run_group


def _gone(pid: int, within: float = 10.0) -> bool:
    """Whether ``pid`` has ended (a zombie waiting for its reaper has ended too)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            return True
        if state == "Z":
            return True
        time.sleep(0.05)
    return False


def test_a_timeout_ends_the_grandchildren_and_keeps_what_was_written():
    with pytest.raises(subprocess.TimeoutExpired) as err:
        run_group(["sh", "-c", "sleep 300 & echo $!; wait"], timeout=1.0)
    pid = int(err.value.stdout.split()[0])
    assert _gone(pid)


def test_a_command_that_exits_leaves_nothing_running_in_its_group():
    # (its output elsewhere: one that kept the pipes open would hold the command to its timeout)
    done = run_group(["sh", "-c", "sleep 300 > /dev/null 2>&1 & echo $!"], timeout=30.0)
    assert done.returncode == 0
    assert _gone(int(done.stdout.split()[0]))


def test_with_a_grace_the_group_gets_sigterm_first_and_may_clean_up():
    child = (
        "import signal, sys, time\n"
        "signal.signal(signal.SIGTERM, lambda *_: (print('cleaned up', flush=True), sys.exit(0)))\n"
        "print('ready', flush=True)\n"
        "time.sleep(300)\n"
    )
    with pytest.raises(subprocess.TimeoutExpired) as err:
        run_group([sys.executable, "-c", child], timeout=5.0, grace=10.0)
    assert "cleaned up" in err.value.stdout
    with pytest.raises(subprocess.TimeoutExpired) as err:  # without one: SIGKILL, no clean-up
        run_group([sys.executable, "-c", child], timeout=5.0)
    assert "ready" in err.value.stdout and "cleaned up" not in err.value.stdout


def test_output_and_exit_status_as_subprocess_run_gives_them(tmp_path: Path):
    done = run_group(["sh", "-c", "pwd; echo oops >&2; exit 3"], timeout=30.0, cwd=str(tmp_path))
    assert (done.returncode, done.stdout.strip(), done.stderr) == (3, os.path.realpath(tmp_path), "oops\n")
