"""The simulator's CPU contention model against contention measured on real cgroups (issue 13, item 3).

The measurements (``src/kalena/sim/params/contention/``, made by ``scripts/measure_contention.py``
on this project's machine; what each file is: the folder's README) ran CPU burners in production
cgroups (``cpu.weight`` from their request, as the kubelet sets it) and batch cgroups (weight 1) at
total demands from 50 % to 120 % of a node. On a node that is CPUs (its processes pinned to one or
two of them), replayed through :func:`kalena.sim.cpu.contend`, each cgroup got the weighted max-min
share the model gives: within 8 % of the node's capacity at worst and 1.5 % on average. A node that
is a CPU quota over more CPUs than it allows behaves otherwise, and a test says how.

The pressure half (:func:`kalena.sim.cpu.pressure_some`, a finite-source queue per CPU) replays the
measured ``some`` PSI of the pinned nodes within a stated tolerance, and its one free parameter is
the least-squares fit ``scripts/fit_pressure.py`` finds.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from kalena.sim import cpu

DATA = Path(__file__).resolve().parents[2] / "src" / "kalena" / "sim" / "params" / "contention"
FILES = sorted(DATA.glob("cpu-*.json"))
PINNED = [p for p in FILES if p.stem.startswith("cpu-pinned-")]
WORST, MEAN = 0.08, 0.015  # |model - measured| per cgroup, as a fraction of the node's capacity


def trials(path: Path) -> list[dict]:
    data = json.loads(path.read_text())
    assert data["kernel"] and data["cgroups"] and data["command"].startswith("python scripts/")
    return data["trials"]


def replay(trial: dict) -> tuple[np.ndarray, np.ndarray, float]:
    rows = trial["cgroups"]
    n = len(rows)
    want = np.array([r["want_cores"] for r in rows])
    weight = np.array([r["weight"] for r in rows])
    got = np.array([r["got_cores"] for r in rows])
    model, psi = cpu.contend(
        np.arange(n), np.zeros(n, dtype=np.int64), want, weight, np.array([trial["capacity_cores"]])
    )
    return model, got, float(psi[0])


def test_the_measurements_are_there_and_span_the_loads():
    assert FILES, f"no measurements in {DATA}"
    for path in FILES:
        loads = {t["load"] for t in trials(path)}
        assert min(loads) <= 0.5 and max(loads) >= 1.2


@pytest.mark.parametrize("path", PINNED, ids=lambda p: p.stem)
def test_each_cgroup_gets_the_weighted_max_min_share_the_model_gives(path):
    errors = []
    for t in trials(path):
        model, got, _ = replay(t)
        err = np.abs(model - got) / t["capacity_cores"]
        assert err.max() <= WORST, (t["mix"], t["load"], model.round(3), got.round(3))
        errors.extend(err)
        if t["load"] >= 1.1:  # saturated: batch (weight 1) gets less than it wants, production not
            batch = np.array([r["kind"] == "batch" for r in t["cgroups"]])
            want = np.array([r["want_cores"] for r in t["cgroups"]])
            assert (got[batch] < want[batch]).all()
    assert np.mean(errors) <= MEAN


def test_a_node_quota_over_more_cpus_than_it_allows_does_not_protect_production_by_weight():
    # One core of quota over the machine's two CPUs: the weights share a CPU's run queue, but the
    # tasks run on two, and the quota throttles them all alike; so at 120 % production gets less
    # than its weight would give it and batch more. Kalena never puts such a quota on a node (only
    # on batch), and the simulator's node is CPUs; this is why the pinned measurements are the ones
    # the model is held to.
    (quota,) = [p for p in FILES if p.stem == "cpu-quota-1"]
    (t,) = [t for t in trials(quota) if t["mix"] == "production-and-batch" and t["load"] == 1.2]
    model, got, _ = replay(t)
    kinds = [r["kind"] for r in t["cgroups"]]
    production = np.array([k == "production" for k in kinds])
    assert got[production].sum() < model[production].sum() - 0.05
    assert got[~production].sum() > model[~production].sum() + 0.05


def fit_script():
    path = Path(__file__).resolve().parents[2] / "scripts" / "fit_pressure.py"
    spec = importlib.util.spec_from_file_location("fit_pressure", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


# |model - measured| of the node's ``some``, a share of wall time: every point, and the mean per
# node size below and above 90 % load. The misses: one disturbed 2-CPU trial (batch-heavy at 0.7,
# its ``full`` ten times the others') and 2 CPUs past saturation, where two burners wanting more
# than a CPU each leave the other idle part of the time and the model, which counts a CPU's tasks
# as one queue, overstates pressure (the safe side: the simulated node throttles batch sooner).
POINT_TOL, MEAN_TOL_BELOW, MEAN_TOL_ABOVE = 0.17, 0.05, 0.07


@pytest.mark.parametrize("path", PINNED, ids=lambda p: p.stem)
def test_the_pressure_model_replays_the_measured_points(path):
    fp = fit_script()
    pts = fp.points([path])
    model = fp.modelled(pts)
    measured = np.array([p["some"] for p in pts])
    loads = np.array([p["load"] for p in pts])
    err = np.abs(model - measured)
    worst = int(np.argmax(err))
    assert err[worst] <= POINT_TOL, (pts[worst], model[worst])
    assert err[loads <= 0.9].mean() <= MEAN_TOL_BELOW
    assert err[loads > 0.9].mean() <= MEAN_TOL_ABOVE
    # where the old "share of wanted time that waited" form said 0, the queue says what was measured
    below = loads <= 0.9
    assert (model[below] > 0.04).all() and (measured[below] > 0.04).all()


def test_contend_gives_the_fitted_pressure_of_a_measured_trial():
    # the simulator's entry point (``contend``) computes the same pressure from the rows' wants
    (one_core,) = [p for p in FILES if p.stem == "cpu-pinned-1"]
    (t,) = [t for t in trials(one_core) if t["mix"] == "production-and-batch" and t["load"] == 0.7]
    _, _, psi = replay(t)
    assert psi == pytest.approx(t["node_some"], abs=POINT_TOL)
    assert psi > 0.3


def test_the_shipped_sharpness_is_the_least_squares_fit():
    fp = fit_script()
    assert fp.fit(fp.points(PINNED)) == cpu.SATURATION_SHARPNESS


def test_the_fit_script_refuses_a_file_that_is_not_a_measurement(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text('{"trials": [{"mix": "x"}]}')
    assert fit_script().main([str(bad)]) == 2
    assert "bad.json" in capsys.readouterr().err
    assert fit_script().main([str(tmp_path / "absent.json")]) == 2
