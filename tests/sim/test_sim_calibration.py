"""The calibration protocol's arithmetic (``kalena.sim.calibration``) and the shipped defaults.

The shipped decay defaults are the knee of the recorded calibration
(``kalena/sim/params/calibration.json``, written with them by ``kalena calibrate --write-defaults``);
the knee is a pure function of the settings' two axes.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import kalena.sim.params as params
from kalena.core.estimators.decay import DecayParams
from kalena.sim.calibration import (
    DEFAULT_HALF_LIVES_S,
    DEFAULT_HOURS,
    DEFAULT_MARGINS,
    DEFAULT_SEEDS,
    Setting,
    knee,
    pareto_front,
    summarise,
)

RECORD = Path(params.__file__).parent / "calibration.json"

# (id, harm, gain, knee index)
KNEES = [
    ("one-setting", [3.0], [5.0], 0),
    ("two-on-the-front-take-the-safer", [1.0, 2.0], [1.0, 2.0], 0),
    ("dominated-never-chosen", [1.0, 1.0], [1.0, 2.0], 1),
    ("bend-after-the-second", [1.0, 2.0, 3.0, 4.0], [1.0, 3.0, 4.0, 4.2], 1),
    ("bend-late", [1.0, 2.0, 3.0, 4.0], [1.0, 1.2, 1.5, 4.0], 0),
    ("straight-line-the-safest", [1.0, 2.0, 3.0], [1.0, 2.0, 3.0], 0),
]


@pytest.mark.parametrize(("harm", "gain", "want"), [k[1:] for k in KNEES], ids=[k[0] for k in KNEES])
def test_the_knee_is_the_front_point_farthest_above_its_chord(harm, gain, want):
    assert knee(harm, gain) == want


def test_an_empty_or_ragged_curve_is_refused():
    with pytest.raises(ValueError):
        knee([], [])
    with pytest.raises(ValueError):
        knee([1.0], [1.0, 2.0])


points = st.lists(
    st.tuples(st.floats(0, 1e4, allow_nan=False), st.floats(0, 1e4, allow_nan=False)), min_size=1, max_size=12
)


@given(points, st.floats(0.01, 100.0), st.floats(0.01, 100.0))
def test_the_knee_is_on_the_front_and_does_not_depend_on_units(pts, a, b):
    harm, gain = [p[0] for p in pts], [p[1] for p in pts]
    k = knee(harm, gain)
    assert k in pareto_front(harm, gain).tolist()
    # no point beats it on both axes
    assert not any(h <= harm[k] and g >= gain[k] and (h < harm[k] or g > gain[k]) for h, g in pts)
    # per hour or per day, core-hours or cores: the same setting
    scaled = knee([a * h for h in harm], [b * g for g in gain])
    assert (harm[scaled], gain[scaled]) == (harm[k], gain[k])


@given(points, st.floats(0, 1e4), st.floats(0, 1e4))
def test_a_dominated_setting_does_not_move_the_knee(pts, dh, dg):
    harm, gain = [p[0] for p in pts], [p[1] for p in pts]
    k = knee(harm, gain)
    worse = (harm[k] + dh + 1.0, gain[k] - dg - 1.0)  # strictly worse than the knee on both
    k2 = knee([*harm, worse[0]], [*gain, worse[1]])
    assert (([*harm, worse[0]])[k2], ([*gain, worse[1]])[k2]) == (harm[k], gain[k])


def test_summarise_averages_each_setting_over_its_seeds():
    a, b = Setting(1.0, 300.0), Setting(1.3, 900.0)
    run = dict.fromkeys(
        (
            "reclaimed_cpu_core_hours", "batch_cpu_core_hours", "production_unmet_cpu_core_seconds",
            "production_interference_cpu_core_seconds", "production_above_reservation_fraction",
            "production_cpu_core_hours",
        ),
        0.0,
    )  # fmt: skip

    def events(evictions: int, production_oom: int, batch_oom: int) -> dict:
        return {
            "evictions_total": evictions,
            "production_oom_kills": production_oom,
            "batch_oom_kills": batch_oom,
        }

    runs = [
        (a, 0, {**run, "reclaimed_cpu_core_hours": 10.0, **events(4, 0, 2)}),
        (b, 0, {**run, "reclaimed_cpu_core_hours": 5.0, **events(0, 0, 0)}),
        (a, 1, {**run, "reclaimed_cpu_core_hours": 20.0, **events(8, 1, 1)}),
    ]
    rows = summarise(runs, hours=2.0)
    assert [(r["margin"], r["seeds"]) for r in rows] == [(1.0, 2), (1.3, 1)]
    assert rows[0]["reclaimed_cpu_core_hours"] == 15.0
    assert rows[0]["disruptions_per_hour"] == pytest.approx(((4 + 2) / 2 + (8 + 2) / 2) / 2)


def test_the_shipped_defaults_are_the_knee_of_the_recorded_calibration():
    record = json.loads(RECORD.read_text())
    # recorded with the command's own default grid, over full days, by the command itself
    assert record["command"] == "kalena calibrate --write-defaults"
    assert record["hours"] == DEFAULT_HOURS == 24.0
    assert record["seeds"] == DEFAULT_SEEDS >= 2
    assert record["margins"] == list(DEFAULT_MARGINS)
    assert record["half_lives_s"] == list(DEFAULT_HALF_LIVES_S)
    assert len(record["runs"]) == len(DEFAULT_MARGINS) * len(DEFAULT_HALF_LIVES_S) * DEFAULT_SEEDS
    assert all(r["restoration_violations"] == 0 for r in record["runs"])
    rows = record["settings"]
    k = knee([r["disruptions_per_hour"] for r in rows], [r["reclaimed_cpu_core_hours"] for r in rows])
    want = (rows[k]["margin"], rows[k]["half_life_s"])
    assert want == (record["knee"]["margin"], record["knee"]["half_life_s"])
    shipped = DecayParams()
    assert (shipped.margin, shipped.half_life_s) == want
    # and the summary is the runs' own means
    again = summarise(
        [(Setting(r["margin"], r["half_life_s"]), r["seed"], r) for r in record["runs"]], record["hours"]
    )
    for mine, theirs in zip(again, rows, strict=True):
        assert mine["reclaimed_cpu_core_hours"] == pytest.approx(theirs["reclaimed_cpu_core_hours"])
        assert mine["disruptions_per_hour"] == pytest.approx(theirs["disruptions_per_hour"])
    assert np.isfinite(record["wall_seconds"])
