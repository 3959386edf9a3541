"""Breadth-first search over compiled configurations, with deletions only where they can matter.

**Moves.** ``deploy(d)`` when ``d``'s guard holds; ``clear(M)`` deletes every running pair of
``M`` at once; ``delete(x)`` deletes one pod of ``x``.

**Which deletions (exact).** Take any witness path. A deletion of ``x`` can be moved later, past
a deploy of ``d``, whenever ``x`` cannot hurt ``d``'s guard (``x`` is not in its forbid set,
bootstrap sets, capacity rows or own spread domain): the deploy still passes with ``x`` present.
So every path can be rewritten so that deletions come in blocks, each right before the deploy
``d`` they serve and each hurting ``d``; moving a deploy forward past deletions that were not
needed yet keeps the path legal, so within a block ``d`` stays disabled until its last deletion.
Deletions commute, so the block can start with every running forbid pair of ``d`` and every
running pair of the bootstrap sets ``d`` will rely on (one ``clear``), followed by single
deletions that each free a capacity dimension or lower a spread skew that is violated at that
moment (a dimension or constraint that already holds cannot become violated by further
deletions of pods in ``d``'s own node or domain). The search generates exactly these moves,
so it finds a path whenever one exists, and every move it makes is legal.

**Budget.** ``max_states`` bounds the stored states; ``should_stop`` (passed in by the shell: this
package reads no clock) is polled every ``check_every`` expansions. Either one ending the search
early makes the answer ``unknown``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from kalena.deployability.compiled import Compiled, Guard, State
from kalena.deployability.symmetry import Canonicalizer

DEPLOY, DELETE, CLEAR = 0, 1, 2
Move = tuple[int, int]  # (DEPLOY, guard index) | (DELETE, slot) | (CLEAR, slot mask)


@dataclass(frozen=True, slots=True)
class Budget:
    max_states: int = 1_000_000
    should_stop: Callable[[], bool] | None = None
    check_every: int = 256

    def __post_init__(self) -> None:
        if self.max_states < 1:
            raise ValueError(f"max_states must be at least 1, got {self.max_states}")
        if self.check_every < 1:
            raise ValueError(f"check_every must be at least 1, got {self.check_every}")


@dataclass
class SearchResult:
    found: bool
    states: int
    moves: list[Move] = field(default_factory=list)  # concrete (not canonical) moves
    states_along: list[State] = field(default_factory=list)  # concrete states before each move
    cut: bool = False  # a search count cap pruned at least one move
    stopped: str = ""  # "", "max-states" or "timeout"
    depth: int = 0  # BFS levels completed when the search ended


def _bits(x: int) -> Iterator[int]:
    while x:
        low = x & -x
        yield low.bit_length() - 1
        x ^= low


def apply(c: Compiled, state: State, move: Move) -> State:
    bits, counts = state
    kind, arg = move
    if kind == DEPLOY:
        slot = c.guards[arg].slot
        ci = c.counted_of[slot]
        if ci >= 0:
            lst = list(counts)
            lst[ci] += 1
            counts = tuple(lst)
        return bits | (1 << slot), counts
    if kind == DELETE:
        ci = c.counted_of[arg]
        if ci >= 0:
            lst = list(counts)
            lst[ci] -= 1
            if lst[ci] == 0:
                bits &= ~(1 << arg)
            return bits, tuple(lst)
        return bits & ~(1 << arg), counts
    lst = None
    for s in _bits(arg):
        ci = c.counted_of[s]
        if ci >= 0:
            if lst is None:
                lst = list(counts)
            lst[ci] = 0
    return bits & ~arg, (tuple(lst) if lst is not None else counts)


class _Expander:
    def __init__(self, c: Compiled) -> None:
        self.c = c
        self.cut = False

    @staticmethod
    def _spread_blocked(g: Guard, counts: tuple[int, ...], bits: int) -> tuple[bool, int]:
        """(some constraint is violated, own-domain pairs whose deletion lowers a violated skew)."""
        blocked, viol = False, 0
        for sp in g.spread:
            per = [sum(counts[i] for i in dom) for dom in sp.domains]
            gmin = min(per) if len(per) >= sp.min_domains else 0
            own = per[sp.own] if sp.own >= 0 else 0
            if own + sp.self_match - gmin > sp.max_skew:
                blocked = True
                viol |= sp.own_slots & bits
        return blocked, viol

    def moves(self, state: State) -> list[Move]:
        """Every move the search makes from ``state`` (deploys, then clears, then single deletions)."""
        c = self.c
        bits, counts = state
        cand = set(c.always)
        for s in _bits(bits & c.trigger_bits):
            tr = c.triggered.get(s)
            if tr:
                cand.update(tr)
        usage: dict[int, list[int]] = {}
        deploys: list[Move] = []
        clears: dict[int, None] = {}  # ordered set
        deletes = 0
        for gi in sorted(cand):
            g = c.guards[gi]
            if bits & g.required != g.required:
                continue
            if g.counted < 0:
                if bits >> g.slot & 1:
                    continue
            elif counts[g.counted] >= g.cap:
                if g.search_capped:
                    self.cut = True
                continue
            required = 0
            optional: list[int] = []
            ok = True
            for needs, boot in g.groups:
                if all(bits & m for m in needs):
                    if boot is not None and bits & boot:
                        optional.append(bits & boot)
                    continue
                if boot is None:
                    ok = False
                    break
                required |= boot
            if not ok:
                continue
            base = bits & (g.forbid | required)
            if base:
                clears[base] = None
            else:
                blocked, viol = False, 0
                for dim, req, cap, users in g.capacity:
                    if g.node not in usage:
                        usage[g.node] = c.usage(state, g.node)
                    if usage[g.node][dim] + req > cap:
                        blocked = True
                        viol |= users & bits
                if g.spread:
                    sb, sv = self._spread_blocked(g, counts, bits)
                    blocked, viol = blocked or sb, viol | sv
                if not blocked:
                    deploys.append((DEPLOY, gi))
                else:
                    deletes |= viol
            for k in range(1, 1 << len(optional)):
                extra = 0
                for j, m in enumerate(optional):
                    if k >> j & 1:
                        extra |= m
                if base | extra != base:
                    clears[base | extra] = None
        deploys.extend((CLEAR, m) for m in clears)
        deploys.extend((DELETE, x) for x in _bits(deletes))
        return deploys


def search(c: Compiled, canon: Canonicalizer, budget: Budget) -> SearchResult:
    """BFS from ``c.initial`` until every target slot runs, the space is exhausted, or the budget ends."""
    start = canon.canon(c.initial)
    if c.target_hit(start[0]):
        return SearchResult(True, 1)
    parent: dict[State, tuple[State, Move] | None] = {start: None}
    frontier: deque[State] = deque([start])
    ex = _Expander(c)
    expanded = 0
    depth, level_left = 0, 1  # states of the current level still to expand
    while frontier:
        if level_left == 0:
            depth, level_left = depth + 1, len(frontier)
        level_left -= 1
        state = frontier.popleft()
        expanded += 1
        if budget.should_stop is not None and expanded % budget.check_every == 0 and budget.should_stop():
            return SearchResult(False, len(parent), cut=ex.cut, stopped="timeout", depth=depth)
        for move in ex.moves(state):
            key = canon.canon(apply(c, state, move))
            if key in parent:
                continue
            parent[key] = (state, move)
            if c.target_hit(key[0]):
                moves = _trace(parent, key)
                concrete, along = _concretize(c, canon, moves)
                return SearchResult(True, len(parent), concrete, along, ex.cut)
            if len(parent) >= budget.max_states:
                return SearchResult(False, len(parent), cut=ex.cut, stopped="max-states", depth=depth)
            frontier.append(key)
    return SearchResult(False, len(parent), cut=ex.cut)


def _trace(parent: dict[State, tuple[State, Move] | None], end: State) -> list[Move]:
    out: list[Move] = []
    cur = parent[end]
    while cur is not None:
        prev, move = cur
        out.append(move)
        cur = parent[prev]
    out.reverse()
    return out


def _map_move(c: Compiled, move: Move, inv: dict[int, int]) -> Move:
    """A move on a canonical state, expressed on the concrete state it stands for."""
    kind, arg = move
    if not inv:
        return move

    def one(s: int) -> int:
        local = c.slot_class[s][1]
        target = inv.get(local, local)
        return s - c.offsets[local] + c.offsets[target]

    if kind == DEPLOY:
        g = c.guards[arg]
        return kind, c.guard_at[(g.type, inv.get(g.node, g.node))]
    if kind == CLEAR:
        out = 0
        for s in _bits(arg):
            out |= 1 << one(s)
        return kind, out
    return kind, one(arg)


def _concretize(c: Compiled, canon: Canonicalizer, moves: list[Move]) -> tuple[list[Move], list[State]]:
    """Replay canonical moves on the concrete initial state, undoing each state's permutation."""
    state = c.initial
    out: list[Move] = []
    along: list[State] = []
    for move in moves:
        _, perm = canon.canon_perm(state) if canon.active else (state, {})
        inv = {v: k for k, v in perm.items()}
        cm = _map_move(c, move, inv)
        along.append(state)
        out.append(cm)
        state = apply(c, state, cm)
    if not c.target_hit(state[0]):  # pragma: no cover - would be a bug in canonicalisation
        raise AssertionError("concretised path does not reach the target")
    return out, along
