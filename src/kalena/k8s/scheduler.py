"""Kalena's secondary scheduler for Kubernetes (``kalena k8s scheduler``).

Pods with ``spec.schedulerName: kalena`` are Kalena's: batch by that opt-in, whatever their tier
label says. Every pass:

1. **the view**: the nodes (Ready and schedulable; a label selector may narrow them to Kalena's),
   every bound pod that has not finished and the node agents' reservation reports
   (``NodeReservation``, :mod:`kalena.k8s.reports`), from the scheduler's cache of the API (a
   list, then watches; a watch that expires, HTTP 410, is a fresh list);
2. **the ledger**: :func:`kalena.core.ledger.observed_ledger` over them (production as the
   blueprint, each bound batch pod as itself, the fresh reports' reservations in place of the
   requests; a node the ledger cannot hold is left out of placement and said once);
3. **placement**: the core's :func:`~kalena.core.placement.schedule` for the pending pods, with
   image locality from each node's ``status.images``, highest priority first and ``chunk`` pods
   at a time on the same ledger (a first chunk of 50, so binding begins early; each chunk's
   binds are sent while the next one is placed);
4. **binding**: ``pods/binding`` with the pod's UID as precondition, ``binders`` binds in flight
   (with the watches, they fit the API client's connection pool). A 409 (the pod was bound by
   someone else, or deleted and made again under its name) is optimistic concurrency doing its
   job: the pod is read again and the next pass decides from the fresh state. Any other refusal
   ends the pass's binding (the pods not yet sent stay pending: the next pass decides them), and
   the cache says a pod bound only once the apiserver did. A bound pod gets a ``Scheduled``
   event (the apiserver sets ``PodScheduled=True``); a pod that stays pending gets
   ``FailedScheduling`` with the core's why-pending text and ``PodScheduled=False``
   (``Unschedulable``), once per distinct reason. Events and conditions are sent beside the
   passes (a pass never waits for them), a transient failure tried again for about 30 s;
   :meth:`Scheduler.flush` waits for them, and :meth:`Scheduler.run` does at its end.

Required node affinity, pod affinity and anti-affinity (the pod's own, and a bound pod's over
it) and hard topology spread are resolved against the pass's pods and nodes
(:mod:`kalena.k8s.affinity`) and kept by the core's filters.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from datetime import UTC, datetime

import numpy as np
import urllib3
from kubernetes import client as kclient
from kubernetes.client.exceptions import ApiException

from kalena.core.ledger.observed import observed_ledger
from kalena.core.placement import ContextKeeper, PlacementConfig, pending_sort_key, schedule
from kalena.k8s.cache import SCHEDULER_NAME, WATCHED, ClusterCache, object_key, read_json
from kalena.k8s.objects import PodView
from kalena.k8s.reports import STALE_AFTER_S

COMPONENT = "kalena-scheduler"
BINDERS = 24  # binds in flight at most: a bind waits on etcd's write, so many overlap (bench/)
CHUNK = 500  # pods per call of the core's schedule: the binds of one go out while the next is placed
FIRST_CHUNK = 50  # the first call's: binding begins as soon as a few pods are placed
TELLERS = 4  # events and conditions in flight at most
#: The API client's connections the command gives the scheduler: its binders, tellers and watches
POOL = BINDERS + TELLERS + 4
RETRY_S = (0.5, 1.0, 2.0, 4.0, 8.0, 15.0)  # between an event's tries: 30 s, a restarted apiserver's time


def _transient(e: BaseException) -> bool:
    """Whether a failed call may succeed later: the apiserver away, throttling, its own error."""
    if isinstance(e, ApiException):
        return e.status == 429 or (e.status or 0) >= 500
    return isinstance(e, urllib3.exceptions.HTTPError | OSError)


def _drain(resp: urllib3.BaseHTTPResponse) -> None:
    """Read an answer to its end (unparsed: nothing of it is needed) and give its connection back:
    an unread one stays out of the pool, so the next call opened a new TLS connection."""
    resp.drain_conn()
    resp.release_conn()


def _short(e: BaseException) -> str:
    if isinstance(e, ApiException):
        return f"{e.status} {e.reason}"
    return f"{type(e).__name__}: {e}"


def _now_iso() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class PassResult:
    """What one pass did: pods bound (pod -> node), binds refused by the apiserver (409), pods
    left pending (pod -> why)."""

    bound: dict[str, str] = field(default_factory=dict)
    conflicts: list[str] = field(default_factory=list)
    pending: dict[str, str] = field(default_factory=dict)


class _Binds:
    """The binds of one pass, ``binders`` in flight: each is decided alone (bound, or 409/404:
    read again), and the cache says bound only after the apiserver did. Any other failure sets
    ``failed``: the binds not yet sent are not (the apiserver is away, say: those pods stay
    pending for the next pass), and the first such failure is raised once the sent ones are done."""

    def __init__(self, sched: Scheduler, out: PassResult) -> None:
        self.sched, self.out = sched, out
        self.failed = threading.Event()
        self.sent: list[Future[None]] = []
        self.guard = threading.Lock()  # over out

    def send(self, v: PodView, node: str) -> None:
        self.sent.append(self.sched._pool("binders").submit(self._one, v, node))

    def _one(self, v: PodView, node: str) -> None:
        if self.failed.is_set():
            return
        try:
            self._decide(v, node)
        except BaseException:
            self.failed.set()
            raise

    def _decide(self, v: PodView, node: str) -> None:
        try:
            self.sched._bind(v, node)
        except ApiException as e:
            if e.status not in (409, 404):
                raise
            # bound elsewhere, or gone, or another pod under the name now
            with self.guard:
                self.out.conflicts.append(v.spec.id)
            self.sched._refresh(v)
            return
        with self.guard:
            self.out.bound[v.spec.id] = node
        self.sched._bound(v, node)

    def wait(self, raise_first: bool = False) -> None:
        wait(self.sent)
        errors = [e for f in self.sent if (e := f.exception()) is not None]
        if errors and raise_first:
            raise errors[0]


class Scheduler(ClusterCache):
    """The passes over the cache of the API (module docstring; the cache is
    :class:`~kalena.k8s.cache.ClusterCache`)."""

    def __init__(
        self,
        core: kclient.CoreV1Api,
        *,
        name: str = SCHEDULER_NAME,
        node_selector: str | None = None,
        placement: PlacementConfig | None = None,
        infer_batch: bool = False,
        clock: Callable[[], float] = time.time,
        log: Callable[[str], None] | None = None,
        stale_after_s: float = STALE_AFTER_S,
        binders: int | None = None,
        chunk: int = CHUNK,
    ) -> None:
        super().__init__(
            core, name=name, node_selector=node_selector, infer_batch=infer_batch, clock=clock, log=log,
            stale_after_s=stale_after_s,
        )  # fmt: skip
        self.placement = placement or PlacementConfig()
        self.rng = np.random.default_rng(0)
        self.said: dict[str, str] = {}  # pod uid -> the last why-pending it was told (under lock)
        # binds in flight, and events / conditions in flight beside them; together with the watches
        # they fit the client's connection pool (more would open a TLS connection per call)
        room = int(getattr(core.api_client.configuration, "connection_pool_maxsize", 0) or 10) - len(WATCHED)
        self.tellers = max(1, min(TELLERS, room // 3))
        self.binders = binders if binders is not None else max(1, min(BINDERS, room - self.tellers))
        self.chunk = max(1, chunk)
        self._synced_at = -float("inf")  # time.monotonic() of the last sync
        self._pools: dict[str, ThreadPoolExecutor] = {}
        self._pools_lock = threading.Lock()
        self._told: set[Future[None]] = set()  # what _tell sent and is not done

    def sync(self) -> None:
        super().sync()
        self._synced_at = time.monotonic()

    # -- one pass -------------------------------------------------------------------------------
    def pass_once(self) -> PassResult:
        """One pass over the cache (module docstring)."""
        out = PassResult()
        nodes, residents, pending, images = self.view()
        if not pending:
            return out
        views = {v.spec.id: v for v in pending}
        if not nodes:
            for v in pending:
                self._pending(v, "0/0 nodes are available: no Ready node for Kalena", out)
            return out
        ledger, left_out = observed_ledger(nodes, residents, self.reservations(residents))
        for n in ledger.node_names:
            self._say_problems(f"{n} (ledger)", [left_out[n]] if n in left_out else [])
        keeper = ContextKeeper(ledger.node_names)
        for k, n in enumerate(ledger.node_names):
            for image in images.get(n, []):
                keeper.started(image, k)
        eligible = np.array([n not in left_out for n in ledger.node_names]) if left_out else None
        specs = sorted((v.spec for v in pending), key=pending_sort_key)
        binds = _Binds(self, out)
        try:
            # a chunk's binds are in flight while the next chunk is placed on the same ledger
            k = 0
            while k < len(specs):
                if binds.failed.is_set():  # the apiserver refused one: place no more this pass
                    break
                size = self.chunk if k else min(self.chunk, FIRST_CHUNK)
                part, k = specs[k : k + size], k + size
                ctx = keeper.context(self.clock(), part)
                if eligible is not None:
                    ctx = dataclasses.replace(ctx, eligible=eligible)
                decision = schedule(part, ledger, ctx, self.placement, self.rng)
                for why in decision.pending:
                    self._pending(views[why.workload_id], why.message, out)
                for res in ledger.apply_all(decision.placements):
                    c = res.commitment
                    if res.accepted:
                        binds.send(views[c.workload.id], ledger.node_names[c.node])  # type: ignore[union-attr]
        except BaseException:
            binds.failed.set()
            binds.wait()
            raise
        binds.wait(raise_first=True)
        return out

    # -- the calls ----------------------------------------------------------------------------
    def _bind(self, v: PodView, node: str) -> None:
        body = {
            "apiVersion": "v1", "kind": "Binding",
            "metadata": {"name": v.name, "namespace": v.namespace, "uid": v.uid},  # the UID precondition
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }  # fmt: skip
        _drain(self.core.create_namespaced_pod_binding(v.name, v.namespace, body, _preload_content=False))

    def _bound(self, v: PodView, node: str) -> None:
        with self.lock:  # bound now: the next pass counts it there even before its watch event
            pod = self.pods.get(v.uid)
            if pod is not None:
                pod = {**pod, "spec": {**(pod.get("spec") or {}), "nodeName": node}}
                self.pods[v.uid] = pod
            self.said.pop(v.uid, None)
        text = f"Successfully assigned {v.spec.id} to {node}"
        self._tell(lambda: self._event(v, "Scheduled", text, "Normal"), f"Scheduled event of {v.spec.id}")

    def _refresh(self, v: PodView) -> None:
        """Read the pod again after a refused bind: the next pass decides from what is."""
        try:
            raw = read_json(self.core.read_namespaced_pod(v.name, v.namespace, _preload_content=False))
        except ApiException as e:
            if e.status == 404:
                with self.lock:
                    self.pods.pop(v.uid, None)
                return
            raise
        with self.lock:
            if raw.get("metadata", {}).get("uid") != v.uid:
                self.pods.pop(v.uid, None)
            self.pods[object_key("pods", raw)] = raw

    def _pending(self, v: PodView, why: str, out: PassResult) -> None:
        out.pending[v.spec.id] = why
        with self.lock:
            if self.said.get(v.uid) == why:
                return
            self.said[v.uid] = why

        def tell() -> None:
            self._event(v, "FailedScheduling", why, "Warning")
            cond = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": why,
                    "lastTransitionTime": _now_iso()}  # fmt: skip
            try:
                _drain(self.core.patch_namespaced_pod_status(
                    v.name, v.namespace, {"status": {"conditions": [cond]}}, _preload_content=False
                ))  # fmt: skip
            except ApiException as e:
                if e.status not in (404, 409):
                    raise

        def untold() -> None:  # not told after every retry: the next pass tells it again
            with self.lock:
                if self.said.get(v.uid) == why:
                    del self.said[v.uid]

        self._tell(tell, f"FailedScheduling of {v.spec.id}", untold)

    def _event(self, v: PodView, reason: str, message: str, kind: str) -> None:
        now = _now_iso()
        body = {
            "metadata": {"generateName": f"{v.name}.", "namespace": v.namespace},
            "involvedObject": {"apiVersion": "v1", "kind": "Pod", "name": v.name, "namespace": v.namespace,
                               "uid": v.uid},
            "reason": reason, "message": message[:1024], "type": kind,
            "source": {"component": COMPONENT}, "reportingComponent": COMPONENT,
            "firstTimestamp": now, "lastTimestamp": now, "count": 1,
        }  # fmt: skip
        try:
            _drain(self.core.create_namespaced_event(v.namespace, body, _preload_content=False))
        except ApiException as e:
            if e.status not in (403, 404, 409):  # an event is worth less than the pass
                raise

    # -- the events and conditions, beside the passes -----------------------------------------
    def _pool(self, which: str) -> ThreadPoolExecutor:
        with self._pools_lock:
            pool = self._pools.get(which)
            if pool is None:
                workers = self.binders if which == "binders" else self.tellers
                pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix=f"kalena-{which}")
                self._pools[which] = pool
            return pool

    def _tell(self, call: Callable[[], None], what: str, lost: Callable[[], None] | None = None) -> None:
        """``call`` (an event, a condition) beside the pass: a pass never waits for what it says.
        A transient failure (the apiserver away, 429, 5xx) is tried again for a while; one that
        stays is said through ``log`` (and ``lost`` runs)."""

        def attempt() -> None:
            for wait_s in (*RETRY_S, None):
                try:
                    call()
                    return
                except Exception as e:
                    if wait_s is None or not _transient(e):
                        self.log(f"{what} not told: {_short(e)}")
                        if lost is not None:
                            lost()
                        return
                    time.sleep(wait_s)

        f = self._pool("tellers").submit(attempt)
        with self._pools_lock:
            self._told.add(f)
        f.add_done_callback(self._done)

    def _done(self, f: Future[None]) -> None:
        with self._pools_lock:
            self._told.discard(f)

    def flush(self, timeout_s: float = 30.0) -> bool:
        """Wait until what the passes said so far is told (events, conditions); whether it all was."""
        with self._pools_lock:
            told = list(self._told)
        _, not_done = wait(told, timeout=timeout_s)
        return not not_done

    def close(self, timeout_s: float = 30.0) -> None:
        """Flush (up to ``timeout_s``), then end the threads of the calls."""
        if not self.flush(timeout_s):
            with self._pools_lock:
                self.log(f"{len(self._told)} events or conditions not told at stop")
        with self._pools_lock:
            pools, self._pools = self._pools, {}
        for pool in pools.values():
            pool.shutdown(wait=False, cancel_futures=True)

    # -- the loop -------------------------------------------------------------------------------
    def run(self, stop: threading.Event, every_s: float = 1.0) -> None:
        """Watch nodes and pods, and pass when something changed (at most every ``every_s``)."""
        # the command lists once to check the apiserver: just after, the watches go on from that
        # list (the changes since included) rather than everything be listed again
        if time.monotonic() - self._synced_at > every_s:
            self.sync()
        threads = self.watch_all(stop)
        said = ""
        try:
            while not stop.is_set():
                self.changed.wait(every_s)
                self.changed.clear()
                try:
                    self.pass_once()
                    said = ""
                except (ApiException, urllib3.exceptions.HTTPError, OSError) as e:
                    if _short(e) != said:  # said once while it lasts
                        said = _short(e)
                        self.log(f"a pass failed: {said}; the next one tries again")
                    stop.wait(every_s)  # the apiserver is away: the next pass tries again
        finally:
            self.close()
            for t in threads:
                t.join(timeout=5)
