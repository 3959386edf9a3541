"""A decaying-histogram percentile estimator, as the Kubernetes VPA recommender builds one.

Per workload and dimension, samples go into a histogram whose bucket boundaries grow
geometrically (ratio rho) and whose sample weights decay with half-life h, so old samples count
less. The reservation is the target percentile p of that weighted distribution times a margin::

    r_t = min(L, m * E(p))

Buckets, in units of a per-cell ``scale`` s (below): bucket i covers [b_i, b_{i+1}) with
b_i = f * (rho**i - 1) / (rho - 1), so b_1 = f is the first bucket's width and each bucket is
rho times wider than the one before (5 % resolution at rho = 1.05). A sample u lands in bucket
i = floor(log_rho(1 + (u / s) * (rho - 1) / f)); the last bucket also takes every larger value
(overflow). E(p) is the upper edge s * b_{i+1} of the first bucket whose cumulative weight reaches
p * (total weight), the VPA's conservative choice; for the overflow bucket E(p) = inf, i.e. r = L.

Decay: a sample at time t gets weight 2 ** ((t - t_ref) / h) instead of decaying every stored
weight each step (the VPA trick: same relative weights, one bucket touched per sample). When the
newest weight passes 2**32 everything is multiplied by an exact power of two and t_ref moves up,
which keeps float32 far from overflow. A missing sample therefore changes nothing, and r holds.

Scale: s = R where R > 0 (buckets relative to the request: usage up to ``top`` x R is resolved
at 5 %, see :meth:`HistogramParams.top`), else L / top so the histogram spans exactly [0, L]
(e.g. a dimension with no request), else 1 IR unit (no request and no finite limit).

Defaults, from the VPA recommender: rho = 1.05, p = 0.9, margin 1.15 (its 0.15 margin fraction),
h = 24 h (its CPU histogram half-life). f = 0.01 mirrors its first CPU bucket of 0.01 cores for a
one-core request, and 80 buckets then reach 9.2 x R. Unlike the VPA, every sample weighs the same
before decay (the VPA weights CPU samples by the request, a constant per workload here, and uses
per-day peaks for memory). No sample yet: r holds (r_0 = R). The shared rules of
:mod:`kalena.core.estimators.base` apply.

Memory per workload: 8 x n_buckets float32 (2.5 KB at 80 buckets) plus about 560 B (the rows of
:mod:`~kalena.core.estimators.base` and a (W, 8) percentile cache); an update allocates only a few
(W, 8) temporaries. p < 1 because the cache compares float64 sums against float32 buckets, equal
to about 1e-7: at p = 1 that rounding could push j into empty buckets (use PeakWithMargin with
quantile 1 for a windowed maximum). Float32 weights are adequate while h / dt < ~10**6.
"""

from __future__ import annotations

import math
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
    rows_first,
)
from kalena.core.validate import check_fraction, check_int, check_number

#: Renormalise when the newest weight passes 2**32: sums stay far below float32's 3.4e38 for any
#: realistic sample count, and weights under 2**-24 of the newest are negligible in float32 anyway.
_RENORM_HALVINGS = 32


@dataclass(frozen=True, slots=True)
class HistogramParams:
    """p in (0, 1), m >= 1, h > 0, rho > 1, f > 0 and n_buckets >= 2."""

    target_percentile: float = 0.9
    margin: float = 1.15
    half_life_s: float = 86_400.0
    bucket_ratio: float = 1.05
    first_bucket: float = 0.01
    n_buckets: int = 80

    def __post_init__(self) -> None:
        check_fraction(self, "target_percentile", lo_open=True, hi_open=True)
        check_number(self, "margin", lo=1.0)
        check_number(self, "half_life_s", lo_open=True)
        check_number(self, "bucket_ratio", lo=1.0, lo_open=True)
        check_number(self, "first_bucket", lo_open=True)
        check_int(self, "n_buckets", lo=2)

    def lower_edges(self) -> np.ndarray:
        """b_0 .. b_{B-1} in units of the scale."""
        rho = self.bucket_ratio
        return self.first_bucket * (rho ** np.arange(self.n_buckets) - 1.0) / (rho - 1.0)

    def upper_edges(self) -> np.ndarray:
        """E for each bucket: b_{i+1}, and inf for the overflow bucket."""
        return np.append(self.lower_edges()[1:], np.inf)

    def top(self) -> float:
        """Lower edge of the overflow bucket, in units of the scale (9.24 with the defaults)."""
        return float(self.lower_edges()[-1])


@dataclass(slots=True, eq=False)
class HistogramState(EstimatorState):
    """``hist`` is the histogram; ``bucket``, ``below``, ``at`` and ``total`` cache its percentile.

    The cache (derivable from ``hist``) turns the per-update percentile from a pass over all
    8 x B buckets into a few (W, 8) passes: bucket j is the first bucket whose cumulative weight
    reaches p * total, i.e. below < p * total <= below + hist[j], with below the weight in
    buckets < j. A new sample moves j by a bucket or so, and only those cells are touched.
    """

    hist: np.ndarray  # (W, 8, B) float32 weights
    scale: np.ndarray  # (W, 8) float64 bucket unit s
    bucket: np.ndarray  # (W, 8) intp: j, the target-percentile bucket
    below: np.ndarray  # (W, 8) float64: weight in buckets < j
    at: np.ndarray  # (W, 8) float32: hist[j], a copy that spares a gather per update
    total: np.ndarray  # (W, 8) float64: all weight
    t_ref: float = math.nan  # time whose samples weigh 1 (set by the first update)


