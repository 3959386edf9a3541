"""PeakWithMargin (seed 002, Stationkeeper): p99 of a usage window times a margin by class.

For one workload and dimension, with the last K samples in a window (missing ones left out)::

    r_t = min(L, m_class * p_q(window))        p_q: linear-interpolation quantile, q = 0.99

p_q is NumPy's default ("linear") percentile: with the n valid samples sorted s_0 <= ... <= s_{n-1},
pos = q*(n-1), p = s_floor(pos) + (pos - floor(pos)) * (s_floor(pos)+1 - s_floor(pos)). With no
sample yet r holds (r_0 = R). Grace, opt-out, gpu, missing samples and the cap follow the shared
rules of :mod:`kalena.core.estimators.base`.

The margin is set by the workload's class, not typed by a person (seed 002): a latency-sensitive
service gets 1.30 because killing it is expensive, so waste a little rather than OOM a user-facing
process; batch gets 1.15, a middle ground (the same 15 % as the decay estimator's placeholder);
best-effort gets 1.05 because it is preemptible anyway and the point is to claw back the gap.

The window is a ring of K slots shared by all workloads: every update writes one slot (NaN where
the sample is missing, so a gap shortens the window instead of pretending usage was zero), so the
window is "the last K sample periods". Unlike the decay estimator, a single sample above r does
not raise r to m*u at once: the p99 deliberately discounts the rarest spike.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import ArrayLike

from kalena.core.estimators.base import (
    EstimatorBase,
    EstimatorState,
    check_step,
    finalize,
    held_rows,
)
from kalena.core.model import Tier
from kalena.core.validate import check_fraction, check_int, check_number

#: 15 min of 10 s samples: the decay estimator's half-life before calibration (900 s; now 300 s).
DEFAULT_WINDOW = 90
#: Rows sorted per block: a block's window (1024 x 8 x K float32) stays in cache for K ~ 100.
_BLOCK = 1024


class MarginClass(enum.IntEnum):
    """Seed 002's application classes (OomBudget Tight / Moderate / Relaxed)."""

    SERVICE = 0
    BATCH = 1
    BEST_EFFORT = 2


def margin_class(tier: Tier) -> MarginClass:
    """The margin class of a Kalena tier (Kalena has no best-effort tier; pass it directly)."""
    return MarginClass.BATCH if tier is Tier.BATCH else MarginClass.SERVICE


@dataclass(frozen=True, slots=True)
class PeakParams:
    """Window length K >= 1, quantile q in [0, 1] and one margin >= 1 per class."""

    window: int = DEFAULT_WINDOW
    quantile: float = 0.99
    margin_service: float = 1.30
    margin_batch: float = 1.15
    margin_best_effort: float = 1.05

    def __post_init__(self) -> None:
        check_int(self, "window", lo=1)
        check_fraction(self, "quantile")
        for key in ("margin_service", "margin_batch", "margin_best_effort"):
            check_number(self, key, lo=1.0)

    def margins(self) -> np.ndarray:
        """Margins indexed by :class:`MarginClass`."""
        return np.array([self.margin_service, self.margin_batch, self.margin_best_effort])


@dataclass(slots=True, eq=False)
class PeakState(EstimatorState):
    window: np.ndarray  # (W, 8, K) float32 ring of samples, NaN = none
    n_valid: np.ndarray  # (W, 8) int32 samples in the window
    margin: np.ndarray  # (W,) float64 m_class
    head: int = 0  # next ring slot, shared by all rows


@dataclass(frozen=True, slots=True)
class PeakWithMargin(EstimatorBase[PeakState]):
    """Memory per workload: the window, 8 x K x 4 B (2.9 KB at K = 90), plus about 310 B."""

    params: PeakParams = field(default_factory=PeakParams)

    def new_state(self, rows: dict[str, np.ndarray], classes: ArrayLike | None) -> PeakState:
        """``classes``: (W,) :class:`MarginClass` codes; default service (the fattest margin)."""
        w, d = rows["requests"].shape
        cls = np.zeros(w, dtype=np.intp) if classes is None else np.asarray(classes)
        if cls.shape != (w,):
            raise ValueError(f"classes must have shape ({w},), got {cls.shape}")
        bad = ~np.isin(cls, list(MarginClass))
        if bad.any():
            i = int(np.argmax(bad))
            raise ValueError(f"classes[{i}] must be a MarginClass code 0, 1 or 2, got {cls[i].item()!r}")
        return PeakState(
            **rows,
            window=np.full((w, d, self.params.window), np.nan, dtype=np.float32),
            n_valid=np.zeros((w, d), dtype=np.int32),
            margin=self.params.margins()[cls.astype(np.intp)],
        )

    def update_in_place(self, state: PeakState, usage: np.ndarray, now: float, dt: float) -> np.ndarray:
        check_step(state, usage, now, dt)
        hold = held_rows(state, now)
        slot = state.window[:, :, state.head]  # (W, 8) view of the oldest sample
        state.n_valid -= ~np.isnan(slot)
        slot[...] = usage
        if hold.any():  # held rows record nothing (base rule 3)
            slot[hold] = np.nan
        state.n_valid += ~np.isnan(slot)
        state.head = (state.head + 1) % state.window.shape[2]

        est = state.spare
        for lo in range(0, state.n, _BLOCK):
            hi = min(lo + _BLOCK, state.n)
            est[lo:hi] = window_quantile(state.window[lo:hi], state.n_valid[lo:hi], self.params.quantile)
        np.multiply(est, state.margin[:, None], out=est)
        empty = state.n_valid == 0
        if empty.any():  # no sample yet: hold r (r_0 = R)
            np.copyto(est, state.reservation, where=empty)
        return finalize(state, usage, hold)


def window_quantile(window: np.ndarray, n_valid: np.ndarray, q: float) -> np.ndarray:
    """Linear-interpolation quantile over the last axis, ignoring NaN; NaN where n_valid == 0.

    Matches ``np.nanpercentile(window, 100*q, axis=-1)`` at a fraction of its cost: one sort of a
    copy (NaN sorts last, so the n valid samples come first) and two gathers.
    """
    ordered = np.sort(window, axis=-1)
    pos = q * np.maximum(n_valid - 1, 0)
    below = np.floor(pos).astype(np.intp)
    above = np.minimum(below + 1, np.maximum(n_valid - 1, 0))
    lo = np.take_along_axis(ordered, below[..., None], axis=-1)[..., 0].astype(np.float64)
    hi = np.take_along_axis(ordered, above[..., None], axis=-1)[..., 0].astype(np.float64)
    return lo + (pos - below) * (hi - lo)
