"""The same breadth-first search, level-synchronous over NumPy arrays of words.

Applies when no slot is counted (no spread constraint, no initial duplicates) and no symmetry
class is active: then a state is a bit set of ``W = ceil(slots / 64)`` words (one row of a
``(N, W)`` ``uint64`` array) and a BFS level is an array. The moves are exactly those of
:mod:`.search` (deploys whose guard holds; one ``clear`` of the running forbid and
required-bootstrap pairs; single deletions from violated capacity rows; optional bootstrap
clears), computed for a whole level at once with bitwise operations and ``bitwise_count``, so
answers, explored states and (shortest) witnesses are those of the plain search, only faster.

With ``width``, :func:`search_vec` is a beam search over the same moves (at most ``width``
states per level, those with the smallest relaxed plan) that finds long witnesses quickly; it
proves nothing when it fails, and a witness it finds is replayed like any other, so answers stay
exact.

Visited states live in sorted chunks (merged like a log-structured tree) so that membership is
a ``searchsorted`` per chunk and the merging cost stays ``O(n log n)`` overall. A one-word state
is its own sort key; a wider one is compared as raw bytes (a ``void`` view): any total order
serves a set.
"""

from __future__ import annotations

import numpy as np

from kalena.deployability.compiled import Compiled
from kalena.deployability.search import CLEAR, DELETE, DEPLOY, Budget, Move, SearchResult

_ONE = np.uint64(1)
_ZERO = np.uint64(0)
_WORD = 64
#: States wider than this many words stay with the plain search, which visits only the guards a
#: move can affect: measured on the MCC nets (7-8 words, ~660 guards) the whole-level passes cost
#: about 10x the plain search, while on pyramids (2-3 words, ~100 guards) they win 5-20x.
MAX_WORDS = 4
#: Tests raise this to run small questions through the multi-word code.
MIN_WORDS = 1


