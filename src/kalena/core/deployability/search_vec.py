"""The same breadth-first search, level-synchronous over NumPy arrays, when a state fits one word.

Applies when every slot fits one 64-bit word, no slot is counted (no spread constraint, no
initial duplicates) and no symmetry class is active: then a state is one ``uint64`` and a BFS
level is an array. The moves are exactly those of :mod:`.search` (deploys whose guard holds;
one ``clear`` of the running forbid and required-bootstrap pairs; single deletions from
violated capacity rows; optional bootstrap clears), computed for a whole level at once with
bitwise operations and ``bitwise_count``, so answers, explored states and (shortest) witnesses
are those of the plain search, only faster.

:func:`probe` is a beam search over the same moves (at most ``width`` states per level, those
with the smallest relaxed plan) that finds long witnesses quickly; it proves nothing when it
fails, and a witness it finds is replayed like any other, so answers stay exact.

Visited states live in sorted chunks (merged like a log-structured tree) so that membership is
a ``searchsorted`` per chunk and the merging cost stays ``O(n log n)`` overall.
"""

from __future__ import annotations

import numpy as np

from kalena.core.deployability.compiled import Compiled
from kalena.core.deployability.search import CLEAR, DELETE, DEPLOY, Budget, Move, SearchResult

_ONE = np.uint64(1)
_ZERO = np.uint64(0)


def applicable(c: Compiled, symmetric: bool) -> bool:
    """One word per state, no counts, no symmetry classes, at most one optional bootstrap group."""
    if symmetric or c.counted_slots or len(c.slot_class) > 64:
        return False
    return all(sum(1 for _, b in g.groups if b is not None) <= 1 and not g.spread for g in c.guards)


class _Seen:
    """A set of uint64 as sorted chunks of decreasing size."""

    def __init__(self) -> None:
        self.chunks: list[np.ndarray] = []
        self.size = 0

    def contains(self, x: np.ndarray) -> np.ndarray:
        found = np.zeros(len(x), dtype=bool)
        for ch in self.chunks:
            i = np.searchsorted(ch, x)
            i[i == len(ch)] = len(ch) - 1
            found |= ch[i] == x
        return found

    def add(self, x: np.ndarray) -> None:
        """Add sorted, unique values not already present."""
        self.size += len(x)
        self.chunks.append(x)
        while len(self.chunks) > 1 and len(self.chunks[-2]) <= 2 * len(self.chunks[-1]):
            b = self.chunks.pop()
            a = self.chunks.pop()
            # two sorted, disjoint runs: a stable sort merges them in linear time
            self.chunks.append(np.sort(np.concatenate([a, b]), kind="stable"))


def _u(x: int) -> np.uint64:
    return np.uint64(x)


def _usage(c: Compiled, node: int, frontier: np.ndarray) -> np.ndarray:
    """Per state and dimension: capacity used on ``node`` (shape (n, dims))."""
    used = np.zeros((len(frontier), len(c.dims)), dtype=np.int64)
    for mask, req in c.node_usage[node]:
        k = np.bitwise_count(frontier & _u(mask)).astype(np.int64)
        used += np.outer(k, np.asarray(req, dtype=np.int64))
    return used


def _level_moves(c: Compiled, f: np.ndarray) -> tuple[list[np.ndarray], list[np.ndarray], list[np.ndarray]]:
    """(children, parent index, move code) arrays for one frontier, in the plain search's order."""
    children, parents, codes = [], [], []
    idx = np.arange(len(f))
    deletes = np.zeros(len(f), dtype=np.uint64)
    usage: dict[int, np.ndarray] = {}

    def emit(sel: np.ndarray, child: np.ndarray, code: int) -> None:
        if sel.any():
            children.append(child[sel])
            parents.append(idx[sel])
            codes.append(np.full(int(sel.sum()), code, dtype=np.int64))

    deploys: list[tuple[np.ndarray, np.ndarray, int]] = []
    clears: list[tuple[np.ndarray, np.ndarray]] = []
    for gi, g in enumerate(c.guards):
        ok = (f & _u(g.required)) == _u(g.required)
        ok &= (f >> _u(g.slot)) & _ONE == _ZERO
        if not ok.any():
            continue
        required_boot = np.zeros(len(f), dtype=np.uint64)
        optional = np.zeros(len(f), dtype=np.uint64)
        for needs, boot in g.groups:
            hit = np.ones(len(f), dtype=bool)
            for m in needs:
                hit &= (f & _u(m)) != _ZERO
            if boot is None:
                ok &= hit
            else:
                required_boot |= np.where(hit, _ZERO, _u(boot))
                optional |= np.where(hit, f & _u(boot), _ZERO)
        if not ok.any():
            continue
        base = f & (_u(g.forbid) | required_boot)
        has_base = base != _ZERO
        clears.append((ok & has_base, f & ~base))
        free = ok & ~has_base
        blocked = np.zeros(len(f), dtype=bool)
        viol = np.zeros(len(f), dtype=np.uint64)
        for dim, req, cap, users in g.capacity:
            if g.node not in usage:
                usage[g.node] = _usage(c, g.node, f)
            over = usage[g.node][:, dim] + req > cap
            blocked |= over
            viol |= np.where(over, f & _u(users), _ZERO)
        deploys.append((free & ~blocked, f | (_ONE << _u(g.slot)), gi))
        deletes |= np.where(free & blocked, viol, _ZERO)
        extra = ok & (optional != _ZERO)
        clears.append((extra, f & ~(base | optional)))
    for sel, child, gi in deploys:
        emit(sel, child, DEPLOY << 32 | gi)
    for sel, child in clears:
        emit(sel, child, CLEAR << 32)
    for x in range(len(c.slot_class)):
        bit = _ONE << _u(x)
        emit((deletes & bit) != _ZERO, f & ~bit, DELETE << 32 | x)
    return children, parents, codes


