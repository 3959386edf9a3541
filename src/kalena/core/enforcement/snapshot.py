"""What the node agent observes, as plain NumPy arrays: the input of every enforcement policy.

A :class:`NodeSnapshot` holds one node's capacity, its residents (one row each, in the
dimension order of :mod:`kalena.core.resources`) and the node's pressure signals
(:class:`NodeConditions`). It is immutable: the arrays are private read-only copies.

DaemonSet rows are carried so that the policies can name and protect them, but they are
outside both ledgers: Phase 0 already deducted their requests from the capacity ``C``
(SPEC: Inputs from the upstream planner), so counting them again would double-count.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import SupportsFloat

import numpy as np

from kalena.core.model import Tier, WorkloadSpec
from kalena.core.resources import DIMS, NDIM, Resources, dim_index
from kalena.core.tolerance import REL_TOL


def ledger_holds_all(totals: np.ndarray, capacity: float) -> np.ndarray:
    """Element-wise ``totals <= capacity`` up to :data:`REL_TOL` (infinite capacity always holds)."""
    return np.asarray(totals) <= capacity + REL_TOL * max(1.0, abs(capacity))


def ledger_holds(total: float, capacity: float) -> bool:
    """``total <= capacity`` up to :data:`REL_TOL` (an infinite capacity always holds)."""
    return bool(ledger_holds_all(np.asarray(total), capacity))


def _frozen(a: np.ndarray) -> np.ndarray:
    a = np.array(a, dtype=np.float64 if a.dtype.kind == "f" else a.dtype, copy=True)
    a.setflags(write=False)
    return a


def _dims_mask(names: Sequence[str] | np.ndarray | None) -> np.ndarray:
    if names is None:
        return np.zeros(NDIM, dtype=bool)
    if isinstance(names, np.ndarray):
        return np.asarray(names, dtype=bool)
    m = np.zeros(NDIM, dtype=bool)
    for n in names:
        m[dim_index(n)] = True
    return m


@dataclass(frozen=True, slots=True, eq=False)
class NodeConditions:
    """The node's pressure signals, per dimension (shape ``(8,)``).

    * ``triggered``: a PSI trigger fired (or, for ram, a ``memory.high`` breach) since the
      previous snapshot. The shell maps PSI files to dimensions (memory -> ram, io -> disk.*).
    * ``acute``: the shell judges the pressure acute (e.g. PSI ``full`` above its trigger, or
      the node about to OOM); it lifts the minimum run time and shortens the grace period.
    * ``psi_some`` / ``psi_full``: PSI avg10 as a fraction in [0, 1]; NaN where unknown.
    * ``memory_events``: ``memory.events`` high/max increments since the previous snapshot;
      any counts as a trigger on ram.

    Build with dimension names: ``NodeConditions.of(triggered=("ram",), acute=("ram",))``.
    """

    triggered: np.ndarray = field(default_factory=lambda: np.zeros(NDIM, dtype=bool))
    acute: np.ndarray = field(default_factory=lambda: np.zeros(NDIM, dtype=bool))
    psi_some: np.ndarray = field(default_factory=lambda: np.full(NDIM, np.nan))
    psi_full: np.ndarray = field(default_factory=lambda: np.full(NDIM, np.nan))
    memory_events: int = 0

    def __post_init__(self) -> None:
        for name in ("triggered", "acute"):
            a = np.asarray(getattr(self, name), dtype=bool)
            if a.shape != (NDIM,):
                raise ValueError(f"NodeConditions.{name} must have shape ({NDIM},), got {a.shape}")
            object.__setattr__(self, name, _frozen(a))
        for name in ("psi_some", "psi_full"):
            a = np.asarray(getattr(self, name), dtype=np.float64)
            if a.shape != (NDIM,):
                raise ValueError(f"NodeConditions.{name} must have shape ({NDIM},), got {a.shape}")
            known = a[~np.isnan(a)]
            if np.any((known < 0) | (known > 1)):
                raise ValueError(f"NodeConditions.{name} must be fractions in [0, 1], got {a.tolist()}")
            object.__setattr__(self, name, _frozen(a))
        if (
            isinstance(self.memory_events, bool)
            or not isinstance(self.memory_events, int)
            or (self.memory_events < 0)
        ):
            raise ValueError(
                f"NodeConditions.memory_events must be a non-negative integer, got {self.memory_events!r}"
            )

    @classmethod
    def handed_over(
        cls, triggered: np.ndarray, acute: np.ndarray, psi_some: np.ndarray, memory_events: int
    ) -> NodeConditions:
        """Conditions from columns already checked as a whole (:meth:`NodesView.check`): copied and
        sealed, not checked again (the round builds one per screened node every tick)."""
        c = object.__new__(cls)
        for name, a in (
            ("triggered", triggered),
            ("acute", acute),
            ("psi_some", psi_some),
            ("psi_full", np.full(NDIM, np.nan)),
        ):
            object.__setattr__(c, name, _frozen(a))
        object.__setattr__(c, "memory_events", memory_events)
        return c

    @classmethod
    def of(
        cls,
        *,
        triggered: Sequence[str] = (),
        acute: Sequence[str] = (),
        psi_some: Mapping[str, float] | None = None,
        psi_full: Mapping[str, float] | None = None,
        memory_events: int = 0,
    ) -> NodeConditions:
        def psi(m: Mapping[str, float] | None) -> np.ndarray:
            a = np.full(NDIM, np.nan)
            for k, v in (m or {}).items():
                a[dim_index(k)] = v
            return a

        return cls(_dims_mask(triggered), _dims_mask(acute), psi(psi_some), psi(psi_full), memory_events)

    def triggered_on(self, d: int) -> bool:
        """A PSI trigger on dimension ``d``, or for ram a memory event."""
        return bool(self.triggered[d] or (DIMS[d] == "ram" and self.memory_events > 0))

    def signalled(self, d: int) -> bool:
        """A kernel signal on dimension ``d``: a trigger (:meth:`triggered_on`) or the acute flag."""
        return self.triggered_on(d) or bool(self.acute[d])


@dataclass(frozen=True, slots=True, eq=False)
class NodeSnapshot:
    """One node at one instant, as the enforcement policies read it.

    Per resident (``W`` rows): ``request``, ``reservation``, ``limit`` (``inf`` = no limit) and
    ``usage`` (``NaN`` = no sample) of shape ``(W, 8)``; ``priority``, ``is_batch``,
    ``is_daemonset``, ``slack_cpu`` (False: slack-cpu denied) and ``started_at`` (seconds,
    ``-inf`` = unknown, treated as long-running) of shape ``(W,)``. ``previous_reservation``
    is optional (NaN row = not resident before). ``epoch`` is the ledger epoch the snapshot was
    taken against; every plan echoes it so the ledger can reject a stale commitment.
    """

    node: str
    capacity: np.ndarray
    ids: tuple[str, ...]
    is_batch: np.ndarray
    priority: np.ndarray
    is_daemonset: np.ndarray
    request: np.ndarray
    reservation: np.ndarray
    limit: np.ndarray
    usage: np.ndarray
    started_at: np.ndarray
    slack_cpu: np.ndarray | None = None
    equivalence_keys: tuple[str, ...] | None = None
    previous_reservation: np.ndarray | None = None
    conditions: NodeConditions = field(default_factory=NodeConditions)
    epoch: int = 0
    _effective: np.ndarray = field(init=False, repr=False)

    def __post_init__(self) -> None:
        w = len(self.ids)
        if len(set(self.ids)) != w:
            raise ValueError(f"NodeSnapshot({self.node}): workload ids must be unique, got {list(self.ids)}")
        cap = np.asarray(self.capacity, dtype=np.float64)
        if cap.shape != (NDIM,) or np.any(np.isnan(cap)) or np.any(cap < 0):
            raise ValueError(
                f"NodeSnapshot({self.node}).capacity must be {NDIM} non-negative numbers, got {cap}"
            )
        object.__setattr__(self, "capacity", _frozen(cap))
        object.__setattr__(self, "ids", tuple(self.ids))
        if self.slack_cpu is None:
            object.__setattr__(self, "slack_cpu", np.ones(w, dtype=bool))
        if self.equivalence_keys is None:
            object.__setattr__(self, "equivalence_keys", self.ids)
        if len(self.equivalence_keys) != w:
            raise ValueError(f"NodeSnapshot({self.node}).equivalence_keys must have {w} entries")
        object.__setattr__(self, "equivalence_keys", tuple(self.equivalence_keys))
        for name, dtype in (
            ("is_batch", bool),
            ("is_daemonset", bool),
            ("slack_cpu", bool),
            ("priority", np.int64),
            ("started_at", np.float64),
        ):
            a = np.asarray(getattr(self, name), dtype=dtype)
            if a.shape != (w,):
                raise ValueError(f"NodeSnapshot({self.node}).{name} must have shape ({w},), got {a.shape}")
            object.__setattr__(self, name, _frozen(a))
        if np.any(np.isnan(self.started_at)) or np.any(np.isposinf(self.started_at)):
            raise ValueError(f"NodeSnapshot({self.node}).started_at must be finite or -inf")
        for name in ("request", "reservation", "limit", "usage", "previous_reservation"):
            raw = getattr(self, name)
            if raw is None:
                continue
            a = np.asarray(raw, dtype=np.float64).reshape(-1, NDIM) if w == 0 else np.asarray(raw, np.float64)
            if a.shape != (w, NDIM):
                raise ValueError(
                    f"NodeSnapshot({self.node}).{name} must have shape ({w}, {NDIM}), got {a.shape}"
                )
            nan_ok = name in ("usage", "previous_reservation")
            known = a[~np.isnan(a)]
            bad = np.any(known < 0) or (not nan_ok and np.any(np.isnan(a)))
            if name != "limit":  # only a limit may be infinite (no limit)
                bad = bad or np.any(np.isinf(known))
            if bad:
                what = "non-negative (NaN = missing)" if nan_ok else "non-negative, never NaN"
                raise ValueError(
                    f"NodeSnapshot({self.node}).{name} must be {what}"
                    + ("" if name == "limit" else " and finite")
                )
            object.__setattr__(self, name, _frozen(a))
        object.__setattr__(self, "_effective", _frozen(_effective(self.reservation, self.usage)))

    @classmethod
    def handed_over(
        cls,
        *,
        node: str,
        capacity: np.ndarray,
        ids: tuple[str, ...],
        equivalence_keys: tuple[str, ...],
        conditions: NodeConditions,
        epoch: int,
        previous_reservation: np.ndarray | None,
        **rows: np.ndarray,
    ) -> NodeSnapshot:
        """A snapshot of one node's rows of columns already checked as a whole (:meth:`NodesView.check`).

        ``rows`` are the row fields (``is_batch`` .. ``slack_cpu``), each a fresh array of its
        field's dtype and shape that nobody else holds (a fancy-indexed gather): they are sealed
        read-only, not copied or checked again. The round builds one snapshot per screened node
        every tick; checking each again cost as much as planning it. Equal, field for field, to
        the checked constructor on the same values (a property test holds the two together).
        """
        s = object.__new__(cls)
        object.__setattr__(s, "node", node)
        object.__setattr__(s, "capacity", _frozen(capacity))
        object.__setattr__(s, "ids", ids)
        object.__setattr__(s, "equivalence_keys", equivalence_keys)
        object.__setattr__(s, "conditions", conditions)
        object.__setattr__(s, "epoch", epoch)
        if previous_reservation is not None:
            previous_reservation.setflags(write=False)
        object.__setattr__(s, "previous_reservation", previous_reservation)
        for name in _ROW_FIELDS:
            a = rows[name]
            a.setflags(write=False)
            object.__setattr__(s, name, a)
        eff = _effective(rows["reservation"], rows["usage"])
        eff.setflags(write=False)
        object.__setattr__(s, "_effective", eff)
        return s

    # derived views ---------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.ids)

    @property
    def in_ledger(self) -> np.ndarray:
        """Rows counted by the ledgers: every resident but DaemonSets."""
        return ~self.is_daemonset

    @property
    def effective_reservation(self) -> np.ndarray:
        """``r'_w = max(r_w, u_w)`` (``u`` missing -> ``r``), shape ``(W, 8)``.

        The estimator raises ``r`` to at least ``m * u >= u`` at its next sample (SPEC: The
        reservation), so the fast path counts the value the slow path is about to publish.
        With raw ``r``, stale reservations could stop the eviction loop while usage exceeds
        capacity; with ``r'``, usage above capacity always shows as a ledger breach.
        """
        return self._effective

    def age(self, now: float) -> np.ndarray:
        """Seconds since start (``inf`` where the start is unknown)."""
        return now - self.started_at

    def index(self, workload: str) -> int:
        return self.ids.index(workload)


#: The per-row array fields :meth:`NodeSnapshot.handed_over` takes as they are.
_ROW_FIELDS = (
    "is_batch",
    "priority",
    "is_daemonset",
    "request",
    "reservation",
    "limit",
    "usage",
    "started_at",
    "slack_cpu",
)


def _effective(reservation: np.ndarray, usage: np.ndarray) -> np.ndarray:
    """``r' = max(r, u)``, ``r`` where the usage is missing (NaN)."""
    return np.where(np.isnan(usage), reservation, np.fmax(reservation, usage))


