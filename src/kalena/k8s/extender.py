"""Kalena's scheduler extender for kube-scheduler (``kalena k8s extender``).

kube-scheduler places the pods; after its own filters and scores it calls this extender, over
HTTP(S) and in its wire format (``k8s.io/kube-scheduler/extender/v1``; Go field names are the
JSON keys):

* ``POST /filter``: ``ExtenderArgs`` ``{"Pod", "Nodes", "NodeNames"}`` (with ``nodeCacheCapable``
  only ``NodeNames``; without it ``Nodes``, a NodeList) -> ``ExtenderFilterResult``
  ``{"NodeNames", "Nodes", "FailedNodes", "FailedAndUnresolvableNodes", "Error"}`` (``Nodes`` is
  sent back when it came: kube-scheduler then reads the passing nodes from it);
* ``POST /prioritize``: the same ``ExtenderArgs`` -> ``HostPriorityList`` ``[{"Host", "Score"}]``,
  scores 0 to 10 (``MaxExtenderPriority``; kube-scheduler multiplies them by the extender's
  ``weight`` and by 10, its own plugins' range being 0 to 100);
* ``GET /healthz``: the extender answers (no token needed: it says nothing else).

What it answers, by the pod's class (the SPEC's: label ``kalena.naughtian.io/tier``, read by
:func:`kalena.k8s.objects.pod_view`):

* a **batch** pod is judged by the core against the reservation ledger: the ledger is the one the
  secondary scheduler builds (:class:`kalena.k8s.cache.ClusterCache`: Ready nodes, bound pods,
  the agents' fresh reservation reports, the core's ``observed_ledger``), the judgement the core's
  :func:`~kalena.core.placement.evaluate` (the filters and scores of ``schedule``). A node the
  core rejects is in ``FailedNodes`` with the core's reason (``Kalena: Insufficient cpu``); a node
  outside Kalena's view (not Ready, not one of Kalena's nodes, left out of the ledger) is in
  ``FailedAndUnresolvableNodes`` (preempting pods would not change that). Prioritize ranks the
  feasible nodes by the core's score: the order is the core's, spread over 0..10 (the best node
  10, the worst feasible 0, all 10 when they tie), so that ``weight`` alone says how much the
  core's choice counts against kube-scheduler's plugins; a node the core rejects scores 0.
* a **production** pod passes the filter unchanged (the blueprint is a preference, and production
  never waits for Kalena). With a Kuberina blueprint (``--blueprint``), prioritize gives 10 to the
  nodes where the blueprint places a replica of the pod's declaration that is not running there
  yet, 0 elsewhere (:class:`BlueprintPreference`); without one, or for a declaration the
  blueprint does not name, every node scores 0 (no opinion).
* a DaemonSet's pod is passed through as production (its controller chose its node).

Bad input (a body that is not JSON, or not ``ExtenderArgs``) is a 400 whose ``Error`` says what
is wrong; the extender never answers with a traceback. Authentication: an optional bearer token
(:func:`kalena.api.serve.bearer_check`) for callers that can send one, and client certificates
(``--tls-client-ca``) for kube-scheduler, whose extender client sends no headers of its own. The
KubeSchedulerConfiguration marks the extender ``ignorable``, so a dead extender never blocks
scheduling (``docs/kubernetes.md``).

The derived view (the ledger, the image context, what runs where) is rebuilt when the cache has
changed (its ``generation``). kube-scheduler waits for each answer, and under churn every bind is
a change, so with :meth:`Extender.run` (the command) a thread rebuilds it, at most every
``refresh_s``, and calls are answered from the last one built: they never wait for a rebuild
(0.3 s at 5,000 nodes and 10,000 pods: the core's ledger), and the view is that much older than
the cache, about the watch's own delay. Without it (a caller that drives the extender itself),
a call rebuilds a view older than ``refresh_s`` whose cache has changed. A view is rebuilt at
least every ``MAX_AGE_S`` (10 s) even without a change: reports go stale with time alone.
"""

from __future__ import annotations

