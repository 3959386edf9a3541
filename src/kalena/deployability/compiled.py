"""A question compiled to bitmask guards over a slot layout, ready for the search.

**Resident classes.** Once a pod runs, every guard sees it only through its labels (selectors),
its namespace (kube-scheduler's term and spread scopes), its requests (capacity) and, under
kube-scheduler, its own anti-affinity terms (the symmetric check). Types equal in all of these
are one *resident class*: two running pods of one class on one node are indistinguishable to
every guard, so the state records classes, not types (the Petri-net encoding's token types
``I_p`` and every ``P_{p,a}`` collapse into "a token in ``p``"). Target types keep a class of
their own, so "the target runs" stays a statement about the target type.

**Slots.** Every kept (class, node) pair is one bit of a Python ``int``: node-major, each node
``i`` owning a contiguous field of ``width[i]`` bits at ``offset[i]`` (the same class list for
every node of a symmetry class). Kept: the classes of the deployable pairs of ``R``, of pairs of
``R`` that run initially, and of the blocking pods ``F`` (see :mod:`.relevance`); every initial
pod of a kept class on that node is counted in.

**Saturation (seed 003 §5, extended).** Affinity, anti-affinity and the bootstrap exception see
only whether a class runs on a node, and capacity only grows with more copies, so a second copy
never helps: a configuration with the same support and fewer copies passes every guard the
larger one passes. Slots therefore hold one bit, except *counted* slots: those a spread
constraint counts (multiplicity changes skews), and those that hold several pods initially
(their copies hold capacity until deleted; nothing of that class is deployed there again while
one runs). A counted slot keeps an instance count, bounded by its capacity
(``min_d C(n)_d // res_d``) or, when nothing bounds it, by the search's ``count_cap`` (a *cut*:
an exhausted search that the cap pruned is ``unknown``, never ``not-deployable``).

**Guards.** One per deployable (type, node) pair: ``forbid`` (any running slot blocks), groups
of ``(needs, boot)``, capacity rows, spread domains over counted indices. A state is
``(bits, counts)``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from kalena.deployability.model import Semantics
from kalena.deployability.relevance import Pair, Relevance, guard_parts
from kalena.deployability.tables import Tables

State = tuple[int, tuple[int, ...]]


@dataclass(frozen=True, slots=True)
class SpreadGuard:
    self_match: int
    max_skew: int
    min_domains: int
    domains: tuple[tuple[int, ...], ...]  # counted indices per eligible domain
    own: int
    own_slots: int  # bitmask of the own domain's counted slots (deletion candidates)


@dataclass(frozen=True, slots=True)
class Guard:
    """Compiled ``Hard(t, n, .)`` for one deployable (type, node) pair."""

    slot: int
    type: int
    node: int  # local node index
    counted: int  # counted index, or -1 for a saturated slot
    cap: int  # deploy only while count < cap (counted slots)
    search_capped: bool  # ``cap`` is the search's count cap, not a capacity bound
    forbid: int
    groups: tuple[tuple[tuple[int, ...], int | None], ...]
    capacity: tuple[tuple[int, int, int, int], ...]  # (dim index, request, capacity, users mask)
    spread: tuple[SpreadGuard, ...]
    trigger: int | None  # a need mask that must hit for this guard to ever hold
    required: int  # single-slot needs of groups without bootstrap: all must run (fast reject)


@dataclass
class Compiled:
    """Layout, guards and initial state of one question."""

    tables: Tables
    nodes: tuple[int, ...]  # local node index -> instance node index
    offsets: tuple[int, ...]
    layout: tuple[tuple[int, ...], ...]  # local node -> classes of its field
    class_of: tuple[int, ...]  # type -> resident class
    class_members: tuple[tuple[int, ...], ...]  # class -> types
    slot_class: tuple[tuple[int, int], ...]  # slot -> (class, local node)
    counted_of: tuple[int, ...]  # slot -> counted index or -1
    counted_slots: tuple[int, ...]  # counted index -> slot
    dims: tuple[str, ...]
    node_usage: tuple[tuple[tuple[int, tuple[int, ...]], ...], ...]  # local node -> (mask, reqvec)
    node_counted_usage: tuple[tuple[tuple[int, tuple[int, ...]], ...], ...]  # local node -> (ci, reqvec)
    guards: tuple[Guard, ...]
    guard_at: dict[tuple[int, int], int]  # (type, local node) -> guard index
    always: tuple[int, ...]  # guard indices without trigger
    triggered: dict[int, tuple[int, ...]]  # slot -> guard indices whose trigger contains it
    trigger_bits: int  # every slot that triggers some guard
    targets: int  # mask of target slots
    initial: State
    fixed_nodes: frozenset[int]  # local indices that symmetry must not move

    def target_hit(self, bits: int) -> bool:
        return bits & self.targets == self.targets

    def usage(self, state: State, node: int) -> list[int]:
        bits, counts = state
        used = [0] * len(self.dims)
        for mask, req in self.node_usage[node]:
            k = (bits & mask).bit_count()
            if k:
                for j, v in enumerate(req):
                    used[j] += k * v
        for ci, req in self.node_counted_usage[node]:
            c = counts[ci]
            if c:
                for j, v in enumerate(req):
                    used[j] += c * v
        return used


def resident_classes(tb: Tables, targets: Iterable[Pair]) -> tuple[int, ...]:
    """Class index per type: equal labels, requests, and (kube-scheduler) namespace and anti terms."""
    target_types = {t for t, _ in targets}
    k8s = tb.semantics is Semantics.KUBERNETES
    keys: dict[object, int] = {}
    out = []
    for i, t in enumerate(tb.types):
        key = (
            tuple(sorted(t.labels.items())),
            tuple(sorted(t.requests.items())),
            t.namespace if k8s else "",
            repr(t.anti_affinity) if k8s else "",
            i if i in target_types else -1,
        )
        out.append(keys.setdefault(key, len(keys)))
    return tuple(out)


def compile_question(
    tb: Tables,
    rel: Relevance,
    targets: Sequence[Pair],
    initial: Mapping[Pair, int],
    classes: Sequence[Sequence[int]],
    count_cap: int,
) -> Compiled:
    """Build the layout (one field per node, shared class lists inside each symmetry class)."""
    class_of = resident_classes(tb, targets)
    members: dict[int, list[int]] = {}
    for t, c in enumerate(class_of):
        members.setdefault(c, []).append(t)
    kept = set(rel.deployable) | set(rel.blocking) | {p for p in rel.pairs if initial.get(p, 0) > 0}
    by_node: dict[int, set[int]] = {}
    for u, m in kept:
        by_node.setdefault(m, set()).add(class_of[u])
    fixed = {n for _, n in targets}
    for n in fixed:
        by_node.setdefault(n, set())
    node_cls: dict[int, tuple[int, ...]] = {}
    in_sym: set[int] = set()
    for cls in classes:  # class members share one list (the union) so that fields can be permuted
        present = [m for m in cls if m in by_node]
        union = tuple(sorted(set().union(*(by_node[m] for m in present)))) if present else ()
        for m in present:
            node_cls[m] = union
            in_sym.add(m)
    for m, cs in by_node.items():
        if m not in in_sym:
            node_cls[m] = tuple(sorted(cs))
    nodes = tuple(sorted(node_cls, key=lambda m: (m not in fixed, m)))
    local = {m: i for i, m in enumerate(nodes)}
    offsets: list[int] = []
    slot_class: list[tuple[int, int]] = []
    cls_slot: dict[tuple[int, int], int] = {}
    for m in nodes:
        offsets.append(len(slot_class))
        for c in node_cls[m]:
            cls_slot[(c, m)] = len(slot_class)
            slot_class.append((c, local[m]))

    def slot_of(p: Pair) -> int | None:
        return cls_slot.get((class_of[p[0]], p[1]))

    masks: dict[int, tuple[object, int]] = {}  # id of a shared pair set -> (the set, its mask)

    def mask(pairs: Iterable[Pair]) -> int:
        if isinstance(pairs, frozenset):
            hit = masks.get(id(pairs))
            if hit is not None and hit[0] is pairs:
                return hit[1]
        out = 0
        for p in pairs:
            s = slot_of(p)
            if s is not None:
                out |= 1 << s
        if isinstance(pairs, frozenset):
            masks[id(pairs)] = (pairs, out)
        return out

    universe = {m: [u for c in node_cls[m] for u in members[c]] for m in nodes}
    parts = {
        p: guard_parts(tb, p[0], p[1], universe) for p in sorted(rel.deployable) if slot_of(p) is not None
    }
    init_count = [0] * len(slot_class)
    for p, cnt in initial.items():
        s = slot_of(p)
        if s is not None and cnt > 0:
            init_count[s] += cnt
    # counted slots: spread-counted (per class, across a symmetry class) and initial duplicates
    spread_slots: set[int] = set()
    for g in parts.values():
        for sp in g.spread:
            for dom in sp.domains:
                spread_slots.update(s for s in map(slot_of, dom) if s is not None)
    counted_cls: dict[int, set[int]] = {}
    for s in spread_slots | {s for s, c in enumerate(init_count) if c > 1}:
        c, i = slot_class[s]
        counted_cls.setdefault(nodes[i], set()).add(c)
    for cls in classes:
        present = [m for m in cls if m in local]
        union = set().union(*(counted_cls.get(m, set()) for m in present)) if present else set()
        for m in present:
            counted_cls[m] = set(union)
    counted_of = [-1] * len(slot_class)
    counted_slots: list[int] = []
    for m in nodes:
        for c in node_cls[m]:
            if c in counted_cls.get(m, ()):
                s = cls_slot[(c, m)]
                counted_of[s] = len(counted_slots)
                counted_slots.append(s)
    # capacity rows
    dims = tuple(sorted({d for m in nodes for d in tb.nodes[m].allocatable}))
    dim_ix = {d: i for i, d in enumerate(dims)}
    node_usage, node_counted_usage = [], []
    for m in nodes:
        bounded = tb.nodes[m].allocatable
        groups: dict[tuple[int, ...], int] = {}
        cu = []
        for c in node_cls[m]:
            rep = tb.types[members[c][0]]
            req = tuple(rep.requests.get(d, 0) if d in bounded else 0 for d in dims)
            if not any(req):
                continue
            s = cls_slot[(c, m)]
            if counted_of[s] >= 0:
                cu.append((counted_of[s], req))
            else:
                groups[req] = groups.get(req, 0) | (1 << s)
        node_usage.append(tuple((mk, req) for req, mk in groups.items()))
        node_counted_usage.append(tuple(cu))
    guards: list[Guard] = []
    for (t, m), g in parts.items():
        s = cls_slot[(class_of[t], m)]
        guards.append(
            _guard(tb, t, m, s, local[m], g, counted_of, s in spread_slots, count_cap, mask, dim_ix)
        )
    guards = _choose_triggers(guards)
    always, triggered = [], {}
    for gi, gd in enumerate(guards):
        if gd.trigger is None:
            always.append(gi)
            continue
        x = gd.trigger
        while x:
            low = x & -x
            triggered.setdefault(low.bit_length() - 1, []).append(gi)
            x ^= low
    bits = 0
    counts = [0] * len(counted_slots)
    for s, cnt in enumerate(init_count):
        if cnt:
            bits |= 1 << s
            if counted_of[s] >= 0:
                counts[counted_of[s]] = cnt
    tmask = 0
    for p in targets:
        s = slot_of(p)
        if s is None:
            raise ValueError(f"target pair {p} has no slot")
        tmask |= 1 << s
    return Compiled(
        tables=tb,
        nodes=nodes,
        offsets=tuple(offsets),
        layout=tuple(node_cls[m] for m in nodes),
        class_of=class_of,
        class_members=tuple(tuple(members[c]) for c in range(len(members))),
        slot_class=tuple(slot_class),
        counted_of=tuple(counted_of),
        counted_slots=tuple(counted_slots),
        dims=dims,
        node_usage=tuple(node_usage),
        node_counted_usage=tuple(node_counted_usage),
        guards=tuple(guards),
        guard_at={(gd.type, gd.node): gi for gi, gd in enumerate(guards)},
        always=tuple(always),
        triggered={k: tuple(v) for k, v in triggered.items()},
        trigger_bits=sum(1 << k for k in triggered),
        targets=tmask,
        initial=(bits, tuple(counts)),
        fixed_nodes=frozenset(local[n] for n in fixed),
    )


def _guard(tb, t, m, slot, node_local, g, counted_of, spread_counted, count_cap, mask, dim_ix) -> Guard:
    """One compiled guard; ``mask`` maps pairs to a slot bitmask."""
    pod, node = tb.types[t], tb.nodes[m]
    ci = counted_of[slot]
    cap, search_capped = 1, False
    if ci >= 0 and spread_counted:
        bounds = [
            node.allocatable[d] // v for d, v in pod.requests.items() if v > 0 and d in node.allocatable
        ]
        if bounds:
            cap = min(bounds)
        else:
            cap, search_capped = count_cap, True
    groups = []
    required = 0
    for needs, boot in g.groups:
        nm = tuple(mask(x) for x in needs)
        bm = None if boot is None else mask(boot)
        groups.append((nm, bm))
        if bm is None:
            for x in nm:
                if x.bit_count() == 1:
                    required |= x
    cap_rows = tuple(
        (dim_ix[d], pod.requests[d], node.allocatable[d], mask(users))
        for d, users in sorted(g.capacity.items())
    )
    spread = []
    for sp in g.spread:
        dom_masks = [mask(dom) for dom in sp.domains]
        doms = tuple(tuple(counted_of[b] for b in _bit_list(dm)) for dm in dom_masks)
        own_slots = dom_masks[sp.own] if sp.own >= 0 else 0
        spread.append(SpreadGuard(sp.self_match, sp.max_skew, sp.min_domains, doms, sp.own, own_slots))
    return Guard(
        slot=slot,
        type=t,
        node=node_local,
        counted=ci,
        cap=cap,
        search_capped=search_capped,
        forbid=_or(mask(part) for part in g.forbid),
        groups=tuple(groups),
        capacity=cap_rows,
        spread=tuple(spread),
        trigger=None,
        required=required,
    )


def _choose_triggers(guards: list[Guard]) -> list[Guard]:
    """Give each guard the need mask (of a group without bootstrap) whose slots trigger fewest guards.

    A guard is examined in a state only when its trigger hits, so a rare trigger (a token of one
    place rather than "a ready pod") keeps the candidate list short. Any need of such a group is a
    correct trigger: while it does not hit, the group and hence the guard cannot hold.
    """
    freq: dict[int, int] = {}
    for g in guards:
        for needs, boot in g.groups:
            if boot is None:
                for x in needs:
                    for b in _bit_list(x):
                        freq[b] = freq.get(b, 0) + 1
    out = []
    for g in guards:
        best, cost = None, None
        for needs, boot in g.groups:
            if boot is not None:
                continue
            for x in needs:
                c = sum(freq[b] for b in _bit_list(x))
                if cost is None or c < cost:
                    best, cost = x, c
        out.append(replace(g, trigger=best))
    return out


def _or(masks: Iterable[int]) -> int:
    out = 0
    for m in masks:
        out |= m
    return out


def _bit_list(x: int) -> list[int]:
    out = []
    while x:
        low = x & -x
        out.append(low.bit_length() - 1)
        x ^= low
    return out
