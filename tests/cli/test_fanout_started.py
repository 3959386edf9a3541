"""``fanout.started`` / ``finished``: jobs run in spawned worker processes beside the caller's own
work (``kalena simulate --compare``'s other arms), on real processes. The jobs are standard-library
functions, so a spawned interpreter imports them without this test module."""

from __future__ import annotations

import math
import multiprocessing
import os
import time

import pytest

from kalena.cli.fanout import finished, started


def test_results_come_back_in_job_order_from_other_processes():
    with started(math.sqrt, [(9.0,), (4.0,), (16.0,)], 2) as pending:
        got = finished(pending, "jobs", quiet=True)
    assert got == [3.0, 2.0, 4.0]
    with started(os.getpid, [(), ()], 2) as pending:
        pids = finished(pending, "jobs", quiet=True)
    assert os.getpid() not in pids
    assert multiprocessing.active_children() == []  # the workers ended with the block


def test_a_jobs_error_is_raised_where_its_result_is_asked_for():
    with pytest.raises(ValueError, match="math domain error"), started(math.sqrt, [(1.0,), (-1.0,)], 1) as p:
        finished(p, "jobs", quiet=True)


def test_a_failed_job_is_said_at_once_not_after_the_others():
    """The second job fails while the first still has two minutes to go: the error comes now, and
    leaving the block stops the first."""
    t0 = time.monotonic()
    jobs = [(120.0,), ("not a number",)]
    with pytest.raises(TypeError), started(time.sleep, jobs, 2) as p:
        finished(p, "jobs", quiet=True)
    assert time.monotonic() - t0 < 60.0  # (wide: a loaded machine spawns slowly)
    assert multiprocessing.active_children() == []


def test_leaving_early_stops_the_workers_instead_of_waiting_for_their_jobs():
    """An error in the caller's own work (its run failed, Ctrl-C) ends a two-minute job at once."""
    t0 = time.monotonic()
    with pytest.raises(RuntimeError, match="the first arm failed"), started(time.sleep, [(120.0,)] * 2, 2):
        time.sleep(0.5)  # the jobs have started
        raise RuntimeError("the first arm failed")
    assert time.monotonic() - t0 < 60.0  # (wide: a loaded machine spawns slowly)
    assert multiprocessing.active_children() == []