def _plan_order(c: Compiled) -> list[tuple[np.uint64, np.uint64]]:
    """(slot, one need bit per need of a group without bootstrap), from the targets backwards."""
    req: dict[int, int] = {}
    for g in c.guards:
        if g.slot in req:
            continue
        r = 0
        for needs, boot in g.groups:
            if boot is None:
                for m in needs:
                    r |= m & -m
        req[g.slot] = r
    order, seen = [], set()
    queue = [s for s in range(len(c.slot_class)) if c.targets >> s & 1]
    while queue:
        s = queue.pop(0)
        if s in seen:
            continue
        seen.add(s)
        order.append((_u(s), _u(req.get(s, 0))))
        r = req.get(s, 0)
        while r:
            low = r & -r
            queue.append(low.bit_length() - 1)
            r ^= low
    return order


def _relaxed_plan(order: list[tuple[np.uint64, np.uint64]], targets: np.uint64, f: np.ndarray) -> np.ndarray:
    """Per state: how many absent slots a delete-free, capacity-free plan to the targets needs.

    One backward pass: a needed absent slot adds one supporter per need. A heuristic only (it
    orders the probe's beam); it never decides an answer.
    """
    need = np.full(len(f), targets)
    for s, r in order:
        missing = ((need & ~f) >> s) & _ONE
        need |= missing * r
    return np.bitwise_count(need & ~f)


def search_vec(
    c: Compiled, budget: Budget, width: int | None = None, max_levels: int | None = None
) -> SearchResult:
    """Level-synchronous BFS; same contract as :func:`kalena.core.deployability.search.search`.

    With ``width``, a beam search instead (see the module docstring): never ``not-deployable``,
    it reports ``stopped="probe"`` when it ends without a witness.
    """
    plan = _plan_order(c) if width is not None else []
    start = np.array([c.initial[0]], dtype=np.uint64)
    tmask = _u(c.targets)
    if (start[0] & tmask) == tmask:
        return SearchResult(True, 1)
    seen = _Seen()
    seen.add(start)
    levels: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = [
        (start, np.zeros(1, np.int64), np.zeros(1, np.int64))
    ]
    frontier = start
    level = 0
    while len(frontier):
        level += 1
        if max_levels is not None and level > max_levels:
            return SearchResult(False, seen.size, stopped="probe")
        if budget.should_stop is not None and budget.should_stop():
            return SearchResult(False, seen.size, stopped="timeout")
        child, parent, code = _expand(c, frontier, seen)
        if not len(child):
            break
        hit = np.nonzero((child & tmask) == tmask)[0]
        if len(hit):
            levels.append((child, parent, code))
            moves = _trace(levels, int(hit[0]))
            return SearchResult(True, seen.size + int(hit[0]) + 1, moves, [], False)
        if width is not None and len(child) > width:
            keep = np.sort(np.argsort(_relaxed_plan(plan, tmask, child), kind="stable")[:width])
            child, parent, code = child[keep], parent[keep], code[keep]
        if seen.size + len(child) >= budget.max_states:
            return SearchResult(False, budget.max_states, stopped="max-states")
        seen.add(np.sort(child, kind="stable"))
        levels.append((child, parent, code))
        frontier = child
    return SearchResult(False, seen.size, stopped="probe" if width is not None else "")


#: Frontier states expanded at once: bounds the transient arrays (about 30 children of 24 bytes
#: per state) to a few hundred megabytes however large a level grows.
CHUNK = 200_000


def _expand(c: Compiled, frontier: np.ndarray, seen: _Seen) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """New states of the next level (first discovery order), with parent index and move code."""
    parts_c, parts_p, parts_m = [], [], []
    for lo in range(0, len(frontier), CHUNK):
        children, parents, codes = _level_moves(c, frontier[lo : lo + CHUNK])
        if not children:
            continue
        child = np.concatenate(children)
        keep = _first_occurrences(child)
        child = child[keep]
        fresh = ~seen.contains(child)
        parts_c.append(child[fresh])
        parts_p.append(np.concatenate(parents)[keep][fresh] + lo)
        parts_m.append(np.concatenate(codes)[keep][fresh])
    if not parts_c:
        return np.zeros(0, np.uint64), np.zeros(0, np.int64), np.zeros(0, np.int64)
    child, parent, code = np.concatenate(parts_c), np.concatenate(parts_p), np.concatenate(parts_m)
    keep = _first_occurrences(child)
    return child[keep], parent[keep], code[keep]


def _first_occurrences(x: np.ndarray) -> np.ndarray:
    """Indices of the first occurrence of each distinct value, in increasing order."""
    order = np.argsort(x, kind="stable")
    s = x[order]
    keep = np.ones(len(x), dtype=bool)
    keep[1:] = s[1:] != s[:-1]
    return np.sort(order[keep])


def _trace(levels: list[tuple[np.ndarray, np.ndarray, np.ndarray]], i: int) -> list[Move]:
    out: list[Move] = []
    for depth in range(len(levels) - 1, 0, -1):
        states, parents, codes = levels[depth]
        code = int(codes[i])
        kind, arg = code >> 32, code & 0xFFFFFFFF
        if kind == CLEAR:
            parent_state = int(levels[depth - 1][0][int(parents[i])])
            arg = parent_state & ~int(states[i])
        out.append((kind, arg))
        i = int(parents[i])
    out.reverse()
    return out
