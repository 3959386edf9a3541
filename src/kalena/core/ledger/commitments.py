"""Commitments: the only way ledger state changes, each carrying the epoch it was computed against.

Optimistic concurrency (seed 000 §4.2, seed 002's airlock): a policy reads the ledger, decides,
and hands back a commitment stamped with the epoch it read. The ledger applies it only if that
part of its state has not moved since; otherwise it answers with a ``STALE_EPOCH`` reason (data,
never an exception) and the caller recomputes from fresh state.

Two epochs, because two kinds of commitment have different footprints:

* **Per-node epoch** ``e_n``: bumped by every accepted change that touches node ``n`` (a batch
  placed or removed there, an eviction there, a reservation on ``n`` that actually changed).
  :class:`PlaceBatch`, :class:`RemoveBatch` and :class:`Eviction` are about one node and carry
  ``e_n``: they are stale only if *that* node moved, so placements computed in parallel for
  different nodes never invalidate each other (a single global counter would reject every
  commitment of a scheduling pass after the first one applied).
* **Global epoch** ``E``: bumped by every accepted commitment; each row records the ``E`` of its
  last change (its version). :class:`ReservationUpdate` covers every workload at once, so it
  carries ``E``: it applies when nothing changed (``E`` equal), or when every row it covers is
  still alive with version ``<= E`` (only rows it does not cover changed, e.g. a new batch
  placement). Checking rows rather than all nodes keeps a busy scheduler from starving the
  estimator. :class:`ReservationRefresh` is the same for every live row, indexed by row.

A scheduler that commits several placements on one node in one pass stamps them ``e``, ``e+1``,
... in order: if an earlier one is rejected, the later ones are stale too, as they should be.
"""

from __future__ import annotations

import enum
from dataclasses import KW_ONLY, InitVar, dataclass, field

import numpy as np

from kalena.core.model import WorkloadSpec
from kalena.core.resources import NDIM, dim_indices
from kalena.core.verdict import Reason


class RemovalCause(enum.Enum):
    """Why a batch workload left the ledger without being evicted."""

    FINISHED = "finished"  # ran to completion
    FAILED = "failed"  # exited with an error
    DELETED = "deleted"  # removed by its owner or an operator


@dataclass(frozen=True, slots=True)
class PlaceBatch:
    """Place batch ``workload`` on node index ``node``; its reservation starts at its request."""

    workload: WorkloadSpec
    node: int
    node_epoch: int


@dataclass(frozen=True, slots=True)
class RemoveBatch:
    """A batch workload finished, failed or was deleted. Never applies to a service workload."""

    workload_id: str
    node: int
    node_epoch: int
    cause: RemovalCause = RemovalCause.FINISHED


@dataclass(frozen=True, slots=True)
class Eviction:
    """Stop a workload under node pressure (enforcement decides; see SPEC "Enforcement on the node").

    A batch workload leaves the ledger. A service workload is accepted only with
    ``limit_breach_override`` (it used more than its own limit): its process is stopped but its
    blueprint placement and request stay, because Kalena never mutates a production placement;
    its reservation resets to its request, as for any (re)starting workload (SPEC: r_0 = R).
    ``reasons`` is the "why evicted" record, kept with the override log.
    """

    workload_id: str
    node: int
    node_epoch: int
    limit_breach_override: bool = False
    reasons: tuple[Reason, ...] = ()


