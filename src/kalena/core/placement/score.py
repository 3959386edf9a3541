"""Score terms for batch placement (seed 000 §4.1). Each term is in [0, 1]; higher is better.

``score_n = w_s * stranded_n + w_c * colocation_n + w_i * image_n + w_v * stability_n``
(weights in :class:`~kalena.core.placement.config.PlacementConfig`, which says why each has its value).

* **Stranded slack** (Borg's hybrid, neither best- nor worst-fit). With ``q(S)`` the node's slack
  quantised down to its bucket (``floor(S_d / w_d) * w_d``; quantising makes the term a pure
  function of the cache key), the fraction left after placing request ``R`` is
  ``f_d = clip((q(S)_d - R_d) / C_d, 0, 1)`` over the configured reclaimable dimensions with a
  finite, positive ``C_d``. ``stranded = 1 - 2 * std_d(f_d)``: 1 when every dimension keeps the
  same fraction free (nothing stranded), 0 at the largest possible imbalance (std of values in
  [0, 1] is at most 1/2). Normalising by ``C_d`` puts cores, GiB and MB/s on one scale.
* **Co-location**: 1 if the node hosts service and batch, 0.5 if service only (placing batch
  there creates the mix), 0 otherwise. Borg: a mix lets high-priority work expand into
  compressible low-priority capacity during a spike.
* **Image locality**: 1 if the node holds the pod's image, else 0 (and 0 for a pod with no image).
* **Stability** (the volatility penalty as a reward): ``1 - min(1, v_n / volatility_scale)`` with
  ``v_n`` from :func:`reservation_volatility`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Protocol

import numpy as np

from kalena.core.model import WorkloadSpec
from kalena.core.resources import RECLAIMABLE


def bucket_key(slack: np.ndarray, width: np.ndarray) -> np.ndarray:
    """``floor(S / w)`` per dimension: the score-cache key (``inf`` stays ``inf``)."""
    return np.floor(slack / width)


def stranded_balance(
    quantised_slack: np.ndarray, request: np.ndarray, capacity: np.ndarray, dims: np.ndarray
) -> np.ndarray:
    """``1 - 2 * std_d clip((q(S)_d - R_d) / C_d, 0, 1)`` per node over ``dims`` with finite ``C_d > 0``.

    Shapes: ``quantised_slack`` and ``capacity`` ``(k, 8)``, ``request`` ``(8,)``, ``dims`` ``(8,)`` bool.
    A node with fewer than two usable dimensions scores 1 (nothing can be stranded).
    """
    return StrandedParts(capacity, dims).balance(quantised_slack[:, dims], request[dims], slice(None))


class StrandedParts:
    """The capacity side of :func:`stranded_balance` for every node, computed once (capacity is fixed).

    Per node, on the stranded dimensions: the divisor ``C_d`` (1 where the dimension is not usable,
    so that no inf or NaN needs silencing: those cells are zeroed anyway), the unusable mask, the
    number of usable dimensions and whether there are at least two. :meth:`balance` is then the
    per-request arithmetic only. A node's value is the same to the last bit whether the cache
    recomputes it alone or among others (a tie between nodes may hinge on it): every sum adds the
    dimensions in order, which the tests check against the formula written out a column at a time.
    """

    __slots__ = ("divisor", "invalid", "safe_n", "scored")

    def __init__(self, capacity: np.ndarray, dims: np.ndarray) -> None:
        c = capacity[:, dims]
        invalid = ~(np.isfinite(c) & (c > 0))
        self.invalid = invalid
        self.divisor = np.where(invalid, 1.0, c)
        n = c.shape[1] - invalid.sum(axis=1)
        self.safe_n = np.maximum(n, 1)
        self.scored = n >= 2

    def balance(self, q: np.ndarray, request: np.ndarray, nodes: np.ndarray | slice) -> np.ndarray:
        """The term for ``nodes``: quantised slack ``q`` (k, d) and ``request`` (d,), on the dimensions.

        Every node's value is the same to the last bit whichever nodes it is computed with (the
        score cache recomputes one node or many): each sum runs over the dimensions in order.
        """
        if len(q) == 1:
            n = range(len(self.scored))[nodes][0] if isinstance(nodes, slice) else int(nodes[0])
            return self._one(q[0], request, n)
        invalid = self.invalid[nodes]
        k, d = invalid.shape
        # Column-major: NumPy then sums each row (``f.sum(axis=1)``, the einsum) one dimension
        # after another, in order, as :meth:`_one` does (a contiguous row would be summed with
        # interleaved partial sums, a different rounding).
        f = np.empty((d, k)).T
        if np.isfinite(request).all():
            np.divide(np.subtract(q, request, out=f), self.divisor[nodes], out=f)
        else:  # inf - inf on an unusable cell: NaN, zeroed below
            with np.errstate(invalid="ignore"):
                np.divide(np.subtract(q, request, out=f), self.divisor[nodes], out=f)
        np.clip(f, 0.0, 1.0, out=f)
        f[invalid] = 0.0
        safe_n = self.safe_n[nodes]
        dev = f - (f.sum(axis=1) / safe_n)[:, None]
        dev[invalid] = 0.0
        var = np.einsum("ij,ij->i", dev, dev) / safe_n
        return np.where(self.scored[nodes], 1.0 - 2.0 * np.sqrt(var), 1.0)

    def _one(self, q: np.ndarray, request: np.ndarray, n: int) -> np.ndarray:
        """:meth:`balance` for one node (the score cache's usual miss: the node a pod just went to),
        in Python floats: the same IEEE operations, each sum over the dimensions in order."""
        if not self.scored[n]:
            return np.array([1.0])
        invalid = self.invalid[n].tolist()
        f = []
        for x, r, c, bad in zip(q.tolist(), request.tolist(), self.divisor[n].tolist(), invalid, strict=True):
            f.append(0.0 if bad else min(max((x - r) / c, 0.0), 1.0))  # (unusable: 0, no inf - inf)
        safe_n = int(self.safe_n[n])
        total = 0.0
        for x in f:
            total += x
        mean = total / safe_n
        var = 0.0
        for x, bad in zip(f, invalid, strict=True):
            dev = 0.0 if bad else x - mean
            var += dev * dev
        return np.array([1.0 - 2.0 * math.sqrt(var / safe_n)])


def colocation(service_count: np.ndarray, batch_count: np.ndarray) -> np.ndarray:
    """1 where both tiers are resident, 0.5 where only service is, else 0."""
    has_service = service_count > 0
    return np.where(has_service & (batch_count > 0), 1.0, np.where(has_service, 0.5, 0.0))


def stability(volatility: np.ndarray, scale: float) -> np.ndarray:
    """``1 - min(1, v / scale)``: 1 for a flat reservation series, 0 at or above ``scale``."""
    return 1.0 - np.minimum(1.0, np.maximum(volatility, 0.0) / scale)


def reservation_volatility(
    series: np.ndarray, capacity: np.ndarray, dims: np.ndarray = RECLAIMABLE
) -> np.ndarray:
    """Per node, the variance over time of ``U_t / C``, averaged over ``dims`` with finite ``C > 0``.

    ``series``: ``(T, N, 8)`` reservation-ledger sums ``U_t`` (NaN = missing sample, ignored);
    ``capacity``: ``(N, 8)``. A dimension needs two samples to have a variance; a node with no
    such dimension gets 0. Normalising by capacity makes a 1-core wobble on a 4-core node count
    as much as a 16-core wobble on a 64-core node.
    """
    x = series[:, :, dims]
    c = capacity[:, dims]
    usable = np.isfinite(c) & (c > 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        frac = x / np.where(usable, c, 1.0)[None]
    present = ~np.isnan(frac)
    cnt = present.sum(axis=0)
    safe = np.maximum(cnt, 1)
    mean = np.where(present, frac, 0.0).sum(axis=0) / safe
    var = np.where(present, (frac - mean[None]) ** 2, 0.0).sum(axis=0) / safe
    ok = usable & (cnt >= 2)
    n_ok = ok.sum(axis=1)
    return np.where(n_ok > 0, np.where(ok, var, 0.0).sum(axis=1) / np.maximum(n_ok, 1), 0.0)


def image_masks(present: Sequence[frozenset[str] | set[str]]) -> dict[str, np.ndarray]:
    """From one set of images per node to image -> ``(N,)`` bool (the form the context takes)."""
    n = len(present)
    out: dict[str, np.ndarray] = {}
    for i, images in enumerate(present):
        for image in images:
            out.setdefault(image, np.zeros(n, dtype=bool))[i] = True
    return out


class ScoreView(Protocol):
    """What a score term reads from a pass (implemented by ``PassState``)."""

    service_count: np.ndarray
    batch_count: np.ndarray
    colocation: np.ndarray  # (N,) ``colocation(service_count, batch_count)``, kept current by the pass
    stability: np.ndarray
    images: Mapping[str, np.ndarray]

    def stranded(self, pod: WorkloadSpec, nodes: np.ndarray) -> np.ndarray: ...


class Score(Protocol):
    """One score plugin: ``score`` returns values in [0, 1] for ``nodes``; the weight is configured."""

    name: str

    def score(self, pod: WorkloadSpec, view: ScoreView, nodes: np.ndarray) -> np.ndarray: ...


class StrandedSlack:
    name = "stranded"

    def score(self, pod: WorkloadSpec, view: ScoreView, nodes: np.ndarray) -> np.ndarray:
        return view.stranded(pod, nodes)  # cached per request vector when reuse is on


class CoLocation:
    name = "colocation"

    def score(self, pod: WorkloadSpec, view: ScoreView, nodes: np.ndarray) -> np.ndarray:
        return view.colocation[nodes]


class ImageLocality:
    name = "image"

    def score(self, pod: WorkloadSpec, view: ScoreView, nodes: np.ndarray) -> np.ndarray:
        mask = view.images.get(pod.image) if pod.image else None
        return np.zeros(len(nodes)) if mask is None else mask[nodes].astype(np.float64)


class LowVolatility:
    name = "volatility"

    def score(self, pod: WorkloadSpec, view: ScoreView, nodes: np.ndarray) -> np.ndarray:
        return view.stability[nodes]


DEFAULT_SCORES: tuple[Score, ...] = (StrandedSlack(), CoLocation(), ImageLocality(), LowVolatility())
