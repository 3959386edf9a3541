"""The API as Kalena's Kubernetes components see it: nodes, pods, ``NodeReservation`` reports and
namespaces (whose labels a ``namespaceSelector`` reads).

One cache for the secondary scheduler and the scheduler extender (they need the same view and
the same ledger, so it is written once): a list of each, then watches from that list's version;
a watch that expires (HTTP 410) or a broken stream (the apiserver restarted) is a fresh list.
``generation`` counts the lists and watch events, so a reader can keep what it derived from
the tables until the next one.

The view (:meth:`ClusterCache.view`): the Ready, schedulable nodes (narrowed by a label selector
to Kalena's), every bound pod that has not finished (pods of Kalena's ``schedulerName`` as
batch, bound or not: that is the opt-in), the pending pods of that name, and the images each
node holds; Kubernetes' pod rules are resolved to the pods they select, their namespace scopes
by the namespaces' labels (:mod:`kalena.k8s.affinity`). Each object is read once: every event
brings a new object, so what was read of an object still in the tables holds. The ledger
(:meth:`ClusterCache.ledger`) is the core's ``observed_ledger`` over the view with the fresh
reports' reservations. A node, pod or report left out is said once through ``log``, and again
when the reason changes.
"""

from __future__ import annotations

import contextlib
import gc
import json
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from kubernetes import client as kclient
from kubernetes import watch as kwatch
from kubernetes.client.exceptions import ApiException

from kalena.core.ledger import Ledger
from kalena.core.ledger.observed import observed_ledger
from kalena.core.messages import MessageError, ReservationReport
from kalena.core.model import NodeSpec, WorkloadSpec
from kalena.core.resources import Resources
from kalena.deployability.model import PodAffinityTerm
from kalena.k8s.affinity import bind_batch, resolve_pending
from kalena.k8s.objects import PodView, node_ready, node_spec, pod_view
from kalena.k8s.reports import GROUP, PLURAL, STALE_AFTER_S, VERSION, read_report, reservations_from

SCHEDULER_NAME = "kalena"
WATCHED = ("nodes", "pods", "reports", "namespaces")


@dataclass(frozen=True, slots=True, eq=False)
class _NodeSeen:
    raw: Mapping[str, Any]
    spec: NodeSpec
    problems: list[str]
    ready: bool
    images: list[str]


View = tuple[list[NodeSpec], list[tuple[WorkloadSpec, str]], list[PodView], dict[str, list[str]]]


