"""The cluster daemon's tick on reports alone (no engine): placement on the hosts that report,
a malformed report left out (said once), a host that stops reporting has its jobs requeued
(``node-lost``), a cancel of a pending job ends it at once, and the work each host is told."""

from __future__ import annotations

from kalena.core.lifecycle import LostRequeueConfig, TaskState
from kalena.docker.cluster import Cluster, report_into
from kalena.docker.join import DaemonLink
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


def run_steps(t: float, *tail: tuple[str, str]) -> list[list]:
    """An agent's history of one daemon job: its own submitted/admitted, then ``tail``."""
    walk = [("pending", "submitted"), ("placed", "admitted"), ("starting", "start-requested"),
            ("running", "started"), *tail]  # fmt: skip
    return [[s, t + i, r] for i, (s, r) in enumerate(walk)]


def entry(state: str, steps: list[list], attempt: int) -> dict:
    return {"state": state, "run": 1, "exit_code": None, "steps": steps, "placed_by": "cluster",
            "attempt": str(attempt)}  # fmt: skip


def test_a_run_evicted_on_its_host_comes_back_to_the_queue_and_keeps_off_that_host_while_it_cools(tmp_path):
    """Seed 000 §4.3-4.4: an evicted run goes back to the cluster's queue, not to its host's, and the
    cooldown its host's agent set keeps it elsewhere; the old attempt is let go (a cancel naming it)."""
    clock = Clock()
    db = Store(tmp_path / "cluster.db")
    both = {"a": ["app:1"], "b": []}  # image locality: a holds the image
    for h, images in both.items():
        report_into(db, h, {"status": status(8.0), "images": images, "jobs": {}}, clock.t)
    db.submit([("j", spec("j"))], clock.t)
    cluster = Cluster(db, lost_after_s=60.0, clock=clock)
    assert cluster.tick() == {"a": ["j"]}
    t0 = clock.t
    clock.t += 10
    evicted = run_steps(
        t0, ("evicting", "evicted-ledger-breach"), ("evicted", "exited"), ("pending", "requeued")
    )
    a_report = {
        "status": status(8.0), "images": ["app:1"], "jobs": {"j": entry("pending", evicted, 1)},
        "context": {"cooldowns": {"batch/j": clock.t + 300}, "blacklist": [], "ineligible_until": None},
    }  # fmt: skip
    report_into(db, "a", a_report, clock.t)
    report_into(db, "b", {"status": status(8.0), "images": [], "jobs": {}}, clock.t)
    assert cluster.tick() == {"b": ["j"]}  # not back on a, though a holds the image
    walk = [(t.state.value, t.reason.value) for t in cluster.state.history("j")]
    assert walk == [
        ("pending", "submitted"), ("placed", "admitted"), ("starting", "start-requested"),
        ("running", "started"), ("evicting", "evicted-ledger-breach"), ("evicted", "exited"),
        ("pending", "requeued"), ("placed", "admitted"),
    ]  # fmt: skip
    assert cluster.state.jobs["j"].run == 2
    assert [e.data["node"] for e in db.events(kinds=["requeued"])] == ["a"]
    work_a = report_into(db, "a", a_report, clock.t)
    assert [(w["job"], w["kind"], w["spec"]) for w in work_a] == [("j", "cancel", {"attempt": "1"})]
    work_b = report_into(db, "b", {"status": status(8.0), "images": [], "jobs": {}}, clock.t)
    assert [(w["job"], w["kind"], w["spec"]["attempt"]) for w in work_b] == [("j", "submit", 2)]
    # b runs attempt 2; a's stale attempt 1 is not mirrored into it
    clock.t += 5
    running = {"j": entry("running", run_steps(clock.t), 2)}
    report_into(db, "b", {"status": status(8.0), "images": [], "jobs": running}, clock.t)
    cluster.tick()
    assert cluster.state.task("j") is TaskState.RUNNING and cluster.state.jobs["j"].host == "b"
    db.close()


def test_a_host_escalation_made_ineligible_or_a_harmful_pairing_takes_no_new_batch(tmp_path):
    clock = Clock()
    db = Store(tmp_path / "cluster.db")
    ctx_a = {"cooldowns": {}, "blacklist": [], "ineligible_until": clock.t + 60}
    report_into(db, "a", {"status": status(8.0), "images": ["app:1"], "jobs": {}, "context": ctx_a}, clock.t)
    ctx_b = {"cooldowns": {}, "blacklist": ["batch/x"], "ineligible_until": None}
    report_into(db, "b", {"status": status(8.0), "images": [], "jobs": {}, "context": ctx_b}, clock.t)
    db.submit([("x", spec("x")), ("y", spec("y"))], clock.t)
    cluster = Cluster(db, lost_after_s=600.0, clock=clock)
    assert cluster.tick() == {"b": ["y"]}  # a is slack-ineligible; x and b are a harmful pairing
    assert cluster.state.jobs["x"].why_pending_codes == ["node-slack-ineligible", "harmful-pairing"]
    assert (
        cluster.state.jobs["x"].why_pending
        == "0/2 nodes are available: 1 Harmful pairing, 1 Node slack ineligible."
    )
    clock.t += 61  # a's deadline is over
    report_into(db, "a", {"status": status(8.0), "images": ["app:1"], "jobs": {}, "context": ctx_a}, clock.t)
    report_into(db, "b", {"status": status(8.0), "images": [], "jobs": {}, "context": ctx_b}, clock.t)
    assert cluster.tick() == {"a": ["x"]}
    # a malformed context leaves the host's report out of placement, said once
    bad = {"cooldowns": {"batch/z": "soon"}, "blacklist": [], "ineligible_until": None}
    report_into(db, "b", {"status": status(8.0), "images": [], "jobs": {}, "context": bad}, clock.t)
    cluster.tick()
    assert any("report of b left out" in e.data["what"] for e in db.events(kinds=["warning"]))
    db.close()


