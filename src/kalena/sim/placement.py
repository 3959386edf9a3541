"""The batch queue and the context of each placement pass; the placing itself is the core's ``schedule``.

**Queue.** Pending pods are kept by equivalence class (their job), in pod order. Before a pass, the
classes are visited in the core's pending order (priority, then key) and each sends at most the
number of its pods that the reservation ledger alone could still admit::

    k = sum over eligible nodes n of floor(min over d with R_d > 0 of S_nd / R_d),   S = C~ - U

(``C~`` the ledger's tolerant capacity; nodes where the class is cooling down after an eviction or
blacklisted as a harmful pairing count 0); those ``k`` pods are then charged to the roomiest nodes
of ``S`` before the next class is measured. The fit is a filter every pod must pass, so the pods
held back would mostly come back pending anyway; holding them skips the core's why-pending work
for answers that are known (kube-scheduler's queueing hints do the same). The charge is an
estimate (the core may choose other nodes), so a pod may wait one pass longer than it had to; the
core still decides every pod it is sent, and the next pass measures the ledger afresh.

**Context.** Cooldowns from eviction requeues, the harmful-pairing blacklist (the core's
``harmful_pairs`` over the eviction history of the last pairing window), slack eligibility from
escalation, image masks (a node holds a job's image once one of its pods started there) and node
volatility (the core's ``reservation_volatility`` over the last 30 one-minute samples of U).
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

import numpy as np

from kalena.core.enforcement import EvictionEvent, PairingConfig, harmful_pairs
from kalena.core.ledger import Ledger
from kalena.core.placement import (
    PlacementCache,
    PlacementConfig,
    SchedulingContext,
    SchedulingDecision,
    reservation_volatility,
    schedule,
)
from kalena.core.resources import RECLAIMABLE
from kalena.sim.batch import BatchTasks

VOLATILITY_SAMPLES = 30


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
    r = requests[:, d][:, None, :]  # (K, 1, D)
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = np.where(r > 0, slack[None, :, d] / r, np.inf)
    per = np.floor(ratio.min(axis=2))
    per = np.where(np.isfinite(per), per, np.where(per > 0, 1 << 20, 0))
    return np.maximum(per, 0).astype(np.int64)


class PlacementShell:
    """Everything the simulator keeps between placement passes."""

    def __init__(self, ledger: Ledger, config: PlacementConfig, pairing: PairingConfig) -> None:
        self.ledger = ledger
        self.config = config
        self.pairing = pairing
        self.cache = PlacementCache()
        n = ledger.n_nodes
        self.cooldowns: dict[tuple[str, int], float] = {}
        self.history: list[EvictionEvent] = []
        self.blacklist: frozenset[tuple[str, int]] = frozenset()
        self._blacklist_until = np.inf
        self._history_changed = False
        self.ineligible_until = np.full(n, -np.inf)
        self.images: dict[str, np.ndarray] = {}
        self._series = np.full((VOLATILITY_SAMPLES, n, ledger.capacity.shape[1]), np.nan)
        self._series_at = 0
        self.volatility = np.zeros(n)
        self.stats = {"passes": 0, "pods_sent": 0, "placed": 0, "stale": 0}

    # bookkeeping fed by the simulator -----------------------------------------------------------
    def evicted(self, key: str, node: int, now: float, cooldown_until: float) -> None:
        self.cooldowns[(key, node)] = max(cooldown_until, self.cooldowns.get((key, node), -np.inf))
        self.history.append(EvictionEvent(key, self.ledger.nodes[node].name, now))
        self._history_changed = True

    def started(self, image: str, node: int) -> None:
        mask = self.images.get(image)
        if mask is None:
            mask = self.images[image] = np.zeros(self.ledger.n_nodes, dtype=bool)
        mask[node] = True

    def sample_reservations(self) -> None:
        self._series[self._series_at % VOLATILITY_SAMPLES] = self.ledger.reservation_sum
        self._series_at += 1

    def update_volatility(self) -> None:
        self.volatility = reservation_volatility(self._series, self.ledger.capacity, RECLAIMABLE)

    # one pass -------------------------------------------------------------------------------------
    def eligible(self, now: float) -> np.ndarray:
        return self.ineligible_until <= now

    def _refresh_blacklist(self, now: float) -> None:
        lo = now - self.pairing.window_s
        if self.history and self.history[0].time <= lo:
            self.history = [e for e in self.history if e.time > lo]
            self._history_changed = True
        if not (self._history_changed or now >= self._blacklist_until):
            return
        pairs = harmful_pairs(self.history, self.pairing, now)
        index = self.ledger.node_index
        self.blacklist = frozenset((p.key, index[p.node]) for p in pairs)
        self._blacklist_until = min((p.until for p in pairs), default=np.inf)
        self._history_changed = False

    def select(self, queue: BatchQueue, tasks: BatchTasks, now: float) -> list[int]:
        """The pods to send this pass (module docstring), classes in the core's pending order."""
        if not queue.classes:
            return []
        if self.cooldowns:
            self.cooldowns = {k: v for k, v in self.cooldowns.items() if v > now}
        self._refresh_blacklist(now)
        blocked: dict[str, list[int]] = {}  # nodes a class may not use: cooling down or a harmful pairing
        for key, n in [*self.cooldowns, *self.blacklist]:
            blocked.setdefault(key, []).append(n)
        slack = self.ledger.capacity_tol - self.ledger.reservation_sum
        slack[~self.eligible(now)] = -np.inf
        keys = list(queue.classes)
        heads = np.array([queue.classes[k][0] for k in keys])
        req = tasks.requests[heads]
        top = slack.max(axis=0)
        # a class whose request exceeds the largest slack on some dimension fits nowhere; charging
        # only lowers the slack, so it stays out for the whole pass
        maybe = np.flatnonzero(np.all(req <= top, axis=1))
        if not len(maybe):
            return []
        # per-node counts of every remaining class at once; after each charge only the charged
        # nodes' columns are recounted (for all classes at once). A class no node admits stays out.
        cand = req[maybe]
        counts = fit_counts_many(cand, slack)
        prio = tasks.priority[heads]
        order = sorted(
            (j for j in range(len(maybe)) if counts[j].any()),
            key=lambda j: (-int(prio[maybe[j]]), keys[maybe[j]]),
        )
        out: list[int] = []
        for j in order:
            key = keys[maybe[j]]
            ids = queue.classes[key]
            per = counts[j]
            if key in blocked:
                per = per.copy()
                per[blocked[key]] = 0
            k = min(len(ids), int(per.sum()))
            if k == 0:
                continue
            out.extend(ids[:k])
            # Charge the k pods to the roomiest nodes, so that the classes after this one are
            # measured against what is left (an estimate: the core may choose other nodes).
            room = np.argsort(-per, kind="stable")
            before = np.concatenate(([0], np.cumsum(per[room])[:-1]))
            take = np.minimum(per[room], np.maximum(k - before, 0))
            hit = room[take > 0]
            slack[hit] -= take[take > 0][:, None] * cand[j][None, :]
            counts[:, hit] = fit_counts_many(cand, slack[hit])
        return out

    def run(
        self, send: list[int], tasks: BatchTasks, now: float, rng: np.random.Generator
    ) -> SchedulingDecision:
        pods = [tasks.specs[t] for t in send]
        images = {p.image: self.images[p.image] for p in pods if p.image in self.images}
        context = SchedulingContext(
            now=now,
            cooldowns=self.cooldowns,
            blacklist=self.blacklist,
            eligible=self.eligible(now),
            images=images,
            volatility=self.volatility,
        )
        self.stats["passes"] += 1
        self.stats["pods_sent"] += len(pods)
        return schedule(pods, self.ledger, context, self.config, rng, cache=self.cache)
