"""PDDL (STRIPS with negative and disjunctive preconditions) for Fast Downward.

One 0-ary predicate per variable; ``deploy-i`` / ``delete-i`` actions. A capacity row becomes a
counter (one predicate per level ``0..C``), so a variable may use at most one bounded row (the
pebbling instances use one); every deploy and delete of a variable that uses a row is ground
once per level. The goal is the target's predicate.
"""

from __future__ import annotations

from bench.deployability.ground import Expr, Ground


def _expr(e: Expr) -> str:
    kind = e[0]
    if kind == "var":
        return f"(x{e[1]})"
    if kind == "true":
        return "(and)"
    if kind == "false":
        return "(or)"
    if kind == "not":
        return f"(not {_expr(e[1])})"
    return f"({kind} " + " ".join(_expr(x) for x in e[1]) + ")"


def pddl(g: Ground) -> tuple[str, str]:
    """(domain, problem)."""
    for i, uses in g.uses.items():
        if len(uses) > 1:
            raise ValueError(f"{g.names[i]} uses {len(uses)} capacity rows; the counter encoding needs one")
    preds = [f"(x{i})" for i in range(len(g.names))]
    for r, (cap, _) in enumerate(g.rows):
        preds += [f"(c{r}-{level})" for level in range(cap + 1)]
    actions = []
    for i in range(len(g.names)):
        guard = g.deploy.get(i)
        uses = g.uses.get(i, [])
        if not uses:
            if guard is not None:
                actions.append(
                    f"(:action deploy-{i} :parameters () :precondition (and (not (x{i})) {_expr(guard)}) "
                    f":effect (x{i}))"
                )
            actions.append(f"(:action delete-{i} :parameters () :precondition (x{i}) :effect (not (x{i})))")
            continue
        ((row, req),) = uses
        cap = g.rows[row][0]
        for level in range(cap + 1):
            if guard is not None and level + req <= cap:
                actions.append(
                    f"(:action deploy-{i}-{level} :parameters () "
                    f":precondition (and (not (x{i})) (c{row}-{level}) {_expr(guard)}) "
                    f":effect (and (x{i}) (not (c{row}-{level})) (c{row}-{level + req})))"
                )
            if level - req >= 0:
                actions.append(
                    f"(:action delete-{i}-{level} :parameters () :precondition (and (x{i}) (c{row}-{level})) "
                    f":effect (and (not (x{i})) (not (c{row}-{level})) (c{row}-{level - req})))"
                )
    domain = (
        "(define (domain deployability)\n"
        "(:requirements :strips :negative-preconditions :disjunctive-preconditions)\n"
        f"(:predicates {' '.join(preds)})\n" + "\n".join(actions) + "\n)\n"
    )
    init = [f"(x{i})" for i in sorted(g.init)]
    for r, (_cap, users) in enumerate(g.rows):
        used = sum(req for v, req in users if v in g.init)
        init.append(f"(c{r}-{used})")
    problem = (
        f"(define (problem q) (:domain deployability)\n(:init {' '.join(init)})\n(:goal (x{g.target}))\n)\n"
    )
    return domain, problem
