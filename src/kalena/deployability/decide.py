"""Answer a deployability question: classify, decide, build the witness, replay it independently.

Entry points: :func:`decide` (one type on one node, or two types together on one node) and
:func:`deployable_nodes` (every node where a type can ever land). Both are pure: the budget's
``should_stop`` callable is the only window on time, and it is passed in by the shell.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from kalena.deployability import search_vec
from kalena.deployability.answer import Answer, Op, Step, Verdict
from kalena.deployability.checker import Checker, replay
from kalena.deployability.compiled import compile_question
from kalena.deployability.fragment import AAS, classify
from kalena.deployability.model import Instance, Query, Semantics
from kalena.deployability.relevance import Pair, guard_parts, relevance
from kalena.deployability.search import DELETE, DEPLOY, Budget, SearchResult, search
from kalena.deployability.semantics import Evaluator, FailureCode
from kalena.deployability.symmetry import Canonicalizer, node_classes
from kalena.deployability.tables import Tables

#: The vectorised search first runs breadth-first up to this many states: most questions end
#: there, with a shortest witness. Beyond it a witness, if any, is likely long, and a beam probe
#: (at most PROBE_WIDTH states per level) costs little next to the full search it may save.
FIRST_BFS_STATES = 20_000
#: Beam width of the probe: on pebbling pyramids up to height 9 and binary trees up to height 4 a
#: width of 1000 finds witnesses as short as (pyramids) or a little longer than (trees) the
#: breadth-first ones, in about a second.
PROBE_WIDTH = 1000
#: Average states per BFS level above which the vectorised search is used: each level is a few
#: dozen NumPy passes (about a millisecond), so it pays off only when a level holds hundreds of
#: states (pebbling: thousands; the Petri-net protocols: a handful).
WIDE_LEVEL = 200

#: First count cap for spread-counted pairs that no capacity bounds; doubled while the search
#: reports a cut and the budget lasts (2 is the least cap at which a skew can differ from 1).
FIRST_COUNT_CAP = 2


def _check_query(instance: Instance, query: Query) -> None:
    ids = {t.id for t in instance.types}
    for tid in (query.pod, query.co_occur):
        if tid is not None and tid not in ids:
            raise ValueError(f"unknown pod type {tid!r}")
    if query.node not in {n.name for n in instance.nodes}:
        raise ValueError(f"unknown node {query.node!r}")


def _verified(
    instance: Instance,
    semantics: Semantics,
    ans: Answer,
    targets: Sequence[tuple[str, str]],
    checker: Checker | None = None,
) -> Answer:
    """Replay a deployable answer's witness with the independent checker; withhold it on refusal."""
    if ans.verdict is not Verdict.DEPLOYABLE:
        return ans
    r = checker.replay(ans.witness, targets) if checker else replay(instance, semantics, ans.witness, targets)
    if r.ok:
        return _replace(ans, checked=True)
    return _replace(
        ans,
        verdict=Verdict.UNKNOWN,
        witness=(),
        reasons=(
            f"internal error: the independent checker refused the witness ({r.message}); answer withheld",
        ),
    )


def _replace(ans: Answer, **kw: object) -> Answer:
    fields = {f: getattr(ans, f) for f in ans.__dataclass_fields__}
    fields.update(kw)
    return Answer(**fields)  # type: ignore[arg-type]


def _initial_pairs(tb: Tables, instance: Instance) -> dict[Pair, int]:
    return {(tb.tindex[t], tb.nindex[n]): c for (t, n), c in instance.initial.items() if c > 0}


