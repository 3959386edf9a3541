"""Helpers for the node-agent tests: fake cgroup hosts in a temporary folder, and a real tree.

Unit tests build a v1, v2 or hybrid host under ``tmp_path`` (a mountinfo text naming folders
there); integration tests get a uniquely named Kalena root in every real hierarchy, which is
emptied (every process SIGKILLed) and removed at teardown, even when the test failed. A host
without root or without writable cgroups skips those tests with a reason naming what is missing.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

from kalena.agent.layout import CgroupLayout, CgroupMode, CgroupTree, LayoutError, detect, detect_layout
from kalena.core.enforcement.throttle import ThrottleCause, ThrottleDecision, ThrottlePlan
from kalena.core.verdict import Reason, ReasonCode

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "agent"

_V1 = ("cpu", "cpuacct", "memory", "blkio", "pids")


@dataclass(frozen=True)
class FakeHost:
    """A cgroup host laid out in a temporary folder."""

    base: Path
    mountinfo: str
    self_cgroup: str

    def layout(self) -> CgroupLayout:
        return detect_layout(self.mountinfo, self.self_cgroup)


def make_fake_host(base: Path, mode: str, v2_controllers: str = "cpu io memory pids") -> FakeHost:
    """``mode`` in v1 / v2 / hybrid; the agent's own cgroup is ``/`` in every hierarchy."""
    lines, own = [], ["0::/"]
    n = 30
    if mode in ("v1", "hybrid"):
        for i, c in enumerate(_V1):
            mp = base / c
            mp.mkdir(parents=True)
            lines.append(f"{n + i} 23 0:{n + i} / {mp} rw,relatime - cgroup cgroup rw,{c}")
            own.append(f"{i + 1}:{c}:/")
    if mode in ("v2", "hybrid"):
        mp = base / ("unified" if mode == "hybrid" else "v2")
        mp.mkdir(parents=True)
        (mp / "cgroup.controllers").write_text("hugetlb\n" if mode == "hybrid" else v2_controllers + "\n")
        lines.append(f"{n + 9} 23 0:{n + 9} / {mp} rw,relatime - cgroup2 cgroup2 rw")
    return FakeHost(base, "\n".join(lines) + "\n", "\n".join(own) + "\n")


# -- real cgroups ------------------------------------------------------------------------------------
def _cgroup_dirs(top: Path) -> list[Path]:
    if not top.is_dir():
        return []
    return [*sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)), top]


def _kill_all(d: Path) -> None:
    for _ in range(50):
        try:
            pids = [int(p) for p in (d / "cgroup.procs").read_text().split()]
        except OSError:
            return
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.05)


def remove_tree(tree: CgroupTree) -> None:
    """Kill every process under Kalena's root and remove every cgroup, deepest first."""
    for h in tree.layout.hierarchies:
        for d in _cgroup_dirs(tree.dir(h, "")):
            _kill_all(d)
    for h in tree.layout.hierarchies:
        for d in _cgroup_dirs(tree.dir(h, "")):
            for _ in range(50):
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    _kill_all(d)
                    time.sleep(0.05)


def real_tree_or_skip() -> CgroupTree:
    if os.geteuid() != 0:
        pytest.skip("real cgroup tests need root (euid 0) to create cgroups")
    try:
        layout = detect()
    except (OSError, LayoutError) as e:
        pytest.skip(f"no cgroup hierarchy on this host: {e}")
    # v2: under the hierarchy root (controllers are delegated there); v1/hybrid: under our own
    # cgroups, so a sandboxed test stays inside its sandbox (see layout.default_root)
    name = f"kalena-test-{uuid.uuid4().hex[:10]}"
    tree = CgroupTree(layout, f"/{name}" if layout.mode is CgroupMode.V2 else name)
    for h in layout.hierarchies:
        try:
            tree.dir(h, "").mkdir(parents=True)
        except OSError as e:
            remove_tree(tree)
            pytest.skip(f"cannot create a cgroup in {h.mount_point} ({h.label}): {e}")
    return tree


def one_run_plan(workload: str, quota: float) -> ThrottlePlan:
    """A throttle plan with one batch decision: ``workload``'s cpu quota (cores), weight 1."""
    why = Reason(ReasonCode.COMPRESSIBLE_PRESSURE, detail="test")
    d = ThrottleDecision(workload, "cpu", quota, 1, ThrottleCause.SLACK, why)
    return ThrottlePlan("n", 0, 0.0, False, 0.0, quota, quota, None, (d,), ())
