"""Layout detection (v1, v2, hybrid) from mountinfo, and name -> directory resolution."""

from __future__ import annotations

from pathlib import Path

import pytest
from agent_testlib import FIXTURES

from kalena.agent.layout import (
    BadCgroupName,
    CgroupMode,
    CgroupTree,
    Hierarchy,
    LayoutError,
    check_name,
    default_root,
    detect_layout,
)


def test_the_hybrid_dev_host_capture():
    lay = detect_layout(
        (FIXTURES / "cgroup_v1_hybrid_host/mountinfo").read_text(),
        (FIXTURES / "cgroup_v1_hybrid_host/proc_self_cgroup").read_text(),
    )
    assert lay.mode is CgroupMode.HYBRID
    assert lay.home("cpu").mount_point == Path("/sys/fs/cgroup/cpu")
    assert lay.home("cpuacct").mount_point == Path("/sys/fs/cgroup/cpuacct")
    assert lay.home("memory").own.startswith("/process_api/")
    assert lay.v2 is not None and lay.v2.mount_point == Path("/sys/fs/cgroup/unified")
    assert lay.has_psi
    # hybrid: the memory controller is bound to v1, so it can never be the v2 tree's
    assert lay.home("memory").version == 1


@pytest.mark.parametrize(
    ("mode", "expected", "homes"),
    [
        ("v1", CgroupMode.V1, {"cpu": 1, "cpuacct": 1, "memory": 1, "blkio": 1, "io": None}),
        ("v2", CgroupMode.V2, {"cpu": 2, "cpuacct": 2, "memory": 2, "blkio": None, "io": 2}),
        ("hybrid", CgroupMode.HYBRID, {"cpu": 1, "cpuacct": 1, "memory": 1, "blkio": 1, "io": None}),
    ],
    ids=["v1", "v2", "hybrid"],
)
def test_modes_and_controller_homes(fake_host, mode, expected, homes):
    lay = fake_host(mode).layout()
    assert lay.mode is expected
    for ctrl, version in homes.items():
        h = lay.home(ctrl)
        assert (None if h is None else h.version) == version, ctrl
    assert lay.has_psi is (mode != "v1")


def test_v2_without_the_memory_controller_has_no_memory_home(fake_host):
    lay = fake_host("v2", v2_controllers="cpu pids").layout()
    assert lay.home("memory") is None
    assert lay.home("cpuacct") is not None  # cpu.stat usage exists in every v2 cgroup


def test_hierarchies_are_listed_once(fake_host):
    lay = fake_host("hybrid").layout()
    points = [h.mount_point.name for h in lay.hierarchies]
    assert points == ["cpu", "cpuacct", "memory", "blkio", "pids", "unified"]


def test_no_cgroup_mount_is_an_error():
    with pytest.raises(LayoutError, match="no cgroup"):
        detect_layout("42 31 0:39 / /proc rw - proc proc rw\n", "0::/\n")


def _h(root: str = "/", own: str = "/") -> Hierarchy:
    return Hierarchy(1, Path("/cg/memory"), root, frozenset({"memory"}), own)


@pytest.mark.parametrize(
    ("root", "own", "name", "path"),
    [
        ("kalena", "/", "", "/kalena"),
        ("kalena", "/process_api/abc", "", "/process_api/abc/kalena"),
        ("kalena", "/process_api/abc", "batch/job-1", "/process_api/abc/kalena/batch/job-1"),
        ("/kalena.slice", "/process_api/abc", "prod/web", "/kalena.slice/prod/web"),
        ("kalena", "/x", "/system.slice/db.service", "/system.slice/db.service"),
    ],
    ids=["relative-root", "nested-under-own", "child", "absolute-root", "absolute-name"],
)
def test_tree_paths(fake_host, root, own, name, path):
    lay = fake_host("v1").layout()
    tree = CgroupTree(lay, root)
    assert tree.path(_h(own=own), name) == path


def test_dir_under_a_mount_that_shows_a_subtree():
    h = _h(root="/process_api")
    assert h.dir("/process_api/abc/kalena") == Path("/cg/memory/abc/kalena")
    assert _h().dir("/a/b") == Path("/cg/memory/a/b")


@pytest.mark.parametrize(
    "name",
    ["", "..", "a/../b", "a//b", "./a", "a/\nb", "/"],
    ids=["empty", "dotdot", "inner-dotdot", "empty-part", "dot", "newline", "slash"],
)
def test_bad_names(name):
    if name == "/":
        assert check_name(name) == "/"
        return
    with pytest.raises(BadCgroupName):
        check_name(name)


def test_describe_names_every_hierarchy(fake_host):
    text = fake_host("hybrid").layout().describe()
    assert text.startswith("mode=hybrid")
    assert "memory=v1:" in text and "v2=" in text


@pytest.mark.parametrize(("mode", "root"), [("v1", "kalena"), ("hybrid", "kalena"), ("v2", "/kalena")])
def test_default_root(fake_host, mode, root):
    assert default_root(fake_host(mode).layout()) == root
