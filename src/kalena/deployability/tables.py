"""Per-instance lookup tables for the search: who matches which term, domains, static checks.

Everything is indexed by integer type index ``t`` and node index ``n`` and computed lazily, so a
query that touches three types in a 10,000-node cluster never evaluates the other pairs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from kalena.deployability import labels as lb
from kalena.deployability.model import Instance, LabelSelector, PodAffinityTerm, PodType, Semantics


class Tables:
    """Matching tables for one instance under one semantics."""

    def __init__(self, instance: Instance, semantics: Semantics) -> None:
        self.instance = instance
        self.semantics = semantics
        self.types: tuple[PodType, ...] = instance.types
        self.nodes = instance.nodes
        self.tindex = instance.type_index()
        self.nindex = instance.node_index()
        self._ns: dict[str, Mapping[str, str]] = {}
        self._static: dict[tuple[int, int], bool] = {}
        self._domains: dict[str, dict[str, tuple[int, ...]]] = {}
        self._keyed: dict[str, tuple[int, ...]] = {}
        self._term_match: dict[tuple[int, str, int], frozenset[int]] = {}
        self._all_match: dict[int, frozenset[int]] = {}
        self._sym_anti: dict[int, tuple[tuple[int, PodAffinityTerm], ...]] = {}
        self._spread_sel: dict[tuple[int, int], frozenset[int]] = {}
        self._eligible: dict[tuple[int, int], tuple[int, ...]] = {}
        self._eligible_set: dict[tuple[int, int], frozenset[int]] = {}
        self._label_index: dict[tuple[str, str], set[int]] | None = None
        self._anti_owners: tuple[int, ...] | None = None
        self._by_term: dict[tuple, frozenset[int]] = {}
        self.memo: dict[tuple, tuple] = {}  # products of matches and domains (see relevance._cross)
        self.all_nodes: tuple[int, ...] = tuple(range(len(self.nodes)))

    # --- namespaces and static ------------------------------------------------------------------
    def ns_labels(self, ns: str) -> Mapping[str, str]:
        if ns not in self._ns:
            self._ns[ns] = self.instance.ns_labels(ns)
        return self._ns[ns]

    def static_ok(self, t: int, n: int) -> bool:
        key = (t, n)
        if key not in self._static:
            self._static[key] = lb.static_ok(self.types[t], self.nodes[n])
        return self._static[key]

    def fits_empty(self, t: int, n: int) -> bool:
        """``res(t) <= C(n)``: the pod fits on the empty node."""
        alloc = self.nodes[n].allocatable
        return all(v <= alloc[d] for d, v in self.types[t].requests.items() if d in alloc)

    # --- topology ---------------------------------------------------------------------------------
    def domains(self, key: str) -> dict[str, tuple[int, ...]]:
        """value -> nodes carrying ``key`` with that value."""
        if key not in self._domains:
            acc: dict[str, list[int]] = {}
            for i, node in enumerate(self.nodes):
                if key in node.labels:
                    acc.setdefault(node.labels[key], []).append(i)
            self._domains[key] = {v: tuple(ns) for v, ns in acc.items()}
        return self._domains[key]

    def domain(self, key: str, n: int) -> tuple[int, ...]:
        """``D_key(n)``: empty when ``n`` has no label ``key``."""
        labels = self.nodes[n].labels
        if key not in labels:
            return ()
        return self.domains(key)[labels[key]]

    def keyed(self, key: str) -> tuple[int, ...]:
        """Nodes carrying ``key`` at all."""
        if key not in self._keyed:
            self._keyed[key] = tuple(i for i, node in enumerate(self.nodes) if key in node.labels)
        return self._keyed[key]

    # --- term matching ----------------------------------------------------------------------------
    def candidates(self, sel: LabelSelector | None) -> Iterable[int]:
        """Types that can match ``sel``: those carrying every matchLabels pair (an index lookup).

        Only a pre-filter: callers still apply the full match (expressions, namespaces).
        """
        if sel is None:
            return ()
        if not sel.match_labels:
            return range(len(self.types))
        if self._label_index is None:
            index: dict[tuple[str, str], set[int]] = {}
            for u, pod in enumerate(self.types):
                for kv in pod.labels.items():
                    index.setdefault(kv, set()).add(u)
            self._label_index = index
        sets = [self._label_index.get(kv, set()) for kv in sel.match_labels.items()]
        return sorted(set.intersection(*sets))

    def term_match(self, owner: int, kind: str, index: int) -> frozenset[int]:
        """Types in ``[[s]]`` for term ``index`` of ``owner`` (``kind`` "aff" or "anti")."""
        key = (owner, kind, index)
        if key not in self._term_match:
            o = self.types[owner]
            term = (o.affinity if kind == "aff" else o.anti_affinity)[index]
            # equal terms (same selector and scope) select the same types: match each once
            same = (_selector_key(term.selector), term.namespaces, _selector_key(term.namespace_selector))
            same = (*same, o.namespace if self.semantics is Semantics.KUBERNETES else "")
            if same not in self._by_term:
                self._by_term[same] = frozenset(
                    u
                    for u in self.candidates(term.selector)
                    if lb.term_matches(term, o, self.types[u], self.semantics, self.ns_labels)
                )
            self._term_match[key] = self._by_term[same]
        return self._term_match[key]

    def all_match(self, owner: int) -> frozenset[int]:
        """Types matching *every* affinity term of ``owner`` (kube-scheduler's witnesses)."""
        if owner not in self._all_match:
            sets = [self.term_match(owner, "aff", i) for i in range(len(self.types[owner].affinity))]
            self._all_match[owner] = frozenset.intersection(*sets) if sets else frozenset()
        return self._all_match[owner]

    def sym_anti(self, t: int) -> tuple[tuple[int, PodAffinityTerm], ...]:
        """(owner, term) for every anti-affinity term of another type that selects ``t``."""
        if t not in self._sym_anti:
            if self._anti_owners is None:  # only types with anti-affinity terms can take part
                self._anti_owners = tuple(u for u, o in enumerate(self.types) if o.anti_affinity)
            pod = self.types[t]
            out = []
            for u in self._anti_owners:
                owner = self.types[u]
                for term in owner.anti_affinity:
                    if lb.term_matches(term, owner, pod, self.semantics, self.ns_labels):
                        out.append((u, term))
            self._sym_anti[t] = tuple(out)
        return self._sym_anti[t]

    def spread_selected(self, t: int, i: int) -> frozenset[int]:
        key = (t, i)
        if key not in self._spread_sel:
            owner = self.types[t]
            sel = owner.spread[i].selector
            self._spread_sel[key] = frozenset(
                u
                for u in self.candidates(sel)
                if lb.spread_selects(owner, sel, self.types[u], self.semantics)
            )
        return self._spread_sel[key]

    def eligible(self, t: int, i: int) -> tuple[int, ...]:
        """The set E of constraint ``i`` of type ``t``."""
        key = (t, i)
        if key not in self._eligible:
            owner = self.types[t]
            self._eligible[key] = tuple(
                n for n, node in enumerate(self.nodes) if lb.constraint_eligible(owner, i, node)
            )
        return self._eligible[key]

    def eligible_set(self, t: int, i: int) -> frozenset[int]:
        key = (t, i)
        if key not in self._eligible_set:
            self._eligible_set[key] = frozenset(self.eligible(t, i))
        return self._eligible_set[key]

    def self_spread(self, t: int, i: int) -> int:
        owner = self.types[t]
        return 1 if lb.selector_matches(owner.spread[i].selector, owner.labels) else 0

    # --- whole-pair feasibility that no configuration can change -----------------------------------
    def deployable_somewhere(self, t: int, n: int) -> bool:
        """Can ``(t, n)`` pass the configuration-independent parts of Hard in some configuration?

        StaticOK, ``res(t) <= C(n)``, the node carries every spread key (and, under kube-scheduler,
        every affinity key), and (paper) ``n`` is in every constraint's E.
        """
        if not self.fits_empty(t, n) or not self.static_ok(t, n):
            return False
        pod, node = self.types[t], self.nodes[n]
        if any(c.topology_key not in node.labels for c in pod.spread):
            return False
        if self.semantics is Semantics.KUBERNETES and any(
            a.topology_key not in node.labels for a in pod.affinity
        ):
            return False
        return not (
            self.semantics is Semantics.PAPER
            and any(n not in self.eligible_set(t, i) for i in range(len(pod.spread)))
        )


def _selector_key(sel: LabelSelector | None) -> tuple | None:
    """A hashable spelling of a selector (None stays None: it selects nothing)."""
    if sel is None:
        return None
    return (tuple(sorted(sel.match_labels.items())), sel.match_expressions)
