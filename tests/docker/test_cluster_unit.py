"""The cluster daemon's tick on reports alone (no engine): placement on the hosts that report,
a malformed report left out (said once), a host that stops reporting has its jobs requeued
(``node-lost``), a cancel of a pending job ends it at once, and the work each host is told."""

from __future__ import annotations

from kalena.core.lifecycle import TaskState
from kalena.docker.cluster import Cluster, report_into
from kalena.store import Store


class Clock:
    def __init__(self) -> None:
        self.t = 1_000_000.0

    def __call__(self) -> float:
        return self.t


def status(ram: float) -> dict:
    return {"capacity": {"cpu": 4.0, "ram": ram}, "production_limits": {"cpu": 1.0, "ram": 1.0},
            "production_reservations": {"cpu": 0.5, "ram": 0.5}, "batch": []}  # fmt: skip


def spec(name: str) -> dict:
    return {"name": name, "image": "app:1", "command": ["run"], "requests": {"cpu": 0.5, "ram": 1.0}}


def test_tick_places_on_good_reports_requeues_a_lost_host_and_ends_a_pending_cancel(tmp_path):
    clock = Clock()
    db = Store(tmp_path / "cluster.db")
    report_into(db, "good", {"status": status(8.0), "images": ["app:1"], "jobs": {}}, clock.t)
    bad = {**status(8.0), "capacity": {"cpu": "lots"}}
    report_into(db, "bad", {"status": bad, "images": [], "jobs": {}}, clock.t)
    db.submit([("a", spec("a")), ("b", spec("b"))], clock.t)
    cluster = Cluster(db, lost_after_s=10.0, clock=clock)
    placed = cluster.tick()
    assert placed == {"good": ["a", "b"]}
    warnings = [e.data["what"] for e in db.events(kinds=["warning"])]
    assert warnings == ["report of bad left out: malformed: could not convert string to float: 'lots'"]
    cluster.tick()
    assert len(db.events(kinds=["warning"])) == 1  # said once
    work = report_into(db, "good", {"status": status(8.0), "images": ["app:1"], "jobs": {}}, clock.t)
    assert sorted((w["job"], w["kind"], w["spec"]["attempt"]) for w in work) == [
        ("a", "submit", 1), ("b", "submit", 1),
    ]  # fmt: skip
    # a report the daemon cannot use keeps the host's jobs there (nothing new is placed on it)
    report_into(
        db, "good", {"status": {**status(8.0), "batch": "nonsense"}, "images": [], "jobs": {}}, clock.t
    )
    db.submit([("c", spec("c"))], clock.t)
    assert cluster.tick() == {}
    assert {cluster.state.jobs[n].host for n in ("a", "b")} == {"good"} and cluster.state.jobs[
        "c"
    ].host is None
    # the host stops reporting: its jobs are requeued, and wait (no host reports)
    clock.t += 11
    cluster.tick()
    for name in ("a", "b"):
        walk = [(t.state.value, t.reason.value) for t in cluster.state.history(name)]
        assert walk[-2:] == [("evicted", "node-lost"), ("pending", "requeued")]
        assert cluster.state.jobs[name].host is None
    assert cluster.state.jobs["a"].why_pending == "no host reports to this daemon"
    db.cancel("a", clock.t)
    db.cancel("c", clock.t)
    cluster.tick()
    assert cluster.state.task("a") is TaskState.CANCELLED
    # it comes back: the requeued job is placed again, as its second attempt
    report_into(db, "good", {"status": status(8.0), "images": ["app:1"], "jobs": {}}, clock.t)
    assert cluster.tick() == {"good": ["b"]}
    assert cluster.state.jobs["b"].run == 2
    # a restarted daemon has it all
    again = Cluster(db, lost_after_s=10.0, clock=clock)
    assert again.state.task("b") is TaskState.PLACED and again.state.jobs["b"].host == "good"
    db.close()
