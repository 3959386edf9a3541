"""Legacy (pre-v1, IR v0.2.0) documents -> IR v1 documents, with the rename map.

Pod identities are preserved where IR v1 can express them and renamed consistently where
it cannot:

* Fold: pods of one namespace (legacy ``pods:`` entries) named ``<base>-0000`` ...
  ``<base>-(n-1)`` with n > 1, a complete run, with identical specs (requests,
  nodeSelector, tolerations, affinity, antiAffinity, gang) become one declaration
  ``<base>`` with ``replicas: n``; its unrolled identities are exactly the old ones. A run
  is not folded when a ``groups:`` member names one of its pods (folding would enrol the
  whole run) or when ``<base>`` is already the name of another declaration there.
* Any other legacy pod ``<name>`` becomes a declaration ``<name>`` with ``replicas: 1``,
  whose unrolled identity is ``<name>-0``: renamed ``ns/<name>`` -> ``ns/<name>-0``.
* References are rewritten: affinity and antiAffinity targets become the full ``ns/pod``
  ids of the pods they matched (every spelling that ``Selector.matches`` accepts: full id,
  ``ns/declaration``, bare pod name, bare declaration name), in order, without
  duplicates; a target that matches no pod is kept verbatim and reported in ``notes``.
  Blueprint keys become full renamed ids; group members become ``ns/declaration``; a
  legacy group without members lists the declarations whose ``gang`` names it.
* Documents already in v1 shape pass through with only their targets made explicit, so
  converting the writer's own v1 output again is byte-identical.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from types import MappingProxyType

from kalena.ir.checks import pod_name_index
from kalena.ir.document import BlueprintDoc, DeclDoc, GroupDoc, InfraDoc, MetaDoc, WorkloadsDoc
from kalena.ir.errors import DOCUMENT, IRError, Problem, ProblemLog
from kalena.ir.groups import declaration_index, resolve_groups

_RUN_MEMBER = re.compile(r"^(?P<base>.+)-(?P<idx>\d{4,})$")


@dataclass(frozen=True, slots=True)
class Conversion:
    """The v1 documents, ``renames`` (old pod id -> new, only ids that changed) and notes."""

    infra: InfraDoc | None
    workloads: WorkloadsDoc | None
    blueprint: BlueprintDoc | None
    renames: Mapping[str, str]
    notes: tuple[str, ...] = ()


def _spec(d: DeclDoc) -> tuple[object, ...]:
    return (
        tuple(sorted(d.requests.items())),
        tuple(sorted(d.node_selector.items())),
        d.tolerations,
        d.affinity,
        d.anti_affinity,
        d.gang,
    )


def _grouped_pods(doc: WorkloadsDoc) -> set[str]:
    """Pod ids that an explicit ``groups:`` member names (folding them would change the gang)."""
    index = declaration_index(doc.declarations, bare=doc.legacy)
    out: set[str] = set()
    for g in doc.groups:
        for m in g.members or ():
            for d in index.get(m, ()):
                out.update(d.pod_ids())
    return out


def _fold_plan(doc: WorkloadsDoc) -> dict[int, tuple[str, list[int]]]:
    """First index of each foldable run -> (base, indices of its members)."""
    grouped = _grouped_pods(doc)
    names: dict[str, set[str]] = {}
    runs: dict[tuple[str, str], dict[int, int]] = {}
    for i, d in enumerate(doc.declarations):
        names.setdefault(d.namespace, set()).add(d.name)
        m = _RUN_MEMBER.match(d.name) if d.pod_entry else None
        if m is not None and d.name == f"{m['base']}-{int(m['idx']):04d}":
            runs.setdefault((d.namespace, m["base"]), {})[int(m["idx"])] = i
    plan: dict[int, tuple[str, list[int]]] = {}
    for (ns, base), by_idx in runs.items():
        n = len(by_idx)
        if n < 2 or set(by_idx) != set(range(n)) or base in names[ns]:
            continue
        members = [by_idx[k] for k in range(n)]
        decls = [doc.declarations[i] for i in members]
        if len({_spec(d) for d in decls}) != 1:
            continue
        if any(pid in grouped for d in decls for pid in d.pod_ids()):
            continue
        plan[min(members)] = (base, members)
    return plan


def _target_index(doc: WorkloadsDoc) -> dict[str, list[str]]:
    """Every spelling Selector.matches accepts -> old pod ids, in pod order."""
    index: dict[str, list[str]] = {}
    for pid, d in doc.pods():
        pod = pid.split("/", 1)[1]
        for spelling in dict.fromkeys((pid, pod, d.full_name, d.name)):
            index.setdefault(spelling, []).append(pid)
    return index


def _rewrite_targets(
    targets: tuple[str, ...], index: Mapping[str, list[str]], renames: Mapping[str, str], notes: list[str]
) -> tuple[str, ...]:
    out: dict[str, None] = {}
    for t in targets:
        hits = index.get(t)
        if not hits:
            notes.append(f"affinity target {t!r} matches no pod; kept as written")
            out[t] = None
            continue
        for pid in hits:
            out[renames.get(pid, pid)] = None
    return tuple(out)


def convert_workloads(doc: WorkloadsDoc) -> tuple[WorkloadsDoc, dict[str, str], list[str]]:
    """``(v1 document, renames, notes)`` for one workloads document."""
    plan = _fold_plan(doc)
    folded = {i for _, members in plan.values() for i in members}
    renames: dict[str, str] = {}
    shaped: list[DeclDoc] = []
    for i, d in enumerate(doc.declarations):
        if i in plan:
            base, members = plan[i]
            shaped.append(replace(d, name=base, replicas=len(members), pod_entry=False))
        elif i in folded:
            continue
        elif d.pod_entry:
            new = replace(d, replicas=1, pod_entry=False)
            renames[d.pod_ids()[0]] = new.pod_ids()[0]
            shaped.append(new)
        else:
            shaped.append(d)
    index = _target_index(doc)
    notes: list[str] = []
    decls = tuple(
        replace(
            d,
            affinity=_rewrite_targets(d.affinity, index, renames, notes),
            anti_affinity=_rewrite_targets(d.anti_affinity, index, renames, notes),
        )
        for d in shaped
    )
    _no_duplicate_declarations(doc.file, decls)
    groups = tuple(_convert_group(g, doc, decls) for g in doc.groups)
    log = ProblemLog(doc.file)
    resolved = resolve_groups(decls, groups, log, bare=False)
    log.raise_if_any()  # the source resolved cleanly, so this would be a converter bug surfacing
    out = WorkloadsDoc(doc.file, False, decls, groups, resolved)
    return out, renames, list(dict.fromkeys(notes))


def _convert_group(g: GroupDoc, doc: WorkloadsDoc, decls: tuple[DeclDoc, ...]) -> GroupDoc:
    if g.members is None:
        members = tuple(dict.fromkeys(d.full_name for d in decls if d.gang == g.name))
    else:
        index = declaration_index(doc.declarations, bare=doc.legacy)
        # Members name declarations; folding never touches a grouped pod, so names survive.
        members = tuple(dict.fromkeys(d.full_name for m in g.members for d in index.get(m, ())))
    return replace(g, members=members)


def _no_duplicate_declarations(file: str, decls: tuple[DeclDoc, ...]) -> None:
    seen: set[str] = set()
    problems = []
    for d in decls:
        if d.full_name in seen:
            problems.append(
                Problem(file, DOCUMENT, "converting would give two declarations of one name", d.full_name)
            )
        seen.add(d.full_name)
    if problems:
        raise IRError(problems)


def convert_blueprint(
    doc: BlueprintDoc, workloads: WorkloadsDoc | None, renames: Mapping[str, str]
) -> BlueprintDoc:
    """Full, renamed keys; metadata completed (pods, activeNodes; feasible as stated or true)."""
    bare = pod_name_index(workloads) if workloads is not None else {}
    solution: list[tuple[str, str]] = []
    problems: list[Problem] = []
    for key, node in doc.solution:
        if "/" in key:
            pid = key
        elif len(bare.get(key, ())) == 1:
            pid = bare[key][0]
        else:
            why = "needs its Workloads document" if workloads is None else "names no single pod"
            problems.append(Problem(doc.file, f"solution.{key}", f"cannot convert a bare key: {why}", key))
            continue
        solution.append((renames.get(pid, pid), node))
    if problems:
        raise IRError(problems)
    feasible = doc.metadata.feasible if doc.metadata and doc.metadata.feasible is not None else True
    meta = MetaDoc(feasible, len(solution), len({n for _, n in solution}))
    return BlueprintDoc(doc.file, False, tuple(solution), meta)


def to_v1(
    infra: InfraDoc | None = None,
    workloads: WorkloadsDoc | None = None,
    blueprint: BlueprintDoc | None = None,
) -> Conversion:
    """Convert any documents to IR v1; a legacy blueprint's bare keys need the workloads."""
    renames: dict[str, str] = {}
    notes: list[str] = []
    wl = None
    if workloads is not None:
        wl, renames, notes = convert_workloads(workloads)
    bp = convert_blueprint(blueprint, workloads, renames) if blueprint is not None else None
    inf = replace(infra, legacy=False) if infra is not None else None
    return Conversion(inf, wl, bp, MappingProxyType(renames), tuple(notes))
