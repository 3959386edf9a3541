"""``schedule``: place pending batch workloads into reclaimed capacity, or say why not.

One pass, for each pending pod in :func:`pending_sort_key` order:

1. **Filter** (``filters.DEFAULT_FILTERS``, in order). With equivalence reuse, the per-class
   filters run once per equivalence key for the whole pass and the fit is cached per class,
   recomputed only on the nodes this pass placed on since (the node the previous pod went to); the
   per-pod filters (namespace cap, production and own anti-affinity, spread) run on candidates.
2. **Sample** (relaxed randomisation, seed 000 §4.2): above ``sample_above_nodes`` nodes, walk
   the candidates in a random order (a per-pass permutation, a per-pod random start) and stop at
   the first ``sample_feasible`` feasible nodes; below it, every feasible node is a candidate.
3. **Score** (``score.DEFAULT_SCORES``) and choose by :func:`candidate_sort_key`.
4. **Commit** to the pass state and emit a :class:`PlaceBatch` stamped with the node's epoch, so
   that ``ledger.apply_all(decision.placements)`` applies them or rejects the stale ones.

A pod no node accepts gets a :class:`WhyPending`. The ledger is never written here. With
``explain=False`` a pending pod's ``WhyPending`` carries no statuses, binding dimension or
message (:data:`UNEXPLAINED`): the placements are the same, and a caller that reads only them
(the simulator; the report asks ``why_pending`` itself) spares the explanation's cost. Then,
without sampling, a request that no node's ledger admits is remembered for the pass: a pass only
adds to the ledger's sums, so every later pod asking for it waits too, whatever its class, and is
answered before any per-pod work (a backlog's pods are mostly such pods).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from kalena.core.ledger import Ledger, PlaceBatch
from kalena.core.model import Tier, WorkloadSpec
from kalena.core.placement.cache import PlacementCache
from kalena.core.placement.config import PlacementConfig, SchedulingContext
from kalena.core.placement.filters import DEFAULT_FILTERS, Filter, ReservationFit, TopologySpread
from kalena.core.placement.runner import Prepared, explain, feasible, prepare, reasons_of
from kalena.core.placement.score import DEFAULT_SCORES, Score
from kalena.core.placement.state import PassState
from kalena.core.placement.why import WhyPending, binding_dimension
from kalena.core.resources import Resources
from kalena.core.verdict import render_reasons


@dataclass(frozen=True, slots=True)
class ScheduleStats:
    pods: int
    placed: int
    pending: int
    nodes_examined: int  # node evaluations in the candidate search, summed over pods
    classes: int  # equivalence classes seen (0 without reuse)
    score_cache_hits: int
    score_cache_misses: int


@dataclass(frozen=True, slots=True)
class SchedulingDecision:
    placements: tuple[PlaceBatch, ...]  # in commit order
    scores: tuple[float, ...]  # the winning score of each placement
    pending: tuple[WhyPending, ...]
    global_epoch: int  # the ledger epoch the pass read
    stats: ScheduleStats


def pending_sort_key(w: WorkloadSpec) -> tuple[int, str, str]:
    """Higher priority first; then by equivalence key (keeps a class together for cache reuse); then id."""
    return (-w.priority, w.equivalence_key, w.id)


def candidate_sort_key(score: float, node: int) -> tuple[float, int]:
    """Highest score first; ties go to the lowest node index (a fixed tie-break)."""
    return (-score, node)


def same_class(a: WorkloadSpec, b: WorkloadSpec) -> bool:
    """Whether ``b`` may reuse ``a``'s class results and why-pending: all they read but identity is equal."""
    # ``x is y`` first: pods of one job usually share these objects, and it spares the comparison
    return (
        a.equivalence_key == b.equivalence_key
        and (a.requests is b.requests or a.requests == b.requests)
        and (a.node_selector is b.node_selector or a.node_selector == b.node_selector)
        and (a.tolerations is b.tolerations or a.tolerations == b.tolerations)
        and (a.labels is b.labels or a.labels == b.labels)
        and a.namespace == b.namespace
        and a.image == b.image
        and (a.anti_affinity is b.anti_affinity or a.anti_affinity == b.anti_affinity)
        and a.anti_affinity_topology_key == b.anti_affinity_topology_key
        and (a.spread is b.spread or a.spread == b.spread)
    )


