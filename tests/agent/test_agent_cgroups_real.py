"""The reader and the writer on this host's real cgroups, with real processes (root only).

Each test gets its own Kalena root in every hierarchy (``real_tree``), removed at teardown.
"""

from __future__ import annotations

import math
import signal

import pytest
from agent_testlib import one_run_plan

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


def test_a_run_whose_children_set_quotas_is_throttled_below_them_and_they_get_theirs_back(real_tree):
    """A Kubernetes batch pod with CPU limits: on cgroup v1 each container's cgroup has a quota of
    its own, and the kernel refuses the pod's quota below it (EINVAL). Those children are lowered
    with the run, first, and get their own quota back once the run's is above it; a child without
    a quota is not touched. On v2 (no such rule) the children are never written."""
    from kalena.agent import knobs
    from kalena.agent.state import JobRecord

    records: list = []
    w = _writer(real_tree, records)
    for name in ("batch/pod", "batch/pod/c-limited", "batch/pod/c-free", "batch/pod/c-limited/inner"):
        w.create(name, "test")
    v1 = real_tree.layout.home("cpu").version == 1
    # the kubelet's part: the pod's quota, its limited container's (1.5 cores), and below it one more
    assert all(
        r.ok
        for r in w.apply(
            [KnobWrite("batch/pod", Knob.CPU_QUOTA, 2.0, "kubelet"),
             KnobWrite("batch/pod/c-limited", Knob.CPU_QUOTA, 1.5, "kubelet"),
             KnobWrite("batch/pod/c-limited/inner", Knob.CPU_QUOTA, 1.0, "kubelet")]
        )
    )  # fmt: skip
    job = JobRecord("pod", ["true"], {"cpu": 1.0}, None, 1, 0.0, cgroup="batch/pod", workload_id="batch/pod")
    runs = {"batch/pod": job}
    originals: dict[str, float] = {}

    def round_of(quota: float) -> list:
        plan = one_run_plan("batch/pod", quota)
        return list(w.apply(knobs.batch_writes(plan, runs) + knobs.nested_writes(plan, runs, originals, w)))

    out = round_of(0.25)  # throttled below every container's limit
    assert all(r.ok for r in out), [(r.cgroup, r.outcome) for r in out]
    assert w.current("batch/pod", Knob.CPU_QUOTA) == pytest.approx(0.25)
    if v1:
        assert w.current("batch/pod/c-limited", Knob.CPU_QUOTA) == pytest.approx(0.25)
        assert w.current("batch/pod/c-limited/inner", Knob.CPU_QUOTA) == pytest.approx(0.25)
        assert originals == {"batch/pod/c-limited": pytest.approx(1.5), "batch/pod/c-limited/inner": 1.0}
        # written deepest first: a parent is never below its child
        order = [r.cgroup for r in out if r.path.endswith("cpu.cfs_quota_us")]
        assert order.index("batch/pod/c-limited/inner") < order.index("batch/pod/c-limited")
        assert order.index("batch/pod/c-limited") < order.index("batch/pod")
    else:
        assert originals == {}  # v2: nothing to lower
        assert w.current("batch/pod/c-limited", Knob.CPU_QUOTA) == pytest.approx(1.5)
    assert w.current("batch/pod/c-free", Knob.CPU_QUOTA) == math.inf  # no quota: untouched

    out = round_of(1.2)  # above the inner one's own: it gets its 1.0 back; c-limited stays lowered
    assert all(r.ok for r in out), [(r.cgroup, r.outcome) for r in out]
    if v1:
        assert w.current("batch/pod/c-limited", Knob.CPU_QUOTA) == pytest.approx(1.2)
        assert w.current("batch/pod/c-limited/inner", Knob.CPU_QUOTA) == pytest.approx(1.0)
        assert originals == {"batch/pod/c-limited": pytest.approx(1.5)}

    out = round_of(2.0)  # unthrottled: every container has its own quota again
    assert all(r.ok for r in out), [(r.cgroup, r.outcome) for r in out]
    assert w.current("batch/pod/c-limited", Knob.CPU_QUOTA) == pytest.approx(1.5)
    assert w.current("batch/pod/c-limited/inner", Knob.CPU_QUOTA) == pytest.approx(1.0)
    assert originals == {}

    round_of(0.25)
    runs.clear()  # the run ended: what was kept of its children goes with it
    assert knobs.nested_writes(one_run_plan("batch/pod", 0.25), runs, originals, w) == [] and originals == {}
