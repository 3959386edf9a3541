"""Promela for SPIN: one process, one guarded deploy and one delete per variable, the target's
deploy asserts false (so "assertion violated" means deployable, and SPIN's trail is the witness)."""

from __future__ import annotations

from bench.deployability.ground import Expr, Ground


def _expr(e: Expr) -> str:
    kind = e[0]
    if kind == "var":
        return f"x[{e[1]}]"
    if kind == "true":
        return "true"
    if kind == "false":
        return "false"
    if kind == "not":
        return f"!({_expr(e[1])})"
    sep = " && " if kind == "and" else " || "
    if not e[1]:
        return "true" if kind == "and" else "false"
    return "(" + sep.join(_expr(x) for x in e[1]) + ")"


def _capacity(g: Ground, i: int) -> list[str]:
    out = []
    for row, req in g.uses.get(i, []):
        cap, users = g.rows[row]
        total = " + ".join(f"x[{v}] * {r}" for v, r in users)
        out.append(f"({total} + {req} <= {cap})")
    return out


def promela(g: Ground) -> str:
    lines = [
        f"/* {len(g.names)} variables: " + ", ".join(f"{i}={n}" for i, n in enumerate(g.names[:50])) + " */"
    ]
    lines.append(f"bit x[{len(g.names)}];")
    lines.append("init {")
    for i in sorted(g.init):
        lines.append(f"  x[{i}] = 1;")
    lines.append("  do")
    for i, guard in sorted(g.deploy.items()):
        cond = " && ".join([f"!x[{i}]", _expr(guard), *_capacity(g, i)])
        action = "assert(false)" if i == g.target else f"x[{i}] = 1"
        lines.append(f"  :: atomic {{ {cond} -> {action} }}")
    for i in range(len(g.names)):
        lines.append(f"  :: atomic {{ x[{i}] -> x[{i}] = 0 }}")
    lines.append("  od")
    lines.append("}")
    return "\n".join(lines) + "\n"
