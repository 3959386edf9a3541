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
``k = max_n (n - floor(q(n-1)))`` from the top (2 for q = 0.99 and K = 90). The top-k of a sliding
window is kept by the van Herk/Gil-Werman scheme, with no slot bookkeeping: ``prefix`` holds the
top-k of the samples written since the last *flip*, ``suffix[j]`` the top-k of ring slots j..K-1
as of that flip. When the head wraps to slot 0 the ring holds the last K samples in slot order;
the flip then recomputes ``suffix`` backwards over the ring (K merges of one sample into a top-k)
and empties ``prefix``. Between flips, with the head at h, slots h..K-1 still hold what they held
at the flip and slots 0..h-1 what came since, so the window's top-k is merge(prefix, suffix[h]).
An update therefore costs one insertion into ``prefix`` (2k - 1 elementwise passes) and one merge
(k^2 passes; 3 and 4 for k = 2), and once every K updates a flip costs K insertions, i.e. K merges
(K (2k - 1) passes over the (W, 8) cells, writing the whole suffix: about six ordinary updates at
100,000 workloads, once in K, so the slowest update is several times the median). NaN is
"no sample" throughout: ``np.minimum`` propagates it and ``np.fmax`` ignores it, which is exactly
the arithmetic of top-k lists padded with absent values. The quantile is then two reads of the
merged top-k; the result equals the full sort bit for bit (same samples, same float32 values, same
float64 arithmetic lo + frac * (hi - lo)). Where k is large (a low quantile), the full sort per
update is used instead. The price is memory: the suffix stores k values per slot, so a workload
holds window + suffix + prefix, about (1 + k) x K x 8 x 4 B (8.6 KB at K = 90, k = 2).
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
from numpy.typing import ArrayLike

