"""Helpers of the Docker runtime's tests (fixtures are in ``conftest.py``)."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable


def until(
    check: Callable[[], bool], bound_s: float = 60.0, every: Callable[[], object] | None = None
) -> bool:
    """``check()`` after each ``every()`` (an agent's round, say) until it holds; the bound stops a
    hung test, it is never a speed assertion."""
    end = time.monotonic() + bound_s
    while time.monotonic() < end:
        if every is not None:
            every()
        if check():
            return True
        time.sleep(0.2)
    return check()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
