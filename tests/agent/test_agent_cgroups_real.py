"""The reader and the writer on this host's real cgroups, with real processes (root only).

Each test gets its own Kalena root in every hierarchy (``real_tree``), removed at teardown.
"""

from __future__ import annotations

import math
import signal

import pytest

from kalena.agent.cgroupfs import FsCgroupReader
from kalena.agent.layout import CgroupTree
from kalena.agent.writer import CgroupWriter, Knob, KnobWrite, ManagedScope, NotManaged


def _writer(tree: CgroupTree, records: list) -> CgroupWriter:
    return CgroupWriter(tree, ManagedScope(), audit=records.append)


def test_knobs_land_in_the_kernel_files(real_tree):
    records: list = []
    w = _writer(real_tree, records)
    w.create("batch/j", "test")
    out = w.apply(
        [
            KnobWrite("batch/j", Knob.CPU_QUOTA, 0.5, "throttle"),
            KnobWrite("batch/j", Knob.CPU_WEIGHT, 1, "batch weight"),
            KnobWrite("batch/j", Knob.MEMORY_MAX, 256 * 2**20, "limit"),
            KnobWrite("batch/j", Knob.MEMORY_HIGH, 128 * 2**20, "high"),
        ]
    )
    assert all(r.ok for r in out), [r.outcome for r in out]
    lay = real_tree.layout
    cpu = real_tree.dir(lay.home("cpu"), "batch/j")
    mem = real_tree.dir(lay.home("memory"), "batch/j")
    if lay.home("cpu").version == 1:
        assert (cpu / "cpu.cfs_quota_us").read_text().strip() == "50000"
        assert (cpu / "cpu.shares").read_text().strip() == "2"
    else:
        assert (cpu / "cpu.max").read_text().split()[0] == "50000"
    limit = "memory.limit_in_bytes" if lay.home("memory").version == 1 else "memory.max"
    assert int((mem / limit).read_text()) == 256 * 2**20
    # the same desired state again is a no-op
    assert w.apply([KnobWrite("batch/j", Knob.CPU_QUOTA, 0.5, "throttle")]) == ()


def test_v1_cfs_hierarchy_needs_the_writer_order(real_tree):
    """cgroup v1 rejects a child quota above its parent's: the batch below fails in naive order."""
    if real_tree.layout.home("cpu").version != 1:
        pytest.skip("the CFS parent/child quota constraint is a cgroup v1 rule; this host's cpu is v2")
    records: list = []
    w = _writer(real_tree, records)
    w.create("batch/j", "test")
    assert all(
        r.ok
        for r in w.apply(
            [KnobWrite("batch", Knob.CPU_QUOTA, 1.0, "p"), KnobWrite("batch/j", Knob.CPU_QUOTA, 0.5, "c")]
        )
    )
    child = real_tree.dir(real_tree.layout.home("cpu"), "batch/j") / "cpu.cfs_quota_us"
    parent = child.parent.parent / "cpu.cfs_quota_us"
    with pytest.raises(OSError):  # parent below its child: the kernel says EINVAL
        parent.write_text("30000")
    # narrowing both: the writer cuts the child first, then the parent
    out = w.apply(
        [
            KnobWrite("batch", Knob.CPU_QUOTA, 0.3, "cut parent"),
            KnobWrite("batch/j", Knob.CPU_QUOTA, 0.2, "cut child"),
        ]
    )
    assert [r.reason for r in out] == ["cut child", "cut parent"] and all(r.ok for r in out)
    # widening both: parent first
    out = w.apply(
        [
            KnobWrite("batch/j", Knob.CPU_QUOTA, 1.5, "grow child"),
            KnobWrite("batch", Knob.CPU_QUOTA, 2.0, "grow parent"),
        ]
    )
    assert [r.reason for r in out] == ["grow parent", "grow child"] and all(r.ok for r in out)
    assert child.read_text().strip() == "150000"


def test_reader_sees_a_real_process_and_kill_removes_it(real_tree, spawn):
    records: list = []
    w = _writer(real_tree, records)
    reader = FsCgroupReader(real_tree)
    w.create("batch/mem", "test")
    p = spawn("mem", "--mib", "32", cgroup_procs=w.procs_files("batch/mem"))
    assert p.stdout.readline().strip() == "ready 32"
    assert reader.procs("batch/mem") == (p.pid,)
    r = reader.read("batch/mem")
    assert r.cpu_usage_ns is not None and r.cpu_usage_ns > 0
    assert r.working_set is not None and r.working_set >= 32 * 2**20
    assert math.isinf(r.memory_limit) or r.memory_limit > 0
    if real_tree.layout.has_psi:
        assert reader.pressure("batch/mem", "memory") is not None
    w.kill("batch/mem", "test kill")
    assert p.wait(10) == -signal.SIGKILL
    assert records[-1].action == "kill"
    w.remove("batch/mem", "done")
    assert not reader.exists("batch/mem")


def test_sigterm_to_a_real_cgroup(real_tree, spawn):
    w = _writer(real_tree, [])
    w.create("batch/s", "test")
    p = spawn("sleep", cgroup_procs=w.procs_files("batch/s"))
    assert p.stdout.readline().strip() == "ready"
    assert w.signal("batch/s", signal.SIGTERM, "evict") == (p.pid,)
    assert p.wait(10) == -signal.SIGTERM


def test_the_hierarchy_root_is_never_writable(real_tree):
    w = _writer(real_tree, [])
    with pytest.raises(NotManaged):
        w.apply([KnobWrite("/", Knob.CPU_QUOTA, 0.1, "never")])
    with pytest.raises(NotManaged):
        w.signal("/", signal.SIGTERM, "never")


def test_purge_kills_and_removes_a_whole_subtree(real_tree, spawn):
    w = _writer(real_tree, [])
    for name in ("batch/a", "batch/a/inner", "prod/b"):
        w.create(name, "test")
    kids = [spawn("sleep", cgroup_procs=w.procs_files(n)) for n in ("batch/a/inner", "prod/b")]
    assert all(k.stdout.readline().strip() == "ready" for k in kids)
    assert w.purge("", "uninstall")
    assert all(k.wait(10) == -signal.SIGKILL for k in kids)
    assert not any(real_tree.dir(h, "").exists() for h in real_tree.layout.hierarchies)