@dataclass(slots=True)
class _Class:
    rep: WorkloadSpec
    fit: Prepared
    order: np.ndarray | None = None  # nodes passing the per-class filters, in search order (on demand)
    why: WhyPending | None = None
    why_at: int = -1  # state.placed when ``why`` was computed
    nowhere: bool = False  # no node took a pod of the class, and none will in this pass (decide)


#: The message of a pending pod's ``WhyPending`` when ``schedule`` was asked not to explain.
UNEXPLAINED = "not explained (schedule(explain=False))"


class _Pass:
    """The mutable bookkeeping of one ``schedule`` call."""

    def __init__(
        self,
        state: PassState,
        config: PlacementConfig,
        rng: np.random.Generator,
        filters: Sequence[Filter],
        scores: Sequence[Score],
        explain: bool = True,
    ) -> None:
        self.state, self.config, self.rng = state, config, rng
        self.explain = explain
        self.filters, self.scores = tuple(filters), tuple(scores)
        self.per_pod = tuple(f for f in self.filters if not f.per_class)
        self.per_class = tuple(f for f in self.filters if f.per_class)
        # the per-class rules' nodes by their keys, when every one of them gives its key (filters)
        keys = [getattr(f, "class_key", None) for f in self.per_class]
        self.class_keys: list[Callable[[WorkloadSpec, PassState], Hashable]] | None = (
            keys if all(callable(k) for k in keys) else None  # type: ignore[assignment]
        )
        self.orders: dict[tuple[Hashable, ...], np.ndarray] = {}
        self.fits: dict[Resources, Prepared] = {}  # the fit by request vector: it reads nothing else
        # (plugin, weight) for every term with a non-zero weight, looked up once per pass
        self.weighted = tuple((sc, w) for sc in self.scores if (w := config.weight(sc.name)))
        n = state.n
        self.sample = config.relaxed_randomisation and n > config.sample_above_nodes
        self.k = config.sample_feasible if self.sample else None
        self.chunk = 2 * config.sample_feasible  # one chunk usually suffices when most nodes are feasible
        self.all = np.arange(n)
        self.order = rng.permutation(n) if self.sample else self.all
        self.classes: dict[str, _Class] = {}
        self.examined = 0
        self.crowded = False  # a search of this pass found no node: look at the fit before searching
        self.unfit: set[Resources] = set()  # requests no node admits in this pass (explain=False)
        self.fit_plugin = next((f for f in filters if isinstance(f, ReservationFit)), None)
        # whether "no node" stays true for a class (decide); spread applies only to pods with it
        self.monotone = all(getattr(f, "monotone", False) or isinstance(f, TopologySpread) for f in filters)

    # candidate search ---------------------------------------------------------------------------
    def search(self, checks: Sequence[Prepared], order: np.ndarray) -> np.ndarray:
        if self.k is None or not len(order):
            self.examined += len(order)
            return feasible(checks, order)
        n = len(order)
        start = int(self.rng.integers(n))
        found: list[np.ndarray] = []
        got = pos = 0
        while pos < n and got < self.k:
            # chunk [pos, pos + chunk) of ``order`` rotated to begin at ``start``, cut from order
            # itself (rotating the whole of it for every pod copied thousands of nodes to read ~100)
            lo, hi = start + pos, start + min(pos + self.chunk, n)
            if hi <= n:
                chunk = order[lo:hi]
            elif lo >= n:
                chunk = order[lo - n : hi - n]
            else:
                chunk = np.concatenate((order[lo:], order[: hi - n]))
            part = feasible(checks, chunk)
            pos += self.chunk
            found.append(part)
            got += len(part)
        self.examined += min(pos, n)
        return found[0][: self.k] if len(found) == 1 else np.concatenate(found)[: self.k]

    def class_for(self, pod: WorkloadSpec) -> _Class:
        cls = self.classes.get(pod.equivalence_key)
        if cls is not None and same_class(cls.rep, pod):
            return cls
        fit = self.fits.get(pod.requests)
        if fit is None:
            fit = self.fits[pod.requests] = (
                ("ReservationFit", self.fit_plugin.prepare_class(pod, self.state))
                if self.fit_plugin is not None
                else ("ReservationFit", _NoCheck())
            )
        cls = _Class(pod, fit)
        if pod.equivalence_key not in self.classes:  # a mismatching pod gets a one-off class
            self.classes[pod.equivalence_key] = cls
        return cls

    def order_of(self, cls: _Class) -> np.ndarray:
        """The nodes passing the class's per-class filters, in search order (computed once per
        class, and once per combination of the filters' keys when they all give one)."""
        if cls.order is None:
            state = self.state
            keys = self.class_keys
            key = None if keys is None else tuple(k(cls.rep, state) for k in keys)
            order = None if key is None else self.orders.get(key)
            if order is None:
                static = feasible(prepare(self.per_class, cls.rep, state), self.all)
                mask = np.zeros(state.n, dtype=bool)
                mask[static] = True
                order = self.order[mask[self.order]]
                if key is not None:
                    self.orders[key] = order
            cls.order = order
        return cls.order

    def pod_checks(self, pod: WorkloadSpec, cls: _Class | None) -> list[Prepared]:
        if cls is None:
            return prepare(self.filters, pod, self.state)
        out: list[Prepared] = []
        for f in self.per_pod:
            if f is self.fit_plugin:
                out.append(cls.fit)
            elif (check := f.prepare(pod, self.state)) is not None:
                out.append((f.name, check))
        return out

    # one pod ----------------------------------------------------------------------------------------
    def decide(self, pod: WorkloadSpec) -> tuple[int, float] | WhyPending:
        state = self.state
        cls = self.class_for(pod) if self.config.equivalence_reuse else None
        if cls is not None and cls.why is not None and not state.prod_aa.names_pod(pod):
            if cls.why_at == state.placed:
                return cls.why.of(pod.id)  # nothing changed since: the same answer
            if cls.nowhere and self.k is None:  # (without sampling: skipping draws nothing from rng)
                return cls.why.of(pod.id) if not self.explain else self.pending(pod, cls)
        if cls is not None and self.k is None and not cls.fit[1].any_fit():
            # No node's ledger fits the request, so no filter order can find one. Without sampling
            # the search draws nothing from ``rng``, so skipping it changes no later decision.
            self.examined += state.n
            cls.nowhere = True  # a pass only adds to the ledger's sums
            if not self.explain:  # (an explained answer names the class's own filters)
                self.unfit.add(pod.requests)
            return self.pending(pod, cls)
        order = self.order_of(cls) if cls is not None else self.order
        if self.crowded and cls is not None and self.k is None and not cls.fit[1].current()[order].any():
            # Nor on the nodes the class's own filters leave: the search would find nothing (the
            # fit is one of its checks), so the pod's other checks are not prepared. (Only once a
            # search has failed: in a pass with room the look would only add to every search.)
            self.examined += len(order)
            return self.nothing_found(pod, cls)
        cands = self.search(self.pod_checks(pod, cls), order)
        if not len(cands):
            self.crowded = True
            return self.nothing_found(pod, cls)
        values = self.score(pod, cands)
        if self.k is None:  # candidates ascend: the first maximum is the lowest index among ties
            i = int(values.argmax())
            best = float(values[i])
            if best == best:  # (NaN: the general form below, which fails loudly)
                return int(cands[i]), best
        best = float(values.max())
        node = int(cands[values == best].min())  # candidate_sort_key: max score, then lowest index
        return node, best

    def nothing_found(self, pod: WorkloadSpec, cls: _Class | None) -> WhyPending:
        """Why ``pod`` waits when its search found no node."""
        if cls is not None and self.monotone and not pod.spread and not self.state.prod_aa.names_pod(pod):
            # Within a pass a placement only shrinks what a monotone filter admits, so no later
            # pod of the class fits either (a pod named by production's anti-affinity is blocked
            # as itself, not as its class).
            cls.nowhere = True
        return self.pending(pod, cls)

    def pending(self, pod: WorkloadSpec, cls: _Class | None) -> WhyPending:
        """Why ``pod`` waits (unexplained when the pass was asked not to), kept for its class."""
        state = self.state
        if self.explain:
            why = why_pending(pod, state, self.filters)
        else:
            why = WhyPending(pod.id, state.n, 0, (), None, UNEXPLAINED)
        if cls is not None:
            cls.why, cls.why_at = why, state.placed
        return why

    def score(self, pod: WorkloadSpec, nodes: np.ndarray) -> np.ndarray:
        """``runner.weighted_score`` with the weights looked up once per pass."""
        total = np.zeros(len(nodes))
        for sc, w in self.weighted:
            term = sc.score(pod, self.state, nodes)
            total += term if w == 1.0 else w * term  # 1.0 * x is x, bit for bit
        return total