def test_a_joined_agent_ends_only_the_attempt_a_cancel_names():
    """The agent's side (``DaemonLink``, no HTTP needed for its intake): a cancel of an attempt it
    does not have ends nothing, and a new attempt of a job waits while the one it holds ends."""
    held: dict[str, str] = {}
    link = DaemonLink("http://127.0.0.1:9", "h", None, known=lambda: dict(held))  # type: ignore[arg-type]

    def intake(*work: dict) -> tuple[list[str], list[str]]:
        link.work = list(work)
        got = link.new()
        return [s.name for _t, _w, s in got.submissions], [name for _t, name in got.cancels]

    cancel1 = {"job": "j", "kind": "cancel", "spec": {"attempt": "1"}}
    submit2 = {"job": "j", "kind": "submit", "spec": {**spec("j"), "attempt": 2}}
    held["j"] = "1"
    assert intake(cancel1) == ([], ["j"])
    held["j"] = "2"
    assert intake(cancel1) == ([], [])  # attempt 1 is gone here: the cancel is stale
    held["j"] = "1"
    assert intake(submit2, cancel1) == ([], ["j"])  # the old attempt ends first, the new one waits
    held["j"] = "1"  # (attempt 1 has ended; the daemon's answer is still the one before)
    assert intake(submit2) == (["j"], [])
    link.client.close()


def test_the_runs_of_a_lost_host_come_back_at_a_bounded_rate(tmp_path):
    """A partition looks like a failure (seed 000 §4.4): two at once, then one every two seconds."""
    clock = Clock()
    db = Store(tmp_path / "cluster.db")
    report_into(db, "a", {"status": status(8.0), "images": [], "jobs": {}}, clock.t)
    db.submit([(n, spec(n)) for n in ("p", "q", "r")], clock.t)
    cluster = Cluster(
        db, lost_after_s=10.0, lost_requeue=LostRequeueConfig(rate_per_s=0.5, burst=2), clock=clock
    )
    assert sorted(cluster.tick()["a"]) == ["p", "q", "r"]
    clock.t += 11
    cluster.tick()
    back = {n for n in "pqr" if cluster.state.jobs[n].host is None}
    assert len(back) == 2
    (warning,) = [e.data["what"] for e in db.events(kinds=["warning"])]
    assert warning.startswith("1 runs of lost hosts wait to be requeued (2 at once, then 0.5 a second")
    clock.t += 2
    cluster.tick()
    assert all(cluster.state.jobs[n].host is None for n in "pqr")
    assert len(db.events(kinds=["node-lost"])) == 3 and len(db.events(kinds=["warning"])) == 1
    db.close()


def test_a_host_whose_batch_no_longer_fits_its_ledger_takes_nothing_new(tmp_path):
    """Production grew under the batch a host reports (the core's observed ledger cannot hold both:
    production reserved at 0.5 GiB and the batch's 1.6 on a 2 GiB host):
    the host keeps what runs there, takes nothing new, and that is said once."""
    clock = Clock()
    db = Store(tmp_path / "cluster.db")
    full = {**status(2.0), "batch": [{"job": "old", "workload": "batch/old.1", "priority": 0,
                                      "requests": {"cpu": 0.5, "ram": 1.6}}]}  # fmt: skip
    report_into(db, "full", {"status": full, "images": ["app:1"], "jobs": {}}, clock.t)
    report_into(db, "roomy", {"status": status(8.0), "images": [], "jobs": {}}, clock.t)
    db.submit([("n", spec("n"))], clock.t)
    cluster = Cluster(db, lost_after_s=600.0, clock=clock)
    assert cluster.tick() == {"roomy": ["n"]}  # not full, though it holds the image
    cluster.tick()
    said = [e.data["what"] for e in db.events(kinds=["warning"])]
    assert said == ["report of full left out: its batch full:batch/old.1 does not fit the ledger"]
    db.close()


def test_the_daemon_refuses_a_bad_requeue_rate_before_anything_starts(tmp_path):
    from typer.testing import CliRunner

    from kalena.cli.main import app

    store = tmp_path / "cluster.db"
    for args, what in (
        (["--requeue-rate", "0"], "rate_per_s must be > 0"),
        (["--requeue-burst", "0"], "burst"),
    ):
        r = CliRunner().invoke(app, ["docker", "daemon", "--store", str(store), *args, "--duration", "0.1"])
        assert r.exit_code == 2 and "--requeue-rate, --requeue-burst: lost requeue " in r.stderr, r.output
        assert what in r.stderr
    assert not store.exists()  # nothing was made
