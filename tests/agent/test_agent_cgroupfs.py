"""The read side against fake v1 and v2 trees filled with real captured cgroup files."""

from __future__ import annotations

import math
import shutil

import pytest
from agent_testlib import FIXTURES

from kalena.agent.cgroupfs import FsCgroupReader, flat_value
from kalena.agent.layout import CgroupTree
from kalena.agent.parsers import IoBytes

V2 = FIXTURES / "cgroup_v2_container"
V1 = FIXTURES / "cgroup_v1_hybrid_host"


def _v2_reader(fake_host):
    tree = CgroupTree(fake_host("v2").layout(), "kalena")
    d = tree.dir(tree.layout.v2, "prod/db")
    d.mkdir(parents=True)
    for f in V2.iterdir():
        shutil.copy(f, d / f.name)
    (d / "memory.events").write_text("low 0\nhigh 3\nmax 1\noom 0\noom_kill 0\n")
    (d / "cgroup.procs").write_text("101\n102\n")
    return FsCgroupReader(tree, proc_pressure=FIXTURES / "psi"), tree


def test_v2_container_reading(fake_host):
    reader, _ = _v2_reader(fake_host)
    r = reader.read("prod/db")
    assert r.cpu_usage_ns == 528946079 * 1000
    assert r.throttled_ns == 2261444 * 1000
    assert r.memory_usage == 2766684160
    assert r.working_set == 2766684160 - 42106880  # usage less inactive_file
    assert r.memory_limit == 8 * 2**30
    assert r.io == IoBytes(40824832, 824999936)
    assert reader.pressure("prod/db", "cpu").some.avg10 == 65.95
    assert reader.memory_events("prod/db")["high"] == 3
    assert reader.procs("prod/db") == (101, 102)
    assert reader.exists("prod/db") and not reader.exists("prod/other")


def _v1_reader(fake_host, mode="hybrid"):
    tree = CgroupTree(fake_host(mode).layout(), "kalena")
    lay = tree.layout
    for ctrl, files in {
        "cpu": ("cpu.stat", "cpu.cfs_quota_us", "cpu.cfs_period_us", "cpu.shares"),
        "cpuacct": ("cpuacct.usage",),
        "memory": (
            "memory.usage_in_bytes",
            "memory.stat",
            "memory.limit_in_bytes",
            "memory.soft_limit_in_bytes",
            "memory.oom_control",
        ),
        "blkio": ("blkio.throttle.io_service_bytes_recursive",),
    }.items():
        d = tree.dir(lay.home(ctrl), "batch/job")
        d.mkdir(parents=True)
        for f in files:
            shutil.copy(V1 / f, d / f)
    if lay.v2 is not None:
        d = tree.dir(lay.v2, "batch/job")
        d.mkdir(parents=True)
        shutil.copy(V1 / "unified.cpu.pressure", d / "cpu.pressure")
        (d / "cgroup.procs").write_text("7\n")
    return FsCgroupReader(tree, proc_pressure=FIXTURES / "psi"), tree


def test_v1_capture_reading(fake_host):
    reader, _ = _v1_reader(fake_host)
    r = reader.read("batch/job")
    assert r.cpu_usage_ns == 1354423352
    assert r.throttled_ns == 1316967525
    assert r.memory_usage == 78995456
    assert r.working_set == 78995456 - 8388608  # usage less total_inactive_file
    assert r.memory_limit == 209715200
    assert r.io == IoBytes(0, 0)
    assert reader.memory_events("batch/job") == {"oom_kill_disable": 0, "under_oom": 0, "oom_kill": 0}
    # hybrid: pressure and membership come from the v2 tree
    assert reader.pressure("batch/job", "cpu").some.avg10 == 8.15
    assert reader.procs("batch/job") == (7,)


def test_v1_only_host_has_no_cgroup_pressure(fake_host):
    reader, _ = _v1_reader(fake_host, mode="v1")
    assert reader.pressure("batch/job", "cpu") is None
    assert reader.read("batch/job").memory_usage == 78995456


def test_missing_cgroup_reads_as_missing_data(fake_host):
    reader, _ = _v2_reader(fake_host)
    r = reader.read("batch/gone")
    assert r.empty and r.working_set is None and r.throttled_ns is None
    assert reader.procs("batch/gone") == ()


@pytest.mark.parametrize(
    ("filename", "garbage"),
    [
        ("memory.current", "lots\n"),
        ("memory.stat", "anon\n"),
        ("cpu.stat", "usage_usec x\n"),
        ("io.stat", "8:0 rbytes=z\n"),
    ],
    ids=["memory.current", "memory.stat", "cpu.stat", "io.stat"],
)
def test_malformed_files_read_as_missing(fake_host, filename, garbage):
    reader, tree = _v2_reader(fake_host)
    (tree.dir(tree.layout.v2, "prod/db") / filename).write_text(garbage)
    r = reader.read("prod/db")
    field = {
        "memory.current": "memory_usage",
        "memory.stat": "working_set",
        "cpu.stat": "cpu_usage_ns",
        "io.stat": "io",
    }
    assert getattr(r, field[filename]) is None
    assert r.memory_limit == 8 * 2**30  # the other files still read


def test_system_pressure_from_a_folder(fake_host):
    reader, _ = _v2_reader(fake_host)
    assert reader.system_pressure("node_exporter_io").some.avg10 == 0.18
    assert reader.system_pressure("nope") is None


def test_memory_limit_unlimited_v1(fake_host, tmp_path):
    reader, tree = _v1_reader(fake_host)
    (tree.dir(tree.layout.home("memory"), "batch/job") / "memory.limit_in_bytes").write_text(
        "9223372036854771712\n"
    )
    assert math.isinf(reader.read("batch/job").memory_limit)


@pytest.mark.parametrize(
    ("text", "key", "value"),
    [
        ((V1 / "memory.stat").read_text(), "total_inactive_file", 8388608),
        ((V1 / "memory.stat").read_text(), "inactive_file", 8388608),  # not total_inactive_file's tail
        ((V2 / "memory.stat").read_text(), "inactive_file", 42106880),
        ("a 1\nb 2", "b", 2),
        ("a 1\n", "c", None),
        ("a x\n", "a", None),
    ],
    ids=["v1-total", "v1-local-not-suffix", "v2", "last-line-no-newline", "absent", "not-a-number"],
)
def test_flat_value(text, key, value):
    assert flat_value(text, key) == value


def test_some_avg10_fast_path_agrees_with_the_parser(fake_host):
    reader, _ = _v2_reader(fake_host)
    assert reader.some_avg10("prod/db", "cpu") == reader.pressure("prod/db", "cpu").some.avg10 == 65.95
    assert reader.some_avg10("prod/gone", "cpu") is None
    assert reader.read("prod/db", with_throttling=False).throttled_ns is None