import dataclasses
import json
import re
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from fastapi import Depends, FastAPI, Request
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from kalena import __version__
from kalena.api.serve import bearer_check
from kalena.core.ledger import Ledger
from kalena.core.ledger.observed import observed_ledger
from kalena.core.model import Tier, WorkloadSpec
from kalena.core.placement import ContextKeeper, PlacementCache, PlacementConfig, evaluate
from kalena.core.verdict import ReasonCode
from kalena.ir import IRError, Problem, read_document
from kalena.ir.document import BlueprintDoc
from kalena.k8s.cache import ClusterCache
from kalena.k8s.objects import declaration_of, node_ready, pod_view

#: ``extenderv1.MaxExtenderPriority``
MAX_PRIORITY = 10
#: The largest body read: without ``nodeCacheCapable`` a request holds every candidate Node
#: object (about 2 KB each: 5,000 nodes are 10 MB).
MAX_BODY_BYTES = 64 << 20
#: The reasons a preemption could resolve (they depend on the pods there, not on the node).
RESOLVABLE = frozenset(
    {
        ReasonCode.INSUFFICIENT_RESOURCE,
        ReasonCode.NAMESPACE_CAP,
        ReasonCode.OWN_ANTI_AFFINITY,
        ReasonCode.PRODUCTION_ANTI_AFFINITY,
        ReasonCode.EXISTING_ANTI_AFFINITY,
        ReasonCode.SPREAD_SKEW,
    }
)
#: A view is rebuilt at least this often, changed or not: a report goes stale with time alone
#: (``kalena.k8s.reports.STALE_AFTER_S``), and a stale one must stop releasing slack.
MAX_AGE_S = 10.0
#: A pod id's unrolling suffix (IR v1 §3.1: ``name-0`` for one replica, ``name-0000``... for more).
UNROLLED = re.compile(r"-\d+$")


class WireError(ValueError):
    """A body that is not kube-scheduler's ``ExtenderArgs`` (the message says what is wrong)."""


@dataclass(frozen=True, slots=True)
class ExtenderArgs:
    """``extenderv1.ExtenderArgs``: the pod, the candidate node names and, when they came (no
    ``nodeCacheCapable``), the Node objects by name."""

    pod: Mapping[str, Any]
    node_names: tuple[str, ...]
    nodes: Mapping[str, Mapping[str, Any]] | None


def parse_args(data: Any) -> ExtenderArgs:
    """``ExtenderArgs`` from decoded JSON; :class:`WireError` naming the key otherwise."""
    if not isinstance(data, Mapping):
        raise WireError(f"the body must be an ExtenderArgs object, got {type(data).__name__}")
    pod = data.get("Pod")
    if not isinstance(pod, Mapping):
        raise WireError("Pod: must be a Pod object" + ("" if "Pod" in data else " (missing)"))
    meta = pod.get("metadata")
    if not isinstance(meta, Mapping) or not isinstance(meta.get("name"), str) or not meta.get("name"):
        raise WireError("Pod.metadata.name: must be a non-empty string")
    for key in ("labels", "annotations"):
        value = meta.get(key)
        if value is not None and not (
            isinstance(value, Mapping) and all(isinstance(v, str) for v in value.values())
        ):
            raise WireError(f"Pod.metadata.{key}: must be an object of strings")
    owners = meta.get("ownerReferences")
    if owners is not None and not (isinstance(owners, list) and all(isinstance(o, Mapping) for o in owners)):
        raise WireError("Pod.metadata.ownerReferences: must be a list of objects")
    for key in ("spec", "status"):
        if pod.get(key) is not None and not isinstance(pod.get(key), Mapping):
            raise WireError(f"Pod.{key}: must be an object")
    names_raw, nodes_raw = data.get("NodeNames"), data.get("Nodes")
    if names_raw is None and nodes_raw is None:
        raise WireError("NodeNames or Nodes: one is needed (NodeNames with nodeCacheCapable)")
    nodes: dict[str, Mapping[str, Any]] | None = None
    if nodes_raw is not None:
        items = nodes_raw.get("items") if isinstance(nodes_raw, Mapping) else None
        if not isinstance(items, list):
            raise WireError("Nodes.items: must be a list of Node objects")
        nodes = {}
        for i, n in enumerate(items):
            name = ((n.get("metadata") if isinstance(n, Mapping) else None) or {}).get("name")
            if not isinstance(name, str) or not name:
                raise WireError(f"Nodes.items[{i}].metadata.name: must be a non-empty string")
            nodes[name] = n
    if names_raw is not None:
        if not isinstance(names_raw, list) or not all(isinstance(n, str) and n for n in names_raw):
            raise WireError("NodeNames: must be a list of node names")
        names = tuple(names_raw)
    else:
        names = tuple(nodes or ())
    return ExtenderArgs(pod, names, nodes)


