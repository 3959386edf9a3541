"""Which (type, node) pairs can matter for a question, and the parts of each pair's guard.

**Positive influence.** ``Hard(t, n, sigma)`` is a conjunction of parts that are monotone in the
presence of each pod: a pod *helps* only as an affinity witness (a pair in a need set) or by
raising a spread domain's count (a pair in a spread domain); everywhere else it can only hurt
(capacity, anti-affinity in either direction, the bootstrap exception's "nothing matches yet",
the candidate's own spread domain). The relevant set ``R`` is the least set containing the
targets and closed under "is a positive influence on the guard of a deployable pair in R".

*Why this is exact:* take any witness path and drop every deploy of a pair outside ``R`` (and
never redeploy one). Each remaining deploy is of a pair in ``R``, whose guard depends positively
only on pairs in ``R``; pods outside ``R`` are now a subset of what the original path had, and
they only ever hurt that guard, so it still holds. The targets are in ``R``, so they are still
reached. Pods outside ``R`` that run initially are kept as deletable-only pairs when they can
hurt a guard of ``R`` (set ``F``) and ignored otherwise (they can neither help nor hurt).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from kalena.deployability.model import Semantics
from kalena.deployability.tables import Tables

Pair = tuple[int, int]
Universe = Mapping[int, Iterable[int]]  # node -> types that may run there


@dataclass
class SpreadPart:
    """One hard spread constraint of the candidate: domains as lists of counted pairs."""

    self_match: int
    max_skew: int
    min_domains: int
    domains: list[list[Pair]]
    own: int  # index of the candidate node's domain in ``domains`` (-1: not eligible)


@dataclass
class GuardParts:
    """The guard of deploying ``t`` on ``n``, restricted to a universe of pairs.

    ``groups``: a conjunction of ``(needs, boot)``; a group holds when every need set has a
    running pair, or ``boot`` is not None and no pair of ``boot`` runs. kube-scheduler has one
    group (all terms, global bootstrap); the paper has one group per term.
    """

    forbid: list[frozenset[Pair]] = field(default_factory=list)  # parts; any running pair blocks
    groups: list[tuple[list[frozenset[Pair]], frozenset[Pair] | None]] = field(default_factory=list)
    capacity: dict[str, set[Pair]] = field(default_factory=dict)  # bounded dim -> pairs on n using it
    spread: list[SpreadPart] = field(default_factory=list)

    def forbid_pairs(self) -> set[Pair]:
        return set().union(*self.forbid)


def _cross(
    tb: Tables, types: Iterable[int], nodes: Sequence[int], universe: Universe | None
) -> frozenset[Pair]:
    """``types x nodes`` restricted to ``universe``; memoised on the identity of shared inputs.

    Term matches and domains are cached in ``tb`` and shared by every pod type that has the
    same term, so the same product is asked for many times; the memo entry keeps its inputs
    alive so that their identities stay valid.
    """
    key = (
        id(types) if isinstance(types, frozenset) else tuple(types),
        id(nodes) if isinstance(nodes, tuple) else tuple(nodes),
        id(universe),
    )
    hit = tb.memo.get(key)
    if hit is not None:
        return hit[-1]
    ts = types if isinstance(types, frozenset | set) else frozenset(types)
    if universe is None:
        out = frozenset((u, m) for m in nodes for u in ts)
    else:
        out = frozenset((u, m) for m in nodes for u in universe.get(m, ()) if u in ts)
    tb.memo[key] = (types, nodes, universe, out)
    return out


def guard_parts(tb: Tables, t: int, n: int, universe: Universe | None) -> GuardParts:
    """The parts of ``Hard(t, n, .)`` over ``universe`` (None: every pair)."""
    pod, node = tb.types[t], tb.nodes[n]
    g = GuardParts()
    # anti-affinity: the candidate's own terms, and (kube-scheduler) every resident's terms
    for i, term in enumerate(pod.anti_affinity):
        g.forbid.append(_cross(tb, tb.term_match(t, "anti", i), tb.domain(term.topology_key, n), universe))
    if tb.semantics is Semantics.KUBERNETES:
        for owner, term in tb.sym_anti(t):
            g.forbid.append(_cross(tb, (owner,), tb.domain(term.topology_key, n), universe))
    # affinity
    if pod.affinity:
        if tb.semantics is Semantics.KUBERNETES:
            wit = tb.all_match(t)
            needs = [_cross(tb, wit, tb.domain(a.topology_key, n), universe) for a in pod.affinity]
            boot = None
            if t in wit:
                keyed: set[int] = set()
                for a in pod.affinity:
                    keyed.update(tb.keyed(a.topology_key))
                boot = _cross(tb, wit, tuple(sorted(keyed)), universe)
            g.groups.append((needs, boot))
        else:
            for i, a in enumerate(pod.affinity):
                match = tb.term_match(t, "aff", i)
                need = _cross(tb, match, tb.domain(a.topology_key, n), universe)
                boot = _cross(tb, match, tb.all_nodes, universe) if t in match else None
                g.groups.append(([need], boot))
    # capacity: pods on n that use a bounded dimension the candidate also requests
    for dim in node.allocatable:
        if pod.requests.get(dim, 0) == 0:
            continue
        users = (u for u in (universe.get(n, ()) if universe is not None else range(len(tb.types))))
        g.capacity[dim] = {(u, n) for u in users if tb.types[u].requests.get(dim, 0) > 0}
    # spread
    for i, c in enumerate(pod.spread):
        elig = tb.eligible(t, i)
        sel = tb.spread_selected(t, i)
        by_value: dict[str, list[int]] = {}
        for m in elig:
            by_value.setdefault(tb.nodes[m].labels[c.topology_key], []).append(m)
        values = sorted(by_value)
        domains = [sorted(_cross(tb, sel, by_value[v], universe)) for v in values]
        own_value = node.labels.get(c.topology_key)
        own = values.index(own_value) if own_value in by_value else -1
        g.spread.append(SpreadPart(tb.self_spread(t, i), c.max_skew, c.min_domains, domains, own))
    return g


def positive_pairs(tb: Tables, t: int, n: int) -> set[Pair]:
    """Pairs whose presence can help ``Hard(t, n, .)``: affinity witnesses and spread counts."""
    pod = tb.types[t]
    out: set[Pair] = set()
    if tb.semantics is Semantics.KUBERNETES:
        if pod.affinity:
            wit = tb.all_match(t)
            for a in pod.affinity:
                out |= _cross(tb, wit, tb.domain(a.topology_key, n), None)
    else:
        for i, a in enumerate(pod.affinity):
            out |= _cross(tb, tb.term_match(t, "aff", i), tb.domain(a.topology_key, n), None)
    for i in range(len(pod.spread)):
        out |= _cross(tb, tb.spread_selected(t, i), tb.eligible(t, i), None)
    return out


@dataclass(frozen=True)
class Relevance:
    """``R`` (relevant pairs), its deployable part, and ``F`` (initial pods that can only hurt)."""

    pairs: frozenset[Pair]
    deployable: frozenset[Pair]
    blocking: frozenset[Pair]


def relevance(tb: Tables, targets: Iterable[Pair], initial: Mapping[Pair, int]) -> Relevance:
    """The closure described in the module docstring."""
    seen: set[Pair] = set()
    deployable: set[Pair] = set()
    work = list(targets)
    while work:
        p = work.pop()
        if p in seen:
            continue
        seen.add(p)
        t, n = p
        if not tb.deployable_somewhere(t, n):
            continue
        deployable.add(p)
        work.extend(q for q in positive_pairs(tb, t, n) if q not in seen)
    outside: dict[int, list[int]] = {}
    for (u, m), c in initial.items():
        if c > 0 and (u, m) not in seen:
            outside.setdefault(m, []).append(u)
    blocking: set[Pair] = set()
    if outside:
        for t, n in deployable:
            g = guard_parts(tb, t, n, outside)
            blocking |= g.forbid_pairs()
            for _, boot in g.groups:
                if boot:
                    blocking |= boot
            for pairs in g.capacity.values():
                blocking |= pairs
    return Relevance(frozenset(seen), frozenset(deployable), frozenset(blocking))
