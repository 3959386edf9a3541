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
``k = max_n (n - floor(q(n-1)))`` from the top (2 for q = 0.99 and K = 90). Each row keeps its
window's c largest values (c <= k + 2) with the ring slots they sit in. A departing cached value
leaves the cache; the new sample goes in where it beats the c-th (a few rows a tick); only rows
left with fewer than k re-read their window; the quantile is then two column reads. The result
equals the full sort bit for bit (same samples, same float32 values, same arithmetic). Where k is
large (a low quantile), the full sort per update is used instead.
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass, field
from typing import ClassVar

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
#: The most top samples the quantile may need for the incremental path; beyond it, the full sort.
MAX_TOP = 8
#: Samples kept beyond the k needed: a row re-reads its window only when departures leave it with
#: fewer than k, not at every departure of one of its top k.
SPARE_TOP = 2


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
    # slot-major, so that an update writes one contiguous (W, 8) slot rather than a strided one
    window: np.ndarray  # (K, W, 8) float32 ring of samples, NaN = none
    n_valid: np.ndarray  # (W, 8) int32 samples in the window
    margin: np.ndarray  # (W,) float64 m_class
    top: np.ndarray  # (W, 8, C) float32 the window's c largest samples, descending; -inf past c
    top_slot: np.ndarray  # (W, 8, C) int32 the ring slot of each; -1 past c
    top_count: np.ndarray  # (W, 8) int8 c: how many of the window's largest ``top`` holds
    top_floor: np.ndarray  # (W, 8) float32 the c-th of them (what a new sample must beat); -inf: c = 0
    head: int = 0  # next ring slot, shared by all rows

    ROW_AXES: ClassVar[dict[str, int]] = {"window": 1}


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
        k = 0 if k > MAX_TOP else min(k + SPARE_TOP, self.params.window)  # 0: the full sort
        return PeakState(
            **rows,
            window=np.full((self.params.window, w, d), np.nan, dtype=np.float32),
            n_valid=np.zeros((w, d), dtype=np.int32),
            margin=self.params.margins()[cls.astype(np.intp)],
            top=np.full((w, d, k), -np.inf, dtype=np.float32),
            top_slot=np.full((w, d, k), -1, dtype=np.int32),
            top_count=np.zeros((w, d), dtype=np.int8),
            top_floor=np.full((w, d), -np.inf, dtype=np.float32),
        )

    def update_in_place(self, state: PeakState, usage: np.ndarray, now: float, dt: float) -> np.ndarray:
        check_step(state, usage, now, dt)
        hold = held_rows(state, now)
        head = state.head
        new = usage.astype(np.float32)
        if hold.any():  # held rows record nothing (base rule 3)
            new[hold] = np.nan
        slot = state.window[head]  # (W, 8): the oldest sample, about to be overwritten
        state.n_valid += np.isnan(slot).view(np.int8)
        state.n_valid -= np.isnan(new).view(np.int8)
        slot[...] = new
        state.head = (head + 1) % state.window.shape[0]

        est = state.spare
        if state.top.shape[2]:
            k = self.params.top_needed()
            _update_top(state, new, head, k)
            top_quantile(state.top[..., :k], state.n_valid, self.params.quantile, out=est)
        else:
            for lo in range(0, state.n, _BLOCK):
                hi = min(lo + _BLOCK, state.n)
                # (rows, 8, K), made contiguous: a sort along a strided axis is many times slower
                block = np.ascontiguousarray(np.moveaxis(state.window[:, lo:hi], 0, -1))
                est[lo:hi] = window_quantile(block, state.n_valid[lo:hi], self.params.quantile)
        np.multiply(est, state.margin[:, None], out=est)
        empty = state.n_valid == 0
        if empty.any():  # no sample yet: hold r (r_0 = R)
            np.copyto(est, state.reservation, where=empty)
        return finalize(state, usage, hold)


