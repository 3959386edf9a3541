"""Usage from the Engine API's stats where a container's cgroup cannot be read: the real engine's
answer for a busy container, used only for the containers the cgroup files gave nothing for,
said once in the action log, and said again when the files are read again.

The unreadable cgroup is a path that does not exist on this host, standing for one the agent's
mount namespace does not show; the container, its engine and its stats are real."""

from __future__ import annotations

import time

import pytest

from kalena.agent.actionlog import ActionLog
from kalena.agent.build import cgroup_tree
from kalena.agent.cgroupfs import FsCgroupReader
from kalena.agent.layout import detect
from kalena.agent.telemetry import CgroupfsTelemetry
from kalena.docker.cgroups import container_cgroup
from kalena.docker.stats import StatsFallback, counters_from_stats

pytestmark = [pytest.mark.docker]


def test_counters_from_a_v1_and_a_v2_answer():
    io = [{"op": "Read", "value": 7}, {"op": "Write", "value": 9}, {"op": "Read", "value": 1}]
    v1 = {"read": "2026-12-01T20:20:00.123456789Z", "cpu_stats": {"cpu_usage": {"total_usage": 5_000_000}},
          "memory_stats": {"usage": 300, "stats": {"total_inactive_file": 100}},
          "blkio_stats": {"io_service_bytes_recursive": io}}  # fmt: skip
    c = counters_from_stats(v1, now=0.0)
    assert (c.cpu_ns, c.working_set, c.io_read, c.io_write) == (5_000_000, 200, 8, 9)
    assert c.time == pytest.approx(1796156400.123456)
    v2 = {"read": "0001-01-01T00:00:00Z", "cpu_stats": {"cpu_usage": {"total_usage": 1}},
          "memory_stats": {"usage": 50, "stats": {"inactive_file": 80}}, "blkio_stats": {}}  # fmt: skip
    c = counters_from_stats(v2, now=42.0)
    assert (c.time, c.cpu_ns, c.working_set, c.io_read) == (42.0, 1, 0, None)  # no time: the agent's


def test_stats_only_where_the_cgroup_cannot_be_read(engine, image, tag, containers, tmp_path):
    name = f"busy-{tag}"
    containers.append(name)
    hc = engine.api.create_host_config()
    engine.api.create_container(image, ["sh", "-c", "while :; do :; done"], name=name, host_config=hc)
    engine.start(name)
    facts = engine.inspect(name)
    assert facts is not None
    layout = detect()
    real = container_cgroup(facts.pid, layout)
    assert real is not None
    hidden = f"/kalena-test-{tag}-not-here/{facts.id}"
    log = ActionLog(tmp_path / "actions.jsonl")
    known = {hidden: facts}
    source = StatsFallback(
        CgroupfsTelemetry(FsCgroupReader(cgroup_tree("/kalena-unused", layout))), engine, lambda: known, log
    )
    first = source.counters({"web": hidden}, time.time())
    time.sleep(1.0)
    second = source.counters({"web": hidden}, time.time())
    a, b = first["web"], second["web"]
    assert a.cpu_ns is not None and b.cpu_ns is not None and b.cpu_ns > a.cpu_ns  # it is busy
    assert b.working_set is not None and b.working_set > 0 and b.time > a.time
    said = [r["what"] for r in log.memory if r["kind"] == "telemetry"]
    assert said == [
        f"container {name}: its cgroup {hidden} cannot be read here; usage from the engine's stats API"
    ]
    assert "engine's stats" in source.name
    # its real cgroup reads: the files, not the engine, and that is said too
    known = {real: facts}
    got = source.counters({"web": real}, time.time())
    assert got["web"].cpu_ns is not None
    said = [r["what"] for r in log.memory if r["kind"] == "telemetry"]
    assert said[1:] == [f"container {name}: its cgroup {real} is read again"]
    # a container its engine no longer has: no counters, said, never a crash
    engine.remove(facts.id)
    known = {hidden: facts}
    assert source.counters({"web": hidden}, time.time()) == {}
    assert "nor its stats" in [r["what"] for r in log.memory if r["kind"] == "telemetry"][-1]
