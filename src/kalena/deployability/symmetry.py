"""Interchangeable nodes: classes of nodes that a permutation can swap without changing any answer.

Two nodes (neither a target node) are interchangeable when swapping them maps the transition
system onto itself: the same allocatable capacity, the same deployable relevant types, the same
membership in every spread constraint's eligible set, and, for every topology key in use, either
the same label value (the same domain) or each a domain of its own (a private value such as the
hostname) or both without the key. Any permutation inside a class is then an automorphism that
fixes the targets, so a state and its permutations are all reachable or all not, and the search
keeps one representative per orbit: the node fields of each class sorted by content.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from kalena.deployability.compiled import Compiled, State
from kalena.deployability.relevance import Pair, Relevance
from kalena.deployability.tables import Tables

_PRIVATE = "\x00private"


def topology_keys(tb: Tables) -> tuple[str, ...]:
    keys: set[str] = set()
    for t in tb.types:
        keys.update(a.topology_key for a in t.affinity)
        keys.update(a.topology_key for a in t.anti_affinity)
        keys.update(c.topology_key for c in t.spread)
    return tuple(sorted(keys))


def node_classes(tb: Tables, rel: Relevance, initial: Mapping[Pair, int], fixed: set[int]) -> list[list[int]]:
    """Classes (size >= 2) of interchangeable nodes among those the question touches."""
    touched: set[int] = {m for _, m in rel.deployable} | {m for _, m in rel.blocking}
    touched |= {m for (u, m), c in initial.items() if c > 0 and (u, m) in rel.pairs}
    touched -= fixed
    if len(touched) < 2:
        return []
    keys = topology_keys(tb)
    deploy_at: dict[int, list[int]] = {}
    for u, m in rel.deployable:
        deploy_at.setdefault(m, []).append(u)
    spread_owners = sorted({(u, i) for u, _ in rel.deployable for i in range(len(tb.types[u].spread))})
    eligible_sets = {(u, i): frozenset(tb.eligible(u, i)) for u, i in spread_owners}
    groups: dict[tuple, list[int]] = {}
    for m in sorted(touched):
        node = tb.nodes[m]
        values = []
        for k in keys:
            if k not in node.labels:
                values.append(None)
            elif len(tb.domain(k, m)) == 1:
                values.append(_PRIVATE)
            else:
                values.append(node.labels[k])
        sig = (
            tuple(sorted(node.allocatable.items())),
            tuple(sorted(deploy_at.get(m, ()))),
            tuple(values),
            tuple(m in eligible_sets[o] for o in spread_owners),
        )
        groups.setdefault(sig, []).append(m)
    return [g for g in groups.values() if len(g) >= 2]


class Canonicalizer:
    """Sorts the fields of each class; ``canon`` for the search, ``canon_perm`` for witnesses."""

    def __init__(self, c: Compiled, classes: Sequence[Sequence[int]]) -> None:
        local = {m: i for i, m in enumerate(c.nodes)}
        self.classes = [sorted(local[m] for m in cls if m in local) for cls in classes]
        self.classes = [cls for cls in self.classes if len(cls) >= 2]
        self.offsets = c.offsets
        self.width = [len(cs) for cs in c.layout]
        cidx: list[list[int]] = [[] for _ in c.nodes]
        for ci, s in enumerate(c.counted_slots):
            cidx[c.slot_class[s][1]].append(ci)
        self.cidx = [tuple(x) for x in cidx]
        self.active = bool(self.classes)

    def _keys(self, bits: int, counts: tuple[int, ...], cls: Sequence[int]) -> list[tuple]:
        out = []
        for i in cls:
            f = (bits >> self.offsets[i]) & ((1 << self.width[i]) - 1)
            out.append((f, tuple(counts[j] for j in self.cidx[i]), i))
        return out

    def canon_perm(self, state: State) -> tuple[State, dict[int, int]]:
        """The representative, and where each local node went (concrete -> canonical)."""
        bits, counts = state
        perm: dict[int, int] = {}
        new_counts = list(counts)
        for cls in self.classes:
            keys = self._keys(bits, counts, cls)
            order = sorted(keys)
            if [k[2] for k in order] == list(cls):
                continue
            w = self.width[cls[0]]
            fmask = (1 << w) - 1
            for i in cls:
                bits &= ~(fmask << self.offsets[i])
            for pos, (f, cnt, src) in zip(cls, order, strict=True):
                bits |= f << self.offsets[pos]
                for j, v in zip(self.cidx[pos], cnt, strict=True):
                    new_counts[j] = v
                perm[src] = pos
        return (bits, tuple(new_counts)), perm

    def canon(self, state: State) -> State:
        if not self.active:
            return state
        return self.canon_perm(state)[0]