# --- the polynomial fragment --------------------------------------------------------------------
def _empty_check(
    instance: Instance, semantics: Semantics, tb: Tables, query: Query, ev: Evaluator | None = None
) -> Answer:
    """Seed 003 §4: deployable iff already running or ``Hard(t*, n*, 0)``; witness: delete what blocks."""
    ev = ev or Evaluator(instance, semantics)
    base = dict(
        pod=query.pod, node=query.node, fragment=AAS.describe(), procedure="empty-configuration check"
    )
    fails = ev.hard(query.pod, query.node, {})
    if fails:
        return Answer(
            Verdict.NOT_DEPLOYABLE,
            states_explored=1,
            reasons=tuple(f"fails in the empty configuration: {f.render()}" for f in fails),
            **base,
        )
    if ev.ok(query.pod, query.node, instance.initial):  # nothing running blocks it
        return Answer(
            Verdict.DEPLOYABLE, witness=(Step(Op.DEPLOY, query.pod, query.node),), states_explored=1, **base
        )
    t, n = tb.tindex[query.pod], tb.nindex[query.node]
    init = _initial_pairs(tb, instance)
    universe: dict[int, list[int]] = {}
    for u, m in init:
        universe.setdefault(m, []).append(u)
    g = guard_parts(tb, t, n, universe)
    blocking: set[Pair] = g.forbid_pairs()
    for pairs in g.capacity.values():
        blocking |= pairs
    for sp in g.spread:
        if sp.own >= 0:
            blocking |= set(sp.domains[sp.own])
    config = dict(instance.initial)
    deletions: list[tuple[str, str]] = []
    for u, m in sorted(blocking):
        key = (tb.types[u].id, tb.nodes[m].name)
        deletions.extend([key] * config.pop(key, 0))
    # keep every pod whose deletion is not needed (greedy, in order)
    kept = []
    for key in deletions:
        config[key] = config.get(key, 0) + 1
        if ev.ok(query.pod, query.node, config):
            kept.append(key)
        else:
            config[key] -= 1
            if config[key] == 0:
                del config[key]
    for key in kept:
        deletions.remove(key)
    witness = (
        *(Step(Op.DELETE, tid, node) for tid, node in deletions),
        Step(Op.DEPLOY, query.pod, query.node),
    )
    return Answer(Verdict.DEPLOYABLE, witness=witness, states_explored=1, **base)


# --- the search -----------------------------------------------------------------------------------
def _search_answer(
    instance: Instance, semantics: Semantics, tb: Tables, query: Query, budget: Budget
) -> Answer:
    targets = [(tb.tindex[tid], tb.nindex[node]) for tid, node in query.targets()]
    init = _initial_pairs(tb, instance)
    rel = relevance(tb, targets, init)
    frag = classify(tb, rel)
    base = dict(pod=query.pod, node=query.node, co_occur=query.co_occur, fragment=frag.describe())
    dead = [p for p in targets if p not in rel.deployable and init.get(p, 0) == 0]
    if dead:
        ev = Evaluator(instance, semantics)
        reasons = []
        for u, m in dead:
            tid, node = tb.types[u].id, tb.nodes[m].name
            fails = [f for f in ev.hard(tid, node, {}) if f.code in _STATIC]
            why = "; ".join(f.render() for f in fails) or "no configuration can satisfy its guard"
            reasons.append(f"{tid} can never be placed on {node}: {why}")
        return Answer(
            Verdict.NOT_DEPLOYABLE,
            states_explored=0,
            procedure="static check",
            reasons=tuple(reasons),
            **base,
        )
    classes = node_classes(tb, rel, init, {m for _, m in targets})
    cap = FIRST_COUNT_CAP
    explored = 0
    while True:
        comp = compile_question(tb, rel, targets, init, classes, cap)
        canon = Canonicalizer(comp, classes)
        left = Budget(max(1, budget.max_states - explored), budget.should_stop, budget.check_every)
        res, how = _searched(comp, canon, left)
        explored += res.states
        capped = any(g.search_capped for g in comp.guards)
        reductions = _reductions(tb, rel, comp, canon, capped, cap)
        base.update(procedure=how, reductions=reductions)
        if res.found:
            steps = _steps(comp, res.moves, instance)
            return Answer(Verdict.DEPLOYABLE, witness=steps, states_explored=explored, **base)
        if res.stopped:
            why = "--max-states" if res.stopped == "max-states" else "--timeout"
            return Answer(
                Verdict.UNKNOWN,
                states_explored=explored,
                reasons=(
                    f"the budget ({why}) ran out after {explored:,} configurations; no answer is a guess",
                ),
                **base,
            )
        if not res.cut:
            why = [f"every reachable configuration explored ({explored:,}); none runs the target"]
            why += _unwitnessed(tb, targets)
            return Answer(Verdict.NOT_DEPLOYABLE, states_explored=explored, reasons=tuple(why), **base)
        cap *= 2  # the count cap pruned a move: explore again with a larger cap
        if explored >= budget.max_states:
            return Answer(
                Verdict.UNKNOWN,
                states_explored=explored,
                reasons=("spread constraints count instances that nothing bounds; no cap proved enough",),
                **base,
            )


_STATIC = frozenset(
    {
        FailureCode.INSUFFICIENT_RESOURCE,
        FailureCode.NODE_AFFINITY,
        FailureCode.UNTOLERATED_TAINT,
        FailureCode.TOPOLOGY_KEY_MISSING,
        FailureCode.SPREAD_NOT_ELIGIBLE,
    }
)