def _update_top(state: PeakState, new: np.ndarray, slot: int, k: int) -> None:
    """Bring every row's top-c up to date after ``new`` (W, 8) was written into ring ``slot``.

    Invariant: ``top[:c]`` are the c largest samples of the row's window (with their slots). A
    departing cached sample is dropped (c - 1 largest remain the largest); a new sample is taken
    in only where it beats the c-th (then no uncached sample can sit above it), the last one
    falling off when the cache is full; rows left with fewer than the k the quantile reads
    re-read their window.
    """
    size = state.top.shape[2]
    top2, where2 = state.top.reshape(-1, size), state.top_slot.reshape(-1, size)  # (W*8, C) views
    count = state.top_count.reshape(-1)
    floor = state.top_floor.reshape(-1)
    n_valid = state.n_valid.reshape(-1)
    flat = new.reshape(-1)
    ranks = np.arange(size)[None, :]
    # 1. the sample leaving the ring leaves the cache (at most one entry per row): shift the rest up
    left = where2[:, 0] == slot
    for j in range(1, size):
        left |= where2[:, j] == slot
    rows = np.flatnonzero(left)
    if len(rows):
        t, w = np.take(top2, rows, axis=0), np.take(where2, rows, axis=0)
        at = _first_column(w == slot)[:, None]
        t = np.where(
            ranks < at, t, np.concatenate((t[:, 1:], np.full((len(rows), 1), -np.inf, t.dtype)), axis=1)
        )
        w = np.where(ranks < at, w, np.concatenate((w[:, 1:], np.full((len(rows), 1), -1, w.dtype)), axis=1))
        _put_rows(top2, rows, t)
        _put_rows(where2, rows, w)
        count[rows] -= 1
        floor[rows] = _floor_of(t, count[rows])
    # 2. the new sample, where it beats the c-th; an empty cache takes it only from an otherwise
    #    empty window (NaN beats nothing)
    threshold = floor
    empty = np.flatnonzero(count == 0)
    if len(empty):
        threshold = floor.copy()
        others = n_valid[empty] - ~np.isnan(flat[empty])
        threshold[empty] = np.where(others == 0, -np.inf, np.inf)
    ins = np.flatnonzero(flat > threshold)
    if len(ins):
        t, w, v = np.take(top2, ins, axis=0), np.take(where2, ins, axis=0), flat[ins]
        at = (t[:, 0] >= v).astype(np.intp)  # after its equals: stable
        for j in range(1, size):
            at += t[:, j] >= v
        at = at[:, None]
        shifted_t = np.concatenate((t[:, :1], t[:, :-1]), axis=1)
        shifted_w = np.concatenate((w[:, :1], w[:, :-1]), axis=1)
        t = np.where(ranks < at, t, np.where(ranks == at, v[:, None], shifted_t))
        _put_rows(top2, ins, t)
        _put_rows(where2, ins, np.where(ranks < at, w, np.where(ranks == at, slot, shifted_w)))
        count[ins] = np.minimum(count[ins] + 1, size)
        floor[ins] = _floor_of(t, count[ins])
    # 3. rows holding fewer than the quantile reads: the whole window again
    stale = np.flatnonzero(count < np.minimum(n_valid, k))
    if len(stale):
        window = state.window.reshape(state.window.shape[0], -1)[:, stale].T  # (m, K)
        vals, slots = top_of(window, size)
        _put_rows(top2, stale, vals)
        _put_rows(where2, stale, slots)
        count[stale] = (slots >= 0).sum(axis=1)
        floor[stale] = _floor_of(vals, count[stale])


def _floor_of(top: np.ndarray, count: np.ndarray) -> np.ndarray:
    """The c-th value of each row of ``top`` (m, C), -inf where c = 0."""
    c = count.astype(np.intp)
    return np.where(c > 0, top[np.arange(len(top)), np.maximum(c - 1, 0)], np.float32(-np.inf))


def _first_column(mask: np.ndarray) -> np.ndarray:
    """The first True column of each row of ``mask`` (m, C), which has one (C small: a loop)."""
    at = np.full(len(mask), mask.shape[1] - 1, dtype=np.intp)
    for j in range(mask.shape[1] - 2, -1, -1):
        at[mask[:, j]] = j
    return at