from kalena.core.estimators.base import (
    EstimatorBase,
    EstimatorState,
    check_step,
    finalize,
    full_rows_first,
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
    # slot-major, so that an update writes one contiguous (W, 8) slot rather than a strided one;
    # each slot rows first (column-major), as the shared rows: their arithmetic meets one layout
    window: np.ndarray  # (K, W, 8) float32 ring of samples, NaN = none
    n_valid: np.ndarray  # (W, 8) int32 samples in the window
    margin: np.ndarray  # (W,) float64 m_class
    # k = 0 columns below: every update sorts the window (a low quantile; :func:`full_sort`)
    prefix: np.ndarray  # (k, W, 8) float32 top-k of the samples since the last flip, descending, NaN = none
    suffix: np.ndarray  # (K, k, W, 8) float32 suffix[j]: top-k of ring slots j..K-1 at the last flip
    merged: np.ndarray  # (k, W, 8) float32 scratch: the window's top-k during an update
    head: int = 0  # next ring slot, shared by all rows

    ROW_AXES: ClassVar[dict[str, int]] = {"window": 1, "prefix": 1, "suffix": 2, "merged": 1}


@dataclass(frozen=True, slots=True)
class PeakWithMargin(EstimatorBase[PeakState]):
    """Memory per workload: the window, 8 x K x 4 B (2.9 KB at K = 90), its suffix top-k, k times
    that (5.8 KB at k = 2), plus about 440 B (prefix, scratch and the shared rows)."""

    params: PeakParams = field(default_factory=PeakParams)

    def new_state(self, rows: dict[str, Any], classes: ArrayLike | None) -> PeakState:
        """``classes``: (W,) :class:`MarginClass` codes; default service (the fattest margin)."""
        w, d = rows["requests"].shape
        cls = np.zeros(w, dtype=np.intp) if classes is None else np.asarray(classes)
        if cls.shape != (w,):
            raise ValueError(f"classes must have shape ({w},), got {cls.shape}")
        bad = ~np.isin(cls, list(MarginClass))
        if bad.any():
            i = int(np.argmax(bad))
            raise ValueError(f"classes[{i}] must be a MarginClass code 0, 1 or 2, got {cls[i].item()!r}")
        size = self.params.window
        k = self.params.top_needed()
        k = 0 if k > MAX_TOP else k  # 0: the full sort
        return PeakState(
            **rows,
            window=full_rows_first((size, w, d), np.nan, np.float32, axis=1),
            n_valid=full_rows_first((w, d), 0, np.int32),
            margin=self.params.margins()[cls.astype(np.intp)],
            prefix=full_rows_first((k, w, d), np.nan, np.float32, axis=1),
            suffix=full_rows_first((size, k, w, d), np.nan, np.float32, axis=2),
            merged=full_rows_first((k, w, d), np.nan, np.float32, axis=1),
        )

    def update_in_place(self, state: PeakState, usage: np.ndarray, now: float, dt: float) -> np.ndarray:
        usage = check_step(state, usage, now, dt)
        hold = held_rows(state, now)
        head = state.head
        slot = state.window[head]  # (W, 8): the oldest sample, about to be overwritten
        state.n_valid += np.isnan(slot, out=state.missing).view(np.int8)  # ``missing``: scratch here
        np.copyto(slot, usage, casting="same_kind")  # float64 -> float32, as the full sort reads it
        if hold.any():  # held rows record nothing (base rule 3)
            slot[hold] = np.nan
        state.n_valid -= np.isnan(slot, out=state.missing).view(np.int8)
        state.head = (head + 1) % state.window.shape[0]

        est = state.spare
        if state.prefix.shape[0]:
            top_quantile(_advance(state, slot), state.n_valid, self.params.quantile, out=est)
        else:
            for lo in range(0, state.n, _BLOCK):
                hi = min(lo + _BLOCK, state.n)
                # (rows, 8, K), made contiguous: a sort along a strided axis is many times slower
                block = np.ascontiguousarray(np.moveaxis(state.window[:, lo:hi], 0, -1))
                est[lo:hi] = window_quantile(block, state.n_valid[lo:hi], self.params.quantile)
        np.multiply(est, state.margin[:, None], out=est)
        if int(state.n_valid.min(initial=1)) == 0:  # no sample yet: hold r (r_0 = R)
            np.copyto(est, state.reservation, where=state.n_valid == 0)
        return finalize(state, usage, hold)


def _advance(state: PeakState, new: np.ndarray) -> np.ndarray:
    """The window's top-k (k, W, 8) after ``new`` (W, 8) was written and the head advanced."""
    if state.head == 0:  # the ring wrapped: it holds the last K samples in slot order
        _flip(state)
        return state.suffix[0]  # merged with an empty prefix
    _insert(state.prefix, new, state.prefix, tmp=state.merged[0])
    _merge(state.prefix, state.suffix[state.head], out=state.merged)
    return state.merged


def _insert(top: np.ndarray, v: np.ndarray, out: np.ndarray, tmp: np.ndarray | None = None) -> None:
    """``out`` = the top-k (k, ...) of the values in ``top`` (k, ..., descending) and ``v`` (...).

    NaN is an absent value (and an absent ``v`` leaves the list as it is): out_0 = fmax(t_0, v),
    out_j = fmax(t_j, minimum(t_{j-1}, v)), as ``minimum`` propagates NaN and ``fmax`` ignores it.
    In place (``out is top``) needs ``tmp``, one (...) scratch, and runs j downwards.
    """
    if out is top:
        assert tmp is not None
        for j in range(len(top) - 1, 0, -1):
            np.fmax(top[j], np.minimum(top[j - 1], v, out=tmp), out=top[j])
    else:
        for j in range(1, len(top)):
            np.fmax(np.minimum(top[j - 1], v, out=out[j]), top[j], out=out[j])
    np.fmax(top[0], v, out=out[0])


def _merge(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
    """``out`` = the top-k of two top-k lists (k, ..., descending, NaN = absent):
    out_j = fmax(a_j, b_j, minimum(a_{i-1}, b_{j-i}) for i = 1..j). ``out[0]`` is the scratch of
    the ranks above it, so they are written first."""
    tmp = out[0]
    for j in range(len(a) - 1, 0, -1):
        c = out[j]
        np.fmax(a[j], b[j], out=c)
        for i in range(1, j + 1):
            np.fmax(c, np.minimum(a[i - 1], b[j - i], out=tmp), out=c)
    np.fmax(a[0], b[0], out=out[0])


#: Rows per chunk of a flip (x 8 cells): a chunk's suffix[j + 1] is still in cache when suffix[j]
#: reads it (about 10 % faster than whole slots at 100,000 workloads; smaller chunks pay per call).
_FLIP_ROWS = 1 << 15


def _flip(state: PeakState) -> None:
    """Recompute ``suffix`` from the ring (suffix[j] = top-k of slots j..K-1) and empty ``prefix``."""
    ring, suffix = state.window, state.suffix
    size = len(ring)
    for lo in range(0, state.n, _FLIP_ROWS):
        rows = slice(lo, lo + _FLIP_ROWS)
        last = suffix[size - 1, :, rows]
        last[0] = ring[size - 1, rows]
        last[1:] = np.nan
        for j in range(size - 2, -1, -1):
            _insert(suffix[j + 1, :, rows], ring[j, rows], out=suffix[j, :, rows])
    state.prefix.fill(np.nan)


def rebuild(state: PeakState) -> None:
    """Recompute ``suffix`` and ``prefix`` from the window at the current head: for a caller that
    wrote the window directly (slots head..K-1 count as written before the last flip, 0..head-1
    after it)."""
    if state.prefix.shape[0]:
        _flip(state)
        for j in range(state.head):
            _insert(state.prefix, state.window[j], state.prefix, tmp=state.merged[0])


def full_sort(state: PeakState) -> PeakState:
    """The same rows without the top-k: every update sorts the window (the reference path)."""
    size, _, w, d = state.suffix.shape
    return dataclasses.replace(
        state,
        prefix=np.zeros((0, w, d), np.float32),
        suffix=np.zeros((size, 0, w, d), np.float32),
        merged=np.zeros((0, w, d), np.float32),
    )


def top_quantile(top: np.ndarray, n_valid: np.ndarray, q: float, out: np.ndarray | None = None) -> np.ndarray:
    """:func:`window_quantile` read from the top-k (k, W, 8), descending along the first axis: the
    sorted sample s_j is ``top[n - 1 - j]``; meaningless where n_valid == 0 (the caller holds r).

    The ranks and the interpolation weight depend on n alone: every cell is read as the fullest
    windows are (one weight, a scalar), then the cells of windows with fewer samples (still
    filling, or with gaps) are read again, exactly, with their own ranks and weight.
    """
    k = top.shape[0]
    most = int(n_valid.max(initial=0))
    least = int(n_valid.min(initial=most))
    n = np.arange(most + 1)
    n1 = np.maximum(n - 1, 0)
    pos = q * n1
    below = np.floor(pos)
    above = np.minimum(below + 1, n1)
    lo_of = np.minimum(n1 - below, k - 1).astype(np.intp)
    hi_of = np.minimum(n1 - above, k - 1).astype(np.intp)
    frac_of = pos - below
    lo_c, hi_c = int(lo_of[most]), int(hi_of[most])  # the columns the fullest windows read
    d = np.subtract(top[hi_c], top[lo_c], dtype=np.float64, out=out)  # NaN where a row has no sample
    d *= frac_of[most]
    d += top[lo_c]
    if least != most:
        # (not n = 0: those rows hold r whatever is read, and a simulator keeps many such spare rows;
        # comparing is cheaper than looking each count up)
        # cells numbered column by column (views, on the column-major slots; copies otherwise)
        flat_n = n_valid.T.reshape(-1)
        cells = np.flatnonzero((flat_n != most) & (flat_n != 0))
        if len(cells):
            n_r = flat_n[cells]
            flat = top.swapaxes(-1, -2).reshape(k, -1)
            lo = flat[lo_of[n_r], cells].astype(np.float64)
            hi = flat[hi_of[n_r], cells].astype(np.float64)
            col, row = np.divmod(cells, d.shape[0])
            d[row, col] = lo + frac_of[n_r] * (hi - lo)  # the same sum as above, reordered
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
