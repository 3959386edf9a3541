"""``fanout.run_all`` forks its local workers before its progress bar's thread starts: a fork
beside a running thread copies the locks that thread holds (the bar writes to stderr), held for good
in the child, which would hang at its first warning. Real forked processes, a real Rich bar."""

from __future__ import annotations

import math
import os
import threading

from rich.live import _RefreshThread

from kalena.cli.fanout import run_all

_seen: list[list[str]] | None = None  # while a test watches: the threads at each fork


def _before_fork() -> None:
    if _seen is not None:
        _seen.append([type(t).__name__ for t in threading.enumerate()])


os.register_at_fork(before=_before_fork)  # (for good: inert unless a test watches)


def test_the_workers_are_forked_while_no_bar_thread_runs():
    global _seen
    during: list[bool] = []  # the bar's thread was there while the jobs ran (else this proves nothing)

    def done(_i: int, _r: object) -> None:
        during.append(any(isinstance(t, _RefreshThread) for t in threading.enumerate()))

    _seen = []
    try:
        got = run_all(math.sqrt, [(9.0,), (4.0,), (16.0,)], workers=2, label="jobs", quiet=False, done=done)
    finally:
        forks, _seen = _seen, None
    assert got == [3.0, 2.0, 4.0]
    assert during and all(during)
    assert len(forks) == 2  # both workers, forked
    assert all("_RefreshThread" not in names for names in forks), forks