def _put_rows(dst: np.ndarray, rows: np.ndarray, src: np.ndarray) -> None:
    """``dst[rows] = src`` for a C-contiguous (n, C) ``dst``: each row moved as one opaque record
    (a row-index assignment into a 2-D array walks every cell, many times slower)."""
    record = np.dtype((np.void, dst.shape[1] * dst.itemsize))
    dst.view(record).reshape(len(dst))[rows] = (
        np.ascontiguousarray(src, dtype=dst.dtype).view(record).reshape(len(src))
    )


def rebuild_top(state: PeakState) -> None:
    """Recompute every row's top-k from its window: for a caller that wrote the window directly."""
    k = state.top.shape[2]
    if k:
        size, w, d = state.window.shape
        vals, slots = top_of(state.window.reshape(size, -1).T, k)
        state.top[...] = vals.reshape(w, d, k)
        state.top_slot[...] = slots.reshape(w, d, k)
        count = (slots >= 0).sum(axis=1)
        state.top_count[...] = count.reshape(w, d)
        state.top_floor[...] = _floor_of(vals, count).reshape(w, d)


def full_sort(state: PeakState) -> PeakState:
    """The same rows without the top-k cache: every update sorts the window (the reference path)."""
    w, d, _ = state.top.shape
    return dataclasses.replace(
        state, top=np.zeros((w, d, 0), np.float32), top_slot=np.zeros((w, d, 0), np.int32)
    )


def top_of(window: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The k largest samples of each row of ``window`` (m, K), descending, and their slots;
    -inf and -1 where a row has fewer than k samples (NaN is no sample). k rounds of argmax: for
    the few rows and small k this is asked for, cheaper than a partition of every row."""
    filled = np.where(np.isnan(window), np.float32(-np.inf), window)
    m, size = filled.shape
    vals = np.full((m, k), -np.inf, dtype=np.float32)
    slots = np.full((m, k), -1, dtype=np.int32)
    rows = np.arange(m)
    for j in range(min(k, size)):
        at = filled.argmax(axis=1)
        vals[:, j] = filled[rows, at]
        slots[:, j] = at
        filled[rows, at] = -np.inf
    slots[vals == -np.inf] = -1
    return vals, slots


def top_quantile(top: np.ndarray, n_valid: np.ndarray, q: float, out: np.ndarray | None = None) -> np.ndarray:
    """:func:`window_quantile` read from the top-k (descending): the sorted sample s_j is
    ``top[n - 1 - j]``; meaningless where n_valid == 0 (the caller holds r there).

    The ranks and the interpolation weight depend on n alone, so they are looked up per n.
    """
    k = top.shape[-1]
    most = int(n_valid.max(initial=0))
    n = np.arange(most + 1)
    n1 = np.maximum(n - 1, 0)
    pos = q * n1
    below = np.floor(pos)
    above = np.minimum(below + 1, n1)
    lo_of = np.minimum(n1 - below, k - 1).astype(np.int8)
    hi_of = np.minimum(n1 - above, k - 1).astype(np.int8)
    frac_of = pos - below
    lo_c, hi_c = int(lo_of[most]), int(hi_of[most])  # the columns the fullest windows read
    with np.errstate(invalid="ignore"):  # -inf - -inf where a row has no sample yet
        d = np.subtract(top[..., hi_c], top[..., lo_c], dtype=np.float64, out=out)
        d *= frac_of[n_valid] if int(n_valid.min()) != most else frac_of[most]
        d += top[..., lo_c]
        # the rows whose count reads other columns (a window still filling, most often), exactly
        other = np.flatnonzero((lo_of != lo_c) | (hi_of != hi_c))
        if len(other):
            rows = np.flatnonzero(np.isin(n_valid.reshape(-1), other))
            if len(rows):
                n_r = n_valid.reshape(-1)[rows]
                flat = top.reshape(-1, k)
                lo = flat[rows, lo_of[n_r]].astype(np.float64)
                hi = flat[rows, hi_of[n_r]].astype(np.float64)
                d.reshape(-1)[rows] = lo + frac_of[n_r] * (hi - lo)
    return d


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