class BlueprintPreference:
    """Where a Kuberina blueprint places each declaration: ``declaration -> node -> replicas``.

    A pod's declaration is :func:`kalena.k8s.objects.declaration_of`; a blueprint pod id's is the
    id without its unrolling suffix (``web/api-0001`` -> ``web/api``). The preferred nodes of a
    pod are those where the blueprint has more replicas of its declaration than are bound there.
    """

    def __init__(self, placements: Mapping[str, Mapping[str, int]], source: str = "") -> None:
        self.placements = {d: dict(nodes) for d, nodes in placements.items()}
        self.source = source

    @classmethod
    def from_document(cls, doc: BlueprintDoc) -> BlueprintPreference:
        """From a strict IR v1 blueprint (``namespace/pod`` keys); :class:`IRError` otherwise."""
        if doc.legacy:
            hint = "a legacy blueprint: convert it (kalena ir convert --to v1)"
            raise IRError([Problem(doc.file, "apiVersion", hint)])
        out: dict[str, Counter[str]] = {}
        for pod_id, node in doc.solution:
            out.setdefault(UNROLLED.sub("", pod_id), Counter())[node] += 1
        return cls(out, doc.file)

    @classmethod
    def read(cls, path: str | Path) -> BlueprintPreference:
        doc = read_document(path, expect="Blueprint")
        assert isinstance(doc, BlueprintDoc)
        return cls.from_document(doc)

    def preferred(self, declaration: str, bound: Mapping[str, int]) -> set[str]:
        """The nodes with a replica of ``declaration`` still to place (``bound``: node -> running)."""
        want = self.placements.get(declaration) or {}
        return {n for n, k in want.items() if k > bound.get(n, 0)}


@dataclass(frozen=True, slots=True, eq=False)
class _Snapshot:
    """What the answers read, derived from the cache at one generation."""

    generation: int
    ledger: Ledger
    left_out: Mapping[str, str]  # node -> why the ledger leaves it out
    not_ready: frozenset[str]  # nodes the cache holds that are not Ready (or unreadable)
    keeper: ContextKeeper
    placement_cache: PlacementCache
    declarations: Mapping[str, Counter[str]]  # declaration -> node -> bound production pods
    taken_at: float


