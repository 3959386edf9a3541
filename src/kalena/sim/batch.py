"""The batch population: jobs of identical pods, generated up front so that both arms see the same work.

A *job* is one equivalence class (Alibaba's "task", Google's "job"): ``k`` identical pods sharing a
request, a priority and an image. Jobs arrive as a Poisson process whose rate follows the fitted
hour-of-day profile ``g(h)`` (mean 1), drawn hour by hour (``Poisson(lambda * 3600 * g(h))`` jobs at
uniform times in the hour); the base rate is set by Little's law so that the batch cpu
*requests* offered at any moment are ``rho`` of the cluster's cpu capacity::

    lambda_jobs(t) = rho * C_cpu / (E[k] * E[R_cpu] * E[D]) * g(hour(t))

with ``E[D]`` the mean task duration (lognormal, so ``mu = ln E[D] - sigma^2 / 2``). Per job: ``k`` from
the instances table, ``R_cpu`` from the request model (20 % log-uniform below 0.1 core, else the
table), ``R_ram = R_cpu * i * (C_ram / C_cpu)`` with memory intensity ``i``, a priority, and a job
duration; each pod's duration is the job's times a unit-mean lognormal jitter (sd 0.1, assumed).
A pod needs ``work = R_cpu * d * D`` core-seconds (``d`` the demand ratio) and uses ``min(1, m) * R_ram``
of memory with ``ln m ~ N(ram_usage_log)``.

Warm start: jobs are also generated for ``warmup`` seconds before t = 0; every pod whose nominal end
``arrival + D`` lies after 0 is submitted at t = 0 with the remaining share of its work, so the run
starts in the steady state of a cluster that was never empty (Borg cells never are). Warm pods are
flagged and left out of completion-time inflation.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from kalena.core.model import Selector, Tier, WorkloadSpec
from kalena.core.resources import CPU, NDIM, RAM, Resources
from kalena.sim.params import TABLE_LEVELS, BatchParams

NAMESPACE = "batch"
JITTER_SD = 0.1  # per-pod duration spread around the job's (assumed: instances of a task run alike)
#: Above any jitter a pod can draw, ``exp(-sd^2 / 2 + 40 sd)``: no double-precision normal sampler
#: returns 40 standard deviations (the inverse CDF of the smallest double is 38.5; NumPy's ziggurat
#: gives at most 13.7), so a warm job that ends before 0 even at this jitter has no pod to draw.
JITTER_MAX = math.exp(-(JITTER_SD**2) / 2.0 + 40.0 * JITTER_SD)


def _from_table(table: np.ndarray, u: np.ndarray) -> np.ndarray:
    return np.interp(u, TABLE_LEVELS, table)


def mean_instances(table: np.ndarray) -> float:
    """E[k] for ``k = max(1, round(inverse-CDF(u)))``, on a fine grid of ``u``."""
    grid = np.linspace(0.0, 1.0, 200_001)
    return float(np.maximum(1.0, np.rint(_from_table(table, grid))).mean())


@dataclass(frozen=True, eq=False)
class BatchTasks:
    """One row per pod, sorted by submission time (warm pods first, at 0)."""

    job: np.ndarray  # (T,) int
    submit: np.ndarray  # (T,) seconds
    requests: np.ndarray  # (T, 8)
    priority: np.ndarray  # (T,) int
    nominal: np.ndarray  # (T,) seconds the pod runs at full demand from scratch
    work: np.ndarray  # (T,) core-seconds still to do at its first start
    demand: np.ndarray  # (T,) cores wanted while running
    ram_use: np.ndarray  # (T,) GiB used while running
    warm: np.ndarray  # (T,) bool
    specs: tuple[WorkloadSpec, ...]

    def __len__(self) -> int:
        return len(self.job)


def job_rate(params: BatchParams, cpu_capacity: float, load_factor: float = 1.0) -> float:
    """lambda_0 in jobs per second (module formula)."""
    per_job = mean_instances(params.instances_table) * params.mean_cpu_request() * params.mean_duration_s
    return load_factor * params.offered_fraction * cpu_capacity / per_job


def _block_rng(seed: int, block: int) -> np.random.Generator:
    """The generator of one hour of arrivals: a run's jobs do not depend on its horizon."""
    return np.random.default_rng([seed, 0x6A0B, block + (1 << 20)])


