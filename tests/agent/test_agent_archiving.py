"""The agent's archive tap with the state file (the Kubernetes DaemonSet's store): estimates become
archive samples at once, evictions and throttles archive events, other records nothing; a
rollup at most every 5 minutes of the clock. On this host's real cgroups, with the tap and with
the store: each sample's throttled seconds are the kernel's since the previous sample."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from kalena.agent.actionlog import ActionLog
from kalena.agent.archiving import ArchiveTap
from kalena.agent.build import build_agent
from kalena.agent.config import AgentConfig
from kalena.agent.declaration import parse_declaration
from kalena.agent.state import StateStore
from kalena.agent.writer import CgroupWriter, Knob, KnobWrite, ManagedScope
from kalena.archive import Archive


def test_the_tap_writes_estimates_and_events_and_rolls_up(tmp_path: Path) -> None:
    archive = Archive(tmp_path / "archive.db")
    tap = ArchiveTap(archive, "node-7")
    store = StateStore(tmp_path / "state.json", tap)
    log = ActionLog(tmp_path / "actions.jsonl", tap)
    for k in range(40):  # 400 s of estimates every 10 s
        now = 1000.0 + 10 * k
        store.record_series(
            now, {"ns/web": {"cpu": 0.5 + 0.01 * k, "ram": 2.0}}, {"ns/web": [1.0, 3.0, 0, 0, 0, 0, 0, 0]}
        )
    log.append("evict", 1100.0, id="e1", workload="ns/batch-1", cause="reservation-ledger-breach")
    log.append("cap", 1110.0, why={"workload": "ns/web", "cap_cores": 0.8})
    log.append("admit", 1120.0, workload="ns/batch-2")
    w = archive.window(["ns/web"], 0.0, 2000.0)
    assert w.usage.count[0, 0] == 40 and w.reservation.knots[0, -1, 1] == 3.0
    assert w.usage.knots[0, -1, 0] == 0.5 + 0.01 * 39
    assert [(e.kind, e.node, e.workload, e.cause) for e in archive.events()] == [
        ("eviction", "node-7", "ns/batch-1", "reservation-ledger-breach"),
        ("cap", "node-7", "ns/web", None),
    ]
    # rollups at 1000 s (nothing closed yet) and 1300 s, none at the estimates in between:
    # [900, 1200) is rolled, [1200, 1500) still open
    assert archive._mark("rolled_300") == 1200.0
    log.close()


# -- on this host's real cgroups (root only): the kernel's throttled time reaches the samples -----------
@pytest.mark.parametrize("kept_in", ["store", "tap"])
def test_a_capped_workloads_samples_carry_the_kernels_throttled_seconds(real_tree, spawn, tmp_path, kept_in):
    """A production cgroup held to 0.1 core with a process spinning in it: from its second
    estimate on, each sample's throttled seconds are what the kernel's cpu.stat counter grew by
    since the previous one (bounded by the counter read just before and after each round), on the
    store (samples in the save) and on the state file's tap alike; its first sample's is NULL."""
    d = parse_declaration(
        {
            "apiVersion": "kalena.naughtian.io/v1alpha1",
            "kind": "NodeDeclaration",
            "node": {"name": "n1", "capacity": {"cpu": 2, "ram": "1Gi"}},
            "workloads": [{"id": "prod/api", "cgroup": "prod/api", "requests": {"cpu": 0.1, "ram": "64Mi"}}],
        },
        "test",
    )
    owner = CgroupWriter(real_tree, ManagedScope())
    owner.create("prod/api", "test")
    owner.apply([KnobWrite("prod/api", Knob.CPU_QUOTA, 0.1, "its own CPU limit")])
    p = spawn("cpu", cgroup_procs=owner.procs_files("prod/api"))
    assert p.stdout.readline().strip() == "ready"
    where = tmp_path / ("kalena.db" if kept_in == "store" else "archive.db")
    agent = build_agent(
        d,
        tmp_path / "state",
        config=AgentConfig(sample_interval_s=1.0, estimate_interval_s=1.0),
        cgroup_root=real_tree.root,
        layout=real_tree.layout,
        **({"store_path": where} if kept_in == "store" else {"archive_path": where}),
    )
    agent.start()
    kernel = []  # the counter (ns) just before and just after each round
    for _ in range(4):
        before = agent.reader.throttled_ns("prod/api")
        assert agent.step().estimated
        kernel.append((before, agent.reader.throttled_ns("prod/api")))
        time.sleep(1.05)  # the next round estimates again
    agent.shutdown()
    with Archive(where) as a:
        rows = a.db.execute(
            "SELECT at, throttled_s FROM archive_samples WHERE workload = 'prod/api' ORDER BY at"
        )
    assert len(rows) == 4 and rows[0][1] is None
    for (_, thr), (b0, a0), (b1, a1) in zip(rows[1:], kernel[:-1], kernel[1:], strict=True):
        assert thr is not None and (b1 - a0) / 1e9 <= thr <= (a1 - b0) / 1e9
        assert thr > 0.5  # held to a tenth of a core, it waits most of each second