class Extender:
    """The answers of the extender over a :class:`ClusterCache` (module docstring)."""

    def __init__(
        self,
        cache: ClusterCache,
        *,
        placement: PlacementConfig | None = None,
        blueprint: BlueprintPreference | None = None,
        refresh_s: float = 0.25,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.cache, self.blueprint = cache, blueprint
        self.placement = placement or PlacementConfig()
        self.refresh_s, self.clock = refresh_s, clock
        self._snap: _Snapshot | None = None
        self._lock = threading.Lock()
        self._background = False

    # -- the view -------------------------------------------------------------------------------
    def snapshot(self) -> _Snapshot:
        """The derived view: the last one built by :meth:`run`'s thread, else rebuilt here when
        the cache changed and ``refresh_s`` has passed."""
        with self._lock:
            snap, now = self._snap, self.clock()
            gen = self.cache.generation
            fresh = snap is not None and now - snap.taken_at < MAX_AGE_S
            if fresh and (self._background or snap.generation == gen or now - snap.taken_at < self.refresh_s):
                return snap
            snap = self._snap = self._build(gen, now)
            return snap

    def run(self, stop: threading.Event) -> threading.Thread:
        """A started thread keeping the view fresh until ``stop`` (module docstring)."""
        self.snapshot()  # the first view before the first call

        def refresh() -> None:
            while not stop.is_set():
                self.cache.changed.wait(1.0)
                self.cache.changed.clear()
                gen, snap = self.cache.generation, self._snap
                if snap is None or snap.generation != gen or self.clock() - snap.taken_at > MAX_AGE_S / 2:
                    fresh = self._build(gen, self.clock())
                    with self._lock:
                        self._snap = fresh
                stop.wait(self.refresh_s)  # a burst of events is one rebuild

        self._background = True
        thread = threading.Thread(target=refresh, name="kalena-extender-view", daemon=True)
        thread.start()
        return thread

    def _build(self, generation: int, now: float) -> _Snapshot:
        cache = self.cache
        nodes, residents, _, images = cache.view()
        ledger, left_out = observed_ledger(nodes, residents, cache.reservations(residents))
        keeper = ContextKeeper(ledger.node_names)
        for k, n in enumerate(ledger.node_names):
            for image in images.get(n, []):
                keeper.started(image, k)
        with cache.lock:
            nodes_raw = list(cache.nodes.values())
            pods_raw = list(cache.pods.values()) if self.blueprint is not None else []
        ready = set(ledger.node_names)
        not_ready = frozenset(
            str((n.get("metadata") or {}).get("name") or "")
            for n in nodes_raw
            if not node_ready(n) or str((n.get("metadata") or {}).get("name")) not in ready
        )
        declarations: dict[str, Counter[str]] = {}
        for raw in pods_raw:  # only with a blueprint: what runs where, by declaration
            node = str((raw.get("spec") or {}).get("nodeName") or "")
            phase = str((raw.get("status") or {}).get("phase") or "")
            if node and phase not in ("Succeeded", "Failed"):
                declarations.setdefault(declaration_of(raw), Counter())[node] += 1
        return _Snapshot(generation, ledger, left_out, not_ready, keeper, PlacementCache(), declarations, now)

    # -- classification -------------------------------------------------------------------------
    def _batch_spec(self, pod: Mapping[str, Any]) -> WorkloadSpec | None:
        """The pod as the core's batch workload, or None for production (and DaemonSet pods)."""
        spec = pod_view(pod, infer_batch=self.cache.infer_batch, batch_scheduler=self.cache.name).spec
        if spec.tier is not Tier.BATCH or spec.is_daemonset:
            return None
        return spec

    def _judge(self, spec: WorkloadSpec, snap: _Snapshot) -> tuple[Any, np.ndarray]:
        """The core's evaluation of ``spec`` on the snapshot's ledger, and each node's index there
        marked feasible (a boolean per ledger node)."""
        ledger = snap.ledger
        if spec.id in ledger:  # an older pod of that name is still bound (terminating): judge anew
            spec = dataclasses.replace(spec, id=f"{spec.id}#pending")
        ctx = snap.keeper.context(self.cache.clock(), [spec])
        if snap.left_out:  # as the scheduler: a node the ledger cannot hold takes no new batch
            eligible = np.array([n not in snap.left_out for n in ledger.node_names])
            ctx = dataclasses.replace(ctx, eligible=eligible)
        e = evaluate(spec, ledger, ctx, self.placement, cache=snap.placement_cache)
        ok = np.zeros(ledger.n_nodes, dtype=bool)
        ok[e.feasible] = True
        return e, ok

    def _outside(self, name: str, snap: _Snapshot) -> str:
        if name in snap.left_out:
            return f"Kalena: {snap.left_out[name]}"
        if name in snap.not_ready:
            return "Kalena: the node is not Ready (or its allocatable cannot be read)"
        sel = self.cache.node_selector
        return f"Kalena: not one of Kalena's nodes ({sel})" if sel else "Kalena: a node Kalena has not seen"

    # -- the verbs ------------------------------------------------------------------------------
    def filter(self, args: ExtenderArgs) -> dict[str, Any]:
        """``ExtenderFilterResult`` for ``args`` (module docstring)."""
        spec = self._batch_spec(args.pod)
        passed: list[str] = []
        failed: dict[str, str] = {}
        unresolvable: dict[str, str] = {}
        if spec is None:
            passed = list(args.node_names)
        else:
            snap = self.snapshot()
            index = snap.ledger.node_index
            e, ok = self._judge(spec, snap)
            for name in args.node_names:
                k = index.get(name)
                if k is None or name in snap.left_out:
                    unresolvable[name] = self._outside(name, snap)
                elif ok[k]:
                    passed.append(name)
                else:
                    status = e.statuses[k]
                    text = "Kalena: " + ", ".join(dict.fromkeys(r.phrase() for r in status.reasons))
                    resolvable = any(r.code in RESOLVABLE for r in status.reasons)
                    (failed if resolvable else unresolvable)[name] = text
        out: dict[str, Any] = {
            "NodeNames": passed,
            "FailedNodes": failed,
            "FailedAndUnresolvableNodes": unresolvable,
            "Error": "",
        }
        if args.nodes is not None:  # kube-scheduler reads the passing nodes from here then
            out["Nodes"] = {"items": [args.nodes[n] for n in passed if n in args.nodes]}
        return out

    def prioritize(self, args: ExtenderArgs) -> list[dict[str, Any]]:
        """``HostPriorityList`` for ``args`` (module docstring)."""
        spec = self._batch_spec(args.pod)
        if spec is None:
            return self._production_scores(args)
        snap = self.snapshot()
        index = snap.ledger.node_index
        e, _ = self._judge(spec, snap)
        value = dict(zip(e.feasible.tolist(), e.scores.tolist(), strict=True))
        asked = [value.get(index.get(n, -1)) for n in args.node_names]
        known = [v for v in asked if v is not None]
        lo, hi = (min(known), max(known)) if known else (0.0, 0.0)
        return [{"Host": n, "Score": _spread(v, lo, hi)} for n, v in zip(args.node_names, asked, strict=True)]

    def _production_scores(self, args: ExtenderArgs) -> list[dict[str, Any]]:
        preferred: set[str] = set()
        if self.blueprint is not None:
            decl = declaration_of(args.pod)
            preferred = self.blueprint.preferred(decl, self.snapshot().declarations.get(decl) or {})
        return [{"Host": n, "Score": MAX_PRIORITY if n in preferred else 0} for n in args.node_names]


def _spread(value: float | None, lo: float, hi: float) -> int:
    """A feasible node's core score onto 0..10 (min-max over the nodes asked); 0 if infeasible."""
    if value is None:
        return 0
    if hi - lo <= 1e-12:
        return MAX_PRIORITY
    return round(MAX_PRIORITY * (value - lo) / (hi - lo))


def _bad(message: str, verb: str) -> JSONResponse:
    """A 400 in the wire's own shape: kube-scheduler reads ``Error`` (a filter result's field)."""
    return JSONResponse({"Error": f"{verb}: {message}"}, status_code=400)


def make_app(extender: Extender, token: str | None = None) -> FastAPI:
    """The extender's HTTP API (module docstring)."""
    app = FastAPI(
        title="Kalena extender", version=__version__, docs_url=None, redoc_url=None, openapi_url=None
    )
    auth = [Depends(bearer_check(token))]

    @app.exception_handler(Exception)
    async def failed(request: Request, exc: Exception) -> JSONResponse:
        # kube-scheduler skips an ignorable extender that errs; the wire's Error says why, no traceback
        return JSONResponse({"Error": f"the extender failed: {type(exc).__name__}: {exc}"}, 500)

    @app.get("/healthz")
    def healthz() -> dict[str, Any]:
        return {"ok": True}

    async def body_args(request: Request, verb: str) -> ExtenderArgs | JSONResponse:
        body = await request.body()
        if len(body) > MAX_BODY_BYTES:
            return _bad(f"the body is larger than {MAX_BODY_BYTES} bytes", verb)
        try:
            # the stdlib's C decoder: the caller is kube-scheduler (authenticated off loopback),
            # and a body of thousands of nodes must decode in milliseconds
            data = json.loads(body)
        except (ValueError, RecursionError) as e:
            return _bad(f"the body is not JSON: {' '.join(str(e).split())}", verb)
        try:
            return parse_args(data)
        except WireError as e:
            return _bad(str(e), verb)

    @app.post("/filter", dependencies=auth)
    async def filter_verb(request: Request) -> Any:
        args = await body_args(request, "filter")
        if isinstance(args, JSONResponse):
            return args
        # a JSONResponse of the plain result: FastAPI's encoder would walk every Node object again
        return JSONResponse(await run_in_threadpool(extender.filter, args))

    @app.post("/prioritize", dependencies=auth)
    async def prioritize_verb(request: Request) -> Any:
        args = await body_args(request, "prioritize")
        if isinstance(args, JSONResponse):
            return args
        return JSONResponse(await run_in_threadpool(extender.prioritize, args))

    return app
