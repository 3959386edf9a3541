"""The one audited cgroup writer on fake v1 and v2 trees: translation, skip, order, scope, audit."""

from __future__ import annotations

import math
import signal
import subprocess
from pathlib import Path

import pytest

from kalena.agent.layout import BadCgroupName, CgroupTree
from kalena.agent.writer import (
    CgroupWriter,
    Knob,
    KnobWrite,
    ManagedScope,
    NotManaged,
    PendingWrite,
    write_order_key,
)


class Clock:
    def __init__(self, t: float = 1000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def _writer(fake_host, mode: str, scope: ManagedScope | None = None, clock=None):
    tree = CgroupTree(fake_host(mode).layout(), "kalena")
    records = []
    w = CgroupWriter(tree, scope or ManagedScope(), clock=clock or Clock(), audit=records.append)
    return w, tree, records


def _prime(tree: CgroupTree, name: str, files: dict[str, str]) -> None:
    """Give ``name`` the files a fresh kernel cgroup would show, in the hierarchy that owns each."""
    for filename, text in files.items():
        ctrl = "memory" if filename.startswith("memory.") else "cpu"
        d = tree.dir(tree.layout.home(ctrl), name)
        d.mkdir(parents=True, exist_ok=True)
        (d / filename).write_text(text)


FRESH_V2 = {"cpu.max": "50000 100000\n", "cpu.weight": "100\n", "memory.high": "max\n", "memory.max": "max\n"}
FRESH_V1 = {
    "cpu.cfs_quota_us": "-1\n",
    "cpu.shares": "1024\n",
    "memory.soft_limit_in_bytes": "9223372036854771712\n",
    "memory.limit_in_bytes": "9223372036854771712\n",
}


@pytest.mark.parametrize(
    ("mode", "knob", "value", "filename", "text"),
    [
        ("v2", Knob.CPU_QUOTA, 0.35, "cpu.max", "35000 100000"),
        ("v2", Knob.CPU_QUOTA, math.inf, "cpu.max", "max 100000"),
        ("v2", Knob.CPU_QUOTA, 0.001, "cpu.max", "1000 100000"),  # the kernel's 1 ms minimum
        ("v2", Knob.CPU_WEIGHT, 1, "cpu.weight", "1"),
        ("v2", Knob.MEMORY_HIGH, 100 * 2**20 + 5, "memory.high", str(100 * 2**20)),  # whole pages
        ("v2", Knob.MEMORY_MAX, 2**30, "memory.max", str(2**30)),
        ("v1", Knob.CPU_QUOTA, 1.5, "cpu.cfs_quota_us", "150000"),
        ("v1", Knob.CPU_WEIGHT, 1, "cpu.shares", "2"),
        ("v1", Knob.CPU_WEIGHT, 100, "cpu.shares", "2597"),  # 2 + round(99 * 262142 / 9999)
        ("v1", Knob.MEMORY_HIGH, 2**28, "memory.soft_limit_in_bytes", str(2**28)),
        ("v1", Knob.MEMORY_MAX, 2**28, "memory.limit_in_bytes", str(2**28)),
        ("hybrid", Knob.CPU_QUOTA, 0.5, "cpu.cfs_quota_us", "50000"),
    ],
    ids=[
        "v2-quota",
        "v2-unlimited",
        "v2-min-quota",
        "v2-weight",
        "v2-high-pages",
        "v2-max",
        "v1-quota",
        "v1-shares-min",
        "v1-shares-default-weight",
        "v1-soft-limit",
        "v1-limit",
        "hybrid-quota-in-v1",
    ],
)
def test_knob_translation(fake_host, mode, knob, value, filename, text):
    w, tree, records = _writer(fake_host, mode)
    _prime(tree, "batch/j", FRESH_V2 if mode == "v2" else FRESH_V1)
    out = w.apply([KnobWrite("batch/j", knob, value, "test")])
    assert [r.outcome for r in out] == ["written"]
    ctrl = "memory" if filename.startswith("memory.") else "cpu"
    assert (tree.dir(tree.layout.home(ctrl), "batch/j") / filename).read_text() == text
    assert records == list(out) and out[0].reason == "test"


def test_unchanged_value_is_skipped_and_not_audited(fake_host):
    w, tree, records = _writer(fake_host, "v2")
    _prime(tree, "batch/j", {"cpu.max": "50000 100000\n"})
    assert w.apply([KnobWrite("batch/j", Knob.CPU_QUOTA, 0.5, "same")]) == ()
    assert records == []
    out = w.apply([KnobWrite("batch/j", Knob.CPU_QUOTA, 0.25, "cut")])
    assert [(r.old, r.new) for r in out] == [("50000 100000", "25000 100000")]
    assert w.apply([KnobWrite("batch/j", Knob.CPU_QUOTA, 0.25, "cut again")]) == ()  # from the cache


def test_last_write_per_file_wins(fake_host):
    w, tree, _ = _writer(fake_host, "v2")
    _prime(tree, "batch/j", FRESH_V2)
    out = w.apply(
        [KnobWrite("batch/j", Knob.CPU_QUOTA, 0.5, "a"), KnobWrite("batch/j", Knob.CPU_QUOTA, 0.2, "b")]
    )
    assert [(r.new, r.reason) for r in out] == [("20000 100000", "b")]


def test_cache_expires_and_notices_outside_changes(fake_host):
    clock = Clock()
    w, tree, _ = _writer(fake_host, "v2", clock=clock)
    _prime(tree, "batch/j", FRESH_V2)
    w.apply([KnobWrite("batch/j", Knob.CPU_QUOTA, 0.5, "cut")])
    f = tree.dir(tree.layout.v2, "batch/j") / "cpu.max"
    f.write_text("max 100000\n")  # someone else reset it
    assert w.apply([KnobWrite("batch/j", Knob.CPU_QUOTA, 0.5, "cut")]) == ()  # cache still fresh
    clock.t += 61
    out = w.apply([KnobWrite("batch/j", Knob.CPU_QUOTA, 0.5, "cut")])
    assert [r.old for r in out] == ["max 100000"]
    assert f.read_text() == "50000 100000"


def test_failed_write_is_a_record_and_is_retried(fake_host):
    w, _tree, records = _writer(fake_host, "v2")
    out = w.apply([KnobWrite("batch/missing", Knob.CPU_QUOTA, 0.5, "cut")])
    assert len(out) == 1 and out[0].outcome.startswith("failed") and not out[0].ok
    assert records == list(out)
    assert len(w.apply([KnobWrite("batch/missing", Knob.CPU_QUOTA, 0.5, "cut")])) == 1


def _pending(path: str, narrows: bool) -> PendingWrite:
    return PendingWrite(KnobWrite("x", Knob.CPU_QUOTA, 1.0, ""), Path(path) / "cpu.max", None, "", narrows)


@pytest.mark.parametrize(
    ("writes", "order"),
    [
        ([("/r/a", True), ("/r/a/b", True)], ["/r/a/b", "/r/a"]),
        ([("/r/a/b", False), ("/r/a", False)], ["/r/a", "/r/a/b"]),
        ([("/r/a", False), ("/r/a/b", True)], ["/r/a/b", "/r/a"]),
        ([("/r/b", True), ("/r/a", True)], ["/r/a", "/r/b"]),
    ],
    ids=["narrow-children-first", "widen-parents-first", "narrowing-before-widening", "tie-break-by-path"],
)
def test_write_order_key(writes, order):
    pending = sorted((_pending(p, n) for p, n in writes), key=write_order_key)
    assert [str(p.path.parent) for p in pending] == order


def test_parent_widens_before_child_in_one_batch(fake_host):
    w, tree, _ = _writer(fake_host, "v1")
    _prime(tree, "", {"cpu.cfs_quota_us": "50000\n"})
    _prime(tree, "batch", {"cpu.cfs_quota_us": "50000\n"})
    out = w.apply(
        [
            KnobWrite("batch", Knob.CPU_QUOTA, 1.0, "grow child"),
            KnobWrite("", Knob.CPU_QUOTA, 2.0, "grow parent"),
        ]
    )
    assert [r.reason for r in out] == ["grow parent", "grow child"]


@pytest.mark.parametrize(
    ("scope", "name", "allowed"),
    [
        (ManagedScope(), "batch/j", True),
        (ManagedScope(), "", True),
        (ManagedScope(), "/system.slice/sshd.service", False),
        (ManagedScope(adopted=frozenset({"/prod/db"})), "/prod/db", True),
        (ManagedScope(adopted=frozenset({"/prod/db"})), "/prod/db/child", True),
        (ManagedScope(adopted=frozenset({"/prod/db"})), "/prod/dbx", False),
        (ManagedScope(protected=frozenset({"ds/logger"})), "ds/logger", False),
        (ManagedScope(protected=frozenset({"/ds/agent"}), adopted=frozenset({"/ds"})), "/ds/agent", False),
    ],
    ids=[
        "under-root",
        "root-itself",
        "outside",
        "adopted",
        "adopted-child",
        "adopted-prefix-is-not-a-parent",
        "protected-under-root",
        "protected-wins-over-adopted",
    ],
)
def test_scope(scope, name, allowed):
    assert scope.allows(name) is allowed


def test_writes_outside_the_scope_raise_before_touching_anything(fake_host):
    w, tree, records = _writer(fake_host, "v2", scope=ManagedScope(protected=frozenset({"ds/logger"})))
    _prime(tree, "ds/logger", FRESH_V2)
    with pytest.raises(NotManaged):
        w.apply(
            [
                KnobWrite("batch/j", Knob.CPU_QUOTA, 0.5, "ok"),
                KnobWrite("ds/logger", Knob.CPU_QUOTA, 0.1, "no"),
            ]
        )
    with pytest.raises(NotManaged):
        w.kill("/system.slice/sshd.service", "no")
    with pytest.raises(BadCgroupName):
        w.apply([KnobWrite("../escape", Knob.CPU_QUOTA, 0.1, "no")])
    assert records == []
    assert (tree.dir(tree.layout.v2, "ds/logger") / "cpu.max").read_text() == "50000 100000\n"


def test_create_and_remove_in_every_hierarchy(fake_host):
    w, tree, records = _writer(fake_host, "hybrid")
    w.create("batch/j", "admit")
    dirs = [tree.dir(h, "batch/j") for h in tree.layout.hierarchies]
    assert all(d.is_dir() for d in dirs) and len(dirs) == 6
    assert {r.action for r in records} == {"mkdir"}
    w.remove("batch", "done")
    assert not any(tree.dir(h, "batch").exists() for h in tree.layout.hierarchies)


def test_create_on_v2_enables_controllers_only_inside_kalenas_root(fake_host):
    w, tree, _ = _writer(fake_host, "v2")
    top = tree.layout.v2.mount_point
    (top / "cgroup.subtree_control").write_text("cpu io memory pids\n")
    out = w.create("", "Kalena's root")  # the hierarchy root's subtree_control is not Kalena's
    assert [r.action for r in out] == ["mkdir"]
    assert (top / "cgroup.subtree_control").read_text() == "cpu io memory pids\n"
    root = tree.dir(tree.layout.v2, "")
    (root / "cgroup.controllers").write_text("cpu io memory pids\n")
    (root / "cgroup.subtree_control").write_text("")
    out = w.create("batch/j", "admit")  # two levels: the root enables for batch, batch for j
    assert [(r.action, Path(r.path).name) for r in out] == [
        ("write", "cgroup.subtree_control"),
        ("write", "cgroup.subtree_control"),
        ("write", "cgroup.subtree_control"),
        ("mkdir", "batch"),
        ("mkdir", "j"),  # batch/ is a plain folder here, offering no controllers to enable
    ]
    # a plain folder is not a kernel file: each "+ctrl" write replaces the text
    assert [r.new for r in out if r.action == "write"] == ["+cpu", "+memory", "+io"]


def test_signal_and_kill_use_the_listed_processes(fake_host):
    w, tree, records = _writer(fake_host, "v1")
    p = subprocess.Popen(["sleep", "30"])
    try:
        for h in tree.layout.hierarchies:
            d = tree.dir(h, "batch/j")
            d.mkdir(parents=True)
            (d / "cgroup.procs").write_text(f"{p.pid}\n")
        assert w.signal("batch/j", signal.SIGTERM, "evict") == (p.pid,)
        assert p.wait(5) == -signal.SIGTERM
        assert [r.action for r in records] == ["signal"]
    finally:
        p.kill()
        p.wait()


def test_unlimited_memory_on_v1_is_not_rewritten_every_round(fake_host):
    """v1 reads "no limit" back as 9223372036854771712 after "-1" was written: the same value."""
    w, tree, records = _writer(fake_host, "v1")
    _prime(tree, "batch/j", {"memory.limit_in_bytes": "9223372036854771712\n"})
    assert w.apply([KnobWrite("batch/j", Knob.MEMORY_MAX, math.inf, "no limit")]) == ()
    assert records == []