class _NoCheck:
    def passes(self, nodes: np.ndarray) -> np.ndarray:
        return np.ones(len(nodes), dtype=bool)

    def any_fit(self) -> bool:
        return True

    def reasons(self, nodes: np.ndarray) -> list:
        return [()] * len(nodes)


def why_pending(
    pod: WorkloadSpec, state: PassState, filters: Sequence[Filter] = DEFAULT_FILTERS
) -> WhyPending:
    """The full answer for one pod against the pass state (all nodes, all plugins, in order)."""
    checks = prepare(filters, pod, state)
    statuses = explain(checks, state.n)
    available = sum(1 for s in statuses if s.ok)
    others = [c for c in checks if c[0] != "ReservationFit"]
    cand = feasible(others, np.arange(state.n))
    binding = binding_dimension(pod.requests.array(), state.reservation[cand], state.capacity[cand])
    message = render_reasons(state.n, available, reasons_of(statuses))
    return WhyPending(pod.id, state.n, available, statuses, binding, message)


def _check_pending(pods: Sequence[WorkloadSpec], ledger: Ledger) -> None:
    """Raise ``ValueError`` for the first of ``pods`` (in order) that is not batch tier, is pending
    twice or is already placed: a caller bug. Whole-list tests first (a backlog sends hundreds of
    pods a pass), the loop that names the pod only when one of them fails."""
    ids = [w.id for w in pods]
    if (
        all(w.tier is Tier.BATCH and not w.is_daemonset for w in pods)
        and len(set(ids)) == len(ids)
        and ledger.holds_none(ids)
    ):
        return
    seen: set[str] = set()
    for w in pods:
        if w.tier is not Tier.BATCH or w.is_daemonset:
            raise ValueError(f"{w.id!r} is not a batch workload: production is placed by the blueprint")
        if w.id in seen or w.id in ledger:
            raise ValueError(f"{w.id!r} is pending twice or already placed")
        seen.add(w.id)


