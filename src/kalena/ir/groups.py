"""Gangs (ir-v1 §3.2): inline ``gang:`` and explicit ``groups:`` resolved to pod identities.

Rules, as IR v1 states them and as this reader applies them:

* ``gang: G`` on a declaration enrols all its replicas in gang G; with no ``groups:`` entry
  named G, the gang's ``min_members`` is its full membership and ``colocate`` is false.
* A ``groups:`` entry lists declarations (``namespace/name``; a legacy file may also use a
  bare name, which then names that declaration in every namespace). A member naming no
  declaration is an error naming the value. An entry named G also takes in the pods whose
  inline gang is G, and its own settings win (otherwise the shorthand's defaults would
  discard ``min_members`` and ``colocate``).
* ``min_members`` defaults to the number of resolved member pods and must lie in 1..=that.
* A pod belongs to at most one group: a pod listed by two entries, or whose inline gang is G
  while an entry named H != G lists it, is an error rather than a silent winner.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import MappingProxyType

from kalena.core.cluster import Group
from kalena.ir.document import DeclDoc, GroupDoc
from kalena.ir.errors import ProblemLog, key_path


def declaration_index(decls: Sequence[DeclDoc], *, bare: bool) -> dict[str, list[DeclDoc]]:
    """``namespace/name`` (and, with ``bare``, plain ``name``) -> declarations."""
    index: dict[str, list[DeclDoc]] = {}
    for d in decls:
        index.setdefault(d.full_name, []).append(d)
        if bare:
            index.setdefault(d.name, []).append(d)
    return index


def resolve_groups(
    decls: Sequence[DeclDoc], groups: Sequence[GroupDoc], log: ProblemLog, *, bare: bool
) -> tuple[Group, ...]:
    """Resolve every gang to pod ids; problems go to ``log`` and the offending group is dropped.

    ``bare`` lets members name a declaration without its namespace (legacy documents only).
    """
    index = declaration_index(decls, bare=bare)
    inline: dict[str, list[str]] = {}
    for d in decls:
        if d.gang is not None:
            inline.setdefault(d.gang, []).extend(d.pod_ids())

    out: list[Group] = []
    claimed: dict[str, str] = {}  # declaration full name -> explicit group that listed it
    seen_names: dict[str, GroupDoc] = {}
    for g in groups:
        if g.name in seen_names:
            where = key_path(seen_names[g.name].loc)
            log.add((*g.loc, "name"), f"duplicate group name (first at {where})", g.name)
            continue
        seen_names[g.name] = g
        members: dict[str, None] = {}  # ordered set of pod ids
        ok = True
        for j, member in enumerate(g.members or ()):
            targets = index.get(member)
            if not targets:
                log.add((*g.loc, "members", j), "group member names no declaration", member)
                ok = False
                continue
            for d in targets:
                if claimed.get(d.full_name, g.name) != g.name:
                    log.add(
                        (*g.loc, "members", j),
                        f"{d.full_name} is already in group {claimed[d.full_name]!r} "
                        "(a pod belongs to one group)",
                        member,
                    )
                    ok = False
                if d.gang is not None and d.gang != g.name:
                    log.add(
                        (*d.loc, "gang"),
                        f"{d.full_name} has inline gang {d.gang!r} but group {g.name!r} also claims it",
                        d.gang,
                    )
                    ok = False
                claimed.setdefault(d.full_name, g.name)
                members.update(dict.fromkeys(d.pod_ids()))
        members.update(dict.fromkeys(inline.get(g.name, ())))
        if not members:
            if ok:
                log.add((*g.loc, "members"), "group has no members", list(g.members or ()))
            continue
        n = len(members)
        min_members = g.min_members if g.min_members is not None else n
        if not 1 <= min_members <= n:
            log.add(
                (*g.loc, "min_members"),
                f"min_members must lie in 1..={n} (the group's {n} resolved member pods)",
                g.min_members,
            )
            ok = False
        if ok:
            out.append(
                Group(
                    name=g.name,
                    members=tuple(members),
                    min_members=min_members,
                    colocate=bool(g.colocate),
                    node_selector=MappingProxyType(dict(g.node_selector or {})),
                )
            )
    for gang, pids in inline.items():
        if gang not in seen_names:
            out.append(Group(name=gang, members=tuple(pids), min_members=len(pids)))
    return tuple(out)
