"""Synthetic usage for production pods: a diurnal profile with noise and bursts, vectorised over pods.

Each pod ``p`` with requests ``R`` draws, once (parameters in :class:`kalena.sim.params.ProductionParams`):

* ``(mu, pi, nu, kappa)`` from the Gaussian copula with empirical marginals: cpu mean, cpu peak
  (the request-to-peak ratio), ram mean and ram peak, each over its request, given the normal score
  of the pod's cpu request among the cluster's production pods (``z_r``): ``z = c z_r + e``,
  ``e ~ N(0, corr - c c^T)``, ``c`` the copula's request correlations;
* amplitude ``A`` ~ N(A_mean, A_sd) clipped to [0, 0.9], peak hour ``h`` ~ N(h_mean, h_sd);
* burst rate ``f`` (per hour) ~ lognormal (the burst frequency).

At simulated time ``t`` (seconds), with ``D(t) = 1 + A sin(2 pi (t/3600 - h + 6) / 24)`` (peaks at hour
``h``) and AR(1) log-noise ``x_t = a x_{t-1} + sqrt(1 - a^2) s z_t``, ``a = exp(-dt / tau)``::

    cpu_t = R_cpu * mu * D(t) * exp(x_t - s^2 / 2)          (unit-mean noise)
    cpu_t = max(cpu_t, R_cpu * pi)                           while bursting
    ram_t = R_ram * nu * (1 + A_ram sin(...)) * exp(y_t - s_ram^2 / 2)
    ram_t = max(ram_t, R_ram * kappa)                        while bursting

A burst starts with probability ``1 - exp(-f dt / 3600)`` per step and continues with probability
``exp(-dt / burst_duration)``. Storage follows ram's factor and disk/network cpu's; gpu usage is the
request (devices are held, not shared). Every step draws the same number of random numbers, so two
runs that share a seed see identical production usage whatever else differs between them.
"""

from __future__ import annotations

import math
from concurrent.futures import Executor, Future
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

from kalena.core.resources import CPU, GPU, NDIM, RAM, STORAGE
from kalena.sim.params import TABLE_LEVELS, ProductionParams


def normal_cdf(z: np.ndarray) -> np.ndarray:
    """Phi(z) = (1 + erf(z / sqrt 2)) / 2, element-wise."""
    flat = np.asarray(z, dtype=np.float64).ravel()
    out = np.array([0.5 * (1.0 + math.erf(v / math.sqrt(2.0))) for v in flat])
    return out.reshape(np.shape(z))


def request_scores(requests: np.ndarray) -> np.ndarray:
    """Normal score of each request's mid-rank (ties share one): where a pod's size stands in its cluster."""
    n = len(requests)
    if n == 0:
        return np.zeros(0)
    _, inverse, counts = np.unique(requests, return_inverse=True, return_counts=True)
    below = np.concatenate(([0], np.cumsum(counts)[:-1]))
    u = (below + counts / 2.0) / n
    return _normal_ppf(u)[inverse.ravel()]


def _normal_ppf(u: np.ndarray) -> np.ndarray:
    inv = NormalDist().inv_cdf
    return np.array([inv(float(v)) for v in u])


def copula_draw(
    tables: np.ndarray,
    corr: np.ndarray,
    n: int,
    rng: np.random.Generator,
    given: np.ndarray | None = None,
    given_corr: np.ndarray | None = None,
) -> np.ndarray:
    """n draws (n, k) of a Gaussian copula: z ~ N(0, corr), x_j = Q_j(Phi(z_j)), Q_j a table's inverse CDF.

    With ``given`` (n normal scores) and ``given_corr`` (k correlations with it), each z is drawn
    conditionally on its row's score: ``z = given_corr * g + e``, ``e ~ N(0, corr - c c^T)``.
    """
    k = len(corr)
    c = np.zeros(k) if given_corr is None else np.asarray(given_corr, dtype=np.float64)
    g = np.zeros(n) if given is None else np.asarray(given, dtype=np.float64)
    cov = corr - np.outer(c, c)
    w, v = np.linalg.eigh(cov)  # a square root that tolerates a singular (e.g. ram mean ~ ram peak) matrix
    root = v * np.sqrt(np.clip(w, 0.0, None))
    z = g[:, None] * c[None, :] + rng.standard_normal((n, k)) @ root.T
    u = normal_cdf(z)
    return np.column_stack([np.interp(u[:, j], TABLE_LEVELS, tables[j]) for j in range(len(tables))])


