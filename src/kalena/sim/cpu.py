"""CPU on the simulated nodes: contention and pressure, the kernel's part (the quotas are the core round's).

**Contention.** Each row wants ``w`` cores: production its demand (under an anti-starvation cap, if
one applies), batch ``min(demand, quota)``. Where a node's wants exceed its capacity ``C``, the CFS
scheduler shares ``C`` in proportion to cgroup ``cpu.weight`` (production from its request, batch at
the core's minimal ``batch_weight``), nobody above its want: weighted max-min fairness, computed by
the core's :func:`~kalena.core.enforcement.throttle.water_fill_groups` for all over-full nodes at
once. Production demand left unmet is recorded.

**Pressure.** The node's cpu PSI ``some`` (share of wall time some runnable task waited) is a
queueing model, since tasks wait for a CPU well below saturation (measured on real cgroups:
``params/contention/``). The kernel keeps pressure per CPU, so each CPU is a single server shared
by ``m = tasks / C`` tasks (a row wanting ``w`` cores runs ``ceil(w)`` of them), a finite-source
queue (M/M/1//m, the machine-repairman model): ``some`` is the chance that two or more of its tasks
are runnable at once, at the CPU's utilisation ``u``. ``u`` is the offered load ``rho = sum w / C``
bent smoothly under 1, ``u = rho / (1 + rho^k)^(1/k)``, since a real CPU never reaches full
utilisation while tasks come and go; ``k`` (``SATURATION_SHARPNESS``) is fitted to the measured
points (``python scripts/fit_pressure.py``). With ``m <= 1`` nobody waits (a CPU each).

**Interference.** Beside batch, production needs more cpu for the same work (caches, memory
bandwidth: what cgroups do not isolate). Borg measured a mean CPI 3 % worse in shared cells than
in dedicated ones (seed 000 §6, the prior it carries); the simulator spreads that in proportion to
the batch share of the node's capacity, ``extra = demand * k * batch_cpu / C``, with ``k``
(``SimConfig.interference``, default 0.06) scaled so a node whose capacity is half batch, assumed
typical of a shared cell, sees the 3 %. The extra cpu is wanted like any other: unmet when the
node cannot give it, and reported on its own as the SLO proxy's interference.
"""

from __future__ import annotations

import functools

import numpy as np

from kalena.core.enforcement.throttle import water_fill_groups
from kalena.core.tolerance import REL_TOL

# Least-squares fit over the pinned measurements (scripts/measure_contention.py --fit).
SATURATION_SHARPNESS = 9.5
# Past 64 tasks a CPU's queue is the open M/M/1 queue's to within 2 % (some = u^2).
MAX_TASKS_PER_CPU = 64
_U_STEPS = 1000


@functools.cache
def _some_table() -> np.ndarray:
    """``S[m, j]``: P(two or more of m tasks runnable) on one CPU at utilisation ``j / _U_STEPS``.

    Built once from the M/M/1//m stationary law, ``p_k = p_0 m!/(m-k)! r^k`` (``r``: a task's
    service-to-idle ratio), swept over ``r`` in log space and read back on a utilisation grid.
    """
    log_r = np.linspace(np.log(1e-6), np.log(1e6), 3000)
    grid = np.linspace(0.0, 1.0, _U_STEPS + 1)
    table = np.zeros((MAX_TASKS_PER_CPU + 1, _U_STEPS + 1))
    for m in range(2, MAX_TASKS_PER_CPU + 1):  # rows 0 and 1: nobody ever waits
        k = np.arange(m + 1)
        log_falling = np.concatenate(([0.0], np.cumsum(np.log(np.arange(m, 0, -1.0)))))
        log_terms = log_falling[None, :] + k[None, :] * log_r[:, None]
        top = log_terms.max(axis=1)
        total = np.exp(log_terms - top[:, None]).sum(axis=1)
        p0 = np.exp(-top) / total
        p1 = np.exp(log_terms[:, 1] - top) / total
        table[m] = np.interp(grid, 1.0 - p0, 1.0 - p0 - p1)
    return table


def pressure_some(
    capacity: np.ndarray, tasks: np.ndarray, want: np.ndarray, sharpness: float = SATURATION_SHARPNESS
) -> np.ndarray:
    """Cpu PSI ``some`` per node from its capacity (cores), runnable tasks and total wanted cores."""
    cap = np.asarray(capacity, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):  # a node without cpu has no pressure
        rho = np.fmin(want / cap, 1e3)  # fmin: a NaN is read as saturated, never as an index
        m = np.fmin(tasks / cap, MAX_TASKS_PER_CPU)
    rho[~(cap > 0)] = 0.0
    m[~(cap > 0)] = 0.0
    u = rho / (1.0 + rho**sharpness) ** (1.0 / sharpness)
    lo = np.minimum(m.astype(np.int64), MAX_TASKS_PER_CPU - 1)  # m >= 0: truncation is floor
    f = m - lo
    j = u * _U_STEPS
    jl = np.minimum(j.astype(np.int64), _U_STEPS - 1)
    g = j - jl
    s = _some_table().ravel()
    at = lo * (_U_STEPS + 1) + jl  # the four corners around (m, u), in the flat table
    below = s[at] * (1.0 - g) + s[at + 1] * g
    above = s[at + _U_STEPS + 1] * (1.0 - g) + s[at + _U_STEPS + 2] * g
    return np.clip(below * (1.0 - f) + above * f, 0.0, 1.0)  # rounding may step past 1


def interference_cores(demand: np.ndarray, batch_share: np.ndarray, k: float) -> np.ndarray:
    """Extra cores each production row needs for its ``demand`` beside batch (module formula)."""
    return demand * (k * batch_share)


def contend(
    live: np.ndarray, node: np.ndarray, want: np.ndarray, weight: np.ndarray, capacity: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(granted cpu per row, psi ``some`` per node): module formulas; rows outside ``live`` untouched."""
    n = len(capacity)
    at, wants = node[live], want[live]
    total = np.bincount(at, weights=wants, minlength=n)
    tasks = np.bincount(at, weights=np.ceil(wants), minlength=n)
    psi = pressure_some(capacity, tasks, total)
    granted = want.copy()
    over = total > capacity * (1.0 + REL_TOL)
    if over.any():
        rows = live[over[at]]
        granted[rows] = water_fill_groups(capacity, node[rows], want[rows], weight[rows])
    return granted, psi