class ClusterCache:
    """Nodes, pods and reports from the API, kept by list and watch (module docstring)."""

    def __init__(
        self,
        core: kclient.CoreV1Api,
        *,
        name: str = SCHEDULER_NAME,
        node_selector: str | None = None,
        infer_batch: bool = False,
        clock: Callable[[], float] = time.time,
        log: Callable[[str], None] | None = None,
        stale_after_s: float = STALE_AFTER_S,
    ) -> None:
        self.core, self.name, self.node_selector = core, name, node_selector
        self.log = log or (lambda _line: None)
        self.infer_batch, self.clock = infer_batch, clock
        self.nodes: dict[str, dict[str, Any]] = {}
        self.pods: dict[str, dict[str, Any]] = {}  # uid -> pod
        self.reports: dict[str, dict[str, Any]] = {}  # node -> its NodeReservation
        self.namespaces: dict[str, dict[str, Any]] = {}  # name -> namespace (its labels scope rules)
        self.custom = kclient.CustomObjectsApi(core.api_client)
        self.stale_after_s = stale_after_s
        self.versions: dict[str, str] = {}  # "nodes" / "pods" -> the list's resourceVersion
        self.problems: dict[str, str] = {}  # node or pod -> the problem last said of it
        self.generation = 0  # bumped by every list and watch event
        # what view() read of each object, by the object itself: a table's objects are replaced,
        # never changed, on every event, so the same object reads the same (id() with an `is` check)
        self._node_memo: dict[int, _NodeSeen] = {}
        self._pod_memo: dict[int, tuple[dict[str, Any], PodView]] = {}
        self._report_memo: dict[int, tuple[Mapping[str, Any], ReservationReport | MessageError]] = {}
        self.changed = threading.Event()
        self.lock = threading.Lock()
        self._watches: dict[str, kwatch.Watch] = {}  # each kind's open watch (closed at stop)
        self._expired: set[str] = set()  # kinds whose watch found its version expired (410)

    # -- list and watch ---------------------------------------------------------------------------
    def _lister(self, what: str) -> tuple[Callable[..., Any], dict[str, Any]]:
        if what == "nodes":
            return self.core.list_node, {"label_selector": self.node_selector}
        if what == "pods":
            return self.core.list_pod_for_all_namespaces, {}
        if what == "namespaces":
            return self.core.list_namespace, {}
        return self.custom.list_cluster_custom_object, {"group": GROUP, "version": VERSION, "plural": PLURAL}

    def _list(self, what: str) -> None:
        """List ``what``: from the apiserver's watch cache (``resourceVersion=0``: no read of etcd,
        far cheaper for 10,000 objects, possibly a moment behind, which the watch from its
        version then catches up on), except just after a watch found its version expired (410),
        when the list is a quorum read (``resourceVersion`` unset): a watch cache that is itself
        behind would hand back the expired version again (client-go's reflector does the same)."""
        fn, kw = self._lister(what)
        if what not in self._expired:
            kw = {**kw, "resource_version": "0"}
        try:
            data = read_json(fn(_preload_content=False, **kw))
        except ApiException as e:
            if what == "reports" and e.status == 404:  # the CRD is not installed
                why = "the NodeReservation resource is not installed: requests only"
            elif what == "namespaces" and e.status == 403:  # RBAC of a version before it was asked
                why = "may not list namespaces: a namespaceSelector sees every namespace without labels"
            else:
                raise
            self._say_problems(what, [why])
            data = {"items": [], "metadata": {}}  # listed again every 30 s (watch)
        items = {(object_key(what, o)): o for o in data.get("items") or []}
        with self.lock:
            setattr(self, what, items)
            self.versions[what] = str((data.get("metadata") or {}).get("resourceVersion") or "")
            self._expired.discard(what)
            self.generation += 1
        self.changed.set()

    def sync(self) -> None:
        """List nodes, pods and the agents' reports afresh, all at once: the apiserver encodes one
        list while this process reads another (at 5,000 nodes and 10,000 pods, seconds each)."""
        with ThreadPoolExecutor(len(WATCHED), thread_name_prefix="kalena-list") as pool:
            for f in [pool.submit(self._list, what) for what in WATCHED]:
                f.result()

    def apply_event(self, what: str, kind: str, obj: Mapping[str, Any]) -> None:
        """One watch event (ADDED, MODIFIED, DELETED, BOOKMARK) into the cache."""
        rv = str((obj.get("metadata") or {}).get("resourceVersion") or "")
        with self.lock:
            if kind != "BOOKMARK":
                table: dict[str, dict[str, Any]] = getattr(self, what)
                if kind == "DELETED":
                    table.pop(object_key(what, obj), None)
                else:
                    table[object_key(what, obj)] = dict(obj)
                self.generation += 1
            if rv:
                self.versions[what] = rv
        self.changed.set()

    def watch(self, what: str, stop: threading.Event, timeout_s: int = 60) -> None:
        """Follow ``what`` until ``stop``: a list, then watches from its version; an expired
        version (410) or a broken stream means a fresh list."""
        while not stop.is_set():
            try:
                if not self.versions.get(what):
                    self._list(what)
                if not self.versions.get(what):  # still none (no reports resource, say): wait, list again
                    stop.wait(30.0)
                    continue
                w = kwatch.Watch()
                self._watches[what] = w
                fn, kw = self._lister(what)
                # deserialize=False: the plain JSON object, not the client's models (we read dicts)
                for ev in w.stream(
                    fn, resource_version=self.versions[what], timeout_seconds=timeout_s,
                    allow_watch_bookmarks=True, deserialize=False, **kw,
                ):  # fmt: skip
                    if stop.is_set():
                        w.stop()
                        break
                    raw = ev.get("object") or {}
                    if ev.get("type") == "ERROR":
                        if raw.get("code") == 410:
                            self._expire(what)  # too old: list again
                        break
                    self.apply_event(what, str(ev.get("type")), raw)
            except ApiException as e:
                if e.status == 410:
                    self._expire(what)
                else:
                    stop.wait(1.0)  # the apiserver restarts, say: try again
            except KeyError:
                # the client library fails on a watch's ERROR event under deserialize=False (it
                # reads a key only its own decoding adds); that error is the 410 of a restarted
                # apiserver, whose watch cache begins after our version: list again, or the
                # same watch fails forever
                self._expire(what)
                stop.wait(1.0)
            except Exception:  # a broken stream (connection reset, the apiserver went away)
                stop.wait(1.0)

    def _expire(self, what: str) -> None:
        """``what``'s version is too old to watch from: the next list is a quorum read."""
        self._expired.add(what)
        self.versions[what] = ""

    def watch_all(self, stop: threading.Event) -> list[threading.Thread]:
        """A started thread per watched kind, each following it until ``stop``."""
        threads = [
            threading.Thread(target=self.watch, args=(w, stop), name=f"kalena-watch-{w}", daemon=True)
            for w in WATCHED
        ]
        threads.append(
            threading.Thread(target=self._close_on, args=(stop,), name="kalena-watch-stop", daemon=True)
        )
        for t in threads:
            t.start()
        return threads

    def _close_on(self, stop: threading.Event) -> None:
        """At ``stop``, close the open watch streams: a watch waits for its next event (up to its
        timeout) before it could see the stop, so its response is closed under it."""
        stop.wait()
        for w in list(self._watches.values()):
            w.stop()
            resp = getattr(w, "_resp", None)  # the client keeps the open response there
            if resp is not None:
                with contextlib.suppress(Exception):
                    resp.close()

    # -- the view and the ledger ------------------------------------------------------------------
    def view(self) -> View:
        """The nodes (sorted by name), the bound pods as ``(spec, node)``, the pending pods of
        Kalena's name and each node's images (module docstring)."""
        with gc_paused():  # at start-up it reads every object: one burst of acyclic objects
            return self._view()

    def _view(self) -> View:
        with self.lock:
            nodes_raw = list(self.nodes.values())
            pods_raw = list(self.pods.values())
            ns_labels = {
                name: (ns.get("metadata") or {}).get("labels") or {} for name, ns in self.namespaces.items()
            }
        nodes: list[NodeSpec] = []
        images: dict[str, list[str]] = {}
        node_memo: dict[int, _NodeSeen] = {}
        for raw in nodes_raw:
            seen = self._node_memo.get(id(raw))
            if seen is None or seen.raw is not raw:
                spec, problems = node_spec(raw)
                imgs = [
                    n for i in (raw.get("status") or {}).get("images") or [] for n in i.get("names") or []
                ]
                seen = _NodeSeen(raw, spec, problems, node_ready(raw), imgs)
            node_memo[id(raw)] = seen
            self._say_problems(seen.spec.name, seen.problems)
            if seen.ready and not seen.problems:
                nodes.append(seen.spec)
                images[seen.spec.name] = seen.images
        names = {n.name for n in nodes}
        residents: list[tuple[WorkloadSpec, str]] = []
        pending: list[PodView] = []
        anti: dict[str, tuple[PodAffinityTerm, ...]] = {}
        pod_memo: dict[int, tuple[dict[str, Any], PodView]] = {}
        for raw in pods_raw:
            got = self._pod_memo.get(id(raw))
            if got is not None and got[0] is raw:
                v = got[1]
            else:
                v = pod_view(raw, infer_batch=self.infer_batch, batch_scheduler=self.name)
            pod_memo[id(raw)] = (raw, v)  # (as read: a pass reads no pod twice)
            if v.finished:
                continue
            if v.node:
                if v.node in names:
                    residents.append((v.spec, v.node))
                    if v.anti_affinity:
                        anti[v.spec.id] = v.anti_affinity
            elif v.scheduler == self.name and not (raw.get("metadata") or {}).get("deletionTimestamp"):
                pending.append(v)
        self._node_memo, self._pod_memo = node_memo, pod_memo  # only what the tables still hold
        # Kubernetes' rules, resolved against this pass's pods and nodes (kalena.k8s.affinity)
        pending = resolve_pending(pending, residents, nodes, ns_labels)
        if anti:  # production's required anti-affinity binds the batch too
            residents = bind_batch(residents, [v.spec for v in pending], anti, ns_labels)
        return sorted(nodes, key=lambda n: n.name), residents, pending, images

    def _say_problems(self, who: str, problems: list[str]) -> None:
        text = "; ".join(problems)
        if problems and self.problems.get(who) != text:  # said once, and again when it changes
            self.problems[who] = text
            self.log(f"{who} left out: {text}")
        elif not problems:
            self.problems.pop(who, None)

    def ledger(self) -> tuple[Ledger, dict[str, str]]:
        """The core's ledger of the view, and the nodes it leaves out (name -> why)."""
        nodes, residents, _, _ = self.view()
        return observed_ledger(nodes, residents, self.reservations(residents))

    def reservations(self, residents: list[tuple[WorkloadSpec, str]]) -> dict[str, Resources]:
        """The fresh reports' reservations of the pods bound where they say; a report left out
        is said once."""
        with self.lock:
            reports = dict(self.reports)
        memo, used = self._report_memo, {}

        def read(obj: Mapping[str, Any]) -> ReservationReport:  # each object decoded once
            seen = memo.get(id(obj))
            if seen is None or seen[0] is not obj:
                try:
                    seen = (obj, read_report(obj))
                except MessageError as e:
                    seen = (obj, e)
            used[id(obj)] = seen
            if isinstance(seen[1], MessageError):
                raise seen[1]
            return seen[1]

        got, left = reservations_from(
            reports, {w.id: n for w, n in residents}, self.clock(), self.stale_after_s, read
        )
        self._report_memo = used
        for n in reports:
            self._say_problems(f"report of {n}", [left[n]] if n in left else [])
        return got


