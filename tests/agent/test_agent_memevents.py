"""Memory events: v1 eventfd thresholds and OOM notifications on real cgroups, v2 memory.events."""

from __future__ import annotations

import select
import time

import pytest

from kalena.agent.memevents import EventfdSource, MemoryEventsSource
from kalena.agent.notify import AgentEvent, Notifier
from kalena.agent.writer import CgroupWriter, Knob, KnobWrite, ManagedScope, NotManaged

MIB = 2**20


def _v1_memory(real_tree):
    h = real_tree.layout.home("memory")
    if h is None or h.version != 1:
        pytest.skip("v1 memcg event_control needs the memory controller on cgroup v1; this host has none")
    return h


def _wait_for(notifier: Notifier, kind: str, bound_s: float = 20.0) -> list[AgentEvent]:
    deadline = time.monotonic() + bound_s  # a bound on a hung test, not a speed assertion
    while time.monotonic() < deadline:
        got = [e for e in notifier.wait(0.5) if e.kind == kind]
        if got:
            return got
    return []


def test_v1_threshold_fires_on_an_upward_crossing(real_tree, spawn):
    h = _v1_memory(real_tree)
    w = CgroupWriter(real_tree, ManagedScope())
    w.create("prod/web", "test")
    memdir = real_tree.dir(h, "prod/web")
    src = EventfdSource.register(
        memdir, threshold=48 * MIB, label="prod/web", check=lambda: w.check("prod/web")
    )
    notifier = Notifier()
    notifier.add(src)
    p = spawn("mem", "--mib", "16", cgroup_procs=w.procs_files("prod/web"))
    assert p.stdout.readline().strip() == "ready 16"
    assert [e for e in notifier.wait(0.2) if e.kind == "memory-threshold"] == []  # below: nothing
    p.stdin.write("grow 80\n")
    p.stdin.flush()
    assert p.stdout.readline().strip() == "at 80"
    events = _wait_for(notifier, "memory-threshold")
    assert events and events[0].dimension == "ram" and not events[0].acute
    assert "threshold 50331648" in events[0].detail
    notifier.close()


def test_v1_oom_notification_is_acute(real_tree, spawn):
    h = _v1_memory(real_tree)
    w = CgroupWriter(real_tree, ManagedScope())
    w.create("batch/hog", "test")
    assert all(r.ok for r in w.apply([KnobWrite("batch/hog", Knob.MEMORY_MAX, 48 * MIB, "small")]))
    src = EventfdSource.register(
        real_tree.dir(h, "batch/hog"), threshold=None, label="batch/hog", check=lambda: None
    )
    notifier = Notifier()
    notifier.add(src)
    p = spawn("mem", "--mib", "96", cgroup_procs=w.procs_files("batch/hog"))
    assert p.wait(30) < 0  # the kernel OOM-kills it inside its 48 MiB limit
    events = _wait_for(notifier, "oom")
    assert events and events[0].acute and "oom_kill=" in events[0].detail
    notifier.close()


def test_registration_is_refused_outside_the_scope(real_tree):
    h = _v1_memory(real_tree)
    w = CgroupWriter(real_tree, ManagedScope(protected=frozenset({"ds/logger"})))
    with pytest.raises(NotManaged):
        EventfdSource.register(
            real_tree.dir(h, "ds/logger"), threshold=1, label="ds", check=lambda: w.check("ds/logger")
        )


def test_v2_memory_events_counts_increments(tmp_path):
    f = tmp_path / "memory.events"
    f.write_text("low 0\nhigh 2\nmax 0\noom 0\noom_kill 0\n")
    src = MemoryEventsSource("prod/web", f, check=lambda: None)
    try:
        assert src.poll_mask == select.POLLPRI
        assert src.collect(1.0, 1.0, select.POLLPRI) == []  # nothing changed since it was opened
        f.write_text("low 0\nhigh 5\nmax 1\noom 0\noom_kill 0\n")
        got = {(e.detail, e.acute) for e in src.collect(2.0, 2.0, select.POLLPRI)}
        assert got == {("high +3", False), ("max +1", True)}
        f.write_text("garbage\n")
        assert src.collect(3.0, 3.0, select.POLLPRI) == [] and src.dead
    finally:
        src.close()
