"""The cluster daemon over several Docker hosts: one queue, placement with the core scheduler, each
host's agent running what is placed there.

Each host runs its agent (``kalena docker serve --join URL``); after each round the agent reports
to the daemon (``POST /v1/nodes/{node}/report``): its slack view (capacity, production's requests
and reservations, its batch runs with their reservations), the images its engine holds, and the
lifecycle of every job the daemon gave it. The answer is its work: jobs placed there, and cancels.

The daemon (:class:`Cluster`, one :meth:`Cluster.tick` a second) keeps the jobs in its store like an
agent does (the same state, lifecycle, steps, events and queue; node name ``cluster``):

1. **intake**: submissions from its queue (``kalena submit --store``, ``POST /v1/jobs``) are PENDING;
   a cancel ends a pending job at once and is forwarded to the host of a placed one;
2. **mirror**: each placed job follows its host's report, step by step (the agent's lifecycle after
   its own admission is appended to the daemon's, so ``kalena job why`` tells the whole story);
   only the daemon's current attempt is mirrored. A run its host requeues (evicted, or to retry)
   comes back to the daemon's queue (seed 000 §4.4: rescheduled from scratch, anywhere), and
   the host is told to cancel that attempt;
3. **lost hosts**: a host that has not reported for ``lost_after_s`` is gone: its jobs are EVICTED
   (``node-lost``) and requeued, to run elsewhere, at a bounded rate (``LostRequeueConfig``: a
   partition looks like a failure, and its runs are still running); its production is never
   touched (the daemon never writes to a host, its agent does). A host that comes back with a
   run the daemon gave elsewhere since is told to cancel it;
4. **placement**: the pending jobs go through the core's ``schedule`` on a ledger of the hosts that
   report, built from their reports (production as one resident per host holding its requests and
   reservations, each batch run as itself); the image-locality score (weighted heavily, seed 000
   §4.3) sees which hosts hold each image, and what each host's agent bars there (its eviction
   cooldowns, harmful pairings, escalation's deadline: the report's ``context``) feeds the
   core's filters. A placed job is PLACED (``admitted``) with its host,
   and handed to that host's agent with the next answer; the agent starts it as
   ``kalena-<job>.<run>`` under its own cgroup parent, so a restarted daemon or agent finds it.

Why the agent starts the container, not the daemon: the run's knobs must be on its cgroup parent
before it exists (it never runs unthrottled), and one writer per host (the agent) is audited.
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from kalena.agent.actionlog import ActionLog
from kalena.agent.batch import batch_spec, take_submissions
from kalena.agent.dbstate import DbActionLog, DbStateStore, DbSubmissions
from kalena.agent.state import AgentState, JobRecord
from kalena.core.ledger import Ledger, observed_ledger
from kalena.core.lifecycle import (
    IllegalTransition,
    LostRequeueConfig,
    RequeueBucket,
    TaskState,
    TransitionReason,
    take_lost,
)
from kalena.core.model import NodeSpec, Tier, WorkloadSpec
from kalena.core.placement import ContextKeeper, PlacementConfig, SchedulingContext, schedule
from kalena.core.resources import DIMS, Resources
from kalena.store import Store
from kalena.store.db import json_text

CLUSTER = "cluster"
#: A placed job's label on its agent (and so on its container): placed by the cluster daemon.
PLACED_BY = "kalena.naughtian.io/placed-by"
#: And which of the daemon's attempts it is: an agent never takes the same attempt twice.
ATTEMPT = "kalena.naughtian.io/attempt"
LIVE_OR_PLACED = (
    TaskState.PLACED, TaskState.STARTING, TaskState.RUNNING, TaskState.THROTTLED, TaskState.EVICTING,
    TaskState.EVICTED, TaskState.REQUEUED,
)  # fmt: skip


def _res(raw: Mapping[str, Any] | None, default: float) -> Resources:
    vals = {d: (math.inf if v is None else float(v)) for d, v in (raw or {}).items() if d in DIMS}
    return Resources.from_mapping(vals, default=default)


def job_spec(job: JobRecord, attempt_id: str) -> WorkloadSpec:
    """The agent's spec of the run (the same equivalence key, so the cooldowns a host reports
    apply), with its image for locality."""
    return dataclasses.replace(batch_spec(job, attempt_id), image=job.image or "")


def host_context(report: Mapping[str, Any]) -> tuple[dict[str, float], list[str], float | None]:
    """A host's report of what its scheduling context bars (``join.placement_context``):
    cooldowns (key -> until), harmful pairings (keys), escalation's deadline; raises on a
    malformed one."""
    raw = report.get("context") or {}
    cooldowns = {str(k): float(v) for k, v in dict(raw.get("cooldowns") or {}).items()}
    blacklist = [str(k) for k in list(raw.get("blacklist") or [])]
    until = raw.get("ineligible_until")
    if not all(map(math.isfinite, cooldowns.values())) or (until is not None and not math.isfinite(until)):
        raise ValueError("a cooldown or the ineligibility deadline is not a finite time")
    return cooldowns, blacklist, None if until is None else float(until)


class Cluster:
    """The daemon's state and its tick (module docstring) over the store ``db``."""

    def __init__(
        self,
        db: Store,
        *,
        lost_after_s: float = 30.0,
        placement: PlacementConfig | None = None,
        lost_requeue: LostRequeueConfig | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.db, self.lost_after_s, self.clock = db, lost_after_s, clock
        self.lost_requeue = lost_requeue or LostRequeueConfig()
        self._bucket = RequeueBucket.full(self.lost_requeue, clock())  # a restarted daemon starts full
        self._waiting = 0
        self.placement = placement or PlacementConfig()
        self.saver = DbStateStore(db, CLUSTER, clock)
        self.source = DbSubmissions(self.saver)
        self.log: ActionLog = DbActionLog(db, CLUSTER, self.saver)
        self.state = self.saver.load(clock()) or AgentState(CLUSTER)
        self.rng = np.random.default_rng(0)
        self._bad: dict[str, str | None] = {}  # ("report:" or "ledger:") host -> why it is left out

    # -- the tick ---------------------------------------------------------------------------------
    def tick(self) -> dict[str, list[str]]:
        """One pass: intake, mirror, lost hosts, placement, the hosts' work; returns what was placed
        (host -> jobs)."""
        now = self.clock()
        self._intake(now)
        reports = self.db.nodes()
        alive = {h: r for h, r in reports.items() if now - float(r.get("at") or 0) <= self.lost_after_s}
        self._mirror(alive, now)
        self._lost(reports, alive, now)
        # a report the ledger cannot be built from keeps its host's jobs there, but nothing new goes there
        placeable = {h: r for h, r in alive.items() if self._usable(h, r, now)}
        placed = self._place(placeable, now)
        self.saver.save(self.state)
        self._work(reports)
        return placed

    def _usable(self, host: str, report: Mapping[str, Any], now: float) -> bool:
        """A report the ledger can be built from: numbers where numbers go, production within the
        capacity. Another is left out of placement (its host keeps what runs there), said once."""
        try:
            cap = _res(report.get("capacity"), math.inf).array()
            prod = _res(report.get("production_limits"), 0.0).array()
            _res(report.get("production_reservations"), 0.0)
            for b in report.get("batch") or []:
                Resources.from_mapping(b.get("requests") or {})
                str(b["workload"]), str(b["job"]), int(b.get("priority") or 0)
            host_context(report)
            ok, why = bool((prod <= cap * (1 + 1e-9)).all()), "production asks for more than the capacity"
        except (TypeError, ValueError, KeyError, AttributeError) as e:
            ok, why = False, f"malformed: {e}"
        self._say_left_out(f"report:{host}", host, None if ok else why, now)
        return ok

    def _say_left_out(self, key: str, host: str, why: str | None, now: float) -> None:
        """A host left out of placement is said once (and again when the reason changes)."""
        if why is not None and self._bad.get(key) != why:
            self.log.append("warning", now, what=f"report of {host} left out: {why}", node=host)
        self._bad[key] = why

    def _intake(self, now: float) -> None:
        new = self.source.new()
        for p in new.problems:
            self.log.append("rejected-submission", now, problem=p.render())
        outcomes = take_submissions(self.state, self.log, new, now)  # the agent's rule, the same
        for token, name in new.cancels:
            outcomes[token] = self._cancel(name, now)
        if outcomes:
            self.source.commit(outcomes, lambda: self.saver.save(self.state))

    def _cancel(self, name: str, now: float) -> str:
        if name not in self.state.jobs or self.state.task(name).terminal:
            return "rejected: no such job, or it ended"
        job = self.state.jobs[name]
        if job.host is None:  # not on any host: it ends here
            self.state.move(name, TaskState.CANCELLED, now, TransitionReason.CANCELLED)
            self.log.append("cancel", now, job=name, was="pending")
            return "cancelled"
        job.cancel_requested = True  # its host's agent cancels it; the step comes back mirrored
        return f"forwarded to {job.host}"

    def _mirror(self, alive: Mapping[str, Mapping[str, Any]], now: float) -> None:
        for name, job in self.state.jobs.items():
            if job.host is None or self.state.task(name).terminal or job.host not in alive:
                continue
            rep = (alive[job.host].get("jobs") or {}).get(name)
            if rep is None or str(rep.get("attempt", job.run)) != str(job.run):
                continue  # not taken yet (what the host has is an earlier attempt)
            steps = rep.get("steps") or []
            # the agent's own first two steps (submitted, admitted) are the daemon's PENDING and PLACED
            for state, at, reason in steps[2 + job.mirrored :]:
                try:
                    self.state.move(name, TaskState(state), float(at), TransitionReason(reason))
                except (IllegalTransition, ValueError) as e:
                    self.log.append("warning", now, what=f"{name}: step {state}/{reason} not mirrored: {e}")
                job.mirrored += 1
                if self.state.task(name) is TaskState.PENDING:
                    # requeued on its host (evicted, or to retry): it comes back to the cluster's
                    # queue (seed 000 §4.4), the host's cooldown keeps it off that host meanwhile,
                    # and the host is told to let this attempt go
                    self.log.append("requeued", now, job=name, node=job.host, attempt=job.run)
                    job.host, job.mirrored = None, 0
                    break
            job.exit_code = rep.get("exit_code")

    def _lost(self, reports: Mapping[str, Mapping[str, Any]], alive: Mapping[str, Any], now: float) -> None:
        lost = [
            (name, float((reports.get(job.host) or {}).get("at") or 0.0) + self.lost_after_s, job.priority)
            for name, job in self.state.jobs.items()
            if job.host is not None and job.host not in alive and not self.state.task(name).terminal
        ]
        if not lost:
            self._waiting = 0
            return
        # seed 000 §4.4: a partition looks like a failure; the runs come back at a bounded rate
        go, self._bucket = take_lost(self._bucket, lost, self.lost_requeue, now)
        waiting = len(lost) - len(go)
        if waiting and not self._waiting:
            rate = self.lost_requeue
            self.log.append(
                "warning", now,
                what=f"{waiting} runs of lost hosts wait to be requeued ({rate.burst} at once, "
                f"then {rate.rate_per_s:g} a second: a partition must not start them twice)",
            )  # fmt: skip
        self._waiting = waiting
        for name in go:
            job = self.state.jobs[name]
            lost_host = job.host
            state = self.state.task(name)
            if state in (TaskState.REQUEUED,):
                self.state.move(name, TaskState.PENDING, now, TransitionReason.COOLDOWN_OVER)
            elif state is not TaskState.PENDING:
                if state is not TaskState.EVICTED:
                    self.state.move(name, TaskState.EVICTED, now, TransitionReason.NODE_LOST)
                self.state.move(name, TaskState.PENDING, now, TransitionReason.REQUEUED)
            self.state.jobs[name] = dataclasses.replace(job, host=None, mirrored=0, cancel_requested=False)
            self.log.append("node-lost", now, job=name, node=lost_host)

    # -- placement ----------------------------------------------------------------------------
    def ledger(self, alive: Mapping[str, Mapping[str, Any]]) -> tuple[Ledger, ContextKeeper, dict[str, str]]:
        """The hosts that report, as a ledger (the core's ``observed_ledger``): production one
        resident each (its requests, and its reported reservations), each batch run as itself, and
        the runs placed here not yet reported; the images each holds; the hosts left out, and why."""
        names = sorted(alive)
        nodes = [NodeSpec(h, allocatable=_res(alive[h].get("capacity"), math.inf)) for h in names]
        residents: list[tuple[WorkloadSpec, str]] = []
        reservations: dict[str, Resources] = {}
        placed_here = {(j.host, n) for n, j in self.state.jobs.items() if j.host is not None}
        for h in names:
            prod = WorkloadSpec(
                id=f"{h}/production", requests=_res(alive[h].get("production_limits"), 0.0),
                tier=Tier.SERVICE, priority=1000, namespace=h, owner=f"{h}/production",
            )  # fmt: skip
            residents.append((prod, h))
            reservations[prod.id] = _res(alive[h].get("production_reservations"), 0.0)
            for b in alive[h].get("batch") or []:
                spec = WorkloadSpec(
                    id=f"{h}:{b['workload']}", requests=Resources.from_mapping(b.get("requests") or {}),
                    tier=Tier.BATCH, priority=int(b.get("priority") or 0), namespace="batch",
                    owner=f"batch/{b['job']}",
                )  # fmt: skip
                residents.append((spec, h))
                placed_here.discard((h, b["job"]))
        # placed by the daemon, not yet running there: they hold their place too
        for h, name in sorted(placed_here):
            if h in alive and not self.state.task(name).terminal:
                residents.append((job_spec(self.state.jobs[name], f"{h}:pending/{name}"), h))
        ledger, left_out = observed_ledger(nodes, residents, reservations)
        keeper = ContextKeeper(names)
        for k, h in enumerate(names):
            for image in alive[h].get("images") or []:
                keeper.started(str(image), k)
        return ledger, keeper, left_out

    def context(
        self,
        alive: Mapping[str, Mapping[str, Any]],
        keeper: ContextKeeper,
        now: float,
        specs: Sequence[WorkloadSpec],
    ) -> SchedulingContext:
        """The pass's context: the images each host holds (the keeper), and what each host's own
        keeper bars there (its eviction cooldowns, harmful pairings and escalation deadline)."""
        names = sorted(alive)
        cooldowns: dict[tuple[str, int], float] = {}
        blacklist: set[tuple[str, int]] = set()
        eligible = np.ones(len(names), dtype=bool)
        for k, h in enumerate(names):
            cool, black, until = host_context(alive[h])
            cooldowns.update({(key, k): t for key, t in cool.items() if t > now})
            blacklist.update((key, k) for key in black)
            eligible[k] = until is None or until <= now
        return dataclasses.replace(
            keeper.context(now, specs), cooldowns=cooldowns, blacklist=frozenset(blacklist), eligible=eligible
        )

    def _place(self, alive: Mapping[str, Mapping[str, Any]], now: float) -> dict[str, list[str]]:
        pending = [n for n in self.state.names_in(TaskState.PENDING) if self.state.jobs[n].host is None]
        if not pending or not alive:
            for n in pending:
                self._why(self.state.jobs[n], "no host reports to this daemon", ["no-nodes"], now)
            return {}
        ledger, keeper, left_out = self.ledger(alive)
        for h in alive:
            self._say_left_out(f"ledger:{h}", h, left_out.get(h), now)
        names = sorted(alive)
        pods = {f"batch/{n}.{self.state.jobs[n].run + 1}": self.state.jobs[n] for n in pending}
        specs = [job_spec(j, wid) for wid, j in pods.items()]
        ctx = self.context(alive, keeper, now, specs)
        if left_out:  # nothing new goes to a host the ledger cannot hold
            eligible = ctx.eligible if ctx.eligible is not None else np.ones(len(names), dtype=bool)
            ctx = dataclasses.replace(ctx, eligible=eligible & np.array([h not in left_out for h in names]))
        decision = schedule(specs, ledger, ctx, self.placement, self.rng)
        for why in decision.pending:
            codes = list(dict.fromkeys(r.code.value for r in why.reasons))
            self._why(pods[why.workload_id], why.message, codes, now)
        out: dict[str, list[str]] = {}
        for res in ledger.apply_all(decision.placements):
            c = res.commitment
            if not res.accepted:
                continue
            wid = c.workload.id  # type: ignore[union-attr]
            job = pods[wid]
            host = names[c.node]  # type: ignore[union-attr]
            job.run += 1
            job.host, job.mirrored, job.why_pending, job.why_pending_codes = host, 0, None, None
            self.state.move(job.name, TaskState.PLACED, now, TransitionReason.ADMITTED)
            self.log.append(
                "placed", now, job=job.name, node=host, workload=wid,
                has_image=bool(job.image and job.image in (alive[host].get("images") or [])),
            )  # fmt: skip
            out.setdefault(host, []).append(job.name)
        return out

    def _why(self, job: JobRecord, why: str, codes: list[str], now: float) -> None:
        if job.why_pending != why or job.why_pending_codes != codes:
            job.why_pending, job.why_pending_codes = why, codes
            self.log.append("pending", now, job=job.name, why=why, codes=codes)

    # -- the hosts' work ----------------------------------------------------------------------
    def _work(self, reports: Mapping[str, Mapping[str, Any]]) -> None:
        """What each host is to be told with its next answer, in the store (``work``): the jobs
        placed there it has not taken, the cancels, and any run it reports that is not the daemon's
        current attempt there. A cancel names its attempt: the agent ends only that one."""
        rows = []
        for name, job in self.state.jobs.items():
            if job.host is None or self.state.task(name).terminal:
                continue
            had = ((reports.get(job.host) or {}).get("jobs") or {}).get(name)
            if had is None or str(had.get("attempt", job.run)) != str(job.run):
                rows.append((job.host, name, "submit", json_text(_spec_of(job))))
            elif job.cancel_requested:
                rows.append((job.host, name, "cancel", json_text({"attempt": job.run})))
        for host, rep in reports.items():  # a run the daemon no longer has there (requeued, or lost and back)
            for name, r in (rep.get("jobs") or {}).items():
                job = self.state.jobs.get(name)
                live = str(r.get("state")) not in ("succeeded", "failed", "cancelled")
                if job is None or not live or r.get("placed_by") != CLUSTER:
                    continue
                if job.host != host or str(r.get("attempt", job.run)) != str(job.run):
                    rows.append((host, name, "cancel", json_text({"attempt": r.get("attempt", "")})))
        with self.db.transaction() as db:
            db.execute("DELETE FROM work")
            db.executemany("INSERT OR REPLACE INTO work(node, job, kind, spec) VALUES (?, ?, ?, ?)", rows)


def _spec_of(job: JobRecord) -> dict[str, Any]:
    return {
        "name": job.name,
        "command": list(job.command),
        "image": job.image,
        "priority": job.priority,
        "requests": dict(job.requests),
        "limits": None if job.limits is None else dict(job.limits),
        "labels": dict(job.labels or {}),
        "slack_memory": job.slack_memory,
        "attempt": job.run,
    }


def report_into(db: Store, node: str, report: Mapping[str, Any], now: float) -> list[dict[str, Any]]:
    """Record a host's report (its status, images and jobs, in ``nodes``) and return its work."""
    status = {**dict(report.get("status") or {}), "images": list(report.get("images") or [])}
    status["jobs"], status["at"] = dict(report.get("jobs") or {}), now
    status["context"] = report.get("context") or {}
    with db.transaction() as tx:
        tx.execute(
            "INSERT OR REPLACE INTO nodes(node, at, status) VALUES (?, ?, ?)", (node, now, json_text(status))
        )
        rows = tx.execute("SELECT job, kind, spec FROM work WHERE node=? ORDER BY job", (node,)).fetchall()
    return [{"job": j, "kind": k, "spec": json.loads(s)} for j, k, s in rows]