def object_key(what: str, obj: Mapping[str, Any]) -> str:
    """A pod's UID (a pod made again under its name is another pod), another object's name."""
    meta = obj.get("metadata") or {}
    return str(meta.get("uid") if what == "pods" else meta.get("name"))


def read_json(resp: Any) -> dict[str, Any]:
    """The body of a ``_preload_content=False`` answer (plain JSON: no model objects to build)."""
    data = resp.data
    with gc_paused():
        return dict(json.loads(data))


_gc_lock = threading.Lock()
_gc_holders = 0  # gc_paused() blocks open (the lists decode on three threads at once)
_gc_was_enabled = False


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """The cyclic garbage collector off while a burst of objects without cycles is made (a list
    of 10,000 pods decoded, the view read from it). Each allocation burst otherwise sets off
    collections that walk every object alive, the cache's tables included: a list of 10,000 pods
    (20 MB of JSON) decoded in 1.2 to 2.0 s with it on, 0.5 s with it off (docs/benchmarks.md).
    Such objects are freed by their reference counts whatever the collector does, so nothing is
    kept longer."""
    global _gc_holders, _gc_was_enabled
    with _gc_lock:
        if _gc_holders == 0:
            _gc_was_enabled = gc.isenabled()
            gc.disable()
        _gc_holders += 1
    try:
        yield
    finally:
        with _gc_lock:
            _gc_holders -= 1
            if _gc_holders == 0 and _gc_was_enabled:
                gc.enable()