def _unwitnessed(tb: Tables, targets: Sequence[Pair]) -> list[str]:
    """Affinity terms of a target that no pod type can ever witness (an explanation, not a proof)."""
    out = []
    for t, _ in targets:
        pod = tb.types[t]
        if not pod.affinity:
            continue
        if tb.semantics is Semantics.KUBERNETES:
            if not tb.all_match(t):
                out.append(
                    f"no pod type matches all {len(pod.affinity)} affinity terms of {pod.id} "
                    "(kube-scheduler needs one running pod that matches every term)"
                )
        else:
            for i in range(len(pod.affinity)):
                if not tb.term_match(t, "aff", i):
                    out.append(f"no pod type matches affinity term {i} of {pod.id}")
    return out


def _searched(comp, canon: Canonicalizer, budget: Budget) -> tuple[SearchResult, str]:
    """Pick the search: plain BFS first; the vectorised one when its levels are wide.

    The plain search runs up to :data:`FIRST_BFS_STATES` states; most questions end there with a
    shortest witness. If it has not ended, the state is a plain bit set, and its levels are wide
    (at least :data:`WIDE_LEVEL` states per level on average: a level is one NumPy pass, which
    pays off only over many states), the vectorised search and its beam probe take over;
    otherwise the plain search starts again with the whole budget. States of every phase count
    against the budget.
    """
    plain = "breadth-first search"
    first = search(
        comp, canon, Budget(min(budget.max_states, FIRST_BFS_STATES), budget.should_stop, budget.check_every)
    )
    if first.found or first.stopped != "max-states" or budget.max_states <= FIRST_BFS_STATES:
        return first, plain
    explored = first.states
    left = Budget(max(1, budget.max_states - explored), budget.should_stop, budget.check_every)
    wide = first.states >= WIDE_LEVEL * max(1, first.depth)
    if not (wide and search_vec.applicable(comp, canon.active)):
        rest = search(comp, canon, left)
        rest.states += explored
        return rest, plain
    res, how = _vectorised(comp, left)
    res.states += explored
    return res, how


def _vectorised(comp, budget: Budget) -> tuple[SearchResult, str]:
    """A beam probe, then the full vectorised BFS; the probe only ever *finds* witnesses.

    A witness the probe finds is replayed like any other; it never concludes ``not-deployable``,
    so the answer is the full BFS's whenever the probe finds nothing.
    """
    bfs = "breadth-first search (vectorised, bit-set states)"
    levels = 3 * len(comp.slot_class) + 10  # witnesses seen so far are at most twice the slots long
    probe = search_vec.search_vec(comp, budget, width=PROBE_WIDTH, max_levels=levels)
    explored = probe.states
    if probe.found:
        return probe, f"beam probe (width {PROBE_WIDTH}) after {FIRST_BFS_STATES:,} breadth-first states"
    if probe.stopped in ("timeout", "max-states"):
        return probe, bfs
    full = search_vec.search_vec(comp, Budget(max(1, budget.max_states - explored), budget.should_stop))
    full.states += explored
    return full, bfs + " (a beam probe found nothing)"


def _reductions(tb, rel, comp, canon, capped: bool, cap: int) -> tuple[str, ...]:
    types = {u for u, _ in rel.deployable}
    nodes = {m for _, m in rel.deployable}
    out = [
        f"relevance: {len(types)} of {len(tb.types)} pod types on {len(nodes)} of {len(tb.nodes)} nodes "
        "can influence the target",
        f"resident classes: {len(set(comp.class_of))} for {len(tb.types)} pod types",
        f"saturation: {len(comp.slot_class) - len(comp.counted_slots)} (class, node) slots kept as "
        f"present/absent, {len(comp.counted_slots)} counted",
        "deletions only right before a deploy they unblock",
    ]
    if rel.blocking:
        out.append(f"{len(rel.blocking)} initially running pairs that can only block kept as delete-only")
    if canon.active:
        merged = sum(len(c) for c in canon.classes)
        out.append(f"symmetry: {len(canon.classes)} classes of interchangeable nodes ({merged} nodes)")
    if capped:
        out.append(f"count cap {cap} on spread-counted pairs that no capacity bounds")
    return tuple(out)


def _steps(comp, moves, instance: Instance) -> tuple[Step, ...]:
    """Concrete steps for the search's moves, tracking which pods of each class run where.

    A deletion of a class on a node deletes one running pod of that class (the first type in
    type order); a clear deletes every pod of each class.
    """
    tb = comp.tables
    running = {(tb.tindex[t], tb.nindex[n]): c for (t, n), c in instance.initial.items() if c > 0}
    out: list[Step] = []

    def delete(slot: int, every: bool) -> None:
        cls, i = comp.slot_class[slot]
        m = comp.nodes[i]
        for u in comp.class_members[cls]:
            while running.get((u, m), 0) > 0:
                running[(u, m)] -= 1
                out.append(Step(Op.DELETE, tb.types[u].id, tb.nodes[m].name))
                if not every:
                    return

    for kind, arg in moves:
        if kind == DEPLOY:
            g = comp.guards[arg]
            m = comp.nodes[g.node]
            running[(g.type, m)] = running.get((g.type, m), 0) + 1
            out.append(Step(Op.DEPLOY, tb.types[g.type].id, tb.nodes[m].name))
        elif kind == DELETE:
            delete(arg, every=False)
        else:
            for s in range(arg.bit_length()):
                if arg >> s & 1:
                    delete(s, every=True)
    return tuple(out)


