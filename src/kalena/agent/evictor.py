"""Carrying out eviction plans: SIGTERM, the grace period, SIGKILL; once per eviction, across crashes.

For each victim, in plan order:

1. a batch victim's job moves to EVICTING (the core's lifecycle, reason from the victim's
   cause), an :class:`EvictionRecord` (id, cgroup, pids, SIGKILL deadline = now + grace) is
   added, and the state file saved: write-ahead, before anything is signalled;
2. the ``evict`` line (the core's "why evicted", the whole plan's victim order, the trigger)
   is appended to the action log and fsynced, then the record is marked ``logged``;
3. SIGTERM, or SIGKILL at once when the grace is 0 (acute): a batch run through its runtime
   (the process runtime signals its cgroup, the Docker runtime asks the Engine API, as
   ``docker stop`` does), a production workload to the processes recorded in step 1.

With a :class:`~kalena.agent.ports.Disruptor` (Kubernetes), step 3 and the SIGKILL are asks to
the cluster instead (the Eviction API, with the grace, then with none at the deadline), and the
cluster may refuse one (a PodDisruptionBudget): the refusal is logged once and respected, the
record stays in flight without a deadline, and the ask is made again each round; once accepted,
the grace runs from then. Only the limit-breach override goes past a refusal, and says so.

Each round, :meth:`Evictor.progress` marks records whose cgroup emptied as done (the job moves
to EVICTED: ``exited`` if no SIGKILL was sent, ``grace-expired`` if it was, at the deadline or
at once) and sends SIGKILL to those past their deadline. A workload with an eviction in
flight is never evicted again; after a restart the records say which are in flight, so a
SIGKILLed agent resumes the grace period instead of starting a second eviction. A record
whose log line may be missing (a crash between steps 1 and 2) is logged on recovery unless
the log already has it.
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from kalena.agent.actionlog import ActionLog, why_evicted
from kalena.agent.cgroupfs import CgroupReader
from kalena.agent.ports import StatePort
from kalena.agent.state import AgentState, EvictionRecord, JobRecord
from kalena.agent.writer import CgroupWriter

if TYPE_CHECKING:
    from kalena.agent.ports import Disruptor, Runtime
from kalena.core.enforcement import EvictionCause, Victim
from kalena.core.lifecycle import TaskState, TransitionReason, eviction_reason


class Evictor:
    def __init__(
        self,
        writer: CgroupWriter,
        reader: CgroupReader,
        state: AgentState,
        store: StatePort,
        log: ActionLog,
        max_history: int = 1000,
        runtime: Runtime | None = None,
        disruptor: Disruptor | None = None,
    ) -> None:
        self.runtime = runtime  # None: batch runs are signalled through their cgroup
        self.disruptor = disruptor  # None: evicting is signalling the processes
        self.writer = writer
        self.reader = reader
        self.state = state
        self.store = store
        self.log = log
        self.max_history = max_history

    def busy(self, workload: str) -> bool:
        """An eviction of ``workload`` is in flight (never start a second one)."""
        return any(e.workload == workload for e in self.state.in_flight())

    def start(
        self,
        victims: Sequence[Victim],
        cgroup_of: Mapping[str, str],
        job_of: Mapping[str, str],
        context: Mapping[str, Any],
        now: float,
        on_record: Callable[[EvictionRecord, Victim], None] | None = None,
    ) -> list[tuple[EvictionRecord, Victim]]:
        """Record, log and signal ``victims`` (skipping any already in flight); returns what started.

        ``on_record`` sees each started record before the write-ahead save, so what the caller
        keeps of an eviction (the cooldown, the harmful-pairing history) is saved with the record
        itself: a crash after the signal can never restart a run the cooldown should have held back.
        """
        started: list[tuple[EvictionRecord, Victim]] = []
        for v in victims:
            if self.busy(v.workload) or v.workload not in cgroup_of:
                continue
            job = job_of.get(v.workload)
            if job is not None:  # before its record: an illegal move raises with nothing recorded
                self.state.move(job, TaskState.EVICTING, now, eviction_reason(v.cause))
            self.state.eviction_seq += 1
            cg = cgroup_of[v.workload]
            rec = EvictionRecord(
                id=f"ev-{self.state.eviction_seq}",
                workload=v.workload,
                cgroup=cg,
                tier=v.tier.value,
                cause=v.cause.value,
                started_at=now,
                deadline=now + v.grace_period_s,
                pids=list(self.reader.procs(cg)),
                requeue_until=None if v.requeue is None else v.requeue.cooldown_until,
                job=job,
            )
            self.state.evictions.append(rec)
            started.append((rec, v))
        if not started:
            return started
        if on_record is not None:
            for rec, v in started:
                on_record(rec, v)
        self.store.save(self.state)  # write-ahead: the record exists before any signal
        for rec, v in started:
            self._log(rec, why_evicted(v), context)
        self.store.save(self.state)
        for rec, v in started:
            self.signal(rec, v.grace_period_s, f"evict {rec.id}: {v.cause.value} on {v.dimension}", now)
        self.store.save(self.state)
        return started

    def signal(self, rec: EvictionRecord, grace: float, reason: str, now: float) -> None:
        """Carry out a recorded (and saved) eviction: ask the cluster, or SIGTERM (SIGKILL at once
        when ``grace`` is 0: acute) its run through the runtime, or its recorded processes."""
        if self.disruptor is not None:
            self._disrupt(rec, grace, reason, now)
            if grace <= 0 and rec.refused is None:
                rec.status = "killed"
        elif grace <= 0 and rec.tier == "batch":
            self._kill_batch(rec, reason + " (acute: no grace)")
            rec.status = "killed"
        elif grace <= 0:
            self.writer.signal(rec.cgroup, signal.SIGKILL, reason + " (acute: no grace)", only=rec.pids)
            rec.status = "killed"
        else:
            why = reason + f" (SIGKILL in {grace:g} s)"
            job = self._run_of(rec)
            if job is not None and self.runtime is not None:
                self.runtime.terminate(job, why)
            else:
                self.writer.signal(rec.cgroup, signal.SIGTERM, why)

    def _disrupt(self, rec: EvictionRecord, grace: float, why: str, now: float) -> None:
        """Ask the cluster to evict ``rec``'s workload; keep and log its answer (a refusal once)."""
        assert self.disruptor is not None
        override = rec.cause == EvictionCause.LIMIT_BREACH.value
        was = rec.refused
        out = self.disruptor.evict(rec.workload, grace, override, why)
        said = {"id": rec.id, "workload": rec.workload}
        if out.accepted:
            rec.refused = None
            if was is not None:  # refused before: its grace runs from now, not from the first ask
                rec.deadline = now + grace
                self.log.append("eviction-accepted", now, **said, after_s=now - rec.started_at)
            if out.overridden:
                self.log.append("eviction-override", now, sync=True, **said, detail=out.detail)
        else:
            rec.refused = out.detail
            if was != out.detail:
                self.log.append("eviction-refused", now, sync=True, **said, detail=out.detail)

    def _run_of(self, rec: EvictionRecord) -> JobRecord | None:
        """The job whose current run ``rec`` evicts (``None``: not a job of this agent's, or the
        job moved on to a later run)."""
        job = None if rec.job is None else self.state.jobs.get(rec.job)
        return job if job is not None and job.workload_id == rec.workload else None

    def _kill_batch(self, rec: EvictionRecord, why: str) -> None:
        job = self._run_of(rec)
        if job is not None and self.runtime is not None:
            self.runtime.kill(job, why)  # the runtime ends all of the run: one kill, one record
        else:
            self.writer.kill(rec.cgroup, why)

    def _log(self, rec: EvictionRecord, why: Mapping[str, Any] | None, context: Mapping[str, Any]) -> None:
        self.log.append(
            "evict",
            rec.started_at,
            sync=True,
            id=rec.id,
            workload=rec.workload,
            cgroup=rec.cgroup,
            pids=rec.pids,
            deadline=rec.deadline,
            why=why,
            **context,
        )
        rec.logged = True

    def recover(self) -> None:
        """After a restart: make sure every recorded eviction has its ``evict`` line, exactly once."""
        for rec in self.state.evictions:
            if not rec.logged:
                if not self.log.has_eviction(rec.id):
                    self._log(rec, None, {"recovered": True})
                rec.logged = True
        self.store.save(self.state)

    def _remaining(self, rec: EvictionRecord) -> tuple[int, ...]:
        """The evicted processes still there. A batch run owns its cgroup: all of its members.
        A production cgroup belongs to its owner, who may restart the workload inside it at
        once: only the processes recorded at the eviction count (and are SIGKILLed)."""
        members = self.reader.procs(rec.cgroup)
        if rec.tier == "batch":
            return members
        return tuple(p for p in members if p in set(rec.pids))

    def progress(self, now: float, on_done: Callable[[EvictionRecord], None]) -> list[EvictionRecord]:
        """Finish evictions whose processes are gone; SIGKILL those past their deadline."""
        done = []
        for rec in self.state.in_flight():
            remaining = self._remaining(rec)
            if not remaining:
                self._job_evicted(rec, now)
                rec.status, rec.finished_at = "done", now
                self.log.append(
                    "evicted", now, id=rec.id, workload=rec.workload, after_s=now - rec.started_at
                )
                on_done(rec)
                done.append(rec)
            elif rec.refused is not None and self.disruptor is not None:  # ask again: it may be allowed now
                grace = max(0.0, rec.deadline - rec.started_at) if rec.status == "terminating" else 0.0
                self._disrupt(rec, grace, f"evict {rec.id}: asked again", now)
                if rec.refused is None and grace <= 0:
                    rec.status = "killed"
            elif rec.status == "terminating" and now >= rec.deadline:
                why = f"evict {rec.id}: grace period over"
                if self.disruptor is not None:  # accepted before: the budget was charged then
                    self.disruptor.kill(rec.workload, why)
                elif rec.tier == "batch":
                    self._kill_batch(rec, why)
                else:
                    self.writer.signal(rec.cgroup, signal.SIGKILL, why, only=rec.pids)
                rec.status = "killed"
                self.log.append("sigkill", now, id=rec.id, workload=rec.workload)
        finished = [e for e in self.state.evictions if e.status == "done"]
        if len(finished) > self.max_history:
            drop = {id(e) for e in finished[: len(finished) - self.max_history]}
            self.state.evictions = [e for e in self.state.evictions if id(e) not in drop]
        return done

    def _job_evicted(self, rec: EvictionRecord, now: float) -> None:
        """The evicted run's job goes EVICTED (its current run only: a job's older runs are gone)."""
        job = self._run_of(rec)
        if job is None:
            return
        killed = rec.status == "killed"  # SIGKILLed at its deadline, or at once (no grace)
        reason = TransitionReason.GRACE_EXPIRED if killed else TransitionReason.EXITED
        self.state.move(job.name, TaskState.EVICTED, now, reason)

    def next_deadline(self) -> float | None:
        # a refused eviction has no deadline (it is asked again each round)
        flying = self.state.in_flight()
        deadlines = [e.deadline for e in flying if e.status == "terminating" and e.refused is None]
        return min(deadlines, default=None)
