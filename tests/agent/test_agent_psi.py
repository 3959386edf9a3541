"""PSI triggers on this host's kernel, the polling fallback, and the notifier."""

from __future__ import annotations

import os
import select
import time
from pathlib import Path

import pytest
from agent_testlib import FIXTURES

from kalena.agent.notify import AgentEvent, Notifier, drain_eventfd
from kalena.agent.psi import WINDOWS_US, PolledPressure, PsiTrigger, TriggerSpec, arm
from kalena.agent.writer import CgroupWriter, Knob, KnobWrite, ManagedScope

CAP_SYS_RESOURCE = 24


def _has_cap_sys_resource() -> bool:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("CapEff:"):
            return bool(int(line.split()[1], 16) >> CAP_SYS_RESOURCE & 1)
    return False


def _need_psi() -> None:
    if not Path("/proc/pressure/memory").exists():
        pytest.skip("this kernel has no PSI (/proc/pressure is missing: CONFIG_PSI off or psi=0)")


def spec(path: Path | str, kind: str = "some", fraction: float = 0.1, dim: str = "ram", acute: bool = False):
    return TriggerSpec(Path(path), kind, fraction, dim, acute, f"test:{path}:{kind}")


@pytest.mark.parametrize(
    ("kind", "fraction"),
    [("most", 0.1), ("some", 0.0), ("some", 1.0)],
    ids=["bad-kind", "zero-fraction", "whole-window"],
)
def test_trigger_spec_validation(kind, fraction):
    with pytest.raises(ValueError, match="TriggerSpec"):
        TriggerSpec(Path("/proc/pressure/cpu"), kind, fraction, "cpu", False, "x")


def test_system_trigger_takes_the_shortest_window_the_kernel_allows():
    _need_psi()
    t = PsiTrigger.open(spec("/proc/pressure/memory"))
    try:
        expected = WINDOWS_US[0] if _has_cap_sys_resource() else 2_000_000
        assert t.window_us == expected
        assert t.stall_us == expected // 10
        assert t.privileged is (expected == 500_000)
        assert "window" in t.describe()
    finally:
        t.close()


def test_a_missing_file_falls_back_to_polling_and_says_so(tmp_path):
    notifier = Notifier()
    setup = arm([spec(tmp_path / "nope")], notifier)
    assert setup.triggers == [] and len(setup.polled) == 1
    assert "polling avg10" in setup.report()[0] and "fallback" in setup.report()[0]
    assert setup.window_s is None and notifier.sources == ()


@pytest.mark.parametrize(
    ("fixture", "kind", "fires"),
    [
        ("psi/couchbase_cpu", "some", True),
        ("psi/node_exporter_cpu", "some", False),
        ("psi/node_exporter_irq", "some", False),
    ],
    ids=["busy-host-78pct", "idle-host", "irq-has-no-some-line"],
)
def test_polled_fallback_on_real_captures(fixture, kind, fires):
    p = PolledPressure(spec(FIXTURES / fixture, kind, 0.1, "cpu"), "test")
    events = p.check(1.0, 2.0)
    assert bool(events) is fires
    if fires:
        assert events[0].kind == "psi-poll" and events[0].dimension == "cpu"


class _FakeSource:
    """An eventfd standing in for a kernel file."""

    poll_mask = select.POLLIN

    def __init__(self, die: bool = False) -> None:
        self.label = "fake"
        self.dead = False
        self._die = die
        self.fd = os.eventfd(0, os.EFD_NONBLOCK)

    def fileno(self) -> int:
        return self.fd

    def collect(self, now: float, mono: float, revents: int) -> list[AgentEvent]:
        drain_eventfd(self.fd)
        self.dead = self._die
        return [AgentEvent("psi", "fake", "cpu", False, now, mono)]

    def close(self) -> None:
        os.close(self.fd)


def test_notifier_wakes_on_a_source_and_drops_dead_ones():
    n = Notifier(clock=lambda: 42.0)
    live, dying = _FakeSource(), _FakeSource(die=True)
    n.add(live)
    n.add(dying)
    assert n.wait(0) == []
    os.eventfd_write(live.fd, 1)
    os.eventfd_write(dying.fd, 1)
    events = n.wait(1.0)
    assert [e.time for e in events] == [42.0, 42.0]
    assert n.sources == (live,)
    n.close()
    assert n.sources == ()


@pytest.mark.slow
def test_a_real_cgroup_trigger_fires_when_its_cpu_is_throttled(real_tree, spawn):
    """A busy loop capped at 0.2 core stalls ~80% of the time: the cgroup's cpu trigger fires."""
    if real_tree.layout.v2 is None:
        pytest.skip("per-cgroup PSI needs a cgroup v2 tree (pure or hybrid); this host is v1-only")
    _need_psi()
    w = CgroupWriter(real_tree, ManagedScope())
    w.create("batch/spin", "test")
    assert all(r.ok for r in w.apply([KnobWrite("batch/spin", Knob.CPU_QUOTA, 0.2, "cap")]))
    path = real_tree.dir(real_tree.layout.v2, "batch/spin") / "cpu.pressure"
    notifier = Notifier()
    setup = arm([spec(path, "some", 0.1, "cpu")], notifier)
    assert len(setup.triggers) == 1, setup.report()
    p = spawn("cpu", cgroup_procs=w.procs_files("batch/spin"))
    assert p.stdout.readline().strip() == "ready"
    deadline = time.monotonic() + 20  # a bound, not a speed assertion: 2 s windows fire in ~2-4 s
    events: list[AgentEvent] = []
    while not events and time.monotonic() < deadline:
        events = notifier.wait(1.0)
    assert events and events[0].kind == "psi" and events[0].dimension == "cpu"
    assert setup.triggers[0].fired >= 1
    # the cgroup goes away: the trigger reports POLLERR and is dropped
    p.kill()
    p.wait()
    w.remove("batch/spin", "done")
    notifier.wait(1.0)
    assert notifier.sources == ()
