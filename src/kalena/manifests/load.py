"""Read Kubernetes YAML into a deployability :class:`Instance`.

* ``Node``: name, labels (``kubernetes.io/hostname`` added when absent, as kubelet does),
  ``spec.taints``, ``spec.unschedulable``, ``status.allocatable`` (else ``status.capacity``).
  A node without either is unbounded on every dimension; a node with one is unbounded on the
  standard dimensions it omits (cpu, memory, ephemeral-storage, pods: a hand-written node rarely
  lists them all, a real one always does) and has 0 of any other resource a pod requests
  (extended resources, hugepages), as the scheduler treats a missing extended resource.
* Pod types: ``Pod`` objects and the pod templates of ``Deployment``, ``StatefulSet``,
  ``DaemonSet``, ``Job``, ``ReplicaSet``, ``ReplicationController`` and ``CronJob``; id
  ``namespace/name`` (namespace ``default`` when absent).
* Initial configuration: every ``Pod`` with ``spec.nodeName``. It runs as an instance of the type
  named by annotation ``kalena.naughtian.io/pod-type``, else of its controller's type (a
  StatefulSet, DaemonSet, Job or ReplicaSet owner; a ReplicaSet ``<deployment>-<pod-template-hash>``
  maps to its Deployment), else of its own type.
* DaemonSet pod types get the tolerations the DaemonSet controller adds (node conditions and
  ``node.kubernetes.io/unschedulable``). Like every pod type, a DaemonSet type may run several
  times on a node in the model (the controller keeps one; affinity never needs a second copy).
* ``Namespace`` objects give namespace labels (for ``namespaceSelector``); ``List`` items are read;
  every other kind (Service, ConfigMap, ...) is ignored.

Every problem is collected with file, key path and value, and all are raised together as one
:class:`~kalena.ir.errors.IRError`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kalena.deployability.model import HOSTNAME, Instance, Node, PodType, Taint, Toleration, frozen_map
from kalena.ir.errors import DOCUMENT, IRError, Problem, ProblemLog, key_path
from kalena.ir.yamlio import parse_yaml_all, read_text
from kalena.manifests import fields as f
from kalena.manifests.fields import Loc
from kalena.manifests.podspec import pod_spec
from kalena.manifests.strict import check_object

POD_TYPE_ANNOTATION = "kalena.naughtian.io/pod-type"
WORKLOAD_KINDS = (
    "Deployment",
    "StatefulSet",
    "DaemonSet",
    "Job",
    "ReplicaSet",
    "ReplicationController",
    "CronJob",
)
#: Tolerations the DaemonSet controller adds to its pods (kubernetes/kubernetes
#: ``pkg/controller/daemon/util``): node conditions and unschedulable nodes do not repel them.
DAEMONSET_TOLERATIONS = tuple(
    Toleration(key, "Exists", "", effect)
    for key, effect in (
        ("node.kubernetes.io/not-ready", "NoExecute"),
        ("node.kubernetes.io/unreachable", "NoExecute"),
        ("node.kubernetes.io/disk-pressure", "NoSchedule"),
        ("node.kubernetes.io/memory-pressure", "NoSchedule"),
        ("node.kubernetes.io/pid-pressure", "NoSchedule"),
        ("node.kubernetes.io/unschedulable", "NoSchedule"),
    )
)
STANDARD_DIMS = frozenset({"cpu", "memory", "ephemeral-storage", "pods"})
#: The most pods one workload may declare (Kubernetes' own scalability limit is 150,000 pods a
#: cluster): more is a typo, and each is a row in memory.
MAX_REPLICAS = 150_000


@dataclass
class _Placed:
    """A pod with ``spec.nodeName``, resolved to a type once every file is read."""

    file: str
    loc: Loc
    pod_id: str
    namespace: str
    node: str
    annotation: str | None
    owner: tuple[str, str] | None
    template_hash: str | None


class _Reader:
    def __init__(self) -> None:
        self.nodes: dict[str, Node] = {}
        self.node_has_alloc: dict[str, bool] = {}
        self.types: dict[str, PodType] = {}
        self.type_src: dict[str, str] = {}
        self.namespaces: dict[str, dict[str, str]] = {}
        self.placed: list[_Placed] = []
        self.problems: list[Problem] = []
        #: pods each workload runs at once (replicas; a Job's parallelism), where it says
        self.replicas: dict[str, int] = {}
        #: (file, key path of the pod spec) each pod type was read from
        self.spec_at: dict[str, tuple[str, Loc]] = {}
        #: the soft rules each pod type states, which the hard-rule model leaves out (kind -> terms)
        self.soft: dict[str, dict[str, int]] = {}

    # --- documents -----------------------------------------------------------------------------
    def read_text(self, text: str, file: str) -> None:
        log = ProblemLog(file)
        ok, docs = parse_yaml_all(text, log)
        if not ok:
            self.problems.extend(log.problems)
            return
        docs = [d for d in docs if d is not None]
        if not docs:
            log.add(DOCUMENT, "no Kubernetes object in this file (empty, or only comments)")
        multi = len(docs) > 1
        for i, doc in enumerate(docs):
            self.document(doc, (f"documents[{i}]",) if multi else (), log)
        self.problems.extend(log.problems)

    def document(self, doc: Any, loc: Loc, log: ProblemLog) -> None:
        m = f.mapping(doc, loc or (DOCUMENT,), log, optional=False)
        if m is None:
            return
        kind = f.string(m.get("kind"), (*loc, "kind"), log, required=True)
        if kind is None:
            return
        check_object(m, kind, loc, log)  # unknown fields and wrong types, as kubectl's strict validation
        if kind == "List":
            for j, item in enumerate(f.seq(m.get("items"), (*loc, "items"), log)):
                self.document(item, (*loc, "items", j), log)
        elif kind == "Node":
            self.node(m, loc, log)
        elif kind == "Namespace":
            meta = f.mapping(m.get("metadata"), (*loc, "metadata"), log, optional=False) or {}
            name = f.string(meta.get("name"), (*loc, "metadata", "name"), log, required=True)
            if name:
                self.namespaces[name] = f.string_map(meta.get("labels"), (*loc, "metadata", "labels"), log)
        elif kind == "Pod":
            self.pod_type(m, loc, log, kind, m.get("spec"), (*loc, "spec"), m.get("metadata"))
        elif kind in WORKLOAD_KINDS:
            self.workload(m, loc, log, kind)

    def node(self, m: dict[str, Any], loc: Loc, log: ProblemLog) -> None:
        meta = f.mapping(m.get("metadata"), (*loc, "metadata"), log, optional=False) or {}
        name = f.string(meta.get("name"), (*loc, "metadata", "name"), log, required=True)
        if not name:
            return
        labels = f.string_map(meta.get("labels"), (*loc, "metadata", "labels"), log)
        labels.setdefault(HOSTNAME, name)
        spec = f.mapping(m.get("spec"), (*loc, "spec"), log) or {}
        taints = []
        for i, t in enumerate(f.seq(spec.get("taints"), (*loc, "spec", "taints"), log)):
            tl = (*loc, "spec", "taints", i)
            tm = f.mapping(t, tl, log, optional=False) or {}
            key = f.string(tm.get("key"), (*tl, "key"), log, required=True)
            value = f.string(tm.get("value"), (*tl, "value"), log)
            effect = f.string(tm.get("effect"), (*tl, "effect"), log, required=True)
            if None not in (key, value, effect):
                taint = f.checked(Taint, (*tl, "effect"), log, tm.get("effect"), key, value, effect)
                if taint is not None:
                    taints.append(taint)
        unsched = spec.get("unschedulable", False)
        if not isinstance(unsched, bool):
            log.add((*loc, "spec", "unschedulable"), "must be true or false", unsched)
            unsched = False
        status = f.mapping(m.get("status"), (*loc, "status"), log) or {}
        part = "allocatable" if status.get("allocatable") is not None else "capacity"
        block = f.mapping(status.get(part), (*loc, "status", part), log)
        alloc: dict[str, int] = {}
        for dim, raw in (block or {}).items():
            v = f.units(str(dim), raw, (*loc, "status", part, str(dim)), log)
            if v is not None:
                alloc[str(dim)] = v
        if name in self.nodes:
            log.add((*loc, "metadata", "name"), "two Node objects share this name", name)
            return
        self.nodes[name] = Node(name, frozen_map(labels), tuple(taints), frozen_map(alloc), unsched)  # type: ignore[arg-type]
        self.node_has_alloc[name] = block is not None

    def workload(self, m: dict[str, Any], loc: Loc, log: ProblemLog, kind: str) -> None:
        spec = f.mapping(m.get("spec"), (*loc, "spec"), log, optional=False) or {}
        tloc: Loc = (*loc, "spec")
        suspended = False  # a suspended Job or CronJob runs no pod until it is resumed
        if kind == "CronJob":
            suspended = bool(f.flag(spec.get("suspend"), (*tloc, "suspend"), log))
            jt = f.mapping(spec.get("jobTemplate"), (*tloc, "jobTemplate"), log, optional=False) or {}
            tloc = (*tloc, "jobTemplate", "spec")
            spec = f.mapping(jt.get("spec"), tloc, log, optional=False) or {}
        if kind in ("Job", "CronJob"):
            suspended = bool(f.flag(spec.get("suspend"), (*tloc, "suspend"), log)) or suspended
        template = f.mapping(spec.get("template"), (*tloc, "template"), log, optional=False) or {}
        tmeta = f.mapping(template.get("metadata"), (*tloc, "template", "metadata"), log) or {}
        meta = f.mapping(m.get("metadata"), (*loc, "metadata"), log, optional=False) or {}
        merged = {"name": meta.get("name"), "namespace": meta.get("namespace"), "labels": tmeta.get("labels")}
        count = self.count(kind, spec, tloc, log)
        if suspended and count is not None:
            count = 0
        if count is not None and meta.get("name") is not None:
            self.replicas[f"{meta.get('namespace') or 'default'}/{meta.get('name')}"] = count
        self.pod_type(
            m,
            loc,
            log,
            kind,
            template.get("spec"),
            (*tloc, "template", "spec"),
            merged,
            labels_loc=(*tloc, "template", "metadata", "labels"),
        )

    @staticmethod
    def count(kind: str, spec: dict[str, Any], loc: Loc, log: ProblemLog) -> int | None:
        """How many pods the workload runs at once: ``replicas`` (default 1); a Job's
        ``parallelism`` (default 1), at most its ``completions`` (a CronJob's job counts as
        running: the room it needs each time it fires); none for a DaemonSet (one per node it
        runs on); the caller makes a suspended Job or CronJob 0. At most :data:`MAX_REPLICAS` (a
        Kubernetes cluster's own scale)."""
        if kind == "DaemonSet":
            return None
        key = "parallelism" if kind in ("Job", "CronJob") else "replicas"
        n = f.integer(spec.get(key), (*loc, key), log, minimum=0, default=1)
        if n is not None and n > MAX_REPLICAS:
            log.add((*loc, key), f"must be at most {MAX_REPLICAS:,} (pods a cluster runs)", n)
            return None
        if n is not None and key == "parallelism" and spec.get("completions") is not None:
            done = f.integer(spec.get("completions"), (*loc, "completions"), log, minimum=0)
            return None if done is None else min(n, done)
        return n

    def pod_type(
        self,
        m: dict[str, Any],
        loc: Loc,
        log: ProblemLog,
        kind: str,
        raw_spec: Any,
        spec_loc: Loc,
        raw_meta: Any,
        labels_loc: Loc | None = None,
    ) -> None:
        meta = f.mapping(raw_meta, (*loc, "metadata"), log, optional=False) or {}
        if meta.get("name") is None and meta.get("generateName") is not None:
            gen = f.string(meta.get("generateName"), (*loc, "metadata", "generateName"), log)
            name = gen.rstrip("-") if gen else None  # the type of every pod the prefix generates
        else:
            name = f.string(meta.get("name"), (*loc, "metadata", "name"), log, required=True)
        ns = f.string(meta.get("namespace"), (*loc, "metadata", "namespace"), log, default="default")
        labels = f.string_map(meta.get("labels"), labels_loc or (*loc, "metadata", "labels"), log)
        spec = f.mapping(raw_spec, spec_loc, log, optional=False)
        if not name or ns is None or spec is None:
            return
        parts = pod_spec(spec, spec_loc, log, labels)
        if kind == "DaemonSet":  # the DaemonSet controller adds these to every pod it creates
            parts.tolerations = parts.tolerations + DAEMONSET_TOLERATIONS
        type_id = f"{ns or 'default'}/{name}"
        if kind == "Pod" and parts.node_name is not None:
            raw_meta_m = m.get("metadata") if isinstance(m.get("metadata"), dict) else {}
            ann = f.string_map(raw_meta_m.get("annotations"), (*loc, "metadata", "annotations"), log)
            owner = None
            for o in f.seq(raw_meta_m.get("ownerReferences"), (*loc, "metadata", "ownerReferences"), log):
                if isinstance(o, dict) and o.get("controller") and o.get("kind") and o.get("name"):
                    owner = (str(o["kind"]), str(o["name"]))
            self.placed.append(
                _Placed(
                    log.file,
                    (*spec_loc, "nodeName"),
                    type_id,
                    ns or "default",
                    parts.node_name,
                    ann.get(POD_TYPE_ANNOTATION),
                    owner,
                    labels.get("pod-template-hash"),
                )
            )
        pt = f.checked(
            PodType,
            spec_loc,
            log,
            raw_spec,
            id=type_id,
            namespace=ns or "default",
            kind=kind,
            labels=frozen_map(labels),
            requests=frozen_map(parts.requests),  # type: ignore[arg-type]
            node_selector=frozen_map(parts.node_selector),
            node_affinity=parts.node_affinity,
            tolerations=parts.tolerations,
            affinity=parts.affinity,
            anti_affinity=parts.anti_affinity,
            spread=parts.spread,
        )
        if pt is None:
            return
        if type_id in self.types:
            log.add(
                (*loc, "metadata", "name"),
                f"a pod type {type_id} is already defined by {self.type_src[type_id]}",
                name,
            )
            return
        self.types[type_id] = pt
        self.type_src[type_id] = f"{kind} in {log.file}"
        self.spec_at[type_id] = (log.file, spec_loc)
        if parts.soft:
            self.soft[type_id] = parts.soft

    # --- after every file ------------------------------------------------------------------------
    def _resolve(self, p: _Placed) -> str | None:
        log = ProblemLog(p.file)
        if p.annotation:
            tid = p.annotation if "/" in p.annotation else f"{p.namespace}/{p.annotation}"
            if tid not in self.types:
                log.add(
                    (*p.loc[:-2], "metadata", "annotations", POD_TYPE_ANNOTATION),
                    "names no pod type",
                    p.annotation,
                )
                self.problems.extend(log.problems)
                return None
            return tid
        if p.owner is not None:
            kind, name = p.owner
            candidates = [f"{p.namespace}/{name}"]
            if kind == "ReplicaSet" and p.template_hash and name.endswith("-" + p.template_hash):
                candidates.append(f"{p.namespace}/{name[: -len(p.template_hash) - 1]}")
            for tid in candidates:
                t = self.types.get(tid)
                if t is not None and t.kind in WORKLOAD_KINDS:
                    return tid
        return p.pod_id

    def finish(self) -> Instance:
        initial: dict[tuple[str, str], int] = {}
        for p in self.placed:
            tid = self._resolve(p)
            if tid is None:
                continue
            if p.node not in self.nodes:
                self.problems.append(
                    Problem(p.file, key_path(p.loc), "names a node that no Node object defines", p.node)
                )
                continue
            initial[(tid, p.node)] = initial.get((tid, p.node), 0) + 1
            if tid != p.pod_id:
                self.types.pop(p.pod_id, None)  # an instance of another type, not a type of its own
        if self.problems:
            raise IRError(self.problems)
        requested = {d for t in self.types.values() for d in t.requests}
        nodes = []
        for name, node in self.nodes.items():
            if self.node_has_alloc[name]:
                extra = {d: 0 for d in requested if d not in STANDARD_DIMS and d not in node.allocatable}
                if extra:
                    node = Node(
                        node.name,
                        node.labels,
                        node.taints,
                        frozen_map({**node.allocatable, **extra}),
                        node.unschedulable,
                    )  # type: ignore[arg-type]
            nodes.append(node)
        return Instance(
            tuple(nodes),
            tuple(self.types.values()),
            frozen_map(initial),  # type: ignore[arg-type]
            frozen_map({k: frozen_map(v) for k, v in self.namespaces.items()}),  # type: ignore[arg-type]
        )


@dataclass(frozen=True)
class Manifests:
    """What the files say: the :class:`Instance`, how many pods each pod type runs at once (a bare
    Pod 1; a DaemonSet's type absent) and the (file, key path) of each type's pod spec."""

    instance: Instance
    replicas: Mapping[str, int]
    spec_at: Mapping[str, tuple[str, Loc]]
    #: pod type id -> the soft rules it states (``kalena.manifests.podspec.SOFT_KINDS`` -> terms)
    soft: Mapping[str, Mapping[str, int]] = field(default_factory=dict)


def parse_manifests(texts: Sequence[tuple[str, str]]) -> Instance:
    """``[(file name, YAML text), ...]`` -> Instance; raises IRError with every problem found."""
    return parse_workloads(texts).instance


def parse_workloads(texts: Sequence[tuple[str, str]]) -> Manifests:
    """:func:`parse_manifests` with the replica counts and the pod specs' places."""
    r = _Reader()
    for file, text in texts:
        r.read_text(text, file)
    instance = r.finish()
    replicas = {t.id: r.replicas.get(t.id, 1) for t in instance.types if t.kind != "DaemonSet"}
    ids = [t.id for t in instance.types]
    return Manifests(
        instance, replicas, {i: r.spec_at[i] for i in ids}, {i: r.soft[i] for i in ids if i in r.soft}
    )


def read_manifests(paths: Sequence[str | Path]) -> Instance:
    """Read YAML files (directories: every ``*.yaml`` / ``*.yml`` inside, sorted)."""
    return read_workloads(paths).instance


def read_workloads(paths: Sequence[str | Path]) -> Manifests:
    """:func:`read_manifests` with the replica counts and the pod specs' places."""
    texts: list[tuple[str, str]] = []
    problems: list[Problem] = []
    for p in paths:
        path = Path(p)
        files = sorted([*path.glob("*.yaml"), *path.glob("*.yml")]) if path.is_dir() else [path]
        if not files:
            problems.append(Problem(str(path), DOCUMENT, "a folder with no *.yaml or *.yml file in it"))
        for fp in files:
            log = ProblemLog(str(fp))
            text = read_text(fp, log)
            if text is not None:
                texts.append((str(fp), text))
            problems.extend(log.problems)
    if problems:
        raise IRError(problems)
    return parse_workloads(texts)
