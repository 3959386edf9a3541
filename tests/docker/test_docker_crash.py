"""SIGKILL of the Docker agent at random points, then a restart: no job, no lifecycle step and no
event is lost, and no task attempt ever has two containers.

The agent runs as its own process (``python -m kalena.cli.agent run --runtime docker``) on the
real engine, with its store in its state folder; the test queues jobs into that store (as
``kalena submit`` does), kills the agent with SIGKILL after a delay drawn from a seeded generator
(``KALENA_CRASH_SEED``), and starts it again, ``KALENA_CRASH_TRIALS`` times (20 unless set).
Jobs exit 0 or 1 after a short sleep, or sleep long until cancelled. A watcher lists Kalena's
containers all along. At the end the agent runs until every job has ended, and the store is
checked against what was acknowledged.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import random
import subprocess
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path

import pytest

from kalena.core.lifecycle import EDGE_REASONS, TaskState, TransitionReason
from kalena.docker.engine import Engine
from kalena.docker.labels import JOB, MANAGED_BY, MANAGER, RUN
from kalena.store import ENDED, Store, StoreConflict

pytestmark = [pytest.mark.docker, pytest.mark.slow]
TRIALS = int(os.environ.get("KALENA_CRASH_TRIALS", "20"))
SEED = int(os.environ.get("KALENA_CRASH_SEED", "11"))


class Watcher(threading.Thread):
    """Lists Kalena's containers of this test every 0.1 s: the runs seen per job, and any moment
    two containers of one job were running at once."""

    def __init__(self, engine: Engine, tag: str) -> None:
        super().__init__(daemon=True)
        self.engine, self.tag = engine, tag
        self.runs: dict[str, set[str]] = defaultdict(set)
        self.overlaps: list[tuple[str, list[str]]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            with contextlib.suppress(Exception):  # an engine call racing a removal
                listed = self.engine.api.containers(all=True, filters={"label": f"{MANAGED_BY}={MANAGER}"})
                running: dict[str, list[str]] = defaultdict(list)
                for c in listed:
                    job = c["Labels"].get(JOB, "")
                    if self.tag not in job:
                        continue
                    self.runs[job].add(c["Labels"].get(RUN, ""))
                    if c["State"] == "running":
                        running[job].append(c["Names"][0])
                self.overlaps += [(j, names) for j, names in running.items() if len(names) > 1]
            time.sleep(0.1)


def _queue(store: Store, name: str, image: str, command: list[str]) -> int:
    spec = {"name": name, "image": image, "command": command, "requests": {"cpu": 0.05, "ram": 0.03}}
    return store.submit([(name, spec)], time.time())[0]


SCRIPTS = {"ok": "sleep 0.5", "fail": "sleep 0.5; exit 1", "long": "sleep 600"}
ENDS = {"ok": "succeeded", "fail": "failed", "long": "cancelled"}


def _trial_jobs(store: Store, rng: random.Random, image: str, prefix: str, most: int,
                acked: dict[int, str], expected: dict[str, str], long: list[str]) -> None:  # fmt: skip
    """One trial's jobs (1 to ``most``): each exits 0, exits 1 or sleeps until cancelled, drawn from
    ``rng``; then, half the time, a cancel of the oldest sleeper, taken by this incarnation or the next."""
    for k in range(rng.randint(1, most)):
        name = f"{prefix}-{k}"
        kind = rng.choice(["ok", "ok", "fail", "long"])
        acked[_queue(store, name, image, ["sh", "-c", SCRIPTS[kind]])] = name
        expected[name] = ENDS[kind]
        if kind == "long":
            long.append(name)
    if long and rng.random() < 0.5:
        with contextlib.suppress(StoreConflict):
            store.cancel(long.pop(0), time.time())


def _legal_walk(steps: list[tuple[int, str, float, str]]) -> None:
    assert [s[0] for s in steps] == list(range(len(steps)))  # no step missing, none twice
    assert (steps[0][1], steps[0][3]) == ("pending", "submitted")
    for (_, a, ta, _), (_, b, tb, why) in itertools.pairwise(steps):
        allowed = EDGE_REASONS.get((TaskState(a), TaskState(b)), frozenset())
        assert TransitionReason(why) in allowed, (a, b, why, steps)
        assert tb >= ta


def _nothing_lost(store: Store, acked: dict[int, str], expected: dict[str, str], story: str):
    """Every acknowledged submission was taken and ended as its command said, and each job's
    history is one legal walk of the core's table (no step lost or written twice). Returns the
    submissions' outcomes and the jobs' rows."""
    outcome = dict(store.db.execute("SELECT seq, outcome FROM submissions"))
    rows = {r.job: r for r in store.jobs()}
    for seq, name in acked.items():
        assert outcome[seq] in ("accepted", "withdrawn"), (name, outcome[seq], story)
        assert rows[name].state == expected[name], (name, rows[name], story)
        _legal_walk([(t.seq, t.state, t.at, t.reason) for t in store.transitions(name, seq)])
    return outcome, rows


def test_sigkill_at_random_points_loses_nothing_and_runs_no_attempt_twice(
    engine, image, tag, containers, cgroup_root, tmp_path
):
    rng = random.Random(SEED)
    state = tmp_path / "state"
    store = Store(state / "kalena.db")  # the agent's store, made first: the test queues into it
    cmd = [
        sys.executable, "-m", "kalena.cli.agent", "run", "--runtime", "docker",
        "--state-dir", str(state), "--cgroup-root", cgroup_root,
        "--sample-interval", "0.2", "--estimate-interval", "1", "--min-run-time", "0", "--grace-period", "1",
        # a loaded machine's CPU pressure must not drain the node here (what this test is not about)
        "--escalation-rounds", "1000000", "--escalation-persist", "1000000",
    ]  # fmt: skip
    log = open(tmp_path / "agent.log", "ab")  # noqa: SIM115 - the agents' stderr, for a failure's story
    expected: dict[str, str] = {}  # job -> the state it must end in
    acked: dict[int, str] = {}
    long: list[str] = []
    watcher = Watcher(engine, tag)
    watcher.start()
    agent: subprocess.Popen[bytes] | None = None
    try:
        for trial in range(TRIALS):
            _trial_jobs(store, rng, image, f"{tag}-{trial}", 3, acked, expected, long)
            agent = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log)
            time.sleep(rng.uniform(0.3, 4.0))  # the point of the kill: drawn from the seed
            agent.kill()
            agent.wait()
            agent = None
        for name in long:
            with contextlib.suppress(StoreConflict):
                store.cancel(name, time.time())
        agent = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log)
        end = time.monotonic() + 240  # a bound on a hung test, not a speed assertion
        while time.monotonic() < end:
            rows = {r.job: r for r in store.jobs()}
            if all(n in rows and rows[n].state in ENDED for n in expected):
                break
            time.sleep(0.5)
        agent.terminate()
        agent.wait(60)
        agent = None
    finally:
        if agent is not None:
            agent.kill()
            agent.wait()
        watcher.stop.set()
        watcher.join(5)
        log.close()
    story = (tmp_path / "agent.log").read_text(errors="replace")[-3000:]

    outcome, rows = _nothing_lost(store, acked, expected, story)
    # no task attempt twice: one run per job (nothing was evicted), never two containers at once
    assert watcher.overlaps == [], watcher.overlaps
    for name, row in rows.items():
        if name in expected and outcome.get(row.submission) != "withdrawn":
            assert row.run <= 1, (name, row)
            assert watcher.runs.get(name, set()) <= {"1"}, (name, watcher.runs[name])
    # no event lost: each run's admission, each end, each cancel is in the events
    for name, want in expected.items():
        kinds = [e.kind for e in store.events(job=name)] + [
            e.kind for e in store.events(workloads=[f"batch/{name}.1"])
        ]
        assert "submit" in kinds or outcome.get(rows[name].submission) == "withdrawn", (name, kinds)
        if rows[name].run == 1:
            assert "admit" in kinds, (name, kinds)
        if want in ("succeeded", "failed"):
            assert "finish" in kinds, (name, kinds)
        if want == "cancelled" and rows[name].run == 1:
            assert "cancel" in kinds, (name, kinds)
    # nothing of the test's is left on the engine
    left = [c for c in engine.containers(all=True, label=f"{MANAGED_BY}={MANAGER}") if tag in c.name]
    assert left == [], [c.name for c in left]
    store.close()
    with contextlib.suppress(OSError):
        Path(log.name).unlink()


def test_sigkill_of_the_daemon_and_the_agent_loses_nothing_and_runs_no_attempt_twice(
    engine, image, tag, containers, cgroup_root, tmp_path
):
    """The same, with a cluster daemon: jobs are queued in the daemon's store and placed on the one
    host whose agent joined it; at each trial the daemon, the agent or both are SIGKILLed at a point
    drawn from the seed. The daemon's store must end with every job as its command said, each
    history a legal walk (its own steps and its host's, mirrored), and each job placed once."""
    import socket

    rng = random.Random(SEED + 1)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    store = Store(tmp_path / "cluster.db")
    daemon_cmd = [sys.executable, "-m", "kalena.cli.main", "docker", "daemon", "--store", str(store.path),
                  "--listen", f"127.0.0.1:{port}", "--lost-after", "1000000"]  # fmt: skip
    agent_cmd = [
        sys.executable, "-m", "kalena.cli.agent", "run", "--runtime", "docker",
        "--state-dir", str(tmp_path / "host"), "--cgroup-root", cgroup_root, "--join", f"http://127.0.0.1:{port}",
        "--sample-interval", "0.2", "--estimate-interval", "1", "--min-run-time", "0", "--grace-period", "1",
        "--escalation-rounds", "1000000", "--escalation-persist", "1000000",
    ]  # fmt: skip
    log = open(tmp_path / "procs.log", "ab")  # noqa: SIM115
    procs: dict[str, subprocess.Popen[bytes] | None] = {"daemon": None, "agent": None}
    cmds = {"daemon": daemon_cmd, "agent": agent_cmd}
    expected: dict[str, str] = {}
    acked: dict[int, str] = {}
    long: list[str] = []
    watcher = Watcher(engine, tag)
    watcher.start()

    def ensure(*which: str) -> None:
        for w in which:
            if procs[w] is None:
                procs[w] = subprocess.Popen(cmds[w], stdout=subprocess.DEVNULL, stderr=log)

    def kill(w: str) -> None:
        p = procs[w]
        if p is not None:
            p.kill()
            p.wait()
            procs[w] = None

    try:
        for trial in range(TRIALS):
            _trial_jobs(store, rng, image, f"{tag}-c{trial}", 2, acked, expected, long)
            ensure("daemon", "agent")
            time.sleep(rng.uniform(0.5, 4.0))
            for w in {"daemon": ("daemon",), "agent": ("agent",), "both": ("daemon", "agent")}[
                rng.choice(["daemon", "agent", "both"])
            ]:
                kill(w)
        for name in long:
            with contextlib.suppress(StoreConflict):
                store.cancel(name, time.time())
        ensure("daemon", "agent")
        end = time.monotonic() + 240
        while time.monotonic() < end:
            rows = {r.job: r for r in store.jobs()}
            if all(n in rows and rows[n].state in ENDED for n in expected):
                break
            time.sleep(0.5)
    finally:
        for w in ("agent", "daemon"):
            p = procs[w]
            if p is not None:
                p.terminate()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    p.wait(60)
                if p.poll() is None:
                    p.kill()
        watcher.stop.set()
        watcher.join(5)
        log.close()
    story = (tmp_path / "procs.log").read_text(errors="replace")[-3000:]
    _nothing_lost(store, acked, expected, story)
    for seq, name in acked.items():
        steps = [(t.state, t.reason) for t in store.transitions(name, seq)]
        assert steps.count(("placed", "admitted")) <= 1 or ("pending", "requeued") in steps, (name, steps)
    assert watcher.overlaps == [], watcher.overlaps
    for name in expected:
        assert watcher.runs.get(name, set()) <= {"1"}, (name, watcher.runs[name])  # one attempt per job
    left = [c for c in engine.containers(all=True, label=f"{MANAGED_BY}={MANAGER}") if tag in c.name]
    assert left == [], [c.name for c in left]
    store.close()
