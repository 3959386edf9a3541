"""``kalena deployable``: can a pod of this type ever land on that node? With a replayable proof.

Exit codes: 0 deployable, 1 not deployable, 3 unknown (a budget ran out: never a guess),
2 bad input (one line per problem on stderr, ``FILE: KEY.PATH: MESSAGE (value: VALUE)``).
With ``--all-nodes`` the exit code is 0 when the type can land on at least one node, 1 when it
can land nowhere, 3 when it can land nowhere known but some node is unknown.

The clock lives here: ``--timeout`` becomes a deadline callable handed to the pure core.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated

import typer

from kalena.deployability import (
    Answer,
    Budget,
    Instance,
    Query,
    Semantics,
    Verdict,
    decide,
    deployable_nodes,
)
from kalena.ir.errors import IRError, Problem
from kalena.manifests import read_manifests

EXIT = {Verdict.DEPLOYABLE: 0, Verdict.NOT_DEPLOYABLE: 1, Verdict.UNKNOWN: 3}
EXIT_BAD_INPUT = 2
ARGS = "<command line>"


def _bad(problems: list[Problem] | tuple[Problem, ...]) -> typer.Exit:
    for p in problems:
        typer.echo(p.render(), err=True)
    return typer.Exit(EXIT_BAD_INPUT)


def resolve_type(instance: Instance, name: str, option: str) -> str:
    """``namespace/name`` as given, or a bare name that exactly one type carries."""
    ids = [t.id for t in instance.types]
    if name in ids:
        return name
    matches = [i for i in ids if i.split("/", 1)[1] == name]
    if len(matches) == 1:
        return matches[0]
    if matches:
        raise _bad(
            [Problem(ARGS, option, f"ambiguous pod type; use one of {', '.join(sorted(matches))}", name)]
        )
    known = ", ".join(sorted(ids)[:8]) + (" ..." if len(ids) > 8 else "")
    raise _bad([Problem(ARGS, option, f"no pod type has this name (known: {known or 'none'})", name)])


def _render(ans: Answer, semantics: Semantics) -> str:
    who = ans.pod if ans.co_occur is None else f"{ans.pod} together with {ans.co_occur}"
    lines = []
    if ans.verdict is Verdict.DEPLOYABLE:
        lines.append(f"deployable: {who} can run on {ans.node} (semantics: {semantics.value})")
        if ans.witness:
            lines.append(f"witness ({len(ans.witness)} steps, replayed by the independent checker):")
            width = len(str(len(ans.witness)))
            for i, s in enumerate(ans.witness, 1):
                lines.append(f"  {i:>{width}}. {s.op.value:<6} {s.pod_type} on {s.node}")
        else:
            lines.append("witness: none needed (already running in the initial configuration)")
    elif ans.verdict is Verdict.NOT_DEPLOYABLE:
        lines.append(f"not-deployable: {who} can never run on {ans.node} (semantics: {semantics.value})")
    else:
        lines.append(
            f"unknown: no answer for {who} on {ans.node} within the budget (semantics: {semantics.value})"
        )
    for r in ans.reasons:
        lines.append(f"reason: {r}")
    if ans.fragment:
        lines.append(f"fragment: {ans.fragment}")
    if ans.procedure:
        lines.append(f"procedure: {ans.procedure}; configurations explored: {ans.states_explored:,}")
    for r in ans.reductions:
        lines.append(f"reduction: {r}")
    return "\n".join(lines)


def command(
    cluster: Annotated[
        list[Path],
        typer.Option(
            "--cluster", help="Kubernetes YAML (Nodes, Pods, workloads, Namespaces); repeat or give a folder."
        ),
    ],
    pod: Annotated[str, typer.Option("--pod", help="Pod type: namespace/name, or a name that is unique.")],
    node: Annotated[str | None, typer.Option("--node", help="Target node (not with --all-nodes).")] = None,
    co_occur: Annotated[
        str | None,
        typer.Option("--co-occur", help="A second pod type that must run on the node at the same time."),
    ] = None,
    all_nodes: Annotated[
        bool, typer.Option("--all-nodes", metavar="", help="Report every node where the type can land.")
    ] = False,
    semantics: Annotated[
        Semantics,
        typer.Option(
            "--semantics", help="kubernetes: kube-scheduler's filters; paper: seed 003 Definition 1."
        ),
    ] = Semantics.KUBERNETES,
    max_states: Annotated[
        int, typer.Option("--max-states", min=1, help="Stop (unknown) after this many configurations.")
    ] = 1_000_000,
    timeout: Annotated[
        float | None, typer.Option("--timeout", min=0.0, help="Stop (unknown) after this many seconds.")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", metavar="", help="Print only the JSON answer.")] = False,
) -> None:
    """Can a pod of type --pod ever run on --node, through any legal sequence of deploys and deletes?"""
    problems = []
    if all_nodes and (node is not None or co_occur is not None):
        problems.append(Problem(ARGS, "--all-nodes", "cannot be combined with --node or --co-occur", True))
    if not all_nodes and node is None:
        problems.append(Problem(ARGS, "--node", "is required (or use --all-nodes)"))
    if problems:
        raise _bad(problems)
    try:
        instance = read_manifests(cluster)
    except IRError as e:
        raise _bad(list(e.problems)) from None
    pod_id = resolve_type(instance, pod, "--pod")
    co_id = resolve_type(instance, co_occur, "--co-occur") if co_occur is not None else None
    if co_id == pod_id:
        raise _bad([Problem(ARGS, "--co-occur", "must name a different pod type than --pod", co_occur)])
    if node is not None and node not in {n.name for n in instance.nodes}:
        raise _bad([Problem(ARGS, "--node", "no Node object has this name", node)])
    deadline = None if timeout is None else time.monotonic() + timeout
    budget = Budget(max_states, None if deadline is None else (lambda: time.monotonic() > deadline))
    if all_nodes:
        _all_nodes(instance, pod_id, semantics, budget, as_json)
        return
    assert node is not None
    ans = decide(instance, Query(pod_id, node, co_id), semantics, budget)
    if as_json:
        typer.echo(json.dumps(ans.to_json()))
    else:
        typer.echo(_render(ans, semantics))
    raise typer.Exit(EXIT[ans.verdict])


def _all_nodes(instance: Instance, pod: str, semantics: Semantics, budget: Budget, as_json: bool) -> None:
    answers = deployable_nodes(instance, pod, semantics, budget)
    verdicts = {a.verdict for a in answers}
    overall = (
        Verdict.DEPLOYABLE
        if Verdict.DEPLOYABLE in verdicts
        else Verdict.UNKNOWN
        if Verdict.UNKNOWN in verdicts
        else Verdict.NOT_DEPLOYABLE
    )
    total = sum(a.states_explored for a in answers)
    if as_json:
        body = {
            "answer": overall.value,
            "witness": [],
            "states_explored": total,
            "nodes": [{"node": a.node, **a.to_json()} for a in answers],
        }
        typer.echo(json.dumps(body))
        raise typer.Exit(EXIT[overall])
    yes = [a.node for a in answers if a.verdict is Verdict.DEPLOYABLE]
    unknown = [a.node for a in answers if a.verdict is Verdict.UNKNOWN]
    typer.echo(f"{pod} can land on {len(yes)} of {len(answers)} nodes (semantics: {semantics.value})")
    width = max((len(a.node) for a in answers), default=4)
    for a in answers:
        extra = (
            f"{len(a.witness)} steps"
            if a.verdict is Verdict.DEPLOYABLE
            else (a.reasons[0] if a.reasons else "")
        )
        typer.echo(f"  {a.node:<{width}}  {a.verdict.value:<14}  {extra}")
    if unknown:
        typer.echo(f"unknown on {len(unknown)} nodes: the budget ran out (raise --max-states or --timeout)")
    raise typer.Exit(EXIT[overall])