def words_for(c: Compiled) -> int:
    return max(MIN_WORDS, -(-len(c.slot_class) // _WORD))


def applicable(c: Compiled, symmetric: bool) -> bool:
    """No counts, no symmetry classes, at most one optional bootstrap group, a bounded width."""
    if symmetric or c.counted_slots or words_for(c) > MAX_WORDS:
        return False
    return all(sum(1 for _, b in g.groups if b is not None) <= 1 and not g.spread for g in c.guards)


class _Words:
    """Python-int bit masks as ``(W,)`` word rows, and the row operations the search needs."""

    def __init__(self, w: int) -> None:
        self.w = w
        self._cache: dict[int, np.ndarray] = {}

    def mask(self, x: int) -> np.ndarray:
        m = self._cache.get(x)
        if m is None:
            m = np.array([(x >> (_WORD * i)) & 0xFFFFFFFFFFFFFFFF for i in range(self.w)], dtype=np.uint64)
            self._cache[x] = m
        return m

    def to_int(self, row: np.ndarray) -> int:
        return sum(int(v) << (_WORD * i) for i, v in enumerate(row.tolist()))

    def key(self, f: np.ndarray) -> np.ndarray:
        """A sortable 1-d key per row, equal iff the rows are."""
        if self.w == 1:
            return f[:, 0]
        return np.ascontiguousarray(f).view(np.dtype((np.void, 8 * self.w))).ravel()

    @staticmethod
    def covers(f: np.ndarray, m: np.ndarray) -> np.ndarray:
        """Rows holding every bit of ``m``."""
        return ((f & m) == m).all(axis=1)

    @staticmethod
    def meets(f: np.ndarray, m: np.ndarray) -> np.ndarray:
        """Rows holding some bit of ``m``."""
        return ((f & m) != _ZERO).any(axis=1)

    @staticmethod
    def nonzero(f: np.ndarray) -> np.ndarray:
        return (f != _ZERO).any(axis=1)

    @staticmethod
    def count(f: np.ndarray) -> np.ndarray:
        return np.bitwise_count(f).sum(axis=1, dtype=np.int64)

    @staticmethod
    def bit(f: np.ndarray, s: int) -> np.ndarray:
        """Rows with slot ``s`` set."""
        return ((f[:, s // _WORD] >> np.uint64(s % _WORD)) & _ONE) != _ZERO

    @staticmethod
    def with_bit(f: np.ndarray, s: int) -> np.ndarray:
        out = f.copy()
        out[:, s // _WORD] |= _ONE << np.uint64(s % _WORD)
        return out

    @staticmethod
    def without_bit(f: np.ndarray, s: int) -> np.ndarray:
        out = f.copy()
        out[:, s // _WORD] &= ~(_ONE << np.uint64(s % _WORD))
        return out


class _Seen:
    """A set of state keys as sorted chunks of decreasing size."""

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
        """Add sorted, unique keys not already present."""
        self.size += len(x)
        self.chunks.append(x)
        while len(self.chunks) > 1 and len(self.chunks[-2]) <= 2 * len(self.chunks[-1]):
            b = self.chunks.pop()
            a = self.chunks.pop()
            # two sorted, disjoint runs: a stable sort merges them in linear time
            self.chunks.append(np.sort(np.concatenate([a, b]), kind="stable"))


def _usage(c: Compiled, wd: _Words, node: int, frontier: np.ndarray) -> np.ndarray:
    """Per state and dimension: capacity used on ``node`` (shape (n, dims))."""
    used = np.zeros((len(frontier), len(c.dims)), dtype=np.int64)
    for mask, req in c.node_usage[node]:
        k = wd.count(frontier & wd.mask(mask))
        used += np.outer(k, np.asarray(req, dtype=np.int64))
    return used


def _level_moves(
    c: Compiled, wd: _Words, f: np.ndarray
) -> tuple[list[np.ndarray], list[np.ndarray], list[np.ndarray]]:
    """(children, parent index, move code) arrays for one frontier, in the plain search's order."""
    children, parents, codes = [], [], []
    n = len(f)
    idx = np.arange(n)
    zero_row = np.zeros((n, wd.w), dtype=np.uint64)
    deletes = zero_row.copy()
    usage: dict[int, np.ndarray] = {}

    def emit(sel: np.ndarray, child: np.ndarray, code: int) -> None:
        if sel.any():
            children.append(child[sel])
            parents.append(idx[sel])
            codes.append(np.full(int(sel.sum()), code, dtype=np.int64))

    deploys: list[tuple[np.ndarray, np.ndarray, int]] = []
    clears: list[tuple[np.ndarray, np.ndarray]] = []
    for gi, g in enumerate(c.guards):
        ok = wd.covers(f, wd.mask(g.required)) & ~wd.bit(f, g.slot)
        if not ok.any():
            continue
        required_boot = zero_row
        optional = zero_row
        for needs, boot in g.groups:
            hit = np.ones(n, dtype=bool)
            for m in needs:
                hit &= wd.meets(f, wd.mask(m))
            if boot is None:
                ok &= hit
            else:
                bm = wd.mask(boot)
                required_boot = required_boot | np.where(hit[:, None], _ZERO, bm)
                optional = optional | np.where(hit[:, None], f & bm, _ZERO)
        if not ok.any():
            continue
        base = f & (wd.mask(g.forbid) | required_boot)
        has_base = wd.nonzero(base)
        clears.append((ok & has_base, f & ~base))
        free = ok & ~has_base
        blocked = np.zeros(n, dtype=bool)
        viol = zero_row
        for dim, req, cap, users in g.capacity:
            if g.node not in usage:
                usage[g.node] = _usage(c, wd, g.node, f)
            over = usage[g.node][:, dim] + req > cap
            blocked |= over
            viol = viol | np.where(over[:, None], f & wd.mask(users), _ZERO)
        deploys.append((free & ~blocked, wd.with_bit(f, g.slot), gi))
        deletes |= np.where((free & blocked)[:, None], viol, _ZERO)
        extra = ok & wd.nonzero(optional)
        clears.append((extra, f & ~(base | optional)))
    for sel, child, gi in deploys:
        emit(sel, child, DEPLOY << 32 | gi)
    for sel, child in clears:
        emit(sel, child, CLEAR << 32)
    for x in range(len(c.slot_class)):
        sel = wd.bit(deletes, x)
        if sel.any():
            emit(sel, wd.without_bit(f, x), DELETE << 32 | x)
    return children, parents, codes


def _plan_order(c: Compiled) -> list[tuple[int, int]]:
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
        order.append((s, req.get(s, 0)))
        r = req.get(s, 0)
        while r:
            low = r & -r
            queue.append(low.bit_length() - 1)
            r ^= low
    return order


def _relaxed_plan(wd: _Words, order: list[tuple[int, int]], targets: np.ndarray, f: np.ndarray) -> np.ndarray:
    """Per state: how many absent slots a delete-free, capacity-free plan to the targets needs.

    One backward pass: a needed absent slot adds one supporter per need. A heuristic only (it
    orders the probe's beam); it never decides an answer.
    """
    need = np.broadcast_to(targets, f.shape).copy()
    for s, r in order:
        missing = wd.bit(need & ~f, s)
        if r and missing.any():
            need[missing] |= wd.mask(r)
    return wd.count(need & ~f)


def search_vec(
    c: Compiled, budget: Budget, width: int | None = None, max_levels: int | None = None
) -> SearchResult:
    """Level-synchronous BFS; same contract as :func:`kalena.deployability.search.search`.

    With ``width``, a beam search instead (see the module docstring): never ``not-deployable``,
    it reports ``stopped="probe"`` when it ends without a witness.
    """
    wd = _Words(words_for(c))
    plan = _plan_order(c) if width is not None else []
    start = wd.mask(c.initial[0])[None, :].copy()
    tmask = wd.mask(c.targets)
    if wd.covers(start, tmask)[0]:
        return SearchResult(True, 1)
    seen = _Seen()
    seen.add(wd.key(start))
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
        child, parent, code = _expand(c, wd, frontier, seen)
        if not len(child):
            break
        hit = np.nonzero(wd.covers(child, tmask))[0]
        if len(hit):
            levels.append((child, parent, code))
            moves = _trace(wd, levels, int(hit[0]))
            return SearchResult(True, seen.size + int(hit[0]) + 1, moves, [], False)
        if width is not None and len(child) > width:
            keep = np.sort(np.argsort(_relaxed_plan(wd, plan, tmask, child), kind="stable")[:width])
            child, parent, code = child[keep], parent[keep], code[keep]
        if seen.size + len(child) >= budget.max_states:
            return SearchResult(False, budget.max_states, stopped="max-states")
        seen.add(np.sort(wd.key(child), kind="stable"))
        levels.append((child, parent, code))
        frontier = child
    return SearchResult(False, seen.size, stopped="probe" if width is not None else "")


#: Frontier states expanded at once: bounds the transient arrays (about 30 children of 24 bytes
#: per state and word) to a few hundred megabytes however large a level grows.
CHUNK = 200_000


def _expand(
    c: Compiled, wd: _Words, frontier: np.ndarray, seen: _Seen
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """New states of the next level (first discovery order), with parent index and move code."""
    parts_c, parts_p, parts_m = [], [], []
    chunk = max(1, CHUNK // wd.w)
    for lo in range(0, len(frontier), chunk):
        children, parents, codes = _level_moves(c, wd, frontier[lo : lo + chunk])
        if not children:
            continue
        child = np.concatenate(children)
        keep = _first_occurrences(wd.key(child))
        child = child[keep]
        fresh = ~seen.contains(wd.key(child))
        parts_c.append(child[fresh])
        parts_p.append(np.concatenate(parents)[keep][fresh] + lo)
        parts_m.append(np.concatenate(codes)[keep][fresh])
    if not parts_c:
        return np.zeros((0, wd.w), np.uint64), np.zeros(0, np.int64), np.zeros(0, np.int64)
    child, parent, code = np.concatenate(parts_c), np.concatenate(parts_p), np.concatenate(parts_m)
    keep = _first_occurrences(wd.key(child))
    return child[keep], parent[keep], code[keep]


def _first_occurrences(x: np.ndarray) -> np.ndarray:
    """Indices of the first occurrence of each distinct key, in increasing order."""
    order = np.argsort(x, kind="stable")
    s = x[order]
    keep = np.ones(len(x), dtype=bool)
    keep[1:] = s[1:] != s[:-1]
    return np.sort(order[keep])


def _trace(wd: _Words, levels: list[tuple[np.ndarray, np.ndarray, np.ndarray]], i: int) -> list[Move]:
    out: list[Move] = []
    for depth in range(len(levels) - 1, 0, -1):
        states, parents, codes = levels[depth]
        code = int(codes[i])
        kind, arg = code >> 32, code & 0xFFFFFFFF
        if kind == CLEAR:
            parent_state = wd.to_int(levels[depth - 1][0][int(parents[i])])
            arg = parent_state & ~wd.to_int(states[i])
        out.append((kind, arg))
        i = int(parents[i])
    out.reverse()
    return out