@dataclass(frozen=True, slots=True)
class DecayingHistogram(EstimatorBase[HistogramState]):
    """The VPA recommender's estimator, vectorised; see the module docstring for the formulas."""

    params: HistogramParams = field(default_factory=HistogramParams)
    #: Its lowest bucket reports a little above 0 for a dimension nobody uses (VPA's bucket bound),
    #: so such a dimension cannot be left out of ``dims`` without changing the answer.
    zero_stays_zero: ClassVar[bool] = False

    def new_state(self, rows: dict[str, Any], classes: ArrayLike | None) -> HistogramState:
        req, lim = rows["requests"], rows["limits"]  # one margin for every class
        spanning = np.where(np.isfinite(lim) & (lim > 0), lim / self.params.top(), 1.0)
        return HistogramState(  # rows first, as the shared rows (see _flat)
            **rows,
            hist=full_rows_first((*req.shape, self.params.n_buckets), 0.0, np.float32),
            scale=rows_first(np.where(req > 0, req, spanning)),
            bucket=full_rows_first(req.shape, 0, np.intp),
            below=full_rows_first(req.shape, 0.0, np.float64),
            at=full_rows_first(req.shape, 0.0, np.float32),
            total=full_rows_first(req.shape, 0.0, np.float64),
        )

    def update_in_place(self, state: HistogramState, usage: np.ndarray, now: float, dt: float) -> np.ndarray:
        usage = check_step(state, usage, now, dt)
        p = self.params
        hold = held_rows(state, now)
        if math.isnan(state.t_ref):
            state.t_ref = now
        halvings = math.floor((now - state.t_ref) / p.half_life_s)
        if halvings > _RENORM_HALVINGS:  # scale by an exact power of two: the cache stays exact
            for arr in (state.hist, state.below, state.at, state.total):
                arr *= arr.dtype.type(2.0**-halvings)
            state.t_ref += halvings * p.half_life_s
        weight = float(np.float32(2.0 ** ((now - state.t_ref) / p.half_life_s)))
        self._record(state, usage, hold, weight)
        _settle(state, p.target_percentile)

        est = np.take(p.upper_edges(), state.bucket, out=state.spare)
        est *= state.scale
        est *= p.margin
        empty = state.total == 0.0
        if empty.any():  # no sample yet: hold r (r_0 = R)
            np.copyto(est, state.reservation, where=empty)
        return finalize(state, usage, hold)

    def _record(self, state: HistogramState, usage: np.ndarray, hold: np.ndarray, weight: float) -> None:
        """Add ``weight`` to the bucket of each valid sample (not missing, row not held)."""
        p = self.params
        pos = np.divide(usage, state.scale, out=state.spare)
        pos *= (p.bucket_ratio - 1.0) / p.first_bucket
        np.log1p(pos, out=pos)
        pos /= math.log(p.bucket_ratio)
        np.fmax(pos, 0.0, out=pos)  # fmax also turns a missing sample's NaN into bucket 0
        np.minimum(pos, p.n_buckets - 1, out=pos)
        cell = pos.astype(np.intp)
        add = np.where(np.isnan(usage) | hold[:, None], 0.0, weight)
        state.total += add
        state.below += add * (cell < state.bucket)
        state.at += add * (cell == state.bucket)  # same float32 rounding as the bucket itself
        # each cell's first bucket in _flat's numbering (cells column by column)
        cell += np.arange(0, cell.size * p.n_buckets, p.n_buckets).reshape(cell.shape[::-1]).T
        _flat(state.hist)[cell] += add  # one sample per cell, so indices are unique


def _flat(a: np.ndarray) -> np.ndarray:
    """A 1-D view of a (W, 8) or (W, 8, B) field, cells numbered column by column, a cell's
    buckets together (never a copy: writes through it must reach the state)."""
    t = a.swapaxes(0, 1)
    if not t.flags.c_contiguous:
        raise RuntimeError("histogram state lost its layout (rows first)")
    return t.reshape(-1)


def _settle(state: HistogramState, q: float) -> None:
    """Move each cell's j until below < q * total <= below + hist[j] (j = 0 when total = 0)."""
    last = state.hist.shape[-1] - 1
    hist, j, below, at = _flat(state.hist), _flat(state.bucket), _flat(state.below), _flat(state.at)
    thr = q * _flat(state.total)
    cells = np.flatnonzero((below + at < thr) & (j < last))
    while cells.size:  # up: the mass at or below j no longer reaches the threshold
        below[cells] += at[cells]
        j[cells] += 1
        at[cells] = hist[cells * (last + 1) + j[cells]]
        cells = cells[(below[cells] + at[cells] < thr[cells]) & (j[cells] < last)]
    cells = np.flatnonzero((below >= thr) & (j > 0))
    while cells.size:  # down: the buckets below j already reach it
        j[cells] -= 1
        at[cells] = hist[cells * (last + 1) + j[cells]]
        below[cells] -= at[cells]
        cells = cells[(below[cells] >= thr[cells]) & (j[cells] > 0)]
