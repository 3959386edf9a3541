"""The kernel-file parsers, on real captures (tests/fixtures/agent/PROVENANCE.md) and edge cases."""

from __future__ import annotations

import math

import pytest
from agent_testlib import FIXTURES

from kalena.agent.parsers import (
    IoBytes,
    ParseError,
    parse_cpu_max,
    parse_flat_keyed,
    parse_limit_bytes,
    parse_mountinfo,
    parse_proc_cgroup,
    parse_psi,
    parse_single_int,
    parse_v1_blkio_bytes,
    parse_v2_io_stat,
)


@pytest.mark.parametrize(
    ("fixture", "some_avg10", "some_total", "full_avg10", "full_total"),
    [
        ("psi/node_exporter_cpu", 0.0, 14036781, 0.0, 0),
        ("psi/node_exporter_io", 0.18, 159886802, 0.18, 159229614),
        ("psi/node_exporter_memory", 0.0, 0, 0.0, 0),
        ("psi/node_exporter_irq", None, None, 0.0, 8494),
        ("psi/couchbase_cpu", 78.29, 733785593, 0.0, 0),
        ("cgroup_v2_container/cpu.pressure", 65.95, 576908731, 32.86, 338250181),
        ("cgroup_v2_container/memory.pressure", 1.05, 446327, 0.36, 308567),
        ("cgroup_v1_hybrid_host/unified.cpu.pressure", 8.15, 1317557, 8.15, 1317557),
    ],
    ids=lambda v: str(v).replace("/", ":") if isinstance(v, str) else None,
)
def test_psi_files_parse(fixture, some_avg10, some_total, full_avg10, full_total):
    p = parse_psi((FIXTURES / fixture).read_text())
    if some_avg10 is None:
        assert p.some is None  # irq has only a full line
    else:
        assert (p.some.avg10, p.some.total_us) == (some_avg10, some_total)
    assert (p.full.avg10, p.full.total_us) == (full_avg10, full_total)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "some avg10=1 avg60=2",
        "weird avg10=0 avg60=0 avg300=0 total=0",
        "some avg10=x avg60=0 avg300=0 total=0",
    ],
    ids=["empty", "missing-fields", "unknown-kind", "not-a-number"],
)
def test_psi_malformed_raises(text):
    with pytest.raises(ParseError):
        parse_psi(text)


def test_cpu_stat_v2_fixture():
    stat = parse_flat_keyed((FIXTURES / "cgroup_v2_container/cpu.stat").read_text())
    assert stat["usage_usec"] == 528946079
    assert stat["throttled_usec"] == 2261444
    assert stat["nr_throttled"] == 222


def test_cpu_stat_v1_capture():
    stat = parse_flat_keyed((FIXTURES / "cgroup_v1_hybrid_host/cpu.stat").read_text())
    assert stat["throttled_time"] == 1316967525
    assert stat["nr_throttled"] == 27


@pytest.mark.parametrize(
    ("text", "expected"),
    [("250000 100000\n", (250000.0, 100000)), ("max 100000", (math.inf, 100000))],
    ids=["quota", "max"],
)
def test_cpu_max(text, expected):
    assert parse_cpu_max(text) == expected


@pytest.mark.parametrize("text", ["250000", "a b", "1 2 3"], ids=["one-field", "words", "three-fields"])
def test_cpu_max_malformed(text):
    with pytest.raises(ParseError):
        parse_cpu_max(text)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("max\n", math.inf),
        ("9223372036854771712\n", math.inf),  # v1 "no limit" on 4 KiB pages
        ("-1", math.inf),  # what v1 accepts as input for it
        ((FIXTURES / "cgroup_v2_container/memory.max").read_text(), 8589934592.0),
        ((FIXTURES / "cgroup_v1_hybrid_host/memory.limit_in_bytes").read_text(), 209715200.0),
    ],
    ids=["v2-max", "v1-unlimited", "v1-minus-one", "v2-8GiB", "v1-200MiB"],
)
def test_limit_bytes(text, expected):
    assert parse_limit_bytes(text) == expected


def test_single_int_malformed():
    with pytest.raises(ParseError, match=r"cpuacct\.usage"):
        parse_single_int("12x", "cpuacct.usage")


def test_io_stat_v2_fixture():
    io = parse_v2_io_stat((FIXTURES / "cgroup_v2_container/io.stat").read_text())
    assert io == IoBytes(read=40824832, write=824999936)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            (FIXTURES / "cgroup_v1_hybrid_host/blkio.throttle.io_service_bytes_recursive").read_text(),
            IoBytes(0, 0),
        ),
        (
            "8:0 Read 4096\n8:0 Write 8192\n8:0 Sync 8192\n8:0 Async 4096\n8:0 Total 12288\n"
            "8:16 Read 1\n8:16 Write 2\nTotal 12291\n",
            IoBytes(4097, 8194),
        ),
    ],
    ids=["captured-no-device", "two-devices"],
)
def test_blkio_bytes(text, expected):
    assert parse_v1_blkio_bytes(text) == expected


def test_mountinfo_of_the_hybrid_dev_host():
    mounts = parse_mountinfo((FIXTURES / "cgroup_v1_hybrid_host/mountinfo").read_text())
    v1 = {c: m.mount_point for m in mounts if m.version == 1 for c in m.controllers}
    v2 = [m.mount_point for m in mounts if m.version == 2]
    assert v1["cpu"] == "/sys/fs/cgroup/cpu"
    assert v1["memory"] == "/sys/fs/cgroup/memory"
    assert "name=systemd" not in v1 and "systemd" not in v1  # a named hierarchy has no controller
    assert v2 == ["/sys/fs/cgroup/unified"]


def test_mountinfo_escapes_and_joined_controllers():
    text = (
        "40 31 0:37 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid - cgroup cgroup rw,cpu,cpuacct\n"
        "41 31 0:38 /sub /mnt/my\\040cg rw - cgroup2 cgroup2 rw,nsdelegate\n"
        "42 31 0:39 / /proc rw - proc proc rw\n"
    )
    mounts = parse_mountinfo(text)
    assert mounts[0].controllers == frozenset({"cpu", "cpuacct"})
    assert (mounts[1].mount_point, mounts[1].root, mounts[1].version) == ("/mnt/my cg", "/sub", 2)
    assert len(mounts) == 2


def test_proc_cgroup():
    got = parse_proc_cgroup((FIXTURES / "cgroup_v1_hybrid_host/proc_self_cgroup").read_text())
    assert got["memory"].startswith("/process_api/")
    assert got["cpu"] == "/" and got[""] == "/"
    assert parse_proc_cgroup("2:cpu,cpuacct:/a\n")["cpuacct"] == "/a"
    with pytest.raises(ParseError):
        parse_proc_cgroup("garbage\n")
