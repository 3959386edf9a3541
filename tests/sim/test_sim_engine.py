"""Whole runs on small synthetic clusters: determinism, the invariants, the no-reclaim arm."""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from kalena.core.config import PolicyConfig
from kalena.core.enforcement import EvictionCause, ThrottleConfig
from kalena.core.resources import CPU, RAM
from kalena.sim import SimConfig, Simulation, build_report, simulate
from kalena.sim.params import default_batch
from kalena.sim.report import timeless
from kalena.sim.synthetic import synthetic_cluster

HOURS = 1.5


@pytest.fixture(scope="module")
def cluster():
    return synthetic_cluster(12, 180, seed=3)


def test_a_timeless_report_drops_the_wall_clock_and_the_command_at_any_depth_and_nothing_else():
    r = {"wall_seconds": 1.0, "command": "kalena", "seed": 5, "arm": {"wall_seconds": 2.0, "x": [1]}}
    assert timeless(r) == {"seed": 5, "arm": {"x": [1]}}
    assert r["arm"]["wall_seconds"] == 2.0  # (a copy: the report itself is left as it was)


def test_same_seed_same_report_and_another_seed_differs(cluster):
    a = timeless(simulate(cluster, SimConfig(hours=HOURS, seed=5))[1])
    b = timeless(simulate(cluster, SimConfig(hours=HOURS, seed=5))[1])
    c = timeless(simulate(cluster, SimConfig(hours=HOURS, seed=6))[1])
    assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)
    assert a != c


SCRIPT = """
import json
from kalena.sim import SimConfig, simulate
from kalena.sim.synthetic import synthetic_cluster
r = simulate(synthetic_cluster(8, 120, seed=1), SimConfig(hours=0.5, seed=2))[1]
r.pop("wall_seconds")
print(json.dumps(r, sort_keys=True))
"""


