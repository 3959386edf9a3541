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

**Incremental and exact.** A high quantile needs only the window's top few samples: with n valid
samples, p_q reads the sorted samples at ranks floor(q(n-1)) and one above, i.e. at most
``k = max_n (n - floor(q(n-1)))`` from the top (2 for q = 0.99 and K = 90). Each row keeps those
top-k values with the ring slots they sit in. An update inserts the new sample where it beats the
k-th (a few rows a tick), and re-reads the whole window only for the rows whose cached value is
the one leaving the ring (about k/K of them); the quantile is then two gathers. The result equals
the full sort bit for bit (same samples, same float32 values, same arithmetic). Where k is large
(a low quantile), the full sort per update is used instead.
"""

from __future__ import annotations

import dataclasses
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
#: The most top samples kept per row for the incremental quantile; beyond it, the full sort.
MAX_TOP = 8


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

    def top_needed(self) -> int:
        """k: the most samples from the top the quantile reads, over every count n <= K (module doc)."""
        n = np.arange(1, self.window + 1)
        return int(np.max(n - np.floor(self.quantile * (n - 1))))


@dataclass(slots=True, eq=False)
class PeakState(EstimatorState):
    window: np.ndarray  # (W, 8, K) float32 ring of samples, NaN = none
    n_valid: np.ndarray  # (W, 8) int32 samples in the window
    margin: np.ndarray  # (W,) float64 m_class
    top: np.ndarray  # (W, 8, k) float32 the window's k largest samples, descending; -inf = none
    top_slot: np.ndarray  # (W, 8, k) int32 the ring slot of each; -1 = none
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
        k = self.params.top_needed()
        k = 0 if k > MAX_TOP else k  # no cache: the full sort
        return PeakState(
            **rows,
            window=np.full((w, d, self.params.window), np.nan, dtype=np.float32),
            n_valid=np.zeros((w, d), dtype=np.int32),
            margin=self.params.margins()[cls.astype(np.intp)],
            top=np.full((w, d, k), -np.inf, dtype=np.float32),
            top_slot=np.full((w, d, k), -1, dtype=np.int32),
        )

    def update_in_place(self, state: PeakState, usage: np.ndarray, now: float, dt: float) -> np.ndarray:
        check_step(state, usage, now, dt)
        hold = held_rows(state, now)
        head = state.head
        slot = state.window[:, :, head]  # (W, 8) view of the oldest sample
        state.n_valid -= ~np.isnan(slot)
        slot[...] = usage
        if hold.any():  # held rows record nothing (base rule 3)
            slot[hold] = np.nan
        state.n_valid += ~np.isnan(slot)
        state.head = (head + 1) % state.window.shape[2]

        est = state.spare
        if state.top.shape[2]:
            _update_top(state, slot, head)
            est[...] = top_quantile(state.top, state.n_valid, self.params.quantile)
        else:
            for lo in range(0, state.n, _BLOCK):
                hi = min(lo + _BLOCK, state.n)
                est[lo:hi] = window_quantile(state.window[lo:hi], state.n_valid[lo:hi], self.params.quantile)
        np.multiply(est, state.margin[:, None], out=est)
        empty = state.n_valid == 0
        if empty.any():  # no sample yet: hold r (r_0 = R)
            np.copyto(est, state.reservation, where=empty)
        return finalize(state, usage, hold)


def _update_top(state: PeakState, new: np.ndarray, slot: int) -> None:
    """Bring every row's top-k up to date after ``new`` (W, 8) was written into ring ``slot``."""
    top, where = state.top, state.top_slot
    k = top.shape[2]
    top2, where2 = top.reshape(-1, k), where.reshape(-1, k)  # (W*8, k) views
    flat = new.reshape(-1)
    # rows whose cached sample just left the ring: the whole window again (its new sample included)
    stale = np.flatnonzero((where2 == slot).any(axis=1))
    # the others: the new sample goes in where it beats the k-th (NaN beats nothing)
    beats = flat > top2[:, k - 1]
    beats[stale] = False
    ins = np.flatnonzero(beats)
    if len(ins):
        t, w, v = top2[ins], where2[ins], flat[ins]
        pos = (t >= v[:, None]).sum(axis=1)[:, None]  # after its equals: stable
        ranks = np.arange(k)[None, :]
        shifted_t = np.concatenate((t[:, :1], t[:, :-1]), axis=1)
        shifted_w = np.concatenate((w[:, :1], w[:, :-1]), axis=1)
        top2[ins] = np.where(ranks < pos, t, np.where(ranks == pos, v[:, None], shifted_t))
        where2[ins] = np.where(ranks < pos, w, np.where(ranks == pos, slot, shifted_w))
    if len(stale):
        window = state.window.reshape(-1, state.window.shape[2])[stale]
        top2[stale], where2[stale] = top_of(window, k)


def rebuild_top(state: PeakState) -> None:
    """Recompute every row's top-k from its window: for a caller that wrote the window directly."""
    k = state.top.shape[2]
    if k:
        w, d, size = state.window.shape
        vals, slots = top_of(state.window.reshape(-1, size), k)
        state.top[...] = vals.reshape(w, d, k)
        state.top_slot[...] = slots.reshape(w, d, k)


def full_sort(state: PeakState) -> PeakState:
    """The same rows without the top-k cache: every update sorts the window (the reference path)."""
    w, d, _ = state.top.shape
    return dataclasses.replace(
        state, top=np.zeros((w, d, 0), np.float32), top_slot=np.zeros((w, d, 0), np.int32)
    )


def top_of(window: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The k largest samples of each row of ``window`` (m, K), descending, and their slots;
    -inf and -1 where a row has fewer than k samples (NaN is no sample)."""
    filled = np.where(np.isnan(window), -np.inf, window)
    m, size = filled.shape
    if k < size:
        part = np.argpartition(filled, size - k, axis=1)[:, size - k :]  # the k largest, unordered
    else:
        part = np.broadcast_to(np.arange(size), (m, size))
    vals = np.take_along_axis(filled, part, axis=1)
    order = np.argsort(-vals, axis=1, kind="stable")
    vals = np.take_along_axis(vals, order, axis=1)
    slots = np.take_along_axis(part, order, axis=1).astype(np.int32)
    slots[vals == -np.inf] = -1
    if k > size:  # a window shorter than k: pad
        vals = np.concatenate((vals, np.full((m, k - size), -np.inf, np.float32)), axis=1)
        slots = np.concatenate((slots, np.full((m, k - size), -1, np.int32)), axis=1)
    return vals, slots


def top_quantile(top: np.ndarray, n_valid: np.ndarray, q: float) -> np.ndarray:
    """:func:`window_quantile` read from the top-k (descending): the sorted sample s_j is
    ``top[n - 1 - j]``; meaningless where n_valid == 0 (the caller holds r there)."""
    n1 = np.maximum(n_valid - 1, 0)
    pos = q * n1
    below = np.floor(pos).astype(np.intp)
    above = np.minimum(below + 1, n1)
    k = top.shape[-1]
    lo_i = np.minimum(n1 - below, k - 1)[..., None]
    hi_i = np.minimum(n1 - above, k - 1)[..., None]
    lo = np.take_along_axis(top, lo_i, axis=-1)[..., 0].astype(np.float64)
    hi = np.take_along_axis(top, hi_i, axis=-1)[..., 0].astype(np.float64)
    with np.errstate(invalid="ignore"):  # -inf - -inf where a row has no sample yet
        return lo + (pos - below) * (hi - lo)


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
