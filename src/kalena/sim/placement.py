"""The batch queue and the context of each placement pass; the placing itself is the core's ``schedule``.

**Queue.** Pending pods are kept by equivalence class (their job), in pod order. Before a pass,
each class sends at most the number of its pods that the reservation ledger alone could admit at
the start of the pass::

    k = sum over eligible nodes n of floor(min over d with R_d > 0 of S_nd / R_d),   S = C~ - U

(``C~`` the ledger's tolerant capacity; nodes where the class is cooling down after an eviction or
blacklisted as a harmful pairing count 0). The bound never changes an outcome: a pass only
lowers ``S``, so the core cannot place more than ``k`` pods of the class in it, and the pods of a
class are identical, so it places a prefix of them in pod order (once one waits, the rest wait
for the same reasons). What it saves is the core's why-pending work for pods whose answer is
known (kube-scheduler's queueing hints do the same). ``tests/sim`` checks a run with the bound
against one that sends every pending pod. Only ``min(k, pending)`` matters, so ``k`` is summed
a block of nodes at a time, and a class stops once it reaches its pending count.

**Context.** The core's :class:`~kalena.core.placement.ContextKeeper` (the one the node agent
keeps too), fed by the engine: cooldowns from eviction requeues, the harmful-pairing blacklist
over the eviction history, slack eligibility from escalation, image masks and node volatility
over the last 30 one-minute samples of U (sampled every minute, refreshed every five).
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence

import numpy as np

from kalena.core.enforcement import PairingConfig
from kalena.core.ledger import Ledger
from kalena.core.placement import (
    ContextKeeper,
    PlacementCache,
    PlacementConfig,
    SchedulingDecision,
    schedule,
)
from kalena.sim.batch import BatchTasks


class BatchQueue:
    """Pending batch pods (task indices) by equivalence class, each class in pod order."""

    def __init__(self) -> None:
        self.classes: dict[str, list[int]] = {}
        self.size = 0

    def add(self, key: str, task: int) -> None:
        bisect.insort(self.classes.setdefault(key, []), task)
        self.size += 1

    def take(self, key: str, tasks: Sequence[int]) -> None:
        left = self.classes[key]
        gone = set(tasks)
        self.classes[key] = [t for t in left if t not in gone]
        self.size -= len(left) - len(self.classes[key])
        if not self.classes[key]:
            del self.classes[key]

    def __len__(self) -> int:
        return self.size


def fit_counts(request: np.ndarray, slack: np.ndarray) -> np.ndarray:
    """Per node, how many pods of ``request`` the reservation ledger alone would still admit:
    ``floor(min over d with R_d > 0 of slack_d / R_d)`` (0 where negative), for ``slack`` = C~ - U."""
    d = request > 0
    if not d.any():
        return np.full(len(slack), 1 << 20, dtype=np.int64)
    with np.errstate(invalid="ignore", divide="ignore"):
        per = np.floor(np.min(slack[:, d] / request[d], axis=1))
    per = np.where(np.isfinite(per), per, np.where(per > 0, 1 << 20, 0))
    return np.maximum(per, 0).astype(np.int64)


def fit_counts_many(requests: np.ndarray, slack: np.ndarray) -> np.ndarray:
    """:func:`fit_counts` for K requests at once: (K, N)."""
    d = np.flatnonzero(requests.any(axis=0))
    if not len(d):
        return np.full((len(requests), len(slack)), 1 << 20, dtype=np.int64)
    out = np.zeros((len(requests), len(slack)), dtype=np.int64)
    # A node short, on a dimension every class requests, of the smallest such request admits no
    # pod of any class: only the others are worked out (a busy cluster's nodes are mostly full).
    req = requests[:, d]
    every = (req > 0).all(axis=0)
    room = np.flatnonzero((slack[:, d[every]] >= req[:, every].min(axis=0)).all(axis=1))
    if not len(room):
        return out
    r = req[:, None, :]  # (K, 1, D)
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = np.where(r > 0, slack[room][:, d][None, :, :] / r, np.inf)
    per = np.floor(ratio.min(axis=2))
    per = np.where(np.isfinite(per), per, np.where(per > 0, 1 << 20, 0))
    out[:, room] = np.maximum(per, 0).astype(np.int64)
    return out


#: Nodes per block of :func:`admitted` (a (classes, nodes, dimensions) block stays small).
ADMIT_BLOCK = 512


def admitted(
    requests: np.ndarray, slack: np.ndarray, sizes: np.ndarray, blocked: Sequence[Sequence[int]]
) -> np.ndarray:
    """Per class, ``min(sizes[k], sum over its unblocked nodes of fit_counts)``: the module's bound.

    The nodes are taken a block at a time and a class leaves once its sum reaches its size (the
    minimum is then its size whatever the other nodes add), so in a cluster with room a pass
    looks at a few blocks, not at every node for every class.
    """
    k, n = len(requests), len(slack)
    total = np.zeros(k, dtype=np.int64)
    active = np.flatnonzero(sizes > 0)
    for start in range(0, n, ADMIT_BLOCK):
        if not len(active):
            break
        stop = min(start + ADMIT_BLOCK, n)
        per = fit_counts_many(requests[active], slack[start:stop])
        for i, c in enumerate(active.tolist()):
            if blocked[c]:  # cooling down or a harmful pairing there: it counts 0
                at = np.asarray(blocked[c], dtype=np.int64)
                at = at[(at >= start) & (at < stop)] - start
                per[i, at] = 0
        total[active] += per.sum(axis=1)
        active = active[total[active] < sizes[active]]
    return np.minimum(total, sizes)


class PlacementShell:
    """Everything the simulator keeps between placement passes: the keeper, the cache, the stats."""

    def __init__(self, ledger: Ledger, config: PlacementConfig, pairing: PairingConfig) -> None:
        self.ledger = ledger
        self.config = config
        self.pairing = pairing
        self.cache = PlacementCache()
        self.keeper = ContextKeeper.of(ledger, pairing)
        self.stats = {"passes": 0, "pods_sent": 0, "placed": 0, "stale": 0}

    # bookkeeping fed by the simulator: the keeper's ---------------------------------------------------
    def evicted(self, key: str, node: int, now: float, cooldown_until: float) -> None:
        self.keeper.evicted(key, node, now, cooldown_until)

    def started(self, image: str, node: int) -> None:
        self.keeper.started(image, node)

    def sample_reservations(self) -> None:
        self.keeper.sample(self.ledger.reservation_sum)

    def update_volatility(self) -> None:
        self.keeper.refresh_volatility(self.ledger.capacity)

    @property
    def cooldowns(self) -> Mapping[tuple[str, int], float]:
        return self.keeper.cooldowns

    @property
    def blacklist(self) -> frozenset[tuple[str, int]]:
        return self.keeper.blacklist

    # one pass -------------------------------------------------------------------------------------
    def eligible(self, now: float) -> np.ndarray:
        return self.keeper.eligible(now)

    def select(self, queue: BatchQueue, tasks: BatchTasks, now: float) -> list[int]:
        """The pods to send this pass (module docstring)."""
        if not queue.classes:
            return []
        self.keeper.refresh(now)
        blocked: dict[str, list[int]] = {}  # nodes a class may not use: cooling down or a harmful pairing
        for key, n in [*self.keeper.cooldowns, *self.keeper.blacklist]:
            blocked.setdefault(key, []).append(n)
        slack = self.ledger.capacity_tol - self.ledger.reservation_sum
        slack[~self.eligible(now)] = -np.inf
        keys = list(queue.classes)
        heads = np.array([queue.classes[k][0] for k in keys])
        req = tasks.requests[heads]
        # a class whose request exceeds the largest slack on some dimension fits nowhere
        maybe = np.flatnonzero(np.all(req <= slack.max(axis=0), axis=1))
        if not len(maybe):
            return []
        sizes = np.array([len(queue.classes[keys[c]]) for c in maybe.tolist()], dtype=np.int64)
        counts = admitted(req[maybe], slack, sizes, [blocked.get(keys[c], []) for c in maybe.tolist()])
        out: list[int] = []  # in queue order: each class is bounded alone, and schedule sorts the pods
        for j, c in enumerate(maybe.tolist()):
            out.extend(queue.classes[keys[c]][: int(counts[j])])
        return out

    def run(
        self, send: list[int], tasks: BatchTasks, now: float, rng: np.random.Generator
    ) -> SchedulingDecision:
        pods = [tasks.specs[t] for t in send]
        context = self.keeper.context(now, pods)
        self.stats["passes"] += 1
        self.stats["pods_sent"] += len(pods)
        # placements only: the engine never reads why a pod waits (the report asks the core itself)
        return schedule(pods, self.ledger, context, self.config, rng, cache=self.cache, explain=False)
