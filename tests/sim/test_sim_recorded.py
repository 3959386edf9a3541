"""Recorded inputs in place of the synthetic ones: production usage from samples, batch as recorded."""

from __future__ import annotations

import numpy as np

from kalena.core.resources import CPU, GPU, NDIM, RAM
from kalena.sim.batch import recorded
from kalena.sim.recorded import RecordedUsage, Samples


def _requests(*rows: tuple[float, float, float]) -> np.ndarray:
    out = np.zeros((len(rows), NDIM))
    for i, (c, r, g) in enumerate(rows):
        out[i, [CPU, RAM, GPU]] = c, r, g
    return out


def test_the_sample_in_force_holds_until_the_next_and_after_the_last() -> None:
    samples = Samples(
        {
            "a": (np.array([0.0, 300.0, 600.0]), np.array([1.0, 3.0, 2.0]), np.array([2.0, 1.0, 4.0])),
            "c": (np.array([50.0]), np.array([0.25]), np.array([0.5])),
        },
        ratio=(0.5, 0.25),
    )
    u = RecordedUsage(_requests((4, 8, 0), (2, 4, 1), (1, 1, 0)), ["a", "b", "c"], samples)
    first = u.step(-100.0, 10.0)  # before any sample: the first
    assert first[0, CPU] == 1.0 and first[0, RAM] == 2.0
    assert first[2, CPU] == 0.25
    assert first[1, CPU] == 1.0 and first[1, RAM] == 1.0 and first[1, GPU] == 1.0  # ratio x request
    assert u.step(299.0, 10.0)[0, CPU] == 1.0
    at = u.step(300.0, 10.0)
    assert at[0, CPU] == 3.0 and at[0, RAM] == 1.0
    assert not u.burst_started.any()  # memory fell: nothing arrives at once
    jumped = u.step(1_000.0, 10.0)  # crosses 600: memory rises to 4
    assert jumped[0, RAM] == 4.0 and u.burst_started.tolist() == [True, False, False]
    assert u.step(10_000.0, 10.0)[0, CPU] == 2.0  # the last sample holds
    assert not u.burst_started.any()


def test_a_recording_crossing_several_samples_in_one_step_lands_on_the_last() -> None:
    t = np.arange(0.0, 100.0, 1.0)
    u = RecordedUsage(_requests((1, 1, 0)), ["p"], Samples({"p": (t, t, t)}, (1.0, 1.0)))
    assert u.step(55.5, 60.0)[0, CPU] == 55.0
    u.restart(np.array([0]))  # the recording goes on
    assert u.step(70.0, 10.0)[0, CPU] == 70.0


def test_recorded_batch_sorts_by_submission_and_shares_a_class_request() -> None:
    req = np.zeros((3, NDIM))
    req[:, CPU] = [1.0, 1.0, 2.0]
    req[:, RAM] = [2.0, 2.0, 2.0]
    tasks = recorded(
        ("x-1", "x-0", "y-0"),
        job=np.array([5, 5, 6]),
        submit=np.array([30.0, 0.0, 0.0]),
        requests=req,
        priority=np.array([1, 1, 0]),
        nominal=np.array([100.0, 50.0, 10.0]),
        demand=np.array([0.5, 0.5, 2.0]),
        ram_use=np.array([1.0, 1.0, 2.0]),
        warm=np.array([False, True, True]),
        namespace="trace",
    )
    assert [s.id for s in tasks.specs] == ["trace/x-0", "trace/y-0", "trace/x-1"]
    assert tasks.specs[0].requests is tasks.specs[2].requests  # one class: one requests object
    assert tasks.specs[1].requests is not tasks.specs[0].requests
    assert tasks.work.tolist() == [25.0, 20.0, 50.0]
    assert tasks.submit.tolist() == [0.0, 0.0, 30.0] and tasks.warm.tolist() == [True, True, False]
