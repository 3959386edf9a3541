"""The estimator interface, the shared state rows and the rules every estimator obeys.

An estimator turns a stream of usage samples into the reservation r of SPEC "The reservation",
vectorised over W workloads x 8 dimensions (order of :data:`kalena.core.resources.DIMS`).

Shared rules (seed 000 §2.5), written once here and applied by :func:`finalize`:

1. cap at the limit: r <= L (the caller passes node capacity where there is no limit);
2. a missing sample (NaN) holds r: r_t = r_{t-1}, never a decay on missing data;
3. a held row has r = R: younger than its startup grace (now < started_at + grace) or opted
   out (``kalena.naughtian.io/reclaim: disabled``); held rows also record no sample, because
   startup transients do not resemble steady state and the opt-out suppresses estimation;
4. the gpu dimension always has r = R (non-reclaimable, seed 000 §2.4).

r_0 = R for every row. The state is plain NumPy arrays whose leading axis is the workload (or the
axis a state names in ``ROW_AXES``), so :func:`append_rows`, :func:`select_rows` and
:func:`assign_rows` work on every estimator's state without knowing it.

**Estimated dimensions.** ``init(..., dims=...)`` estimates only the dimensions listed; every other
one holds r = R. The caller names the dimensions some row requests or uses: where no row ever
requests or uses a dimension, an estimator whose ``zero_stays_zero`` is true gives r = 0 = R
there anyway, so the answer is the same bit for bit at a fraction of the work (Irina's pods use
two of the eight beside gpu, which rule 4 holds at R whatever ``dims`` says). The rows then keep
one column per estimated dimension, and the update still takes and returns all 8.

**Layout.** The shared (W, k) rows are column-major: every rule works a dimension at a time
over all rows, and a column of a row-major (W, 8) array is a strided pass that reads a whole
cache line per cell. :func:`copy_state`, :func:`select_rows` and :func:`append_rows` keep every row
field so (:func:`rows_first`); the values are the same in any layout.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, Protocol, TypeVar

import numpy as np
from numpy.typing import ArrayLike

from kalena.core.classify import DEFAULT_STARTUP_GRACE_S
from kalena.core.resources import DIMS, GPU, NDIM, dim_indices


@dataclass(slots=True, eq=False)
class EstimatorState:
    """Rows shared by every estimator. Every ndarray field has the workload as its leading axis.

    ``reservation`` is r_t. ``spare`` and ``missing`` are scratch buffers reused by each update
    (their contents mean nothing between calls); ``spare`` and ``reservation`` swap roles on each
    update, so an update allocates no (W, 8) result array.
    """

    requests: np.ndarray  # (W, 8) float64, R
    limits: np.ndarray  # (W, 8) float64, L (inf allowed: no cap)
    grace_until: np.ndarray  # (W,) float64, started_at + startup grace
    pinned: np.ndarray  # (W,) bool, reclaim disabled
    reservation: np.ndarray  # (W, 8) float64, r_t
    spare: np.ndarray  # (W, 8) float64 scratch
    missing: np.ndarray  # (W, 8) bool scratch

    #: The dimensions estimated, ascending and without gpu, or None for all 8 (module docstring):
    #: the (W, 8) rows above then have one column per dimension listed, and ``full`` holds r_t on
    #: all 8, the dimensions not listed at R.
    dims: tuple[int, ...] | None = field(default=None, kw_only=True)
    full: np.ndarray | None = field(default=None, kw_only=True)

    #: Fields whose workload axis is not the first (a ring stored slot-major, say): name -> axis.
    ROW_AXES: ClassVar[dict[str, int]] = {}

    @property
    def n(self) -> int:
        """Number of workloads (rows)."""
        return int(self.requests.shape[0])


S = TypeVar("S", bound=EstimatorState)


class ReservationEstimator(Protocol[S]):
    """What the ledger and the simulator call. Implementations are frozen and hold only params."""

    #: Whether a dimension no row requests or uses may be left out of ``dims`` (module docstring).
    zero_stays_zero: ClassVar[bool]

    def init(
        self,
        requests: ArrayLike,
        limits: ArrayLike,
        started_at: ArrayLike,
        *,
        grace: ArrayLike | None = None,
        pinned: ArrayLike | None = None,
        classes: ArrayLike | None = None,
        dims: Sequence[int] | None = None,
    ) -> S:
        """State for W new workloads with r_0 = R (``dims``: the dimensions estimated)."""
        ...

    def update_in_place(self, state: S, usage: np.ndarray, now: float, dt: float) -> np.ndarray:
        """Advance ``state`` by one sample (W, 8), NaN = missing; return r_t (W, 8).

        The returned array belongs to the state and is overwritten by the next call.
        """
        ...

    def update(self, state: S, usage: np.ndarray, now: float, dt: float) -> tuple[S, np.ndarray]:
        """Pure form of :meth:`update_in_place`: ``state`` is left untouched."""
        ...


class EstimatorBase(Generic[S]):
    """What the three estimators share: ``init`` (validation, r_0 = R) and the pure ``update``.

    An estimator adds :meth:`new_state` (its own arrays beside the validated rows) and
    :meth:`update_in_place`.
    """

    __slots__ = ()

    #: With R = 0 and only zero or missing samples, r stays 0: a dimension no row requests or uses
    #: may be left out of ``dims`` without changing an answer (module docstring).
    zero_stays_zero: ClassVar[bool] = True

    def init(
        self,
        requests: ArrayLike,
        limits: ArrayLike,
        started_at: ArrayLike,
        *,
        grace: ArrayLike | None = None,
        pinned: ArrayLike | None = None,
        classes: ArrayLike | None = None,
        dims: Sequence[int] | None = None,
    ) -> S:
        """State for W new workloads with r_0 = R; bad input raises ValueError naming key and value.

        ``grace`` defaults to 300 s and ``pinned`` to False; ``classes`` is used only by
        estimators whose margin depends on the class (PeakWithMargin); ``dims``: the dimensions
        estimated (module docstring), all 8 by default.
        """
        return self.new_state(base_fields(requests, limits, started_at, grace, pinned, dims), classes)

    def new_state(self, rows: dict[str, Any], classes: ArrayLike | None) -> S:
        raise NotImplementedError

    def update_in_place(self, state: S, usage: np.ndarray, now: float, dt: float) -> np.ndarray:
        raise NotImplementedError

    def update(self, state: S, usage: np.ndarray, now: float, dt: float) -> tuple[S, np.ndarray]:
        new = copy_state(state)
        return new, self.update_in_place(new, usage, now, dt)


# construction --------------------------------------------------------------------------------------
def _bad_cell(name: str, arr: np.ndarray, bad: np.ndarray, what: str) -> ValueError:
    idx = tuple(int(i) for i in np.argwhere(bad)[0])
    where = f"{idx[0]}, {DIMS[idx[1]]}" if len(idx) == 2 else f"{idx[0]}"
    return ValueError(f"{name}[{where}] {what}, got {arr[idx].item()!r}")


def _rows(name: str, value: ArrayLike, shape: tuple[int, ...], dtype: type) -> np.ndarray:
    arr = np.array(value, dtype=dtype, order="F")
    if arr.ndim == 0:  # one value for every row
        return np.full(shape, arr, dtype=dtype, order="F")
    if arr.shape != shape:
        raise ValueError(f"{name} must have shape {shape}, got {arr.shape}")
    return arr


def _check_dims(dims: Sequence[int]) -> tuple[int, ...]:
    out = dim_indices(dims)
    if GPU in out:
        raise ValueError(f"dims must leave out gpu ({GPU}): rule 4 holds its reservation at the request")
    return out


def base_fields(
    requests: ArrayLike,
    limits: ArrayLike,
    started_at: ArrayLike,
    grace: ArrayLike | None,
    pinned: ArrayLike | None,
    dims: Sequence[int] | None = None,
) -> dict[str, Any]:
    """Validated fields of :class:`EstimatorState`; bad input raises ValueError naming key and value."""
    req = np.array(requests, dtype=np.float64, order="F")
    if req.ndim != 2 or req.shape[1] != NDIM:
        raise ValueError(f"requests must have shape (W, {NDIM}), got {req.shape}")
    w = req.shape[0]
    lim = _rows("limits", limits, (w, NDIM), np.float64)
    start = _rows("started_at", started_at, (w,), np.float64)
    gr = _rows("grace", DEFAULT_STARTUP_GRACE_S if grace is None else grace, (w,), np.float64)
    pin = _rows("pinned", False if pinned is None else pinned, (w,), np.bool_)
    for name, arr, bad, what in (
        ("requests", req, ~np.isfinite(req) | (req < 0), "must be a finite number >= 0"),
        ("limits", lim, np.isnan(lim) | (lim < req), "must be >= the request (inf = no limit)"),
        ("started_at", start, ~np.isfinite(start), "must be a finite time in seconds"),
        ("grace", gr, ~np.isfinite(gr) | (gr < 0), "must be a finite duration >= 0 s"),
    ):
        if bad.any():
            raise _bad_cell(name, arr, bad, what)
    out: dict[str, Any] = {}
    if dims is not None:
        d = _check_dims(dims)
        out = {"dims": d, "full": np.copy(req)}  # r_0 = R on all 8
        req, lim = req[:, list(d)], lim[:, list(d)]
    return out | {
        "requests": req,
        "limits": lim,
        "grace_until": start + gr,
        "pinned": pin,
        "reservation": np.copy(req),  # r_0 = R
        "spare": np.empty_like(req),
        "missing": np.empty_like(req, dtype=np.bool_),
    }


def check_step(state: EstimatorState, usage: np.ndarray, now: float, dt: float) -> np.ndarray:
    """Cheap per-call checks (shapes and scalars only: the hot path does not scan values); returns
    the usage of the estimated dimensions (``usage`` itself when all 8 are)."""
    want = state.requests.shape if state.dims is None else (state.n, NDIM)
    if usage.shape != want:
        raise ValueError(f"usage must have shape {want}, got {usage.shape}")
    if not np.isfinite(now):
        raise ValueError(f"now must be a finite time in seconds, got {now!r}")
    if not (np.isfinite(dt) and dt >= 0):
        raise ValueError(f"dt must be a finite sample spacing >= 0 s, got {dt!r}")
    # A gather into a fresh (W, k) array, in usage's layout (take would make a column-major
    # usage row-major, one strided pass per column).
    return usage if state.dims is None else usage[:, list(state.dims)]


# the shared rules ----------------------------------------------------------------------------------
def held_rows(state: EstimatorState, now: float) -> np.ndarray:
    """(W,) bool: rows whose reservation is pinned at R (startup grace or reclaim opt-out)."""
    return state.pinned | (now < state.grace_until)


def finalize(state: EstimatorState, usage: np.ndarray, hold: np.ndarray) -> np.ndarray:
    """Apply rules 1-4 to the raw estimate in ``state.spare`` and make it r_t; return r_t on all 8
    dimensions (``usage``: the estimated dimensions' samples, as :func:`check_step` returns them).

    Rule order matters only for clarity: R <= L and r_{t-1} <= L, so every rule keeps r <= L.
    """
    est = state.spare
    np.minimum(est, state.limits, out=est)  # 1. cap at the limit
    missing = np.isnan(usage, out=state.missing)
    if missing.any():  # 2. missing sample holds r (checked first: usually nothing is missing)
        np.copyto(est, state.reservation, where=missing)
    if hold.any():  # 3. startup grace or opt-out
        _copy_rows(est, state.requests, hold)
    if state.dims is None:
        est[:, GPU] = state.requests[:, GPU]  # 4. gpu is never reclaimed (with dims: never estimated)
    state.spare, state.reservation = state.reservation, est
    if state.full is None or state.dims is None:
        return est
    for j, d in enumerate(state.dims):  # a column at a time (a (W, k) strided write is slower)
        state.full[:, d] = est[:, j]
    return state.full


def _copy_rows(dst: np.ndarray, src: np.ndarray, rows: np.ndarray) -> None:
    """``dst[rows] = src[rows]`` for a (W,) bool ``rows``: whole rows bit for bit.

    On the rows' layout (column-major), a column at a time: one element test per cell of a
    contiguous column, several times faster than ``copyto(where=rows[:, None])``, which tests
    every cell through a broadcast mask; any other layout takes that plain form.
    """
    same = dst.ndim == 2 and dst.shape == src.shape and dst.dtype == src.dtype
    if same and dst.flags.f_contiguous and src.flags.f_contiguous:
        for j in range(dst.shape[1]):
            np.copyto(dst[:, j], src[:, j], where=rows)
    else:
        np.copyto(dst, src, where=rows[:, None])


# rows ------------------------------------------------------------------------------------------------
def _row_fields(state: EstimatorState) -> list[str]:
    return [f.name for f in dataclasses.fields(state) if isinstance(getattr(state, f.name), np.ndarray)]


def _axis(state: EstimatorState, name: str) -> int:
    return state.ROW_AXES.get(name, 0)


def copy_state(state: S) -> S:
    """An independent copy (arrays copied, shared scalars such as a ring head kept)."""
    return dataclasses.replace(state, **{k: np.copy(getattr(state, k)) for k in _row_fields(state)})


def select_rows(state: S, keep: ArrayLike) -> S:
    """The rows picked by ``keep``: a (W,) bool mask or an index array (order kept as given).

    Copies the whole state (O(W)); a simulator removing a few rows per tick should rather reuse
    them with :func:`assign_rows` and compact with this now and then.
    """
    idx = np.asarray(keep)
    if idx.dtype == np.bool_:
        if idx.shape != (state.n,):
            raise ValueError(f"keep mask must have shape ({state.n},), got {idx.shape}")
        idx = np.flatnonzero(idx)
    return dataclasses.replace(
        state,
        **{
            k: rows_first(np.take(getattr(state, k), idx, axis=_axis(state, k)), _axis(state, k))
            for k in _row_fields(state)
        },
    )


def rows_first(a: np.ndarray, axis: int = 0) -> np.ndarray:
    """``a`` in the layout of every row field: its row ``axis`` runs faster in memory than the
    next one (the dimension), so a dimension's cells over all rows are one contiguous block; a
    (W, k) field is column-major. No copy when it is already so (take and concatenate may give
    another layout); a field without an axis after the rows is returned as it is."""
    if a.ndim < axis + 2:
        return a
    return np.ascontiguousarray(a.swapaxes(axis, axis + 1)).swapaxes(axis, axis + 1)


def full_rows_first(shape: tuple[int, ...], fill: float, dtype: type, axis: int = 0) -> np.ndarray:
    """``np.full(shape, fill, dtype)`` in :func:`rows_first`'s layout, its rows on ``axis``."""
    if len(shape) < axis + 2:
        return np.full(shape, fill, dtype=dtype)
    swapped = (*shape[:axis], shape[axis + 1], shape[axis], *shape[axis + 2 :])
    return np.full(swapped, fill, dtype=dtype).swapaxes(axis, axis + 1)


def _check_same_kind(state: S, new: S) -> None:
    if type(new) is not type(state):
        raise TypeError(f"cannot combine {type(new).__name__} rows with {type(state).__name__}")
    if new.dims != state.dims:
        raise ValueError(f"cannot combine rows estimating dims {new.dims} with rows estimating {state.dims}")
    for k in _row_fields(state):
        a, b = getattr(state, k), getattr(new, k)
        ax = _axis(state, k)
        mine, theirs = a.shape[:ax] + a.shape[ax + 1 :], b.shape[:ax] + b.shape[ax + 1 :]
        if mine != theirs:
            raise ValueError(f"{k}: rows of shape {tuple(theirs)} do not match {tuple(mine)}")


def assign_rows(state: S, at: ArrayLike, new: S) -> None:
    """Overwrite rows ``at`` (indices) with the rows of ``new``, in place: O(len(at)), no reallocation.

    The cheap path for a simulator: keep spare rows (e.g. R = L = 0, fed NaN), reuse a departed
    workload's row for an arrival, and grow with :func:`append_rows` in large chunks.
    """
    _check_same_kind(state, new)
    idx = np.asarray(at, dtype=np.intp)
    if idx.shape != (new.n,):
        raise ValueError(f"at must list {new.n} row indices, got shape {idx.shape}")
    for k in _row_fields(state):
        getattr(state, k)[(slice(None),) * _axis(state, k) + (idx,)] = getattr(new, k)


def append_rows(state: S, new: S) -> S:
    """``state`` followed by the rows of ``new`` (built by the same estimator's ``init``); O(W).

    Shared scalars (a ring head, a histogram reference time) come from ``state``: the new rows
    hold no samples yet, so those scalars mean nothing for them.
    """
    _check_same_kind(state, new)
    return dataclasses.replace(
        state,
        **{
            k: rows_first(
                np.concatenate((getattr(state, k), getattr(new, k)), axis=_axis(state, k)), _axis(state, k)
            )
            for k in _row_fields(state)
        },
    )
