"""Usage distributions kept small: bucket summaries, their exact merge, and what the archive reports.

The usage archive cannot keep every raw sample for ever, yet the Stationkeeper reads a p99 over
days and the export a p95 over a week. So each bucket (5 minutes, then 1 hour) keeps, per
dimension, its sample count, mean and five **knots**: the min, p50, p95, p99 and max of its
samples (:data:`KNOT_LEVELS`). A bucket stands for the distribution whose CDF runs linearly
between its knots (a knot repeated is a point mass), which it matches exactly at the five levels.

Merging buckets (5-minute into 1-hour ones, or a whole window for the export) takes the quantiles
of the count-weighted **mixture** of those CDFs, found exactly by a sweep over the knots, never
by averaging quantiles. Two properties follow and are tested: the merged max (min) is the largest
(smallest) of the buckets', and any merged quantile lies between the smallest and the largest of
the buckets' own at that level.

Everything here is vectorised over many groups at once (a group: one workload's buckets to merge
into one), with NaN for a dimension a group never measured.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: The quantile levels a bucket keeps (min, p50, p95, p99, max).
KNOT_LEVELS = np.array([0.0, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 1.0])
#: A knot segment shorter than this share of its group's value range counts as a point mass, so a
#: near-tie never turns into a huge density and the sweep's float error stays below ~1e-7 of mass.
_POINT = 1e-9


@dataclass(frozen=True, slots=True)
class Buckets:
    """B buckets over D dimensions: ``group`` (B,) the caller's key (a workload's index),
    ``start`` (B,) the bucket's start time, ``count`` (B, D) samples measured, ``mean`` (B, D),
    ``knots`` (B, K, D) at :data:`KNOT_LEVELS` (NaN where the count is 0)."""

    group: np.ndarray
    start: np.ndarray
    count: np.ndarray
    mean: np.ndarray
    knots: np.ndarray

    def __len__(self) -> int:
        return len(self.group)


def _runs(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Starts and ids of the runs of equal rows in sorted ``keys`` (N, k)."""
    n = len(keys)
    new = np.ones(n, dtype=bool)
    if n > 1:
        new[1:] = np.any(keys[1:] != keys[:-1], axis=1)
    return np.flatnonzero(new), np.cumsum(new) - 1


def summarise(group: np.ndarray, t: np.ndarray, values: np.ndarray, width: float) -> Buckets:
    """Raw samples (``group`` (N,), time ``t`` (N,), ``values`` (N, D), NaN = not measured) into one
    bucket per (group, ``floor(t / width)``), sorted by group then start. Quantiles interpolate
    linearly between order statistics (NumPy's default), so a bucket's knots are ``np.quantile``'s."""
    group = np.asarray(group, dtype=np.int64)
    t = np.asarray(t, dtype=np.float64)
    values = np.asarray(values, dtype=np.float64)
    slot = np.floor(t / width).astype(np.int64)
    order = np.lexsort((slot, group))
    keys = np.stack([group[order], slot[order]], axis=1)
    starts, ids = _runs(keys)
    nb = len(starts)
    d = values.shape[1]
    count = np.zeros((nb, d), dtype=np.int64)
    mean = np.full((nb, d), np.nan)
    knots = np.full((nb, len(KNOT_LEVELS), d), np.nan)
    for j in range(d):
        v = values[order, j]
        missing = np.isnan(v)
        # within a bucket: measured values ascending, the missing ones after them
        inner = np.lexsort((np.where(missing, 0.0, v), missing, ids))
        v = v[inner]
        n = np.bincount(ids, weights=~missing, minlength=nb).astype(np.int64)
        count[:, j] = n
        has = n > 0
        total = np.bincount(ids, weights=np.where(missing, 0.0, values[order, j]), minlength=nb)
        mean[has, j] = total[has] / n[has]
        pos = starts[has, None] + KNOT_LEVELS[None, :] * (n[has, None] - 1)
        lo = np.floor(pos).astype(np.int64)
        hi = np.minimum(lo + 1, (starts[has] + n[has] - 1)[:, None])
        frac = pos - lo
        knots[has, :, j] = v[lo] + (v[hi] - v[lo]) * frac
    first = order[starts]
    return Buckets(group=group[first], start=slot[first] * width, count=count, mean=mean, knots=knots)