def _jobs(
    params: BatchParams, rate: float, gib_per_core: float, block: int, seed: int
) -> dict[str, np.ndarray]:
    """The jobs arriving in hour ``block`` (Poisson at ``rate * g(hour)``), with their attributes."""
    rng = _block_rng(seed, block)
    hour = block % 24
    j = int(rng.poisson(rate * 3600.0 * params.arrival_hour_profile[hour]))
    small = rng.random(j) < params.small_share
    a, b = params.small_range
    cpu = np.where(
        small,
        np.exp(rng.uniform(math.log(a), math.log(b), j)),
        _from_table(params.cpu_table, rng.random(j)),
    )
    levels = np.array(sorted(params.priority_weights))
    weights = np.array([params.priority_weights[p] for p in levels])
    return {
        "time": block * 3600.0 + np.sort(rng.random(j)) * 3600.0,
        "k": np.maximum(1, np.rint(_from_table(params.instances_table, rng.random(j)))).astype(np.int64),
        "cpu": cpu,
        "ram": cpu * _from_table(params.memory_intensity_table, rng.random(j)) * gib_per_core,
        "priority": rng.choice(levels, size=j, p=weights / weights.sum()).astype(np.int64),
        "duration": np.exp(rng.normal(params.duration_log_mu, params.duration_log_sd, j)),
        "seed": rng.integers(0, 1 << 62, size=j),
    }


def generate(
    params: BatchParams,
    cpu_capacity: float,
    gib_per_core: float,
    horizon: float,
    seed: int,
    *,
    warmup: float = 48 * 3600.0,
    load_factor: float = 1.0,
) -> BatchTasks:
    """Every batch pod submitted in [0, horizon), plus the warm population (module docstring).

    Jobs are drawn hour by hour, each hour from its own generator keyed by ``seed``, so a longer
    run sees the same jobs as a shorter one over their common hours.
    """
    rate = job_rate(params, cpu_capacity, load_factor)
    first, last = -math.ceil(warmup / 3600.0), math.ceil(horizon / 3600.0)
    blocks = [_jobs(params, rate, gib_per_core, b, seed) for b in range(first, last)]
    jobs = {key: np.concatenate([blk[key] for blk in blocks]) for key in blocks[0]}
    keep_job = jobs["time"] < horizon
    jobs = {key: v[keep_job] for key, v in jobs.items()}
    # The jobs that may still run at 0 (JITTER_MAX): over a 48 h warm-up about half of them. The
    # others' pods would all be dropped below, so they are never drawn (each job draws from its own
    # generator: skipping one changes no other) and keep their numbers.
    live = np.flatnonzero(jobs["time"] + np.maximum(jobs["duration"] * JITTER_MAX, 1.0) > 0.0)
    k = jobs["k"][live]
    job = np.repeat(live, k)
    first_pod = np.concatenate(([0], np.cumsum(k)[:-1])).astype(np.int64)
    pod_no = np.arange(len(job)) - np.repeat(first_pod, k)  # pod number within its job
    # per-pod draws from the job's own generator: unit-mean duration jitter and memory use
    jitter = np.empty(len(job))
    ram_ratio = np.empty(len(job))
    m_mu, m_sd = params.ram_usage_log
    for i, s in enumerate(jobs["seed"][live].tolist()):
        rng = np.random.default_rng(s)
        lo, hi = first_pod[i], first_pod[i] + k[i]
        jitter[lo:hi] = np.exp(rng.normal(-(JITTER_SD**2) / 2.0, JITTER_SD, k[i]))
        ram_ratio[lo:hi] = np.minimum(1.0, np.exp(rng.normal(m_mu, m_sd, k[i])))
    nominal = np.maximum(jobs["duration"][job] * jitter, 1.0)
    arrival = jobs["time"][job]
    left = np.clip((arrival + nominal) / nominal, 0.0, 1.0)  # warm pods: share of work still to do
    warm = arrival < 0.0
    submit = np.where(warm, 0.0, arrival)
    order = np.flatnonzero(arrival + nominal > 0.0)
    order = order[np.lexsort((order, submit[order]))]  # by submission, then generation order
    req = np.zeros((len(order), NDIM))
    req[:, CPU] = jobs["cpu"][job[order]]
    req[:, RAM] = jobs["ram"][job[order]]
    demand = req[:, CPU] * params.cpu_demand_ratio
    # a job's pods share one requests object and one set of names: built once, and the
    # scheduler's class test is `is`
    shared: dict[int, _Job] = {}
    specs = []
    for n, i in enumerate(order.tolist()):
        j = int(job[i])
        tmpl = shared.get(j)
        if tmpl is None:
            tmpl = shared[j] = _Job.of(j, Resources.from_array(req[n]), int(jobs["priority"][j]))
        specs.append(tmpl.spec(f"job-{j:06d}-{int(pod_no[i]):05d}"))
    return BatchTasks(
        job=job[order],
        submit=submit[order],
        requests=req,
        priority=jobs["priority"][job[order]],
        nominal=nominal[order],
        work=demand * nominal[order] * np.where(warm[order], left[order], 1.0),
        demand=demand,
        ram_use=req[:, RAM] * ram_ratio[order],
        warm=warm[order],
        specs=tuple(specs),
    )