# --- entry points -----------------------------------------------------------------------------------
def decide(instance: Instance, query: Query, semantics: Semantics, budget: Budget | None = None) -> Answer:
    """Can ``query.pod`` (with ``query.co_occur``) ever run on ``query.node``?

    Raises ValueError on unknown names (the shell reports them as bad input).
    """
    _check_query(instance, query)
    budget = budget or Budget()
    targets = query.targets()
    if all(instance.initial.get(k, 0) > 0 for k in targets):
        ans = Answer(
            Verdict.DEPLOYABLE,
            pod=query.pod,
            node=query.node,
            co_occur=query.co_occur,
            states_explored=1,
            procedure="initial configuration",
            reasons=("already running in the initial configuration",),
        )
        return _verified(instance, semantics, ans, targets)
    tb = Tables(instance, semantics)
    target_type = instance.types[tb.tindex[query.pod]]
    if query.co_occur is None and not target_type.affinity:
        ans = _empty_check(instance, semantics, tb, query)
    else:
        ans = _search_answer(instance, semantics, tb, query, budget)
    return _verified(instance, semantics, ans, targets)


def _node_signature(instance: Instance, tb: Tables, n: int, private: Mapping[str, set[str]]) -> tuple:
    node = instance.nodes[n]
    labels = tuple(sorted((k, "\x00" if v in private.get(k, ()) else v) for k, v in node.labels.items()))
    pods = tuple(sorted((t, c) for (t, m), c in instance.initial.items() if m == node.name))
    static = tuple(tb.static_ok(t, n) for t in range(len(instance.types)))
    return (labels, tuple(sorted(node.allocatable.items())), node.taints, node.unschedulable, pods, static)


def _swap(steps: Sequence[Step], a: str, b: str) -> tuple[Step, ...]:
    def sw(x: str) -> str:
        return b if x == a else a if x == b else x

    return tuple(Step(s.op, s.pod_type, sw(s.node)) for s in steps)


def deployable_nodes(
    instance: Instance,
    pod: str,
    semantics: Semantics,
    budget: Budget | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> tuple[Answer, ...]:
    """One answer per node: where can ``pod`` ever land? (a security-boundary report)

    Nodes that a swap maps onto each other (equal labels up to values private to one node, taints,
    capacity, static verdicts and initial pods) share one search; the other node's witness is the
    swapped one, replayed again by the checker.
    """
    budget = budget or Budget()
    if pod not in {t.id for t in instance.types}:
        raise ValueError(f"unknown pod type {pod!r}")
    tb = Tables(instance, semantics)
    affinity_free = not instance.types[tb.tindex[pod]].affinity
    counts: dict[tuple[str, str], int] = {}
    for node in instance.nodes:
        for k, v in node.labels.items():
            counts[(k, v)] = counts.get((k, v), 0) + 1
    private: dict[str, set[str]] = {}
    for (k, v), c in counts.items():
        if c == 1:
            private.setdefault(k, set()).add(v)
    seen: dict[tuple, Answer] = {}
    out = []
    ev, checker = Evaluator(instance, semantics), Checker(instance, semantics)
    for i, node in enumerate(instance.nodes):
        if progress is not None:
            progress(i, len(instance.nodes))
        q = Query(pod, node.name)
        if affinity_free:  # seed §4 per node, sharing the tables, the evaluator and the checker
            if instance.initial.get((pod, node.name), 0) > 0:
                out.append(decide(instance, q, semantics, budget))
            else:
                ans = _empty_check(instance, semantics, tb, q, ev)
                out.append(_verified(instance, semantics, ans, q.targets(), checker))
            continue
        sig = _node_signature(instance, tb, i, private)
        rep = seen.get(sig)
        if rep is None:
            ans = decide(instance, q, semantics, budget)
            seen[sig] = ans
            out.append(ans)
            continue
        mapped = _replace(rep, node=node.name, witness=_swap(rep.witness, rep.node, node.name), checked=False)
        out.append(_verified(instance, semantics, mapped, q.targets(), checker))
    return tuple(out)