@dataclass(frozen=True, eq=False)
class ReservationUpdate:
    """New reservations for many workloads at once: ``reservations[i]`` belongs to row ``rows[i]``.

    ``rows`` and the previous reservations come from :meth:`Ledger.rows`, read at ``global_epoch``.
    Only reservations change; requests are not in this commitment, so it cannot touch them. On
    the gpu dimension the reservation must equal the request (non-reclaimable): anything else is
    an estimator bug and raises ``ValueError`` when applied.

    ``copy=False`` (keyword only): the caller hands its arrays over (it never writes to them
    again), so float64 reservations and int64 rows are taken as they are and made read-only, not
    copied: a simulator's update of every row spares a (W, 8) copy per tick.
    """

    rows: np.ndarray
    reservations: np.ndarray
    global_epoch: int
    row_span: tuple[int, int] = field(init=False, repr=False, compare=False)  # (min, max) of rows
    _: KW_ONLY
    copy: InitVar[bool] = True

    def __post_init__(self, copy: bool) -> None:
        take = np.array if copy else np.asarray
        rows = take(self.rows, dtype=np.int64).reshape(-1)
        res = take(self.reservations, dtype=np.float64)
        if res.shape != (len(rows), NDIM):
            raise ValueError(f"reservations must have shape ({len(rows)}, {NDIM}), got {res.shape}")
        # Strictly ascending rows (what a shell usually passes) have no repeat; otherwise a stable
        # sort (timsort: O(W) on nearly sorted rows), not np.unique, whose hash-based version in
        # NumPy >= 2.3 costs ~1 ms per 10,000 rows.
        ordered = rows
        if len(rows) > 1 and not (rows[1:] > rows[:-1]).all():
            ordered = np.sort(rows, kind="stable")
            if np.any(ordered[1:] == ordered[:-1]):
                raise ValueError("a reservation update names a row twice")
        _check_values(res)
        rows.setflags(write=False)
        res.setflags(write=False)
        object.__setattr__(self, "rows", rows)
        object.__setattr__(self, "reservations", res)
        span = (int(ordered[0]), int(ordered[-1])) if len(rows) else (0, -1)
        object.__setattr__(self, "row_span", span)


@dataclass(frozen=True, eq=False)
class ReservationRefresh:
    """New reservations for every live row at once, indexed by row: row ``i`` gets
    ``reservations[i]``. The array covers at least the ledger's rows in use so far (its high
    mark); the values of rows not in use are checked like the others but never read.

    The form for an estimator that keeps its state by ledger row, as the simulator's does: the
    live rows are neither gathered on the way in nor looked up on the ledger's side (at Irina's
    12,000 rows, 0.44 ms a tick where a :class:`ReservationUpdate` of every live row took 0.74).
    It is judged as that update would be: applied when the global epoch is equal, or when no row
    in use now was placed or changed since; the gpu rule holds.

    ``dims`` (keyword only, distinct and ascending): the refresh carries only these dimensions,
    ``reservations[:, j]`` being dimension ``dims[j]``, and every other dimension keeps its
    reservation. An estimator that estimates two of the eight hands over its two columns, and the
    ledger compares, writes and sums two columns instead of eight.
    """

    reservations: np.ndarray
    global_epoch: int
    _: KW_ONLY
    copy: InitVar[bool] = True  # as ReservationUpdate's
    dims: tuple[int, ...] | None = None

    def __post_init__(self, copy: bool) -> None:
        res = (np.array if copy else np.asarray)(self.reservations, dtype=np.float64)
        width = NDIM
        if self.dims is not None:
            dims = dim_indices(self.dims)
            object.__setattr__(self, "dims", dims)
            width = len(dims)
        if res.ndim != 2 or res.shape[1] != width:
            raise ValueError(f"reservations must have shape (rows, {width}), got {res.shape}")
        _check_values(res)
        res.setflags(write=False)
        object.__setattr__(self, "reservations", res)


def _check_values(res: np.ndarray) -> None:
    # min >= 0 and max < inf is "finite and non-negative" (a NaN fails both comparisons)
    if res.size and not (res.min() >= 0.0 and res.max() < np.inf):
        raise ValueError("reservations must be finite and non-negative")


Commitment = PlaceBatch | RemoveBatch | Eviction | ReservationUpdate | ReservationRefresh


@dataclass(frozen=True, slots=True)
class CommitResult:
    """What the ledger did with one commitment: accepted, or rejected with reasons (data)."""

    commitment: Commitment
    accepted: bool
    reasons: tuple[Reason, ...] = ()
    global_epoch: int = 0  # the ledger's global epoch after this commitment


@dataclass(frozen=True, slots=True)
class OverrideRecord:
    """A service workload stopped by the limit-breach override (the audit trail the spec asks for)."""

    workload_id: str
    node: int
    global_epoch: int
    reasons: tuple[Reason, ...] = field(default=())
