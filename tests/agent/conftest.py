"""Fixtures for the node-agent tests (helpers live in ``agent_testlib``)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from agent_testlib import FakeHost, make_fake_host, real_tree_or_skip, remove_tree

from kalena.agent.layout import CgroupTree


@pytest.fixture
def fake_host(tmp_path: Path):
    def build(mode: str, **kw: str) -> FakeHost:
        return make_fake_host(tmp_path / f"cg-{mode}", mode, **kw)

    return build


@pytest.fixture
def real_tree() -> Iterator[CgroupTree]:
    tree = real_tree_or_skip()
    try:
        yield tree
    finally:
        remove_tree(tree)


@pytest.fixture
def spawn() -> Iterator:
    """Start Python helper processes (``kalena.agent.loadgen``); all are killed at teardown."""
    procs: list[subprocess.Popen[str]] = []

    def start(*args: str, cgroup_procs: tuple[Path, ...] = (), **kw) -> subprocess.Popen[str]:
        def enter() -> None:
            for f in cgroup_procs:
                with open(f, "w") as fh:
                    fh.write(str(os.getpid()))

        p = subprocess.Popen(
            [sys.executable, "-m", "kalena.agent.loadgen", *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            preexec_fn=enter if cgroup_procs else None,
            **kw,
        )
        procs.append(p)
        return p

    try:
        yield start
    finally:
        for p in procs:
            with contextlib.suppress(ProcessLookupError):
                p.kill()
            with contextlib.suppress(Exception):
                p.wait(5)
