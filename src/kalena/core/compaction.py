"""Cluster compaction (seed 000 §6.2, Borg §5.1): the fewest nodes a workload still fits on.

One **trial** draws a random order in which to remove nodes (from the generator it is given), and
finds the largest number of them that can go while :func:`~kalena.core.packing.pack` still places
the workload, repacking from scratch each time. It searches that number (a bisection, about
log2 N packs, not N; or, guided by another trial, a gallop from where that one ended, about 2); a
greedy packer is not strictly monotone in the nodes it is given, so the search answers "a
smallest cluster the packer fits, along this removal order", which is what a trial reports.

As Borg did, so that a handful of pathological workloads do not decide the figure:

* up to ``pending_fraction`` (0.2 %) of the workloads may stay unplaced and the workload still
  counts as fitting (they are listed in the trial: the especially constrained ones);
* a gang with more members than half the cluster's nodes keeps its members but loses its gang
  rules (all or nothing, one node): they are packed one by one; and a declaration with more
  replicas than half the nodes has its Kubernetes hard rules (required pod affinity and
  anti-affinity, hard spread) made soft.

**Growing.** A workload larger than the cluster (batch by its requests, say) first grows the pool
by clones of the cluster's own nodes, in a random order of the trial's, until it fits (up to
``MAX_GROWTH`` times the cluster); the removal then runs over the pool. So "how many nodes would
this need" has an answer above the cluster's size too.

**The arms** (:func:`arm`): production alone by its requests; production with batch under
reclamation, Kalena's dual ledger (production's requests in the request ledger, every reservation
in the reservation ledger); and production with batch by requests in one ledger. The batch and
the reservations are a moment's (:class:`BatchLoad`; a shell takes them from a simulated run).

Several trials (11 by default) give a distribution; :class:`Compaction` reports its 90th
percentile with the min and max, Borg's Fig. 10 bars. Trials are independent pure functions of
(cluster, generator, guide), so a shell may run them in parallel processes, one seeded generator
each: the first of an arm bisects, and what it found (:class:`Guide`) guides the others' search.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from kalena.core.cluster import Cluster
from kalena.core.ledger import tolerant_capacity
from kalena.core.model import PodTerm, Selector, WorkloadSpec
from kalena.core.packing import PackResult, pack

#: The share of workloads that may stay pending while the workload still fits (Borg §5.1 did so).
PENDING_FRACTION = 0.002
DEFAULT_TRIALS = 11
#: The pool grows by clones of the cluster's nodes up to this many times its size.
MAX_GROWTH = 16


@dataclass(frozen=True, slots=True)
class BatchLoad:
    """Batch to compact with production, and the reservations of a moment (a simulated
    checkpoint): ``production_reservation`` (P, 8) in the cluster's workload order, the ``batch``
    pods and their ``batch_reservation`` (B, 8)."""

    batch: tuple[WorkloadSpec, ...]
    batch_reservation: np.ndarray
    production_reservation: np.ndarray


def arm(
    cluster: Cluster, load: BatchLoad | None, reclaim: bool
) -> tuple[tuple[WorkloadSpec, ...], tuple[np.ndarray, ...] | None]:
    """The extra workloads and the ledgers of one arm (``pack``'s ``extra`` and ``ledgers``).

    Reclamation off: one ledger, every request (production's and batch's). On: Kalena's dual
    ledger: production's requests in the request ledger (batch counts nothing there), and every
    reservation, production's and batch's, in the reservation ledger. Without batch: production
    by its requests, either way.
    """
    if load is None or not load.batch:
        return (), None
    prod = cluster.requests_matrix()
    batch_req = np.array([w.requests.array() for w in load.batch]).reshape(-1, prod.shape[1])
    if not reclaim:
        return load.batch, (np.vstack([prod, batch_req]),)
    return load.batch, (
        np.vstack([prod, np.zeros_like(batch_req)]),
        np.vstack([load.production_reservation, load.batch_reservation]),
    )


@dataclass(frozen=True, slots=True)
class Trial:
    """One removal order's answer: ``nodes`` kept (the smallest that fits), which were removed,
    and the workloads left pending on it (within the budget); ``kept`` names the nodes (a clone
    ``NAME~K``) and ``placement`` is where the cluster's own workloads went on them
    (:func:`compacted` rebuilds that cluster)."""

    nodes: int
    removed: tuple[str, ...]
    pending: tuple[str, ...]
    packs: int  # how many packs the search ran
    added: int = 0  # clones of the cluster's nodes added to the pool before removing (too small)
    kept: tuple[str, ...] = ()
    placement: Mapping[str, str] = dataclasses.field(default_factory=dict)
    bound: int = 0  # the fewest nodes whose capacity could hold the workload along the order


@dataclass(frozen=True, slots=True)
class Guide:
    """What the first trial of an arm tells the others' search (:func:`trial`): how many nodes
    above its capacity bound it ended (``gap``), and whether the whole cluster was too small
    (``grows``: its pack is the same in every trial, as is its answer)."""

    gap: int
    grows: bool

    @classmethod
    def of(cls, first: Trial) -> Guide:
        return cls(first.nodes - first.bound, first.added > 0)


@dataclass(frozen=True, slots=True)
class Compaction:
    trials: tuple[Trial, ...]

    @property
    def counts(self) -> np.ndarray:
        return np.array([t.nodes for t in self.trials], dtype=np.int64)

    @property
    def p90(self) -> float:
        return float(np.percentile(self.counts, 90))

    @property
    def low(self) -> int:
        return int(self.counts.min())

    @property
    def high(self) -> int:
        return int(self.counts.max())


def relax_large_gangs(cluster: Cluster) -> Cluster:
    """The cluster with every gang larger than half its nodes dropped (its members stay), and the
    Kubernetes hard rules of every declaration with more replicas than half its nodes made soft:
    its required pod anti-affinity and affinity terms join its soft antiAffinity and affinity
    (kept where some node allows, by node), its hard spread dropped."""
    half = len(cluster.nodes) / 2
    kept = tuple(g for g in cluster.groups if len(g.members) <= half)
    replicas: dict[str, int] = {}
    for w in cluster.workloads:
        replicas[w.declaration or w.id] = replicas.get(w.declaration or w.id, 0) + 1
    large = {d for d, n in replicas.items() if n > half}
    hard = [
        (w.declaration or w.id) in large and bool(w.required_affinity or w.required_anti_affinity or w.spread)
        for w in cluster.workloads
    ]
    if len(kept) == len(cluster.groups) and not any(hard):
        return cluster
    workloads = tuple(_soft(w) if h else w for w, h in zip(cluster.workloads, hard, strict=True))
    return dataclasses.replace(cluster, groups=kept, workloads=workloads)


def _soft(w: WorkloadSpec) -> WorkloadSpec:
    def union(soft: Selector, terms: Sequence[PodTerm]) -> Selector:
        # the terms name their targets (a shell resolved their labels); a soft selector is one set
        return Selector(frozenset().union(soft.names, *(t.selector.names for t in terms)), soft.match_labels)

    return dataclasses.replace(
        w,
        affinity=union(w.affinity, w.required_affinity),
        anti_affinity=union(w.anti_affinity, w.required_anti_affinity),
        required_affinity=(),
        required_anti_affinity=(),
        spread=(),
    )


def budget(cluster: Cluster, pending_fraction: float = PENDING_FRACTION, extra: int = 0) -> int:
    """How many workloads (the cluster's and ``extra`` more) may stay pending while the workload
    still counts as fitting."""
    return math.floor(pending_fraction * (len(cluster.workloads) + extra))


class TrialStopped(Exception):
    """The trial's ``proceed`` answered no before a pack: its answer is no longer wanted."""


def trial(
    cluster: Cluster,
    rng: np.random.Generator,
    pending_fraction: float = PENDING_FRACTION,
    load: BatchLoad | None = None,
    reclaim: bool = True,
    guide: Guide | None = None,
    proceed: Callable[[], bool] | None = None,
) -> Trial:
    """The smallest cluster along one random removal order (module docstring), for production
    alone or with ``load``'s batch in the arm ``reclaim`` says (:func:`arm`).

    ``guide``: what another trial of the same arm found (:class:`Guide`). The search then first
    probes this trial's capacity bound plus the guide's gap and gallops from there (about 2 packs
    where a bisection takes 6), a whole cluster the guide saw too small is not packed again
    (the same pack, the same answer), and the pool is packed only if no probe fits (below).
    Without it, the search bisects. Either way the search ends at a removal count that fits with
    one more that does not.

    ``proceed``: asked before each pack; once it answers False the trial raises
    :class:`TrialStopped` (a shell that no longer wants the answer frees the process sooner)."""
    cluster = relax_large_gangs(cluster)
    extra, ledgers = arm(cluster, load, reclaim)
    allowance = budget(cluster, pending_fraction, len(extra))
    clone_order = rng.permutation(len(cluster.nodes))
    packs = 0
    need = least_placed(cluster, extra, ledgers, allowance)
    empty = not cluster.workloads and not extra
    none = np.zeros(0, dtype=np.int64)

    def fits(r: PackResult | None) -> bool:
        return r is not None and len(r.pending) <= allowance

    def holds(pool: Cluster, off: np.ndarray) -> np.ndarray | None:
        """The pool's nodes without ``off`` (a mask), where their capacity can hold what must be
        placed; else None."""
        allowed = np.ones(len(pool.nodes), dtype=bool)
        allowed[off] = False
        room = tolerant_capacity(pool.capacity_matrix()[allowed]).sum(axis=0)
        return None if (need > room * (1.0 + 1e-9)).any() else allowed

    def attempt(pool: Cluster, off: np.ndarray) -> PackResult | None:
        """The pack without the nodes ``off``; None, without packing, where their capacity
        cannot hold what must be placed (it would not fit: the same answer, sooner)."""
        nonlocal packs
        allowed = holds(pool, off)
        if allowed is None:
            return None
        if proceed is not None and not proceed():
            raise TrialStopped
        packs += 1
        return pack(pool, allowed, extra=extra, ledgers=ledgers, give_up_after=allowance, reasons=False)

    def search(pool: Cluster) -> tuple[np.ndarray, int, int, PackResult | None]:
        """The removal order drawn for ``pool``, its capacity bound, and the search along it."""
        n = len(pool.nodes)
        order = rng.permutation(n)
        bound = capacity_bound(pool, order, need)
        if empty:
            return order, bound, n, None
        start = None if guide is None else n - bound - guide.gap
        lo, found = _search(lambda m: attempt(pool, order[:m]), fits, n, start)
        return order, bound, lo, found

    # The pool: the cluster, grown by clones of its nodes (in a random order) while too small.
    # Unguided, the pool is packed first (the search takes 0 removals to fit). Guided, a pool
    # whose capacity holds the workload is searched at once: a probe that fits shows the pool
    # does too (a packer that fits fewer nodes fits more), so the pool is packed only if every
    # probe failed, and is grown (its order drawn again, from the same generator state) if that
    # pack fails too: the answer of packing it first, one pack sooner.
    lazy = guide is not None and not empty
    pool, added = cluster, 0
    skip = guide is not None and guide.grows  # the whole cluster, which the guide saw too small
    while True:
        if not skip:
            if not lazy:
                best = attempt(pool, none)
                if fits(best):
                    order, bound, lo, found = search(pool)
                    best = found if found is not None else best
                    break
            elif holds(pool, none) is not None:
                drawn = rng.bit_generator.state
                order, bound, lo, best = search(pool)
                if lo > 0:
                    break
                best = attempt(pool, none)
                if fits(best):
                    break
                rng.bit_generator.state = drawn
        skip = False
        if added >= MAX_GROWTH * len(cluster.nodes) or not cluster.nodes:
            raise ValueError(
                f"the workload does not fit the whole cluster, nor {MAX_GROWTH} times as many nodes: "
                f"more than the {allowance} workloads allowed stay pending"
            )
        added = max(1, 2 * added, len(cluster.nodes) // 8)
        pool = grown(cluster, clone_order, added)
    n = len(pool.nodes)
    assert best is not None
    names = [nd.name for nd in pool.nodes]
    own = {w.id for w in cluster.workloads}
    return Trial(
        nodes=n - lo,
        removed=tuple(names[i] for i in order[:lo].tolist()),
        pending=tuple(w for w, _ in best.pending),
        packs=packs,
        added=added,
        kept=tuple(names[i] for i in sorted(order[lo:].tolist())),
        placement={w: nd for w, nd in best.placement.items() if w in own},
        bound=bound,
    )


def _search(
    probe: Callable[[int], PackResult | None],
    fits: Callable[[PackResult | None], bool],
    n: int,
    start: int | None,
) -> tuple[int, PackResult | None]:
    """The removal count ``lo`` whose probe fits with ``lo + 1``'s not (0 is taken to fit, ``n``
    not to), and ``lo``'s pack (None for 0). From ``start``: one probe there, then steps of 1, 2,
    4, ... towards the boundary, then a bisection; without it, a bisection of ``[0, n]``."""
    lo, hi, best = 0, n, None

    def at(m: int) -> bool:
        nonlocal lo, hi, best
        r = probe(m)
        if fits(r):
            lo, best = m, r
            return True
        hi = m
        return False

    if start is not None and hi - lo > 1:
        up = at(min(max(start, lo + 1), hi - 1))
        step = 1
        while hi - lo > 1 and at(min(lo + step, hi - 1) if up else max(hi - step, lo + 1)) == up:
            step *= 2
    while hi - lo > 1:
        at((lo + hi) // 2)
    return lo, best


def capacity_bound(pool: Cluster, order: np.ndarray, need: np.ndarray) -> int:
    """The fewest nodes, kept from the end of ``order``, whose capacity holds ``need`` (L, 8) in
    every ledger (:func:`least_placed`): no pack along ``order`` can do with fewer."""
    n = len(order)
    cap = tolerant_capacity(pool.capacity_matrix())[order]
    room = np.cumsum(cap[::-1], axis=0)[::-1]  # room[m]: the nodes left after removing m
    ok = ~(need[None, :, :] > room[:, None, :] * (1.0 + 1e-9)).any(axis=(1, 2))
    if not n or not ok[0]:
        return n
    return n - int(np.flatnonzero(ok)[-1])


def least_placed(
    cluster: Cluster, extra: Sequence[WorkloadSpec], ledgers: Sequence[np.ndarray] | None, allowance: int
) -> np.ndarray:
    """(L, 8): what a pack that fits must place in each ledger at least, whichever ``allowance``
    workloads stay pending (the largest on each dimension, the most they could leave out). Nodes
    whose summed capacity is below it cannot take the workload: no need to pack to know."""
    rows = (
        np.stack([np.asarray(m, dtype=np.float64) for m in ledgers])
        if ledgers is not None
        else np.vstack([cluster.requests_matrix(), *(w.requests.array()[None] for w in extra)])[None]
    )
    total = rows.sum(axis=1)
    if allowance <= 0 or rows.shape[1] == 0:
        return total
    return total - np.sort(rows, axis=1)[:, -allowance:, :].sum(axis=1)


def compacted(cluster: Cluster, t: Trial) -> Cluster:
    """The cluster trial ``t`` ended with: its kept nodes (a clone ``NAME~K`` rebuilt from node
    ``NAME``) and the cluster's workloads where the trial placed them; the few it left pending
    (within the budget) are left out, and so are the gangs they belonged to."""
    by_name = {nd.name: nd for nd in cluster.nodes}
    nodes = [
        by_name[name] if name in by_name else dataclasses.replace(by_name[name.rsplit("~", 1)[0]], name=name)
        for name in t.kept
    ]
    placed = [w for w in cluster.workloads if w.id in t.placement]
    groups = [g for g in cluster.groups if all(m in t.placement for m in g.members)]
    return Cluster.build(nodes, cluster.daemonsets, placed, t.placement, groups)


def grown(cluster: Cluster, clone_order: np.ndarray, count: int) -> Cluster:
    """The cluster with ``count`` more nodes, clones of its own taken in ``clone_order`` (cycling):
    the same allocatable, labels and taints, named ``NAME~K``."""
    nodes = cluster.nodes
    picks = [nodes[int(clone_order[k % len(nodes)])] for k in range(count)]
    clones = [dataclasses.replace(nd, name=f"{nd.name}~{k}") for k, nd in enumerate(picks)]
    return Cluster.build((*nodes, *clones), cluster.daemonsets, cluster.workloads, groups=cluster.groups)


def compact(
    cluster: Cluster,
    rngs: Sequence[np.random.Generator],
    pending_fraction: float = PENDING_FRACTION,
    load: BatchLoad | None = None,
    reclaim: bool = True,
) -> Compaction:
    """Every trial in turn (a shell parallelises them with :func:`trial` itself)."""
    return Compaction(tuple(trial(cluster, r, pending_fraction, load, reclaim) for r in rngs))
