"""Cluster compaction (seed 000 §6.2, Borg §5.1): the fewest nodes a workload still fits on.

One **trial** draws a random order in which to remove nodes (its seed), and finds the largest
number of them that can go while :func:`~kalena.core.packing.pack` still places the workload,
repacking from scratch each time. It bisects over that number (about log2 N packs, not N); a
greedy packer is not strictly monotone in the nodes it is given, so the bisection answers "a
smallest cluster the packer fits, along this removal order", which is what a trial reports.

As Borg did, so that a handful of pathological workloads do not decide the figure:

* up to ``pending_fraction`` (0.2 %) of the workloads may stay unplaced and the workload still
  counts as fitting (they are listed in the trial: the especially constrained ones);
* a gang with more members than half the cluster's nodes keeps its members but loses its gang
  rules (all or nothing, one node): they are packed one by one.

Several trials (11 by default) give a distribution; :class:`Compaction` reports its 90th
percentile with the min and max, Borg's Fig. 10 bars. Trials are independent pure functions of
(cluster, seed), so a shell may run them in parallel processes.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from kalena.core.cluster import Cluster
from kalena.core.packing import PackResult, pack

#: Borg §5.1: "we allowed up to 0.2 % of tasks to go pending".
PENDING_FRACTION = 0.002
DEFAULT_TRIALS = 11


@dataclass(frozen=True, slots=True)
class Trial:
    """One removal order's answer: ``nodes`` kept (the smallest that fits), which were removed,
    and the workloads left pending on it (within the budget)."""

    seed: int
    nodes: int
    removed: tuple[str, ...]
    pending: tuple[str, ...]
    packs: int  # how many packs the bisection ran


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
    """The cluster with every gang larger than half its nodes dropped (its members stay)."""
    half = len(cluster.nodes) / 2
    kept = tuple(g for g in cluster.groups if len(g.members) <= half)
    return cluster if len(kept) == len(cluster.groups) else dataclasses.replace(cluster, groups=kept)


def budget(cluster: Cluster, pending_fraction: float = PENDING_FRACTION) -> int:
    """How many workloads may stay pending while the workload still counts as fitting."""
    return math.floor(pending_fraction * len(cluster.workloads))


def trial(cluster: Cluster, seed: int, pending_fraction: float = PENDING_FRACTION) -> Trial:
    """The smallest cluster along one random removal order (module docstring)."""
    cluster = relax_large_gangs(cluster)
    n = len(cluster.nodes)
    allowance = budget(cluster, pending_fraction)
    order = np.random.default_rng(seed).permutation(n)
    packs = 0

    def attempt(k: int) -> PackResult:
        nonlocal packs
        packs += 1
        allowed = np.ones(n, dtype=bool)
        allowed[order[:k]] = False
        return pack(cluster, allowed)

    def fits(r: PackResult) -> bool:
        return len(r.pending) <= allowance

    best = attempt(0)
    if not fits(best):
        raise ValueError(
            f"the workload does not fit the whole cluster: {len(best.pending)} workloads pending, "
            f"more than the {allowance} allowed"
        )
    lo, hi = 0, n  # lo removed: fits; hi removed: assumed not to (unless the workload is empty)
    if not cluster.workloads:
        lo = hi = n
    while hi - lo > 1:
        mid = (lo + hi) // 2
        r = attempt(mid)
        if fits(r):
            lo, best = mid, r
        else:
            hi = mid
    names = [nd.name for nd in cluster.nodes]
    return Trial(
        seed=seed,
        nodes=n - lo,
        removed=tuple(names[i] for i in order[:lo].tolist()),
        pending=tuple(w for w, _ in best.pending),
        packs=packs,
    )


def compact(
    cluster: Cluster, seeds: Sequence[int] = range(DEFAULT_TRIALS), pending_fraction: float = PENDING_FRACTION
) -> Compaction:
    """Every trial in turn (a shell parallelises them with :func:`trial` itself)."""
    return Compaction(tuple(trial(cluster, s, pending_fraction) for s in seeds))
