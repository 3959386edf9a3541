"""Reading one IR document: header, kind, closed schema, and the checks one file allows.

``apiVersion: kuberina.io/v1`` selects the strict v1 models; a document without
``apiVersion`` is read with the legacy models (a superset: flat spellings, the Irina
``pods:`` list, bare-name blueprints). Any other apiVersion is an error, and so is a ``kind``
that is unknown or differs from the kind the caller expects. Without ``kind`` the kind is
told from the top-level keys.

Every problem of the file is collected (list entries are validated one by one, so a bad
node does not hide a duplicate name further down) and raised together as one
:class:`~kalena.ir.errors.IRError`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from kalena.core.model import Taint
from kalena.ir import schema_legacy as lg
from kalena.ir import schema_v1 as v1
from kalena.ir.document import (
    BlueprintDoc,
    DaemonSetDoc,
    DeclDoc,
    Document,
    GroupDoc,
    InfraDoc,
    Kind,
    Loc,
    MetaDoc,
    NodeDoc,
    ObservedDoc,
    SpreadDoc,
    TolerationDoc,
    WorkloadsDoc,
)
from kalena.ir.errors import DOCUMENT, IRError, Problem, ProblemLog, key_path
from kalena.ir.groups import resolve_groups
from kalena.ir.yamlio import parse_yaml, parse_yaml_all, read_text

_KIND_KEYS: dict[str, frozenset[str]] = {
    "Infrastructure": frozenset({"nodes", "daemonsets"}),
    "Workloads": frozenset({"namespaces", "pods", "groups"}),
    "Blueprint": frozenset({"solution", "metadata"}),
}


def read_document(path: str | Path, expect: Kind | None = None) -> Document:
    """Read and check one IR file; raises :class:`IRError` listing every problem found."""
    log = ProblemLog(str(path))
    text = read_text(path, log)
    if text is None:
        raise IRError(log.problems)
    return parse_document(text, str(path), expect)


def parse_document(text: str, file: str = "<string>", expect: Kind | None = None) -> Document:
    """Parse and check one IR document given as text (``file`` names it in problems)."""
    log = ProblemLog(file)
    ok, data = parse_yaml(text, log)
    if not ok and any("expected a single document" in p.message for p in log.problems):
        several = ProblemLog(file)
        _, docs = parse_yaml_all(text, several)
        if docs and isinstance(docs[0], dict) and _looks_kubernetes(docs[0]):
            log = ProblemLog(file)  # manifests, several per file: say so instead of a syntax error
            log.add(DOCUMENT, KUBERNETES_HINT)
    doc = _document(data, log, expect) if ok else None
    log.raise_if_any()
    assert doc is not None  # no problems logged means a document was built
    return doc


def read_documents(paths: Sequence[str | Path]) -> list[Document]:
    """Read several files, collecting the problems of all of them before raising."""
    docs: list[Document] = []
    problems: list[Problem] = []
    for p in paths:
        try:
            docs.append(read_document(p))
        except IRError as e:
            problems.extend(e.problems)
    if problems:
        raise IRError(problems)
    return docs


# ---------------------------------------------------------------------------------------------
#: What an IR reader says of a Kubernetes object: the verifier reads those.
KUBERNETES_HINT = (
    "a Kubernetes object, not a Kuberina IR document: `kalena deployable --cluster FILE` reads those"
)


def _looks_kubernetes(data: Any) -> bool:
    """An apiVersion of Kubernetes' shape (``v1``, ``apps/v1``) with a kind: not a typo of IR's."""
    api, kind = data.get("apiVersion"), data.get("kind")
    return (
        isinstance(api, str)
        and isinstance(kind, str)
        and not api.startswith("kuberina.io/")
        and (api.split("/")[-1].startswith("v") and api.split("/")[-1][1:2].isdigit())
    )


def _document(data: Any, log: ProblemLog, expect: Kind | None) -> Document | None:
    if not isinstance(data, dict):
        what = "empty" if data is None else type(data).__name__
        log.add(DOCUMENT, f"the top level must be a mapping, not {what}", data)
        return None
    header = _header(data, log, expect)
    if header is None:
        return None
    kind, legacy = header
    if kind == "Infrastructure":
        return _infra(data, legacy, log)
    if kind == "Workloads":
        return _workloads(data, legacy, log)
    return _blueprint(data, legacy, log)


def _header(data: dict[str, Any], log: ProblemLog, expect: Kind | None) -> tuple[Kind, bool] | None:
    api = data.get("apiVersion")
    if "apiVersion" in data and api != v1.API_VERSION:
        if _looks_kubernetes(data):
            log.add("apiVersion", KUBERNETES_HINT, api)
        else:
            log.add("apiVersion", f"unknown apiVersion (this reader implements {v1.API_VERSION})", api)
        return None
    legacy = "apiVersion" not in data
    kind = data.get("kind")
    found = [k for k, keys in _KIND_KEYS.items() if keys & data.keys()]
    if kind is not None:
        if kind not in v1.KINDS:
            log.add("kind", f"unknown kind (expected one of {', '.join(v1.KINDS)})", kind)
            return None
        if expect is not None and kind != expect:
            log.add("kind", f"wrong kind: expected kind {expect}", kind)
            return None
        if len(found) == 1 and found[0] != kind:
            log.add("kind", f"wrong kind: the document has {found[0]} keys", kind)
            return None
        return kind, legacy
    if len(found) > 1:
        log.add(
            DOCUMENT, f"cannot tell the kind: keys of {' and '.join(found)} are mixed", sorted(map(str, data))
        )
        return None
    if not found:
        if expect is not None:
            return expect, legacy
        log.add(
            DOCUMENT,
            "cannot tell the kind: no nodes:, namespaces:/pods: or solution: key",
            sorted(map(str, data)),
        )
        return None
    if expect is not None and found[0] != expect:
        log.add(
            DOCUMENT,
            f"wrong kind: expected kind {expect}, the document has {found[0]} keys",
            sorted(map(str, data)),
        )
        return None
    return found[0], legacy  # type: ignore[return-value]


def _check(model: type[BaseModel], raw: Any, loc: Loc, log: ProblemLog) -> Any:
    """Validate one entry against a closed model; log problems and return ``None`` on failure."""
    try:
        return model.model_validate(raw)
    except ValidationError as e:
        log.extend(v1.problems_from(e, log.file, loc))
        return None


def _entries(data: dict[str, Any], key: str) -> list[Any]:
    raw = data.get(key)
    return raw if isinstance(raw, list) else []  # a non-list was reported by the top-level model


def _dims(block: Any) -> dict[str, float]:
    return block.present() if block is not None else {}


# Infrastructure ------------------------------------------------------------------------------
def _infra(data: dict[str, Any], legacy: bool, log: ProblemLog) -> InfraDoc:
    _check(v1.InfraTop, data, (), log)
    node_model = lg.LegacyNode if legacy else v1.Node
    ds_model = lg.LegacyDaemonSet if legacy else v1.DaemonSet
    nodes: list[NodeDoc] = []
    for i, raw in enumerate(_entries(data, "nodes")):
        m = _check(node_model, raw, ("nodes", i), log)
        if m is not None:
            nodes.append(
                NodeDoc(
                    name=m.name,
                    zone=m.zone,
                    rack=m.rack,
                    labels=dict(m.labels),
                    taints=tuple(Taint(t.key, t.value, t.effect) for t in m.taints),
                    allocatable=_dims(m.allocatable),
                    loc=("nodes", i),
                )
            )
    daemonsets: list[DaemonSetDoc] = []
    for i, raw in enumerate(_entries(data, "daemonsets")):
        m = _check(ds_model, raw, ("daemonsets", i), log)
        if m is not None:
            daemonsets.append(
                DaemonSetDoc(
                    name=m.name,
                    resources=_dims(m.resources),
                    node_selector=dict(m.node_selector),
                    tolerations=tuple(m.tolerations),
                    loc=("daemonsets", i),
                )
            )
    _unique(data, "nodes", "node name", log)
    _unique(data, "daemonsets", "DaemonSet name", log)
    return InfraDoc(log.file, legacy, tuple(nodes), tuple(daemonsets))


def _raw_name(raw: Any) -> str | None:
    """The ``name`` of a raw entry, when it is a string: checks run even on entries that failed."""
    name = raw.get("name") if isinstance(raw, dict) else None
    return name if isinstance(name, str) else None


def _unique(data: dict[str, Any], key: str, what: str, log: ProblemLog) -> None:
    first: dict[str, Loc] = {}
    for i, raw in enumerate(_entries(data, key)):
        name = _raw_name(raw)
        if name is None:
            continue
        if name in first:
            log.add((key, i, "name"), f"duplicate {what} (first at {key_path(first[name])})", name)
        else:
            first[name] = (key, i)


# Workloads -----------------------------------------------------------------------------------
def _tolerations(ts: Sequence[v1.Toleration]) -> tuple[TolerationDoc, ...]:
    return tuple(TolerationDoc(t.key, t.operator, t.value, t.effect) for t in ts)


def _observed(o: v1.Observed | None) -> ObservedDoc | None:
    if o is None:
        return None
    return ObservedDoc(
        window=o.window,
        p50=o.p50.present() if o.p50 is not None else None,
        p95=o.p95.present() if o.p95 is not None else None,
        p99=o.p99.present() if o.p99 is not None else None,
        peak=o.peak.present() if o.peak is not None else None,
        exceeded_request_fraction=o.exceeded_request_fraction,
    )


def _declaration(ns: str, m: v1.Declaration, loc: Loc) -> DeclDoc:
    spread = m.topology_spread
    return DeclDoc(
        namespace=ns,
        name=m.name,
        replicas=m.replicas,
        requests=_dims(m.requests),
        node_selector=dict(m.node_selector),
        tolerations=_tolerations(m.tolerations),
        affinity=tuple(m.affinity),
        anti_affinity=tuple(m.anti_affinity),
        topology_spread=SpreadDoc(spread.max_skew, spread.topology_key) if spread else None,
        gang=m.gang,
        observed=_observed(m.observed),
        loc=loc,
    )


def _legacy_pod(m: lg.LegacyPod, loc: Loc) -> DeclDoc:
    return DeclDoc(
        namespace=m.namespace,
        name=m.name,
        requests=_dims(m.requests),
        node_selector=dict(m.node_selector),
        tolerations=_tolerations(m.tolerations),
        affinity=tuple(m.affinity),
        anti_affinity=tuple(m.anti_affinity),
        gang=m.gang_name,
        pod_entry=True,
        loc=loc,
    )


def _workloads(data: dict[str, Any], legacy: bool, log: ProblemLog) -> WorkloadsDoc:
    _check(lg.LegacyWorkloadsTop if legacy else v1.WorkloadsTop, data, (), log)
    decl_model = lg.LegacyDeclaration if legacy else v1.Declaration
    decls: list[DeclDoc] = []
    namespaces = data.get("namespaces")
    if isinstance(namespaces, dict):
        for ns, entries in namespaces.items():
            if not isinstance(ns, str) or not ns or "/" in ns or any(c.isspace() for c in ns):
                log.add(
                    ("namespaces", str(ns)), "a namespace must be non-empty, without '/' or whitespace", ns
                )
                continue
            if not isinstance(entries, list):
                continue  # reported by the top-level model
            for i, raw in enumerate(entries):
                m = _check(decl_model, raw, ("namespaces", ns, i), log)
                if m is not None:
                    decls.append(_declaration(ns, m, ("namespaces", ns, i)))
    if legacy:
        for i, raw in enumerate(_entries(data, "pods")):
            m = _check(lg.LegacyPod, raw, ("pods", i), log)
            if m is not None:
                decls.append(_legacy_pod(m, ("pods", i)))
    groups: list[GroupDoc] = []
    group_model = lg.LegacyGroup if legacy else v1.Group
    for i, raw in enumerate(_entries(data, "groups")):
        m = _check(group_model, raw, ("groups", i), log)
        if m is not None:
            groups.append(
                GroupDoc(
                    name=m.name,
                    members=tuple(m.members) if m.members is not None else None,
                    min_members=m.min_members_value if legacy else m.min_members,
                    colocate=m.colocate,
                    node_selector=dict(m.node_selector) if m.node_selector is not None else None,
                    loc=("groups", i),
                )
            )
    stubs = _stubs(data, legacy)
    total = sum(1 if d.pod_entry else d.replicas for d in stubs)
    if total > v1.MAX_PODS:  # counted before a single pod identity is built
        log.add(DOCUMENT, f"declares {total:,} pods, more than the {v1.MAX_PODS:,} one document may hold")
        decls, groups = [], []
    else:
        _unique_pods(stubs, log)
    resolved = resolve_groups(decls, groups, log, bare=legacy)
    return WorkloadsDoc(log.file, legacy, tuple(decls), tuple(groups), resolved)


def _stubs(data: dict[str, Any], legacy: bool) -> list[DeclDoc]:
    """Name, namespace and replicas of every raw entry that has a name, valid or not."""
    out: list[DeclDoc] = []
    namespaces = data.get("namespaces")
    for ns, entries in namespaces.items() if isinstance(namespaces, dict) else ():
        for i, raw in enumerate(entries if isinstance(ns, str) and isinstance(entries, list) else ()):
            name = _raw_name(raw)
            if name is not None:
                n = raw.get("replicas", 1)
                ok = isinstance(n, int) and not isinstance(n, bool) and 1 <= n <= v1.MAX_REPLICAS
                replicas = n if ok else 1  # a bad count was reported by the model
                out.append(DeclDoc(ns, name, replicas, loc=("namespaces", ns, i)))
    for i, raw in enumerate(_entries(data, "pods") if legacy else ()):
        name = _raw_name(raw)
        ns = raw.get("namespace", "default") if name is not None else None
        if name is not None and isinstance(ns, str):
            out.append(DeclDoc(ns, name, pod_entry=True, loc=("pods", i)))
    return out


def _unique_pods(decls: Sequence[DeclDoc], log: ProblemLog) -> None:
    """Declaration names are unique within a namespace, and unrolled pod identities everywhere."""
    first_decl: dict[str, Loc] = {}
    first_pod: dict[str, Loc] = {}
    for d in decls:
        if not d.pod_entry:
            if d.full_name in first_decl:
                where = key_path(first_decl[d.full_name])
                log.add((*d.loc, "name"), f"duplicate declaration {d.full_name} (first at {where})", d.name)
                continue
            first_decl[d.full_name] = d.loc
        for pid in d.pod_ids():
            if pid in first_pod:
                where = key_path(first_pod[pid])
                log.add((*d.loc, "name"), f"duplicate pod identity {pid} (first at {where})", d.name)
            else:
                first_pod[pid] = d.loc


# Blueprint -----------------------------------------------------------------------------------
def _blueprint(data: dict[str, Any], legacy: bool, log: ProblemLog) -> BlueprintDoc:
    _check(v1.BlueprintTop, data, (), log)
    meta: MetaDoc | None = None
    if "metadata" in data:
        m = _check(
            lg.LegacyBlueprintMeta if legacy else v1.BlueprintMeta, data["metadata"], ("metadata",), log
        )
        if m is not None:
            meta = MetaDoc(m.feasible, m.pods, m.active_nodes)
    elif not legacy:
        log.add("metadata", "required key 'metadata' is missing (a v1 blueprint states feasible)")
    raw = data.get("solution")
    solution: list[tuple[str, str]] = []
    if isinstance(raw, dict):
        for key, node in raw.items():
            if not isinstance(key, str) or not isinstance(node, str):
                continue  # reported by the top-level model
            ns, sep, pod = key.partition("/")
            if not legacy and (not sep or not ns or not pod or "/" in pod):
                log.add(("solution", key), "a v1 blueprint key is namespace/podname", key)
            elif not node:
                log.add(("solution", key), "empty node name", node)
            else:
                solution.append((key, node))
    doc = BlueprintDoc(log.file, legacy, tuple(solution), meta)
    if meta is not None and isinstance(raw, dict):
        if meta.feasible is False:
            log.add(
                "metadata.feasible",
                "the blueprint is marked infeasible: it breaches real capacity and must not be applied",
                False,
            )
        if meta.pods is not None and meta.pods != len(raw):
            log.add("metadata.pods", f"says {meta.pods} pods but solution has {len(raw)} entries", meta.pods)
        active = len({v for v in raw.values() if isinstance(v, str)})
        if meta.active_nodes is not None and meta.active_nodes != active:
            log.add(
                "metadata.activeNodes",
                f"says {meta.active_nodes} active nodes but solution uses {active}",
                meta.active_nodes,
            )
    return doc
