"""The batch population: Little's law rate, request shape, warm start, and horizon-independent draws."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from kalena.core.model import Tier, WorkloadSpec
from kalena.core.resources import CPU, Resources
from kalena.sim import batch
from kalena.sim.batch import generate, job_rate, mean_instances
from kalena.sim.params import TABLE_LEVELS, default_batch

CAP = 2000.0  # cores
GIB_PER_CORE = 4.0


def test_job_rate_is_littles_law_hand_computed():
    p = dataclasses.replace(default_batch(), instances_table=np.full(len(TABLE_LEVELS), 3.0))
    expect = p.offered_fraction * CAP / (3.0 * p.mean_cpu_request() * p.mean_duration_s)
    assert mean_instances(p.instances_table) == 3.0
    assert job_rate(p, CAP) == pytest.approx(expect)
    assert job_rate(p, CAP, load_factor=2.0) == pytest.approx(2 * expect)


def test_same_seed_same_population_and_a_longer_run_extends_a_shorter_one():
    p = default_batch()
    short = generate(p, CAP, GIB_PER_CORE, 3 * 3600.0, 7)
    again = generate(p, CAP, GIB_PER_CORE, 3 * 3600.0, 7)
    long = generate(p, CAP, GIB_PER_CORE, 6 * 3600.0, 7)
    assert [s.id for s in short.specs] == [s.id for s in again.specs]
    assert np.array_equal(short.work, again.work)
    n = len(short)
    assert [s.id for s in long.specs[:n]] == [s.id for s in short.specs]
    assert np.array_equal(long.nominal[:n], short.nominal) and np.all(long.submit[n:] >= 3 * 3600.0)


def test_requests_shape_and_batch_specs():
    t = generate(default_batch(), CAP, GIB_PER_CORE, 24 * 3600.0, 1, warmup=0.0)
    cpu = t.requests[:, CPU]
    _, first = np.unique(t.job, return_index=True)
    small = (cpu[first] < 0.1).mean()  # per job (a job's pods share its request)
    assert small == pytest.approx(0.20, abs=0.05)  # Borg: 20 % of non-production tasks below 0.1 core
    assert np.all(t.ram_use <= t.requests[:, 1] + 1e-12)  # memory limit = request (slack memory denied)
    spec = t.specs[0]
    assert spec.tier is Tier.BATCH and spec.namespace == "batch" and not spec.slack_memory
    same_job = [s for s, j in zip(t.specs, t.job, strict=True) if j == t.job[0]]
    assert len({s.equivalence_key for s in same_job}) == 1 and len({s.id for s in t.specs}) == len(t)
    assert np.all(np.diff(t.submit) >= 0)


def test_warm_start_submits_survivors_at_zero_with_their_remaining_work():
    t = generate(default_batch(), CAP, GIB_PER_CORE, 3600.0, 2)
    warm = t.warm
    assert warm.any() and np.all(t.submit[warm] == 0.0)
    full = t.demand * t.nominal
    assert np.all(t.work[warm] <= full[warm] + 1e-9) and np.all(t.work[~warm] == pytest.approx(full[~warm]))
    # steady state by Little's law: warm requests near rho * C (heavy tails: a loose check)
    assert 0.2 * CAP * 0.4 < t.requests[warm, CPU].sum() < 3 * CAP * 0.4


def test_a_jobs_pods_share_its_objects_and_equal_specs_built_field_by_field():
    t = generate(default_batch(), CAP, GIB_PER_CORE, 6 * 3600.0, 3, warmup=0.0)
    jobs, counts = np.unique(t.job, return_counts=True)
    job = int(jobs[np.argmax(counts)])  # a job of several pods
    at = [k for k, j in enumerate(t.job.tolist()) if j == job]
    pods = [t.specs[k] for k in at]
    assert len(pods) > 1
    first = pods[0]
    for s in pods[1:]:  # the scheduler's class test takes `is` before `==`
        assert s.requests is first.requests and s.anti_affinity is first.anti_affinity
        assert s.owner is first.owner and s.image is first.image
    owner = f"batch/job-{job:06d}"
    built = WorkloadSpec(
        id=first.id,
        requests=Resources.from_array(t.requests[at[0]]),
        tier=Tier.BATCH,
        priority=int(t.priority[at[0]]),
        namespace="batch",
        declaration=owner,
        image=f"registry.local/{owner}",
        owner=owner,
        slack_cpu=True,
        slack_memory=False,
    )
    assert first == built
    assert first.id.startswith(f"batch/job-{job:06d}-")


def test_warm_jobs_that_end_before_zero_are_skipped_without_changing_the_population(monkeypatch):
    """The warm-up skips drawing jobs that end before 0 even at the largest jitter: the same
    population as when every job is drawn (JITTER_MAX infinite), and the skipped jobs' pods, drawn
    anyway, all end before 0."""
    p = default_batch()
    bound = batch.JITTER_MAX
    fast = generate(p, CAP, GIB_PER_CORE, 2 * 3600.0, 5)
    monkeypatch.setattr(batch, "JITTER_MAX", math.inf)
    every = generate(p, CAP, GIB_PER_CORE, 2 * 3600.0, 5)
    assert [s.id for s in fast.specs] == [s.id for s in every.specs]
    assert [s.requests for s in fast.specs] == [s.requests for s in every.specs]
    for f in ("job", "submit", "requests", "priority", "nominal", "work", "demand", "ram_use", "warm"):
        assert np.array_equal(getattr(fast, f), getattr(every, f)), f
    # the bound skips most of a 48 h warm-up's jobs, and rightly: drawn anyway, none of their pods runs at 0
    rate = job_rate(p, CAP)
    jobs = [batch._jobs(p, rate, GIB_PER_CORE, b, 5) for b in range(-48, 0)]
    time = np.concatenate([j["time"] for j in jobs])
    duration = np.concatenate([j["duration"] for j in jobs])
    seeds, k = np.concatenate([j["seed"] for j in jobs]), np.concatenate([j["k"] for j in jobs])
    skipped = np.flatnonzero(time + np.maximum(duration * bound, 1.0) <= 0.0)
    assert len(skipped) > len(time) / 4
    for i in skipped[:: max(1, len(skipped) // 200)].tolist():
        rng = np.random.default_rng(int(seeds[i]))
        jitter = np.exp(rng.normal(-(batch.JITTER_SD**2) / 2.0, batch.JITTER_SD, int(k[i])))
        assert np.all(time[i] + np.maximum(duration[i] * jitter, 1.0) <= 0.0)