def mixture_quantiles(
    group: np.ndarray, count: np.ndarray, knots: np.ndarray, levels: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The ``levels`` quantiles of each group's count-weighted mixture of bucket distributions.

    ``group`` (B,) sorted ascending, ``count`` (B, D), ``knots`` (B, K, D). Returns the groups (G,)
    in order and the quantiles (G, len(levels), D); NaN where a group has no sample of a dimension.
    """
    group = np.asarray(group, dtype=np.int64)
    levels = np.asarray(levels, dtype=np.float64)
    b, _, d = knots.shape
    if b == 0:
        return group[:0], np.zeros((0, len(levels), d))
    starts, gid = _runs(group[:, None])
    ng = len(starts)
    out = np.full((ng, len(levels), d), np.nan)
    dp = np.diff(KNOT_LEVELS)  # (K-1,) the mass of each knot segment
    for j in range(d):
        c = count[:, j].astype(np.float64)
        total = np.bincount(gid, weights=c, minlength=ng)
        w = np.divide(c, total[gid], out=np.zeros_like(c), where=total[gid] > 0)
        x = knots[:, :, j]
        use = c > 0
        lo_g = np.full(ng, np.inf)
        hi_g = np.full(ng, -np.inf)
        np.minimum.at(lo_g, gid[use], x[use, 0])
        np.maximum.at(hi_g, gid[use], x[use, -1])
        measured = total > 0
        if np.array_equal(lo_g[measured], hi_g[measured]):
            # every group's samples all have one value (a dimension nobody uses: all zeros): each
            # mixture is a point mass, and every quantile its value, as the sweep finds it
            out[measured, :, j] = lo_g[measured, None]
            continue
        span = np.where(hi_g > lo_g, hi_g - lo_g, 1.0)
        # each bucket's segments, scaled to its group's [0, 1]: events where the density starts
        # (+m / len) and stops (-m / len), or one jump of m for a point mass
        a = (x[:, :-1] - lo_g[gid, None]) / span[gid, None]
        z = (x[:, 1:] - lo_g[gid, None]) / span[gid, None]
        m = w[:, None] * dp[None, :]
        keep = use[:, None] & (m > 0)
        point = keep & (z - a <= _POINT)
        slope = np.where(keep & ~point, m / np.where(point | ~keep, 1.0, z - a), 0.0)
        g2 = np.broadcast_to(gid[:, None], a.shape)
        ev_g = np.concatenate([g2[keep], g2[keep & ~point]])
        ev_x = np.concatenate([a[keep], z[keep & ~point]])
        ev_xo = np.concatenate([x[:, :-1][keep], x[:, 1:][keep & ~point]])  # unscaled: answers exact
        ev_ds = np.concatenate([slope[keep], -slope[keep & ~point]])
        ev_jump = np.concatenate([np.where(point, m, 0.0)[keep], np.zeros(int((keep & ~point).sum()))])
        # ties in the scaled position broken by the value itself: a subnormal next to 0 scales to
        # 0 too, and the mixture's minimum must stay the smaller of the two
        order = np.lexsort((ev_xo, ev_x, ev_g))
        ev_g, ev_x, ev_xo = ev_g[order], ev_x[order], ev_xo[order]
        ev_ds, ev_jump = ev_ds[order], ev_jump[order]
        if len(ev_g) == 0:
            continue
        e_starts, _ = _runs(ev_g[:, None])
        first = np.zeros(len(ev_g), dtype=bool)
        first[e_starts] = True
        run_start = np.maximum.accumulate(np.where(first, np.arange(len(ev_g)), 0))
        cs = np.cumsum(ev_ds)
        slope_after = cs - (cs[run_start] - ev_ds[run_start])  # this group's active density
        dx = np.diff(ev_x, prepend=0.0)
        prev_slope = np.concatenate([[0.0], slope_after[:-1]])
        inc = np.where(first, ev_jump, prev_slope * dx + ev_jump)
        ci = np.cumsum(inc)
        cdf = ci - (ci[run_start] - inc[run_start])  # F just after each event, within its group
        cdf = np.clip(cdf, 0.0, 1.0)
        # monotone within each group despite float noise: a running max that restarts per group
        cdf = np.maximum.accumulate(cdf + ev_g * 2.0) - ev_g * 2.0
        # invert: for each (group, level) the first event where F reaches the level, and the
        # linear piece that leads up to it (F is linear between events, jumps only at events)
        gl = np.unique(ev_g)
        key = cdf + ev_g * 2.0
        want = gl[:, None] * 2.0 + np.clip(levels[None, :] - 1e-12, 0.0, 1.0)
        at = np.searchsorted(key, want.ravel(), side="left").reshape(want.shape)
        ends = np.append(e_starts[1:], len(ev_g)) - 1
        at = np.minimum(at, ends[:, None])
        f_here = cdf[at]
        x_here = ev_xo[at]
        is_first = first[at]
        prev = np.maximum(at - 1, 0)
        f_before = np.where(is_first, 0.0, cdf[prev])
        f_cont = f_here - ev_jump[at]  # F just before this event's jump
        x_prev = np.where(is_first, x_here, ev_xo[prev])
        target = np.clip(levels[None, :], 0.0, 1.0)
        rising = (~is_first) & (f_cont > f_before) & (target < f_cont)
        frac = np.divide(target - f_before, f_cont - f_before, out=np.ones_like(f_here), where=rising)
        xq = np.where(rising, x_prev + np.clip(frac, 0.0, 1.0) * (x_here - x_prev), x_here)
        out[gl, :, j] = xq
    return group[starts], out


def merge(buckets: Buckets, width: float) -> Buckets:
    """Buckets into coarser ones (each group's buckets by ``floor(start / width)``): counts add,
    means weigh by count, knots are the mixture's quantiles at :data:`KNOT_LEVELS`."""
    slot = np.floor(buckets.start / width).astype(np.int64)
    order = np.lexsort((slot, buckets.group))
    keys = np.stack([buckets.group[order], slot[order]], axis=1)
    starts, ids = _runs(keys)
    count = buckets.count[order]
    total = np.zeros((len(starts), count.shape[1]), dtype=np.int64)
    np.add.at(total, ids, count)
    summed = np.zeros(total.shape)
    np.add.at(summed, ids, np.where(count > 0, buckets.mean[order], 0.0) * count)
    mean = np.divide(summed, total, out=np.full(total.shape, np.nan), where=total > 0)
    _, knots = mixture_quantiles(ids, count, buckets.knots[order], KNOT_LEVELS)
    first = order[starts]
    return Buckets(buckets.group[first], slot[first] * width, total, mean, knots)


def above_fraction(
    group: np.ndarray, count: np.ndarray, knots: np.ndarray, threshold: np.ndarray
) -> np.ndarray:
    """Per group (G, D): the share of its mixture's mass above ``threshold`` (G, D); NaN where a
    group measured nothing or the threshold is NaN. Exact for raw samples summarised one bucket
    each, an interpolation between the knots otherwise."""
    group = np.asarray(group, dtype=np.int64)
    starts, gid = _runs(group[:, None])
    thr = np.asarray(threshold, dtype=np.float64)[gid]  # (B, D)
    x = knots  # (B, K, D)
    # each bucket's CDF at the threshold, linear between its knots (right-continuous at ties)
    below = np.zeros(thr.shape)
    for kk in range(len(KNOT_LEVELS) - 1):
        a, z = x[:, kk, :], x[:, kk + 1, :]
        p0, p1 = KNOT_LEVELS[kk], KNOT_LEVELS[kk + 1]
        inside = (thr >= a) & (thr < z)
        frac = np.divide(thr - a, z - a, out=np.zeros_like(thr), where=inside)
        below = np.where(inside, p0 + frac * (p1 - p0), below)
    below = np.where(thr >= x[:, -1, :], 1.0, below)
    c = count.astype(np.float64)
    mass = np.zeros((len(starts), c.shape[1]))
    np.add.at(mass, gid, np.where(c > 0, (1.0 - below) * c, 0.0))
    total = np.zeros_like(mass)
    np.add.at(total, gid, c)
    out = np.divide(mass, total, out=np.full(mass.shape, np.nan), where=total > 0)
    return np.where(np.isnan(np.asarray(threshold, dtype=np.float64)), np.nan, out)


def drift(requests: np.ndarray, p95_reservation: np.ndarray) -> np.ndarray:
    """Blueprint drift per dimension (seed 000 §5.3): the sum over production workloads of
    ``|request - p95 reservation|`` over the sum of their requests; NaN where nothing is requested.
    Workloads with no reservation seen in a dimension are left out of it (both sums)."""
    req = np.asarray(requests, dtype=np.float64)
    res = np.asarray(p95_reservation, dtype=np.float64)
    seen = np.isfinite(res) & np.isfinite(req)
    num = np.where(seen, np.abs(req - res), 0.0).sum(axis=0)
    den = np.where(seen, req, 0.0).sum(axis=0)
    return np.divide(num, den, out=np.full(num.shape, np.nan), where=den > 0)


def regroup(buckets: Buckets, group: np.ndarray) -> Buckets:
    """The same buckets under new group keys (``group`` (B,): e.g. each pod's declaration),
    sorted by them, so a merge pools the members of each new group."""
    group = np.asarray(group, dtype=np.int64)
    order = np.argsort(group, kind="stable")
    b = buckets
    return Buckets(group[order], b.start[order], b.count[order], b.mean[order], b.knots[order])