_RAM_LIKE = (RAM, STORAGE)  # follow ram's factor; cpu, disk and network follow cpu's


class ProductionUsage:
    """The usage process of P production pods (rows in ledger order)."""

    def __init__(
        self,
        requests: np.ndarray,
        params: ProductionParams,
        rng: np.random.Generator,
        step_rng: np.random.Generator | None = None,
    ) -> None:
        """Draw every pod's profile from ``rng``; each step's noise from ``step_rng`` (default ``rng``)."""
        self.requests = np.asarray(requests, dtype=np.float64)
        self.params = params
        self.rng = rng if step_rng is None else step_rng
        n = self.n = len(self.requests)
        lo, hi = params.ratio_bounds
        scores = request_scores(self.requests[:, CPU])
        ratios = copula_draw(params.copula_tables, params.copula_corr, n, rng, scores, params.request_corr)
        np.clip(ratios, lo, hi, out=ratios)
        self.mu, self.pi, self.nu, self.kappa = ratios.T.copy()
        self.amplitude = np.clip(rng.normal(params.amplitude_mean, params.amplitude_sd, n), 0.0, 0.9)
        self.peak_hour = rng.normal(params.peak_hour_mean, params.peak_hour_sd, n)
        mu_f, sd_f = params.burst_rate_log
        self.burst_rate = np.exp(rng.normal(mu_f, sd_f, n))  # bursts per hour
        self.x = rng.normal(0.0, params.noise_log_sd, n)  # start in the stationary distribution
        self.y = rng.normal(0.0, params.ram_noise_log_sd, n)
        self.bursting = np.zeros(n, dtype=bool)
        self.burst_started = np.zeros(n, dtype=bool)  # this step's new bursts (a step, not a ramp)
        self._dt = float("nan")
        # Usage is the request times a positive factor: cpu's, ram's, or 1 on gpu. Only the columns
        # some pod requests are multiplied (Irina's pods request 3 of the 8); the others are 0.
        self._scaled = [
            (d, np.ascontiguousarray(self.requests[:, d]), d in _RAM_LIKE)
            for d in range(NDIM)
            if d != GPU and self.requests[:, d].any()
        ]
        self._gpu = self.requests[:, GPU].any()

    def restart(self, pods: np.ndarray) -> None:
        """A killed pod restarts: its noise and burst state start afresh (its profile stays)."""
        self.x[pods] = 0.0
        self.y[pods] = 0.0
        self.bursting[pods] = False

    def mark(self) -> _Mark:
        """The process's state now, for :meth:`rewind` (a step replaces these arrays, never writes
        into them, so keeping them is enough; the generator's state is copied)."""
        return _Mark(self.rng.bit_generator.state, self.x, self.y, self.bursting, self.burst_started)

    def rewind(self, mark: _Mark) -> None:
        """Back to ``mark``, as if the steps since were never drawn."""
        self.rng.bit_generator.state = mark.rng
        self.x, self.y, self.bursting, self.burst_started = mark.x, mark.y, mark.bursting, mark.burst_started

    def _constants(self, dt: float) -> tuple[float, float, float, float, np.ndarray, float]:
        """Per-step constants for a step of ``dt`` (cached: the step is almost always the same)."""
        if self._dt != dt:
            p = self.params
            a, b = np.exp(-dt / p.noise_tau_s), np.exp(-dt / p.ram_noise_tau_s)
            self._consts = (
                a,
                np.sqrt(1.0 - a * a) * p.noise_log_sd,
                b,
                np.sqrt(1.0 - b * b) * p.ram_noise_log_sd,
                -np.expm1(-self.burst_rate * dt / 3600.0),  # P(a burst starts)
                float(np.exp(-dt / p.burst_duration_s)),  # P(a burst goes on)
            )
            self._dt = dt
        return self._consts

    def step(self, t: float, dt: float) -> np.ndarray:
        """Usage at time ``t`` after a step of ``dt`` seconds, shape (P, 8)."""
        p, n = self.params, self.n
        a, sa, b, sb, p_start, p_stay = self._constants(dt)
        z = self.rng.standard_normal((2, n))
        u = self.rng.random((2, n))
        self.x = a * self.x + sa * z[0]
        self.y = b * self.y + sb * z[1]
        was = self.bursting
        self.bursting = np.where(was, u[1] < p_stay, u[0] < p_start)
        self.burst_started = self.bursting & ~was
        phase = np.sin(2.0 * np.pi * (t / 3600.0 - self.peak_hour + 6.0) / 24.0)
        cpu_f = self.mu * (1.0 + self.amplitude * phase) * np.exp(self.x - p.noise_log_sd**2 / 2.0)
        ram_f = self.nu * (1.0 + p.ram_amplitude * phase) * np.exp(self.y - p.ram_noise_log_sd**2 / 2.0)
        # the few bursting pods only: a masked maximum walks every pod
        up = np.flatnonzero(self.bursting)
        cpu_f[up] = np.maximum(cpu_f[up], self.pi[up])
        ram_f[up] = np.maximum(ram_f[up], self.kappa[up])
        out = np.zeros((n, NDIM), order="F")  # written and read a column at a time, as the rows
        for d, request, ram_like in self._scaled:  # each cell the product R * factor, as a whole
            np.multiply(request, ram_f if ram_like else cpu_f, out=out[:, d])
        if self._gpu:
            out[:, GPU] = self.requests[:, GPU]
        return out