#: The empty selector every batch pod has (shared: it is immutable, and equal to a new one).
_NO_ONE = Selector()


@dataclass(frozen=True, slots=True)
class _Job:
    """What a job's pods share: their requests, priority and the names derived from the job."""

    requests: Resources
    priority: int
    namespace: str
    owner: str
    image: str

    @classmethod
    def of(cls, job: int, requests: Resources, priority: int, namespace: str = NAMESPACE) -> _Job:
        owner = f"{namespace}/job-{job:06d}"
        return cls(requests, priority, namespace, owner, f"registry.local/{owner}")

    def spec(self, name: str) -> WorkloadSpec:
        """Batch pod ``namespace/name`` of this job (its owner and image are the job's)."""
        return WorkloadSpec(
            id=f"{self.namespace}/{name}",
            requests=self.requests,
            tier=Tier.BATCH,
            priority=self.priority,
            namespace=self.namespace,
            declaration=self.owner,
            affinity=_NO_ONE,
            anti_affinity=_NO_ONE,
            image=self.image,
            owner=self.owner,
            slack_cpu=True,
            slack_memory=False,
        )


def recorded(
    ids: tuple[str, ...],
    job: np.ndarray,
    submit: np.ndarray,
    requests: np.ndarray,
    priority: np.ndarray,
    nominal: np.ndarray,
    demand: np.ndarray,
    ram_use: np.ndarray,
    warm: np.ndarray,
    namespace: str = NAMESPACE,
) -> BatchTasks:
    """A batch population as recorded (a trace replay): one row per pod, any order (sorted here by
    submission, then as given). ``job`` (int) groups pods into classes: a job's pods with the same
    request share one requests object (the scheduler's class). ``nominal``: seconds the pod runs at
    ``demand`` cores (its work is their product); ``warm``: running when the recording started."""
    order = np.lexsort((np.arange(len(submit)), submit))
    req = np.asarray(requests, dtype=np.float64)[order]
    shared: dict[tuple[int, bytes, int], _Job] = {}
    specs = []
    for n, i in enumerate(order.tolist()):
        key = (int(job[i]), req[n].tobytes(), int(priority[i]))
        tmpl = shared.get(key)
        if tmpl is None:
            tmpl = shared[key] = _Job.of(key[0], Resources.from_array(req[n]), key[2], namespace)
        specs.append(tmpl.spec(ids[i]))
    return BatchTasks(
        job=np.asarray(job, dtype=np.int64)[order],
        submit=np.asarray(submit, dtype=np.float64)[order],
        requests=req,
        priority=np.asarray(priority, dtype=np.int64)[order],
        nominal=np.asarray(nominal, dtype=np.float64)[order],
        work=(np.asarray(demand) * np.asarray(nominal))[order],
        demand=np.asarray(demand, dtype=np.float64)[order],
        ram_use=np.asarray(ram_use, dtype=np.float64)[order],
        warm=np.asarray(warm, dtype=bool)[order],
        specs=tuple(specs),
    )
