"""Containers as workloads (pure): labels, the container's own settings, names, caps, cgroup paths."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from kalena.agent.layout import CgroupTree, detect_layout
from kalena.core.model import Tier
from kalena.docker.cgroups import DriverError, batch_parent, cgroup_mounts, check_driver, container_cgroup
from kalena.docker.declarations import uncapped
from kalena.docker.enforcer import update_fields
from kalena.docker.labels import MANAGED_BY, ContainerFacts, is_batch_label, settings_resources, workload_of
from kalena.docker.runtime import container_name

GIB = 2**30
P = "kalena.naughtian.io/"


def facts(**kw) -> ContainerFacts:
    kw.setdefault("id", "c0ffee")
    kw.setdefault("name", "web")
    kw.setdefault("image", "img")
    kw.setdefault("running", True)
    return ContainerFacts(**kw)


def test_from_inspect_reads_what_kalena_needs():
    data = {
        "Id": "abc",
        "Name": "/web",
        "Config": {"Image": "nginx", "Labels": {P + "priority": "5"}, "StopSignal": "SIGQUIT"},
        "State": {
            "Running": True,
            "Pid": 42,
            "StartedAt": "2026-12-01T16:14:05.973443743Z",
            "OOMKilled": False,
        },
        "HostConfig": {"NanoCpus": 500_000_000, "Memory": 64 * 2**20, "CpuShares": 0},
    }
    c = ContainerFacts.from_inspect(data)
    assert (c.name, c.pid, c.image, c.stop_signal, c.exit_code) == ("web", 42, "nginx", "SIGQUIT", None)
    assert c.cpu_limit == 0.5
    assert c.started_at is not None and abs(c.started_at - 1796141645.973443) < 1e-3
    never = ContainerFacts.from_inspect({"State": {"StartedAt": "0001-01-01T00:00:00Z", "ExitCode": 3}})
    assert never.started_at is None and never.exit_code == 3


@pytest.mark.parametrize(
    ("kw", "req", "lim"),
    [
        ({}, {}, {}),  # nothing declared: asks for nothing
        ({"nano_cpus": 1_500_000_000}, {"cpu": 1.5}, {"cpu": 1.5}),  # a limit alone is the request
        ({"cpu_quota": 50_000, "cpu_period": 100_000}, {"cpu": 0.5}, {"cpu": 0.5}),
        ({"cpu_quota": 20_000}, {"cpu": 0.2}, {"cpu": 0.2}),  # Docker's default period
        ({"cpu_shares": 512}, {"cpu": 0.5}, {}),  # shares: a request without a limit
        ({"memory": GIB, "memory_reservation": GIB // 4}, {"ram": 0.25}, {"ram": 1.0}),
        ({"memory": GIB // 2}, {"ram": 0.5}, {"ram": 0.5}),
    ],
)
def test_settings_give_requests_and_limits(kw, req, lim):
    assert settings_resources(facts(**kw)) == (req, lim)


def test_labels_override_settings_and_classify():
    c = facts(
        memory=GIB,
        labels={
            P + "request.cpu": "250m",
            P + "request.ram": "128Mi",
            P + "limit.cpu": "2",
            P + "priority": "100",
            P + "reclaim": "disabled",
            P + "startup-grace": "30s",
            "com.docker.compose.project": "shop",
        },
    )
    spec, problems = workload_of(c)
    assert problems == ()
    assert spec.id == "shop/web" and spec.tier is Tier.SERVICE and spec.priority == 100
    assert spec.requests["cpu"] == 0.25 and spec.requests["ram"] == 0.125
    assert spec.limits is not None and spec.limits["cpu"] == 2.0 and spec.limits["ram"] == 1.0
    assert spec.reclaim_disabled and spec.startup_grace_s == 30.0


@pytest.mark.parametrize(
    ("labels", "needle"),
    [
        ({P + "tier": "sometimes"}, "label kalena.naughtian.io/tier: must be 'service' or 'batch'"),
        ({P + "priority": "-3"}, "label kalena.naughtian.io/priority: must be a non-negative integer"),
        ({P + "request.cpus": "1"}, "label kalena.naughtian.io/request.cpus: unknown dimension"),
        ({P + "request.ram": "lots"}, "label kalena.naughtian.io/request.ram:"),
        ({P + "limit.cpu": "1", P + "request.cpu": "3"}, "is above the limit 1; the limit is used"),
    ],
)
def test_bad_labels_are_named_and_never_make_anything_evictable(labels, needle):
    spec, problems = workload_of(facts(labels=labels))
    assert any(needle in p and p.startswith("container web: label ") for p in problems), problems
    assert all("(value: " in p for p in problems)
    assert spec.tier is Tier.SERVICE
    if P + "request.cpu" in labels:
        assert spec.requests["cpu"] == 1.0  # clipped to its limit


def test_batch_labels_and_kalena_own_containers():
    hand = facts(labels={P + "tier": "batch"})
    own = facts(labels={P + "tier": "batch", MANAGED_BY: "kalena"})
    assert is_batch_label(hand) and not is_batch_label(own)
    assert own.managed and not hand.managed


def test_cap_fields_and_exact_restoration_values():
    free = facts()
    cpus = facts(nano_cpus=1_500_000_000)
    quota = facts(cpu_quota=30_000, cpu_period=50_000)
    assert update_fields(free, 0.4) == {"cpu_quota": 40_000}
    assert update_fields(free, math.inf) == {"cpu_quota": -1}  # 0 would mean "unchanged" to Docker
    assert update_fields(cpus, 0.4) == {"nano_cpus": 400_000_000}
    assert update_fields(quota, 0.4) == {"cpu_quota": 20_000}
    with pytest.raises(ValueError, match="--cpus"):
        update_fields(cpus, math.inf)
    # while a cap is in force the ledger keeps the limit the container had before it
    assert uncapped(facts(cpu_quota=40_000), math.inf).cpu_limit is None
    assert uncapped(facts(nano_cpus=400_000_000), 1.5).cpu_limit == 1.5
    assert uncapped(facts(cpu_quota=20_000, cpu_period=50_000), 0.6).cpu_limit == 0.6


def test_names_and_parents():
    assert container_name("batch/job-1.2") == "kalena-job-1.2"
    with pytest.raises(ValueError):
        container_name("docker/web")
    layout = detect_layout("1 0 0:1 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n", "0::/\n")
    assert batch_parent(CgroupTree(layout, "/kalena"), "batch/j.1") == "/kalena/batch/j.1"
    with pytest.raises(DriverError, match="systemd"):
        check_driver("systemd", CgroupTree(layout, "/kalena"))
    with pytest.raises(DriverError, match="absolute"):
        check_driver("cgroupfs", CgroupTree(layout, "kalena"))
    check_driver("cgroupfs", CgroupTree(layout, "/kalena"))


def test_container_cgroup_for_each_layout(tmp_path: Path):
    """From /proc/PID/cgroup: the memory path on v1 and hybrid hosts, the unified one on v2; the
    systemd driver's scope is read the same way."""
    (tmp_path / "7").mkdir()
    (tmp_path / "7" / "cgroup").write_text(
        "4:memory:/system.slice/docker-ab.scope\n1:cpu,cpuacct:/system.slice/docker-ab.scope\n0::/x\n"
    )
    (tmp_path / "8").mkdir()
    (tmp_path / "8" / "cgroup").write_text("0::/system.slice/docker-cd.scope\n")
    v2 = detect_layout("1 0 0:1 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n", "0::/\n")
    v1 = detect_layout("1 0 0:1 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n", "4:memory:/\n")
    assert container_cgroup(7, v1, tmp_path) == "/system.slice/docker-ab.scope"
    assert container_cgroup(8, v2, tmp_path) == "/system.slice/docker-cd.scope"
    assert container_cgroup(9, v2, tmp_path) is None  # gone
    assert container_cgroup(0, v2, tmp_path) is None


def test_cgroup_mounts_include_named_hierarchies():
    text = (
        "30 25 0:26 / /sys/fs/cgroup/systemd rw - cgroup cgroup rw,name=systemd\n"
        "31 25 0:27 / /sys/fs/cgroup/freezer rw - cgroup cgroup rw,freezer\n"
        "32 25 0:28 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n"
        "33 25 0:29 / /proc rw - proc proc rw\n"
    )
    points = [str(p) for p, _ in cgroup_mounts(text)]
    assert points == ["/sys/fs/cgroup/systemd", "/sys/fs/cgroup/freezer", "/sys/fs/cgroup/unified"]