def test_report_does_not_depend_on_python_hash_randomisation():
    out = []
    for hash_seed in ("1", "2"):
        env = dict(os.environ, PYTHONHASHSEED=hash_seed)
        res = subprocess.run(
            [sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, check=True
        )
        out.append(res.stdout)
    assert out[0] == out[1]


def _tight_memory_config(**kw) -> SimConfig:
    """Batch nine times as memory-hungry: it fills the ram slack, so production's ram moves evict it."""
    b = default_batch()
    batch = dataclasses.replace(b, memory_intensity_table=b.memory_intensity_table * 9.0)
    return SimConfig(hours=HOURS, seed=1, batch=batch, **kw)


def test_invariants_hold_and_production_is_evicted_only_through_the_override(cluster):
    sim = Simulation(cluster, _tight_memory_config(production_ram_limit_ratio=1.0))
    sim.run()
    r = build_report(sim)
    assert r["restoration_violations"] == 0
    assert r["evictions"]["reservation-ledger-breach"] > 0  # the scenario does exercise eviction
    assert r["production_evictions_without_override"] == 0
    # every production eviction went through the ledger's override log, and only those
    assert r["production_evictions"] == len(sim.ledger.overrides) <= r["evictions"]["limit-breach"]
    for rec in sim.ledger.overrides:
        assert rec.workload_id in set(sim.ledger.production_ids())
    assert set(r["evictions"]) == {c.value for c in EvictionCause}  # every cause reported, 0 or not


def test_no_reclaim_keeps_batch_inside_unallocated_capacity_at_every_tick(cluster):
    sim = Simulation(cluster, _tight_memory_config(reclaim=False))
    sim.prewarm()
    led = sim.ledger
    free = np.maximum(led.capacity - led.request_sum, 0.0)
    for k in range(1, sim.cfg.ticks + 1):
        sim.step(k)
        rs = led.row_arrays()
        live = rs.live_rows()
        batch = live[rs.is_batch[live]]
        for d in (CPU, RAM):
            per_node = np.bincount(rs.node[batch], weights=rs.reservation[batch, d], minlength=led.n_nodes)
            assert np.all(per_node <= free[:, d] * (1 + 1e-9) + 1e-9), (k, d)
        assert np.array_equal(rs.reservation[live], rs.request[live])  # reservations pinned to requests
    r = build_report(sim)
    assert r["reclaimed_cpu_core_hours"] == 0 and r["reclaimed_ram_gib_hours"] == 0
    assert r["reclaimed_work_fraction"] == 0 and r["batch_cpu_core_hours"] > 0
    assert r["restoration_violations"] == 0


def test_both_arms_see_the_same_production_and_batch_work(cluster):
    on = Simulation(cluster, SimConfig(hours=0.2, seed=4))
    off = Simulation(cluster, SimConfig(hours=0.2, seed=4, reclaim=False))
    assert [s.id for s in on.tasks.specs] == [s.id for s in off.tasks.specs]
    assert np.array_equal(on.tasks.work, off.tasks.work) and np.array_equal(on.tasks.submit, off.tasks.submit)
    for a, b in (
        (on.prod.mu, off.prod.mu),
        (on.prod.pi, off.prod.pi),
        (on.prod.burst_rate, off.prod.burst_rate),
    ):
        assert np.array_equal(a, b)
    on.prewarm()
    off.prewarm()
    assert np.array_equal(on.prod.step(10.0, 10.0), off.prod.step(10.0, 10.0))


def test_reclaiming_runs_more_batch_in_capacity_the_blueprint_allocated(cluster):
    on = simulate(cluster, SimConfig(hours=HOURS, seed=3))[1]
    off = simulate(cluster, SimConfig(hours=HOURS, seed=3, reclaim=False))[1]
    assert on["reclaimed_cpu_core_hours"] > 0 and 0 < on["reclaimed_work_fraction"] < 1
    assert on["batch_cpu_core_hours"] > off["batch_cpu_core_hours"]
    assert on["restoration_violations"] == off["restoration_violations"] == 0


@pytest.mark.parametrize("estimator", ["peak", "histogram"])
def test_every_estimator_runs_through_the_same_loop(cluster, estimator):
    r = simulate(cluster, SimConfig(hours=0.5, seed=1, policy=PolicyConfig(estimator=estimator)))[1]
    assert r["estimator"] == estimator and r["restoration_violations"] == 0
    assert r["reservation_accuracy"]["cpu"]["reservation_over_request"]["n"] > 0


@pytest.mark.parametrize("estimator", ["decay", "peak"])
def test_the_estimator_working_on_the_used_dimensions_only_changes_nothing(cluster, estimator, monkeypatch):
    """The engine estimates cpu and ram here (no pod requests another dimension); estimating all
    8, or one more that nobody uses, gives the same run bit for bit. Memory-hungry batch brings
    evictions and restarts, so rows are started afresh and the estimator's rows grow."""
    from kalena.core.resources import DISK_READ

    cfg = _tight_memory_config(production_ram_limit_ratio=1.0, policy=PolicyConfig(estimator=estimator))
    used = Simulation(cluster, cfg)
    assert used.est_dims == (CPU, RAM) and used.est_state.requests.shape[1] == 2
    used.run()
    others = [d for d in range(8) if d not in (CPU, RAM)]
    assert (np.nan_to_num(used.table.usage[:, others]) == 0).all()  # nobody used the others
    reports = [timeless(build_report(used))]
    for dims in (None, (CPU, RAM, DISK_READ)):
        monkeypatch.setattr(Simulation, "_estimated_dims", lambda self, p, d=dims: d)
        sim = Simulation(cluster, cfg)
        assert sim.est_dims == dims
        sim.run()
        reports.append(timeless(build_report(sim)))
    assert reports[0]["evictions"]["reservation-ledger-breach"] > 0
    assert reports[0] == reports[1] == reports[2]


def test_the_histogram_estimates_every_dimension(cluster):
    sim = Simulation(cluster, SimConfig(hours=0.1, policy=PolicyConfig(estimator="histogram")))
    assert sim.est_dims is None and sim.est_state.requests.shape[1] == 8


BAD_CONFIG = [
    ("hours-zero", {"hours": 0}, "hours"),
    ("dict-for-policy", {"policy": {"estimator": "peak"}}, "SimConfig.policy must be a PolicyConfig"),
    ("bool-flag", {"reclaim": 1}, "SimConfig.reclaim"),
    ("interval-below-tick", {"schedule_interval_s": 5.0}, "schedule_interval_s"),
    ("limit-below-request", {"production_ram_limit_ratio": 0.5}, "production_ram_limit_ratio"),
    ("negative-seed", {"seed": -1}, "seed"),
]


@pytest.mark.parametrize(("kw", "key"), [c[1:] for c in BAD_CONFIG], ids=[c[0] for c in BAD_CONFIG])
def test_bad_configuration_fails_when_built_naming_the_key(kw, key):
    with pytest.raises(ValueError, match=key):
        SimConfig(**kw)


def test_the_simulator_runs_the_one_policy_it_is_given():
    policy = PolicyConfig(estimator="peak", throttle=ThrottleConfig(growth_fraction=0.2))
    cfg = SimConfig(policy=policy)
    assert cfg.estimator == "peak" and cfg.policy is policy
    with pytest.raises(ValueError, match="policy"):
        SimConfig(policy={"estimator": "peak"})  # type: ignore[arg-type]


def test_drawing_production_ahead_changes_nothing_where_services_restart(cluster, monkeypatch):
    """``run`` draws production's next step on a second thread and rewinds it when a service
    restarts; stepping by hand draws each step in its turn. The two runs are the same."""
    from kalena.sim import engine
    from kalena.sim.production import Lookahead

    rewound = []

    class Counting(Lookahead):
        def restart(self, pods):  # type: ignore[no-untyped-def]
            rewound.append(self._pending is not None)
            super().restart(pods)

    monkeypatch.setattr(engine, "LOOKAHEAD_MIN_PODS", 0)  # this small cluster draws ahead too
    monkeypatch.setattr(engine, "Lookahead", Counting)
    cfg = _tight_memory_config(production_ram_limit_ratio=1.0)
    ahead = Simulation(cluster, cfg)
    ahead.run()
    assert ahead._lookahead is None  # closed with the run
    assert any(rewound)  # a step drawn ahead was undone for a restart
    by_hand = Simulation(cluster, cfg)
    by_hand.prewarm()
    for k in range(1, cfg.ticks + 1):
        by_hand.step(k)
    a, b = build_report(ahead), build_report(by_hand)
    assert a["production_evictions"] + a["production_oom_kills"] > 0  # restarts did happen
    assert timeless(a) == timeless(b)
    for name in ("x", "y", "bursting"):  # production ends where a run without the thread leaves it
        assert np.array_equal(getattr(ahead.prod, name), getattr(by_hand.prod, name))
    assert ahead.prod.rng.bit_generator.state == by_hand.prod.rng.bit_generator.state


def test_a_task_is_up_the_tick_its_startup_ends_even_when_evicted_while_starting(cluster):
    # Evictions are frequent here (memory-hungry batch), so some tasks are evicted while starting
    # and started again later: each run waits its own startup, and none stays STARTING past it.
    from kalena.core.lifecycle import TaskState

    cfg = _tight_memory_config(production_ram_limit_ratio=1.0)
    startup = 300.0  # long: evicted while starting and started again before the first run would be up
    cfg = dataclasses.replace(cfg, batch=dataclasses.replace(cfg.batch, startup_s=startup))
    sim = Simulation(cluster, cfg)
    sim.prewarm()
    restarted = early = 0
    for k in range(1, sim.cfg.ticks + 1):
        sim.step(k)
        starting = sim.life.in_state(TaskState.STARTING)
        until = sim.table.startup_until[sim.ts.row[starting]]
        assert np.all(until > sim.now), k  # (the scan over every task the simulator no longer does)
        assert np.all(until <= sim.now + startup), k
    tick = sim.cfg.tick_s
    for h in range(len(sim.tasks)):
        history = sim.life.history(h)
        restarted += [t.state for t in history].count(TaskState.STARTING) > 1
        starts = [t.time for t in history if t.state is TaskState.STARTING]
        early += any(b - a < startup for a, b in itertools.pairwise(starts))
        for before, after in itertools.pairwise(history):  # up neither early nor late, run by run
            if before.state is TaskState.STARTING and after.state is TaskState.RUNNING:
                assert startup <= after.time - before.time < startup + tick, (h, history)
    assert restarted > 0 and early > 0  # some tasks start again before their first run was up
