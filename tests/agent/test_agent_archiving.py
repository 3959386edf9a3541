"""The agent's archive tap with the state file (the Kubernetes DaemonSet's store): estimates become
archive samples at once, evictions and throttles archive events, other records nothing; a
rollup at most every 5 minutes of the clock."""

from __future__ import annotations

from pathlib import Path

from kalena.agent.actionlog import ActionLog
from kalena.agent.archiving import ArchiveTap
from kalena.agent.state import StateStore
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
