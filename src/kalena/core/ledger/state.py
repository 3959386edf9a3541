"""The dual ledger (seed 000 §2.3): per-node request and reservation sums, changed only by commitments.

For node ``n`` with capacity ``C_n`` (post-Phase-0), production set ``P_n`` and batch set ``B_n``:

* request ledger   ``Q_n = sum_{p in P_n} R_p <= C_n``   (production only; batch never appears)
* reservation ledger ``U_n = sum_{w in P_n u B_n} r_w``; batch ``b`` fits when ``U_n + R_b <= C_n``
* slack ``S_n = C_n - U_n`` with ``S_n[gpu] = 0`` (gpu is non-reclaimable: r = R always)

Production rows are loaded once from the blueprint (rows ``0..P-1``) and never removed or
re-requested; batch rows come and go through :class:`PlaceBatch`, :class:`RemoveBatch` and
:class:`Eviction`; reservations move through one bulk :class:`ReservationUpdate` (or
:class:`ReservationRefresh`, every live row by row). Sums are kept
incrementally and recomputed from scratch after every bulk update that moves a reservation
(which also resets float drift; a refresh sums the columns it writes and any that drifted):
one ``bincount`` per column through a per-row node bin that each add and drop keeps current (a
spill bin for a free row), bitwise ``per_node_sum`` over the live rows. The request and
reservation rows are column-major: the round, the estimator and these sums read a dimension at a
time. :meth:`Ledger.recompute` gives the from-scratch values for the invariant check.

Loads are vectorised: the blueprint's production in one step, a cluster shell's observed batch
through :meth:`Ledger.place_until_refused` (each pass rebuilds that ledger), and a scheduling
pass's many placements in :meth:`Ledger.apply_all`, each bit for bit the loop of single adds it
stands for. The selector index is built on the first selector
question, so a ledger never asked one never pays for it.

The ledger is the one mutable object in the core: it is *state*, owned by a shell, and
:meth:`Ledger.apply` is its single writer. Policies read it and return commitments.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

import numpy as np

from kalena.core.ledger.blueprint import node_lookup, per_node_sum, resolve_production
from kalena.core.ledger.commitments import (
    Commitment,
    CommitResult,
    Eviction,
    OverrideRecord,
    PlaceBatch,
    RemoveBatch,
    ReservationRefresh,
    ReservationUpdate,
)
from kalena.core.ledger.fit import insufficient_resources, rank_within, running_fit, tolerant_capacity
from kalena.core.ledger.index import ResidentIndex
from kalena.core.ledger.rows import INITIAL_ROWS, RowStore, any_per_row
from kalena.core.model import NodeSpec, Selector, Tier, WorkloadSpec
from kalena.core.resources import DIMS, GPU, NDIM, Resources, stack
from kalena.core.verdict import Reason, ReasonCode

#: From this many placements on, :meth:`Ledger.apply_all` applies them at once (measured: below
#: it, the loop of single applies costs less).
_BULK_FROM = 24
_EARLIER_REJECTED = "an earlier commitment of this decision on the node was rejected"

ALL_DIMS = tuple(range(NDIM))  # a whole-row refresh: every column


def _stale_reason(detail: str) -> Reason:
    return Reason(ReasonCode.STALE_EPOCH, detail=detail)


def _readonly(a: np.ndarray) -> np.ndarray:
    v = a.view()
    v.flags.writeable = False
    return v


@dataclass(frozen=True, eq=False)
class RowView:
    """A copy of the live rows, for estimators: row numbers to put in a :class:`ReservationUpdate`."""

    rows: np.ndarray  # (W,) row numbers
    ids: tuple[str, ...]
    node: np.ndarray  # (W,)
    requests: np.ndarray  # (W, 8)
    reservations: np.ndarray  # (W, 8)
    is_batch: np.ndarray  # (W,)
    global_epoch: int


@dataclass(frozen=True, eq=False)
class Sums:
    """Per-node sums ``(N, 8)`` and batch counts ``(N,)`` from one source (incremental or scratch)."""

    request: np.ndarray
    reservation: np.ndarray
    batch_count: np.ndarray
    service_count: np.ndarray


class Ledger:
    """Dual-ledger state for ``N`` nodes (indexed ``0..N-1``) and their resident workloads."""

    def __init__(self, nodes: Sequence[NodeSpec], capacity: np.ndarray | Sequence[Resources]) -> None:
        cap = np.array(capacity if isinstance(capacity, np.ndarray) else stack(capacity), dtype=np.float64)
        if cap.shape != (len(nodes), NDIM):
            raise ValueError(f"capacity must have shape ({len(nodes)}, {NDIM}), got {cap.shape}")
        if np.any(np.isnan(cap)) or np.any(cap < 0):
            raise ValueError("capacity must be non-negative (inf means unconstrained)")
        self.nodes: tuple[NodeSpec, ...] = tuple(nodes)
        self.node_index: Mapping[str, int] = MappingProxyType(node_lookup(self.nodes))
        self.node_names: tuple[str, ...] = tuple(n.name for n in self.nodes)
        cap.setflags(write=False)
        self._capacity = cap
        self._capacity_tol = tolerant_capacity(cap)
        self._capacity_tol.setflags(write=False)
        n = len(self.nodes)
        self._rows = RowStore(INITIAL_ROWS)
        self._row_of: dict[str, int] = {}
        # built on the first selector question, then kept per add and drop: a cluster shell's
        # ledger of one pass is often never asked one (no affinity, no spread), so it never pays
        self._index: ResidentIndex | None = None
        #: batch rows whose workload has required anti-affinity terms (Kubernetes'), in add order
        self._anti_rows: dict[int, None] = {}
        self._request_sum = np.zeros((n, NDIM))
        self._reservation_sum = np.zeros((n, NDIM))
        self._batch_count = np.zeros(n, dtype=np.int64)
        self._service_count = np.zeros(n, dtype=np.int64)
        self._ns_running: dict[str, int] = {}
        self._node_epoch = np.zeros(n, dtype=np.int64)
        self._global_epoch = 0
        self._production = 0
        self._production_ids: tuple[str, ...] | None = None  # rows 0..P-1 never change: built once
        # the sums' bin of every row: its node while the row is live, else the spill bin n past
        # the last node; kept per add and drop, so a bulk update never rebuilds it
        self._sum_node = np.full(INITIAL_ROWS, n, dtype=np.intp)
        # the dimensions whose reservation sums took a non-zero incremental change since they were
        # last summed from scratch (a refresh of some dimensions sums these again too)
        self._drift = np.zeros(NDIM, dtype=bool)
        self._overrides: list[OverrideRecord] = []

    # construction ---------------------------------------------------------------------------
    @classmethod
    def from_blueprint(
        cls,
        nodes: Sequence[NodeSpec],
        capacity: np.ndarray | Sequence[Resources],
        workloads: Iterable[WorkloadSpec],
        placement: Mapping[str, str | int],
    ) -> Ledger:
        """Load production once: every service workload the placement names (see ``resolve_production``).

        The request ledger must hold (the blueprint is a feasibility proof); a node it overfills
        is a configuration error naming the node and dimension.
        """
        ledger = cls(nodes, capacity)
        prod = resolve_production(ledger.nodes, workloads, placement)
        if prod:
            req = np.array([spec.requests.array() for spec, _ in prod], dtype=np.float64)
            where = np.array([n for _, n in prod], dtype=np.int64)
            versions = np.full(len(prod), ledger._global_epoch, dtype=np.int64)
            ledger._add_many([spec for spec, _ in prod], where, req, req, versions, is_batch=False)
        ledger._production = len(ledger._row_of)
        over = ledger._request_sum > ledger._capacity_tol
        if over.any():
            n, d = (int(x) for x in np.argwhere(over)[0])
            raise ValueError(
                f"blueprint overfills node {ledger.nodes[n].name!r} on {DIMS[d]}: production requests "
                f"{ledger._request_sum[n, d]:g} > capacity {ledger._capacity[n, d]:g}"
            )
        return ledger

    # read side ------------------------------------------------------------------------------
    @property
    def n_nodes(self) -> int:
        return len(self.nodes)

    @property
    def capacity(self) -> np.ndarray:
        """C, ``(N, 8)``, read-only."""
        return self._capacity

    @property
    def capacity_tol(self) -> np.ndarray:
        """C with the fit tolerance added (see :func:`tolerant_capacity`), read-only."""
        return self._capacity_tol

    @property
    def request_sum(self) -> np.ndarray:
        """Request ledger Q (production requests per node), ``(N, 8)``, read-only."""
        return _readonly(self._request_sum)

    @property
    def reservation_sum(self) -> np.ndarray:
        """Reservation ledger U (production and batch reservations per node), ``(N, 8)``, read-only."""
        return _readonly(self._reservation_sum)

    @property
    def batch_count(self) -> np.ndarray:
        return _readonly(self._batch_count)

    @property
    def service_count(self) -> np.ndarray:
        return _readonly(self._service_count)

    @property
    def node_epochs(self) -> np.ndarray:
        return _readonly(self._node_epoch)

    @property
    def global_epoch(self) -> int:
        return self._global_epoch

    @property
    def production_count(self) -> int:
        return self._production

    @property
    def overrides(self) -> tuple[OverrideRecord, ...]:
        return tuple(self._overrides)

    def node_epoch(self, node: int) -> int:
        return int(self._node_epoch[node])

    def slack(self) -> np.ndarray:
        """``S = C - U`` per node, with the gpu column 0 (gpu is never slack). May be negative."""
        s = self._capacity - self._reservation_sum
        s[:, GPU] = 0.0
        return s

    def reservation_breaches(self) -> np.ndarray:
        """``(N, 8)`` bool: where ``U > C`` (reservations rose after placement; enforcement's cue)."""
        return self._reservation_sum > self._capacity_tol

    def namespace_running(self) -> Mapping[str, int]:
        """Running batch workloads per namespace."""
        return MappingProxyType(self._ns_running)

    def __len__(self) -> int:
        return len(self._row_of)

    def __contains__(self, workload_id: object) -> bool:
        return workload_id in self._row_of

    def holds_none(self, workload_ids: Iterable[str]) -> bool:
        """Whether none of ``workload_ids`` is in the ledger (one set operation, not a lookup each)."""
        return self._row_of.keys().isdisjoint(workload_ids)

    def spec(self, workload_id: str) -> WorkloadSpec:
        spec = self._rows.specs[self._row_of[workload_id]]
        assert spec is not None
        return spec

    def node_of(self, workload_id: str) -> int:
        return int(self._rows.node[self._row_of[workload_id]])

    def row_of(self, workload_id: str) -> int:
        """The row of a resident workload in :meth:`row_arrays` (rows are reused after a removal)."""
        return self._row_of[workload_id]

    def reservation_of(self, workload_id: str) -> np.ndarray:
        return self._rows.reservation[self._row_of[workload_id]].copy()

    def production_ids(self) -> tuple[str, ...]:
        """Ids of rows ``0..P-1``; kept after the first call (only an add or drop on those rows moves it)."""
        ids = self._production_ids
        if ids is None:
            ids = tuple(s.id for s in self._rows.specs[: self._production] if s is not None)
            self._production_ids = ids
        return ids

    def batch_ids(self) -> tuple[str, ...]:
        rows = np.flatnonzero(self._rows.alive[: self._rows.high] & self._rows.is_batch[: self._rows.high])
        return tuple(self._rows.specs[r].id for r in rows)  # type: ignore[union-attr]

    def workloads_on(self, node: int) -> tuple[WorkloadSpec, ...]:
        rows = np.flatnonzero(self._rows.node[: self._rows.high] == node)
        return tuple(self._rows.specs[r] for r in rows)  # type: ignore[misc]

    def rows(self) -> RowView:
        """Copies of the live rows, for an estimator to compute a :class:`ReservationUpdate` from."""
        r = self._rows.live_rows()
        return RowView(
            rows=r,
            ids=tuple(self._rows.specs[i].id for i in r),  # type: ignore[union-attr]
            node=self._rows.node[r],
            requests=self._rows.request[r],
            reservations=self._rows.reservation[r],
            is_batch=self._rows.is_batch[r],
            global_epoch=self._global_epoch,
        )

    def row_arrays(self) -> RowStore:
        """The row columns themselves, for the invariant check. Callers must not write to them."""
        return self._rows

    def matching_rows(self, selector: Selector) -> np.ndarray:
        """Rows of every resident workload ``selector`` matches (unordered)."""
        if self._index is None:
            self._index = ResidentIndex()
            for row in self._rows.live_rows().tolist():
                self._index.add(row, self._rows.specs[row])  # type: ignore[arg-type]
        hits = self._index.match(selector)
        return np.fromiter(hits, dtype=np.int64, count=len(hits))

    def matching_nodes(self, selector: Selector) -> np.ndarray:
        """Node index of every resident workload ``selector`` matches (with repeats)."""
        return self._rows.node[self.matching_rows(selector)]

    def batch_anti_terms(self) -> list[tuple[int, Selector, str]]:
        """``(node, selector, topology key)`` of every resident batch workload's required
        anti-affinity term (Kubernetes' symmetric rule binds the pods they select)."""
        out = []
        for row in self._anti_rows:
            spec = self._rows.specs[row]
            assert spec is not None
            out.extend(
                (int(self._rows.node[row]), t.selector, t.topology_key) for t in spec.required_anti_affinity
            )
        return out

    def recompute(self) -> Sums:
        """Every per-node sum from scratch over the rows (the invariant check's yardstick)."""
        rs = self._rows
        live = rs.alive[: rs.high]
        node = rs.node[: rs.high]
        prod = live & ~rs.is_batch[: rs.high]
        batch = live & rs.is_batch[: rs.high]
        n = self.n_nodes
        return Sums(
            request=per_node_sum(node[prod], rs.request[: rs.high][prod], n),
            reservation=per_node_sum(node[live], rs.reservation[: rs.high][live], n),
            batch_count=np.bincount(node[batch], minlength=n).astype(np.int64),
            service_count=np.bincount(node[prod], minlength=n).astype(np.int64),
        )

    def incremental(self) -> Sums:
        """The incrementally maintained sums (copies)."""
        return Sums(
            request=self._request_sum.copy(),
            reservation=self._reservation_sum.copy(),
            batch_count=self._batch_count.copy(),
            service_count=self._service_count.copy(),
        )

    # write side -----------------------------------------------------------------------------
    def apply(self, commitment: Commitment) -> CommitResult:
        """Apply one commitment, or reject it with reasons (stale epoch, does not fit, not allowed)."""
        match commitment:
            case PlaceBatch():
                return self._place(commitment)
            case RemoveBatch():
                return self._remove(commitment)
            case Eviction():
                return self._evict(commitment)
            case ReservationUpdate():
                return self._update(commitment)
            case ReservationRefresh():
                return self._refresh(commitment)
        raise TypeError(f"not a commitment: {commitment!r}")

    def apply_all(self, commitments: Iterable[Commitment]) -> tuple[CommitResult, ...]:
        """Apply one decision's commitments in order; each is judged against the state the previous left.

        A decision stamps successive commitments on one node ``e, e+1, ...``. Once one of them is
        rejected, every later one on that node is rejected as stale too: they were computed
        against the same view, and an outside change that happened to bump the node's epoch
        the same number of times must not make a later one look current.
        """
        if not isinstance(commitments, Sequence):
            commitments = list(commitments)
        # a scheduling pass's placements at once, when they are many (the loop costs less below
        # that) and regular (else the loop says what it says)
        if len(commitments) >= _BULK_FROM and all(type(c) is PlaceBatch for c in commitments):
            bulk = self._place_all(commitments)  # type: ignore[arg-type]
            if bulk is not None:
                return bulk
        results: list[CommitResult] = []
        failed: set[int] = set()
        for c in commitments:
            node = None if isinstance(c, ReservationUpdate | ReservationRefresh) else c.node
            if node is not None and node in failed:
                results.append(self._stale(c, _EARLIER_REJECTED))
                continue
            r = self.apply(c)
            if not r.accepted and node is not None:
                failed.add(node)
            results.append(r)
        return tuple(results)

    def _place_all(self, cs: Sequence[PlaceBatch]) -> tuple[CommitResult, ...] | None:
        """:meth:`apply_all` of ``PlaceBatch`` commitments at once, bit for bit the loop (rows, sums,
        versions, epochs, results and their reasons); None where the loop must say it itself (a
        workload that is not batch, an id twice or already placed, a node out of range)."""
        k = len(cs)
        specs = [c.workload for c in cs]
        if any(w.tier is not Tier.BATCH or w.is_daemonset for w in specs):
            return None
        where = np.fromiter((c.node for c in cs), dtype=np.int64, count=k)
        if where.min() < 0 or where.max() >= self.n_nodes:
            return None
        stamp = np.fromiter((c.node_epoch for c in cs), dtype=np.int64, count=k)
        bulk = self._place_bulk(specs, where, stamp)
        if bulk is None:
            return None
        took, epochs, reasons = bulk
        return tuple(
            CommitResult(c, bool(t), reasons.get(i, ()), e)
            for i, (c, t, e) in enumerate(zip(cs, took.tolist(), epochs.tolist(), strict=True))
        )

    def place_until_refused(
        self, placements: Sequence[tuple[WorkloadSpec, int]]
    ) -> tuple[np.ndarray, dict[int, CommitResult]]:
        """``PlaceBatch`` of each ``(workload, node)`` in order at the node's current epoch, except
        that once one is refused on a node the later ones on that node are not tried: a cluster
        shell loading what it observes (:func:`~kalena.core.ledger.observed.observed_ledger`).
        Returns which were placed, ``(k,)`` bool, and the refusal of each node that had one (by
        position in ``placements``), as that loop of ``apply`` gives it; sums, rows, versions and
        epochs are bitwise the loop's."""
        k = len(placements)
        refused: dict[int, CommitResult] = {}
        if not k:
            return np.zeros(0, dtype=bool), refused
        specs = [w for w, _ in placements]
        for w in specs:
            if w.tier is not Tier.BATCH or w.is_daemonset:
                raise ValueError(f"PlaceBatch for {w.id!r}: only batch workloads are placed by Kalena")
        where = np.array([n for _, n in placements], dtype=np.int64)
        if where.min() < 0 or where.max() >= self.n_nodes:
            bad = int(where[(where < 0) | (where >= self.n_nodes)][0])
            raise IndexError(f"node index {bad} outside 0..{self.n_nodes - 1}")
        bulk = self._place_bulk(specs, where, None)
        if bulk is None:
            # an id twice (never so from an apiserver or an engine): whether the second is refused
            # as placed depends on whether the first was; the loop itself says
            return self._place_one_by_one(placements)
        took, epochs, reasons = bulk
        stopped: set[int] = set()
        for i in sorted(reasons):  # each node's first refusal (the later ones there are not tried)
            n = int(where[i])
            if n not in stopped:
                stopped.add(n)
                # every earlier one there was taken and no later one: its epoch now was the one then
                c = PlaceBatch(specs[i], n, int(self._node_epoch[n]))
                refused[i] = CommitResult(c, False, reasons[i], int(epochs[i]))
        return took, refused

    def _place_bulk(
        self, specs: Sequence[WorkloadSpec], where: np.ndarray, stamp: np.ndarray | None
    ) -> tuple[np.ndarray, np.ndarray, dict[int, tuple[Reason, ...]]] | None:
        """The loop of ``PlaceBatch(specs[i], where[i], stamp[i])`` in order at once, a node's later
        ones stale once one there is refused (``stamp`` None: each at its node's epoch at its
        turn). Batch workloads on nodes in range only. Returns whether each was taken, the ledger's
        epoch after each, and the reasons of each refused one; None where an id repeats or is
        placed already (whether the loop refuses it depends on what it took before)."""
        k = len(specs)
        ids = [w.id for w in specs]
        if len(set(ids)) < k or not self._row_of.keys().isdisjoint(ids):
            return None
        req = np.array([w.requests.array() for w in specs], dtype=np.float64)
        running, fits = running_fit(self._reservation_sum, where, req, self._capacity_tol)
        ok = fits & (req[:, GPU] <= 0)
        rank = rank_within(where)
        if stamp is not None:  # the node's epoch when each comes, if all before it there took
            epoch_then = self._node_epoch[where] + rank
            ok &= stamp == epoch_then
        # a node takes its commitments up to its first refusal; the later ones on it are stale
        first_bad = np.full(self.n_nodes, k, dtype=np.int64)
        np.minimum.at(first_bad, where[~ok], rank[~ok])
        cut = first_bad[where]
        took = rank < cut
        epochs = self._global_epoch + np.cumsum(took)  # the ledger's epoch after each
        reasons: dict[int, tuple[Reason, ...]] = {}
        # the refusals' reasons first, against the sums as they stand before the adds
        for i in np.flatnonzero(~took).tolist():
            n = int(where[i])
            if rank[i] > cut[i]:
                reasons[i] = (_stale_reason(_EARLIER_REJECTED),)
            elif stamp is not None and stamp[i] != epoch_then[i]:
                then = f"node {self.nodes[n].name} is at epoch {int(epoch_then[i])}"
                reasons[i] = (_stale_reason(f"{then}, not {int(stamp[i])}"),)
            elif req[i, GPU] > 0:
                reasons[i] = (Reason(ReasonCode.GPU_REQUESTED, "gpu", requested=float(req[i, GPU])),)
            else:  # the node's use with the ones it took before this one (running's earlier row)
                prev = np.flatnonzero((where[:i] == n) & took[:i])
                used = running[prev[-1]] if len(prev) else self._reservation_sum[n]
                reasons[i] = insufficient_resources(req[i], used, self._capacity[n])
        take = np.flatnonzero(took)
        if take.size:
            self._global_epoch += int(take.size)
            np.add.at(self._node_epoch, where[take], 1)
            self._add_many(
                [specs[i] for i in take], where[take], req[take], req[take], epochs[take], is_batch=True
            )
        return took, epochs, reasons

    def _place_one_by_one(
        self, placements: Sequence[tuple[WorkloadSpec, int]]
    ) -> tuple[np.ndarray, dict[int, CommitResult]]:
        placed = np.zeros(len(placements), dtype=bool)
        refused: dict[int, CommitResult] = {}
        stopped: set[int] = set()
        for i, (w, n) in enumerate(placements):
            if n in stopped:
                continue
            r = self.apply(PlaceBatch(w, n, int(self._node_epoch[n])))
            placed[i] = r.accepted
            if not r.accepted:
                stopped.add(n)
                refused[i] = r
        return placed, refused

    # internals --------------------------------------------------------------------------------
    def _add_many(
        self,
        specs: Sequence[WorkloadSpec],
        where: np.ndarray,
        req: np.ndarray,
        res: np.ndarray,
        versions: np.ndarray,
        *,
        is_batch: bool,
    ) -> None:
        """:meth:`_add` of many rows at once (same rows, same sums bit for bit: ``np.add.at``
        adds in order)."""
        rows = self._rows.add_many(specs, where, req, res, is_batch=is_batch, version=versions)
        if rows.size and int(rows.min()) < self._production:
            self._production_ids = None
        self._cover(int(rows.max()))
        self._sum_node[rows] = where
        self._row_of.update(zip((w.id for w in specs), rows.tolist(), strict=True))
        if self._index is not None:
            for row, spec in zip(rows.tolist(), specs, strict=True):
                self._index.add(row, spec)
        np.add.at(self._reservation_sum, where, res)
        self._drift |= (res != 0).any(axis=0)
        if is_batch:
            np.add.at(self._batch_count, where, 1)
            for row, spec in zip(rows.tolist(), specs, strict=True):
                self._ns_running[spec.namespace] = self._ns_running.get(spec.namespace, 0) + 1
                if spec.required_anti_affinity:
                    self._anti_rows[row] = None
        else:
            np.add.at(self._request_sum, where, req)
            np.add.at(self._service_count, where, 1)

    def _add(self, spec: WorkloadSpec, n: int, req: np.ndarray, res: np.ndarray, *, is_batch: bool) -> None:
        row = self._rows.add(spec, n, req, res, is_batch=is_batch, version=self._global_epoch)
        if row < self._production:  # never through the commitments (production rows are not freed)
            self._production_ids = None
        self._cover(row)
        self._sum_node[row] = n
        self._row_of[spec.id] = row
        if self._index is not None:
            self._index.add(row, spec)
        self._reservation_sum[n] += res
        self._drift |= res != 0
        if is_batch:
            self._batch_count[n] += 1
            self._ns_running[spec.namespace] = self._ns_running.get(spec.namespace, 0) + 1
            if spec.required_anti_affinity:
                self._anti_rows[row] = None
        else:
            self._request_sum[n] += req
            self._service_count[n] += 1

    def _cover(self, row: int) -> None:
        """The bin index reaches ``row`` (grown with the rows when they doubled)."""
        if row >= len(self._sum_node):
            grown = np.full(self._rows.capacity, self.n_nodes, dtype=np.intp)
            grown[: len(self._sum_node)] = self._sum_node
            self._sum_node = grown

    def _drop(self, workload_id: str) -> None:
        row = self._row_of.pop(workload_id)
        spec = self._rows.specs[row]
        assert spec is not None and self._rows.is_batch[row]
        n = int(self._rows.node[row])
        res = self._rows.reservation[row]
        self._reservation_sum[n] -= res
        self._drift |= res != 0
        self._batch_count[n] -= 1
        left = self._ns_running[spec.namespace] - 1
        if left:
            self._ns_running[spec.namespace] = left
        else:
            del self._ns_running[spec.namespace]
        if self._index is not None:
            self._index.remove(row, spec)
        self._anti_rows.pop(row, None)
        self._rows.remove(row)
        self._sum_node[row] = self.n_nodes
        if row < self._production:
            self._production_ids = None

    def _bump(self, nodes: int | np.ndarray) -> None:
        self._global_epoch += 1
        self._node_epoch[nodes] += 1

    def _result(self, c: Commitment, accepted: bool, reasons: tuple[Reason, ...] = ()) -> CommitResult:
        return CommitResult(c, accepted, reasons, self._global_epoch)

    def _stale_node(self, c: PlaceBatch | RemoveBatch | Eviction) -> CommitResult | None:
        if not 0 <= c.node < self.n_nodes:
            raise IndexError(f"node index {c.node} outside 0..{self.n_nodes - 1}")
        now = int(self._node_epoch[c.node])
        if now == c.node_epoch:
            return None
        return self._stale(c, f"node {self.nodes[c.node].name} is at epoch {now}, not {c.node_epoch}")

    def _stale(self, c: Commitment, detail: str) -> CommitResult:
        return self._result(c, False, (_stale_reason(detail),))

    def _place(self, c: PlaceBatch) -> CommitResult:
        w = c.workload
        if w.tier is not Tier.BATCH or w.is_daemonset:
            raise ValueError(f"PlaceBatch for {w.id!r}: only batch workloads are placed by Kalena")
        if (stale := self._stale_node(c)) is not None:
            return stale
        if w.id in self._row_of:
            return self._stale(c, f"{w.id} is already placed")
        req = w.requests.array()
        if req[GPU] > 0:
            return self._result(
                c, False, (Reason(ReasonCode.GPU_REQUESTED, "gpu", requested=float(req[GPU])),)
            )
        used = self._reservation_sum[c.node]
        # the fit rule on the precomputed tolerant capacity; the reasons only when it fails
        if (used + req > self._capacity_tol[c.node]).any():
            return self._result(c, False, insufficient_resources(req, used, self._capacity[c.node]))
        self._bump(c.node)
        self._add(w, c.node, req, req, is_batch=True)
        return self._result(c, True)

    def _resident_on(self, c: RemoveBatch | Eviction) -> int | CommitResult:
        """The workload's row, or a stale result when the caller's view of the node is out of date."""
        if (stale := self._stale_node(c)) is not None:
            return stale
        row = self._row_of.get(c.workload_id)
        if row is None or int(self._rows.node[row]) != c.node:
            return self._stale(c, f"{c.workload_id} is not on node {self.nodes[c.node].name}")
        return row

    def _remove(self, c: RemoveBatch) -> CommitResult:
        row = self._resident_on(c)
        if isinstance(row, CommitResult):
            return row
        if not self._rows.is_batch[row]:
            return self._result(c, False, (_production_immutable(c.workload_id),))
        self._bump(c.node)
        self._drop(c.workload_id)
        return self._result(c, True)

    def _evict(self, c: Eviction) -> CommitResult:
        row = self._resident_on(c)
        if isinstance(row, CommitResult):
            return row
        if self._rows.is_batch[row]:
            self._bump(c.node)
            self._drop(c.workload_id)
            return self._result(c, True)
        if not c.limit_breach_override:
            return self._result(c, False, (_production_immutable(c.workload_id),))
        # Service workload over its own limit: stop the process, keep the placement and request.
        self._bump(c.node)
        old = self._rows.reservation[row].copy()
        self._rows.reservation[row] = self._rows.request[row]
        self._rows.version[row] = self._global_epoch
        delta = self._rows.request[row] - old
        self._reservation_sum[c.node] += delta
        self._drift |= delta != 0
        self._overrides.append(OverrideRecord(c.workload_id, c.node, self._global_epoch, c.reasons))
        return self._result(c, True)

    def _update(self, c: ReservationUpdate) -> CommitResult:
        rs = self._rows
        rows = c.rows
        if len(rows) and (c.row_span[0] < 0 or c.row_span[1] >= rs.high):
            raise IndexError("a reservation update names a row that was never used")
        if c.global_epoch == self._global_epoch:
            if not np.take(rs.alive, rows).all():
                raise ValueError("a reservation update names a free row at the current epoch")
        else:
            alive = np.take(rs.alive, rows)
            changed = np.take(rs.version, rows) > c.global_epoch
            if not alive.all() or changed.any():
                gone = int((~alive).sum())
                moved = int((alive & changed).sum())
                return self._stale(
                    c, f"computed at epoch {c.global_epoch}: {gone} row(s) removed, {moved} changed since"
                )
        new = c.reservations
        # np.take selects the same rows as fancy indexing, ~5x faster on (W, 8); the any over each
        # row's 8 comparisons is one word test (rows.any_per_row)
        neq = np.not_equal(new, np.take(rs.reservation, rows, axis=0), out=np.empty(new.shape, dtype=bool))
        return self._write_reservations(c, rows, new, neq)

    def _refresh(self, c: ReservationRefresh) -> CommitResult:
        rs = self._rows
        h = rs.high
        if len(c.reservations) < h:
            raise ValueError(
                f"a reservation refresh must cover the {h} rows in use so far, got {len(c.reservations)}"
            )
        alive = rs.alive[:h]
        if c.global_epoch != self._global_epoch:
            moved = alive & (rs.version[:h] > c.global_epoch)
            if moved.any():
                detail = f"{int(moved.sum())} row(s) placed or changed since"
                return self._stale(c, f"computed at epoch {c.global_epoch}: {detail}")
        # whole rows are the refresh of every column: the rows are column-major
        return self._refresh_columns(c, ALL_DIMS if c.dims is None else c.dims, c.reservations[:h], alive)

    def _refresh_columns(
        self, c: ReservationRefresh, dims: tuple[int, ...], new: np.ndarray, alive: np.ndarray
    ) -> CommitResult:
        """A refresh of the ``dims`` columns (``new[:, j]`` is dimension ``dims[j]``; all of them
        for whole rows). A refresh of some columns moves the same rows, with the same epochs,
        versions, cells and sums, as the whole-row refresh whose other columns equal the
        ledger's."""
        rs = self._rows
        h = len(new)
        moved_rows = np.zeros(h, dtype=bool)
        moved: set[int] = set()
        for j, d in enumerate(dims):
            neq = np.not_equal(new[:, j], rs.reservation[:h, d])
            neq &= alive
            if d == GPU:  # the gpu rule, on the one column
                at = np.flatnonzero(neq)
                self._check_gpu(at, new[at, j])
            if neq.any():
                moved_rows |= neq
                moved.add(d)
        if not moved:
            return self._result(c, True)
        self._stamp(np.flatnonzero(moved_rows))
        for j, d in enumerate(dims):
            np.copyto(rs.reservation[:h, d], new[:, j], where=alive)
        # From scratch: the dimensions that moved and any whose sums drifted since. Every other
        # one was summed from scratch last and holds the same values: its sums would come out the
        # same bit for bit.
        self._sum_from_scratch(moved)
        return self._result(c, True)

    def _sum_from_scratch(self, dims: set[int]) -> None:
        """The reservation sums of ``dims`` and of every drifted dimension, from scratch: one
        bincount per column through the rows' node bins (a free row's goes to the spill bin), so
        every (node, d) sum adds its live rows in ascending order from 0.0, bitwise
        ``per_node_sum`` over the live rows. A new array, never written in place."""
        rs, n, h = self._rows, self.n_nodes, self._rows.high
        bins = self._sum_node[:h]
        sums = self._reservation_sum.copy()
        for d in sorted(dims | set(np.flatnonzero(self._drift).tolist())):
            sums[:, d] = np.bincount(bins, weights=rs.reservation[:h, d], minlength=n + 1)[:n]
        self._reservation_sum = sums
        self._drift[:] = False

    def _check_gpu(self, rows: np.ndarray, gpu: np.ndarray) -> None:
        """The gpu rule for ``rows`` whose gpu reservation changes to ``gpu``: it must stay at the
        request (the ledger keeps every row there, so only a changed cell needs comparing)."""
        bad_at = np.flatnonzero(gpu != self._rows.request[rows, GPU])
        if len(bad_at):
            bad = self._rows.specs[int(rows[bad_at[0]])]
            msg = f"gpu reservation must equal the request (non-reclaimable); {bad.id!r} differs"  # type: ignore[union-attr]
            raise ValueError(msg)

    def _stamp(self, moved_at: np.ndarray) -> None:
        """A reservation write's epochs: each node of the ``moved_at`` rows bumped once (one scatter
        pass), the rows' versions the new global epoch."""
        touched = np.zeros(self.n_nodes, dtype=bool)
        touched[np.take(self._rows.node, moved_at)] = True
        self._bump(np.flatnonzero(touched))
        self._rows.version[moved_at] = self._global_epoch

    def _write_reservations(
        self, c: ReservationUpdate, rows: np.ndarray, new: np.ndarray, neq: np.ndarray
    ) -> CommitResult:
        """Write ``new`` to ``rows``; ``neq`` marks the cells that differ from the ledger's."""
        rs = self._rows
        # gpu: the ledger keeps every row's gpu reservation equal to its request (a row starts at
        # r = R, and each later write is this check or a reset to R), so only a changed gpu cell
        # can differ from the request; those are compared with it
        gpu_moved = neq[:, GPU]
        if gpu_moved.any():
            at = np.flatnonzero(gpu_moved)
            self._check_gpu(rows[at], new[at, GPU])
        moved_rows = any_per_row(neq)
        if not moved_rows.any():
            return self._result(c, True)
        self._stamp(np.compress(moved_rows, rows))
        rs.reservation[rows] = new
        self._sum_from_scratch(set(ALL_DIMS))  # (it resets incremental float drift)
        return self._result(c, True)


def _production_immutable(workload_id: str) -> Reason:
    return Reason(
        ReasonCode.RESTORATION_VIOLATION,
        detail=f"{workload_id} is production: only a limit-breach eviction may stop it",
    )


def from_blueprint(
    nodes: Sequence[NodeSpec],
    capacity: np.ndarray | Sequence[Resources],
    workloads: Iterable[WorkloadSpec],
    placement: Mapping[str, str | int],
) -> Ledger:
    """Module-level spelling of :meth:`Ledger.from_blueprint`."""
    return Ledger.from_blueprint(nodes, capacity, workloads, placement)