@dataclass(frozen=True, slots=True)
class _Ahead:
    """A step being drawn ahead: for ``t`` after a step of ``dt``, from the state ``before``."""

    t: float
    dt: float
    before: _Mark
    drawn: Future[tuple[np.ndarray, np.ndarray]]


@dataclass(frozen=True, slots=True)
class _Mark:
    rng: dict
    x: np.ndarray
    y: np.ndarray
    bursting: np.ndarray
    burst_started: np.ndarray


class Lookahead:
    """Production's next step drawn on a second thread while the simulator works on this one.

    Production's usage is a process of its own except where a pod restarts (an eviction or an OOM
    kill of a service), so the step for ``t + dt`` can be drawn as soon as the step for ``t`` is
    handed out; NumPy lets go of the GIL inside the draws and the array arithmetic, so the other
    core does it. A restart waits for that step, rewinds it and restarts the pods: the next step is
    then drawn after the restart, as without the thread. :meth:`close` rewinds a step drawn that
    nobody took, so the process ends where a run without the thread leaves it. The same draws in
    the same order: the run is bit for bit the one without it.
    """

    def __init__(self, usage: ProductionUsage, pool: Executor) -> None:
        self.usage, self.pool = usage, pool
        self._pending: _Ahead | None = None

    def _draw(self, t: float, dt: float) -> tuple[np.ndarray, np.ndarray]:
        u = self.usage.step(t, dt)
        return u, self.usage.burst_started

    def step(self, t: float, dt: float) -> tuple[np.ndarray, np.ndarray]:
        """Usage at ``t`` and the pods whose burst began with it; the next step is then begun."""
        got = self._pending
        if got is not None and got.t == t and got.dt == dt:
            self._pending = None
            out = got.drawn.result()
        else:
            self._drop()
            out = self._draw(t, dt)
        self._pending = _Ahead(t + dt, dt, self.usage.mark(), self.pool.submit(self._draw, t + dt, dt))
        return out

    def restart(self, pods: np.ndarray) -> None:
        self._drop()
        self.usage.restart(pods)

    def close(self) -> None:
        self._drop()

    def _drop(self) -> None:
        """Wait for the step drawn ahead, if any, and undo it."""
        got, self._pending = self._pending, None
        if got is not None:
            got.drawn.result()  # (an error in the draw is raised here, not lost)
            self.usage.rewind(got.before)
