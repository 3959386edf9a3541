"""The simulator's CPU contention model against contention measured on real cgroups (issue 13, item 3).

The measurements (``src/kalena/sim/params/contention/``, made by ``scripts/measure_contention.py``
on this project's machine; what each file is: the folder's README) ran CPU burners in production
cgroups (``cpu.weight`` from their request, as the kubelet sets it) and batch cgroups (weight 1) at
total demands from 50 % to 120 % of a node. On a node that is CPUs (its processes pinned to one or
two of them), replayed through :func:`kalena.sim.cpu.contend`, each cgroup got the weighted max-min
share the model gives: within 8 % of the node's capacity at worst and 1.5 % on average. A node that
is a CPU quota over more CPUs than it allows behaves otherwise, and a test says how.

The pressure half of the model is not fitted yet, and a test says where it stands: measured
``some`` PSI is positive well below saturation (queueing), where the model gives 0.
"""

from __future__ import annotations

import json
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


def test_pressure_below_saturation_is_measured_where_the_model_says_none():
    # Not a fit: what the next step must fix. On one core, half loaded, a tenth to a fifth of the
    # time something waits for the CPU; the model's psi = max(0, 1 - C / sum w) is 0 there.
    (one_core,) = [p for p in FILES if p.stem == "cpu-pinned-1"]
    for t in trials(one_core):
        _, _, modelled = replay(t)
        if t["load"] <= 0.9:
            assert modelled == 0.0
            assert t["node_some"] > 0.1
