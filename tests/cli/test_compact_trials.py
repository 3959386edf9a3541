"""The compaction trials' runner: restarted arms, guided trials and its limit, in real worker processes."""

from __future__ import annotations

import pickle
import time
from pathlib import Path

import numpy as np
import pytest

from kalena.cli.compact_trials import TrialRunner, one
from kalena.cli.fanout import submitter, worker_cluster
from kalena.core.compaction import BatchLoad, Guide, TrialStopped, trial
from kalena.testing.builders import workload

V1I = "apiVersion: kuberina.io/v1\nkind: Infrastructure\n"
V1W = "apiVersion: kuberina.io/v1\nkind: Workloads\n"


def source(tmp_path: Path) -> tuple[str, ...]:
    infra, wl = tmp_path / "infra.yaml", tmp_path / "wl.yaml"
    infra.write_text(
        V1I
        + "nodes:\n"
        + "".join(f"  - {{name: n{i}, allocatable: {{cpu: 10, ram: 10}}}}\n" for i in range(12))
    )
    wl.write_text(V1W + "namespaces:\n  a:\n    - {name: web, replicas: 20, requests: {cpu: 3, ram: 1}}\n")
    return (str(infra), str(wl))


def load_of(pods: int, cpu: float) -> BatchLoad:
    batch = tuple(workload(f"b/t-{i}", cpu=cpu, ram=0.5, tier="batch") for i in range(pods))
    res = np.array([w.requests.array() * 0.5 for w in batch])
    return BatchLoad(batch, res, np.tile(np.array([2.0, 1.0, 0, 0, 0, 0, 0, 0]), (20, 1)))


def test_a_restarted_arm_ends_as_its_last_load_says_and_the_limit_holds(tmp_path: Path):
    src = source(tmp_path)
    first, last = load_of(10, 1.0), load_of(30, 4.0)  # 7 nodes, then more
    out: list[object] = []
    most = 0
    with submitter(2, None) as submit:

        def counted(*job):  # how many trials are out whenever one more is sent
            nonlocal most
            out[:] = [f for f in out if not f.done()]
            f = submit(*job)
            out.append(f)
            most = max(most, len(out))
            return f

        runner = TrialRunner(counted, src, 4, 0.002, limit=1)
        runner.start("production", None, True)
        runner.start("reclaim_on", pickle.dumps(first), True)
        runner.pump()
        runner.start("reclaim_on", pickle.dumps(last), True)  # a worse checkpoint came: follow it
        seen: list[int] = []
        results = runner.finish(2, lambda k, total: seen.append(k))
    assert seen[-1] == 8 and seen == sorted(seen)
    assert most <= 2  # one while "the run" went on (plus a dropped one at most), then two
    cluster = worker_cluster(*src)
    for name, load in (("production", None), ("reclaim_on", last)):
        plain = trial(cluster, np.random.default_rng(0), load=load)
        expect = [plain] + [
            trial(cluster, np.random.default_rng(s), load=load, guide=Guide.of(plain)) for s in (1, 2, 3)
        ]
        assert list(results[name].trials) == expect


def test_a_trial_told_to_stop_stops_before_its_next_pack_and_one_not_told_runs_as_before(tmp_path: Path):
    src = source(tmp_path)
    load = pickle.dumps(load_of(30, 4.0))
    stop = tmp_path / "stop"
    # not told: the same trial as the pure function's
    assert one(src, 1, 0.002, load, True, None, str(stop)) == trial(
        worker_cluster(*src), np.random.default_rng(1), 0.002, load_of(30, 4.0), True
    )
    asked: list[int] = []

    def proceed() -> bool:  # no after the second pack
        asked.append(1)
        return len(asked) <= 2

    with pytest.raises(TrialStopped):
        trial(worker_cluster(*src), np.random.default_rng(1), load=load_of(30, 4.0), proceed=proceed)
    assert len(asked) == 3
    stop.touch()
    with pytest.raises(TrialStopped):
        one(src, 1, 0.002, load, True, None, str(stop))


def test_a_restarted_arm_tells_its_running_trial_to_stop(tmp_path: Path):
    src = source(tmp_path)
    stops = tmp_path / "stops"
    stops.mkdir()
    with submitter(1, None) as submit:
        sent: list[object] = []

        def kept(*job):
            sent.append(f := submit(*job))
            return f

        runner = TrialRunner(kept, src, 2, 0.002, limit=1, stop_dir=str(stops))
        runner.start("reclaim_on", pickle.dumps(load_of(400, 0.2)), True)  # many packs of many pods
        first = sent[0]
        while not first.running() and not first.done():
            time.sleep(0.005)
        runner.start("reclaim_on", pickle.dumps(load_of(10, 1.0)), True)
        assert [p.name for p in stops.iterdir()] == ["reclaim_on-1"]  # the first start's stop file
        with pytest.raises(TrialStopped):
            first.result(timeout=120)
        results = runner.finish(1)
    cluster = worker_cluster(*src)
    plain = trial(cluster, np.random.default_rng(0), load=load_of(10, 1.0))
    guided = trial(cluster, np.random.default_rng(1), load=load_of(10, 1.0), guide=Guide.of(plain))
    assert list(results["reclaim_on"].trials) == [plain, guided]