def _row(value: Resources | Mapping[str, SupportsFloat | str] | None, default: float) -> np.ndarray:
    if value is None:
        return np.full(NDIM, default)
    if isinstance(value, Resources):
        return value.array()
    out = np.full(NDIM, default)
    filled = Resources.from_mapping(value).array()
    for k in value:
        i = dim_index(k)
        out[i] = filled[i]
    return out


def snapshot_from_workloads(
    node: str,
    capacity: Resources,
    workloads: Sequence[WorkloadSpec],
    *,
    usage: Mapping[str, Resources | Mapping[str, SupportsFloat | str]] | None = None,
    reservations: Mapping[str, Resources] | None = None,
    previous_reservations: Mapping[str, Resources] | None = None,
    started_at: Mapping[str, float] | None = None,
    conditions: NodeConditions | None = None,
    epoch: int = 0,
) -> NodeSnapshot:
    """Build a snapshot from :class:`WorkloadSpec` residents and per-workload observations.

    Missing entries default to: usage NaN (a mapping may give some dimensions only), reservation
    = request (its value at start), started_at = ``-inf`` (unknown), previous reservation NaN.
    A spec limit of 0 (or no limits) means no limit, as in Docker and as :meth:`Resources.of`
    fills unspecified dimensions with 0.
    """
    usage, reservations = usage or {}, reservations or {}
    started_at = started_at or {}
    req = np.array([w.requests.values for w in workloads], dtype=np.float64).reshape(-1, NDIM)
    lim = np.full_like(req, np.inf)
    for i, w in enumerate(workloads):
        if w.limits is not None:
            a = w.limits.array()
            lim[i] = np.where(a > 0, a, np.inf)
    prev = None
    if previous_reservations is not None:
        prev = np.array([_row(previous_reservations.get(w.id), math.nan) for w in workloads]).reshape(
            -1, NDIM
        )
    return NodeSnapshot(
        node=node,
        capacity=capacity.array(),
        ids=tuple(w.id for w in workloads),
        is_batch=np.array([w.tier is Tier.BATCH for w in workloads], dtype=bool),
        priority=np.array([w.priority for w in workloads], dtype=np.int64),
        is_daemonset=np.array([w.is_daemonset for w in workloads], dtype=bool),
        request=req,
        reservation=np.array(
            [reservations[w.id].array() if w.id in reservations else req[i] for i, w in enumerate(workloads)]
        ).reshape(-1, NDIM),
        limit=lim,
        usage=np.array([_row(usage.get(w.id), math.nan) for w in workloads]).reshape(-1, NDIM),
        started_at=np.array([started_at.get(w.id, -math.inf) for w in workloads], dtype=np.float64),
        slack_cpu=np.array([w.slack_cpu for w in workloads], dtype=bool),
        equivalence_keys=tuple(w.equivalence_key for w in workloads),
        previous_reservation=prev,
        conditions=conditions or NodeConditions(),
        epoch=epoch,
    )
