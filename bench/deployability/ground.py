"""A deployability question (paper semantics, no spread) ground to boolean variables and guards.

One boolean per (type, node) pair that can ever run there (StaticOK and ``res(t) <= C(n)``) or
runs initially; a pair's variable says "at least one pod of this type runs on this node". This is
the seed's saturation (§5): without spread constraints a second copy never helps, so the peers
get a finite model of the same question. Guards follow Definition 1:

* capacity per bounded dimension: ``sum(req_u * x_u over pairs on n) + req_t <= C(n)``;
* affinity term ``(s, tau)``: ``OR(x_u : u in [[s]], on D_tau(n))``, or, when ``t`` matches
  ``s``, ``NOT OR(x_u : u in [[s]], anywhere)``;
* anti-affinity term: ``NOT OR(x_u : u in [[s]], on D_tau(n))``.

No relevance, class or symmetry reduction is applied: the peers see the plain model.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kalena.deployability import Instance, Query, Semantics
from kalena.deployability.tables import Tables

Expr = tuple  # ("and"|"or", [Expr]) | ("not", Expr) | ("var", int) | ("true",) | ("false",)


@dataclass
class Ground:
    names: list[str]  # variable i -> "type@node"
    init: set[int]
    target: int
    deploy: dict[int, Expr] = field(default_factory=dict)  # variable -> guard (capacity excluded)
    rows: list[tuple[int, list[tuple[int, int]]]] = field(default_factory=list)  # (capacity, [(var, req)])
    uses: dict[int, list[tuple[int, int]]] = field(default_factory=dict)  # var -> [(row, req)]


def _or(vs: list[int]) -> Expr:
    return ("or", [("var", v) for v in vs]) if vs else ("false",)


def ground(inst: Instance, query: Query) -> Ground:
    if query.co_occur is not None:
        raise ValueError("co-occurrence is not encoded")
    tb = Tables(inst, Semantics.PAPER)
    if any(t.spread for t in inst.types):
        raise ValueError("spread constraints count instances: no boolean encoding")
    init_pairs = {(tb.tindex[t], tb.nindex[n]) for (t, n), c in inst.initial.items() if c > 0}
    pairs = sorted(
        {
            (t, n)
            for t in range(len(inst.types))
            for n in range(len(inst.nodes))
            if tb.deployable_somewhere(t, n)
        }
        | init_pairs
    )
    var = {p: i for i, p in enumerate(pairs)}
    g = Ground(
        [f"{inst.types[t].id}@{inst.nodes[n].name}" for t, n in pairs], {var[p] for p in init_pairs}, -1
    )
    target = (tb.tindex[query.pod], tb.nindex[query.node])
    if target not in var:
        pairs.append(target)
        var[target] = len(pairs) - 1
        g.names.append(f"{query.pod}@{query.node}")
    g.target = var[target]
    by_node: dict[int, list[int]] = {}
    for t, n in var:
        by_node.setdefault(n, []).append(t)
    # capacity rows
    row_of: dict[tuple[int, str], int] = {}
    for (t, n), i in var.items():
        for d, cap in inst.nodes[n].allocatable.items():
            req = inst.types[t].requests.get(d, 0)
            if req > 0:
                key = (n, d)
                if key not in row_of:
                    row_of[key] = len(g.rows)
                    g.rows.append((cap, []))
                g.rows[row_of[key]][1].append((i, req))
                g.uses.setdefault(i, []).append((row_of[key], req))
    for (t, n), i in var.items():
        if not tb.deployable_somewhere(t, n):
            continue
        pod = inst.types[t]
        parts: list[Expr] = []
        for j, a in enumerate(pod.affinity):
            match = tb.term_match(t, "aff", j)
            near = [
                var[(u, m)] for m in tb.domain(a.topology_key, n) for u in by_node.get(m, ()) if u in match
            ]
            clause = _or(near)
            if t in match:
                anywhere = [var[(u, m)] for (u, m) in var if u in match]
                clause = ("or", [clause, ("not", _or(anywhere))])
            parts.append(clause)
        for j, a in enumerate(pod.anti_affinity):
            match = tb.term_match(t, "anti", j)
            near = [
                var[(u, m)] for m in tb.domain(a.topology_key, n) for u in by_node.get(m, ()) if u in match
            ]
            if near:
                parts.append(("not", _or(near)))
        g.deploy[i] = ("and", parts) if parts else ("true",)
    return g