def schedule(
    pending: Iterable[WorkloadSpec],
    ledger: Ledger,
    context: SchedulingContext,
    config: PlacementConfig,
    rng: np.random.Generator,
    *,
    cache: PlacementCache | None = None,
    filters: Sequence[Filter] = DEFAULT_FILTERS,
    scores: Sequence[Score] = DEFAULT_SCORES,
    explain: bool = True,
) -> SchedulingDecision:
    """Decide where each pending batch workload goes (module docstring); the ledger is only read.

    ``cache`` carries indexes and the score cache between passes (a fresh one is used if omitted);
    ``rng`` drives relaxed randomisation only; ``explain=False`` leaves pending pods unexplained
    (module docstring). Pending workloads must be batch tier, distinct and not already in the
    ledger: anything else is a caller bug and raises ``ValueError``.
    """
    pods = sorted(pending, key=pending_sort_key)
    _check_pending(pods, ledger)
    cache = cache if cache is not None else PlacementCache()
    nodes, prod_aa, score_cache = cache.bind(ledger, config)
    state = PassState(
        ledger, context, config, nodes, prod_aa, score_cache if config.equivalence_reuse else None
    )
    run = _Pass(state, config, rng, filters, scores, explain)
    hits0, misses0 = score_cache.hits, score_cache.misses
    placements: list[PlaceBatch] = []
    won: list[float] = []
    waiting: list[WhyPending] = []
    unfit, n = run.unfit, state.n
    for pod in pods:
        if unfit and pod.requests in unfit:  # what decide would answer, without its work
            waiting.append(WhyPending(pod.id, n, 0, (), None, UNEXPLAINED))
            continue
        outcome = run.decide(pod)
        if isinstance(outcome, WhyPending):
            waiting.append(outcome)
            continue
        node, value = outcome
        placements.append(PlaceBatch(pod, node, state.place(pod, node)))
        won.append(value)
    stats = ScheduleStats(
        pods=len(pods),
        placed=len(placements),
        pending=len(waiting),
        nodes_examined=run.examined,
        classes=len(run.classes),
        score_cache_hits=score_cache.hits - hits0,
        score_cache_misses=score_cache.misses - misses0,
    )
    return SchedulingDecision(tuple(placements), tuple(won), tuple(waiting), ledger.global_epoch, stats)
