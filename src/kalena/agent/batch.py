"""Batch runs through their lifecycle, in ledger commitments (the process runtime's bookkeeping).

    queued --PlaceBatch accepted--> running --cgroup empty--> done | failed (RemoveBatch)
    running --eviction (Eviction)--> evicting --cgroup empty--> queued again after the cooldown

* intake: submissions from the inbox are recorded in the state file before their files are
  deleted (never lost, never taken twice);
* admission: queued jobs in submission order while the node is slack-eligible and the pair
  (job, node) is not blacklisted (harmful pairing); the ledger's ``PlaceBatch`` is the fit check,
  and a rejection is the job's "why pending" (rendered from the ledger's reasons). The run's
  knobs are written before its process starts, so it never runs unthrottled;
* each run is a new workload id ``batch/<job>.<run>`` in cgroup ``batch/<job>.<run>``: an
  eviction is of one run, and a requeued job is a new run.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kalena.agent import knobs
from kalena.agent.actionlog import ActionLog, reason_json
from kalena.agent.cgroupfs import CgroupReader
from kalena.agent.config import AgentConfig
from kalena.agent.runtime import ProcessRuntime, read_inbox, take
from kalena.agent.state import AgentState, EvictionRecord, JobRecord, StateStore
from kalena.agent.writer import CgroupWriter, Knob, KnobWrite
from kalena.core.enforcement import EvictionEvent, blacklisted_pairs
from kalena.core.ledger import Ledger, PlaceBatch, RemovalCause, RemoveBatch
from kalena.core.model import Tier, WorkloadSpec
from kalena.core.resources import Resources
from kalena.core.verdict import render_reasons


def batch_spec(job: JobRecord) -> WorkloadSpec:
    """The current run of ``job`` as the core sees it (owner = the job: its equivalence key)."""
    return WorkloadSpec(
        id=job.workload_id or "",
        requests=Resources.from_mapping(job.requests),
        limits=None if job.limits is None else Resources.from_mapping(job.limits),
        tier=Tier.BATCH,
        priority=job.priority,
        namespace="batch",
        owner=f"batch/{job.name}",
        slack_memory=job.slack_memory,
    )


class BatchRuns:
    def __init__(
        self,
        state: AgentState,
        store: StateStore,
        log: ActionLog,
        writer: CgroupWriter,
        reader: CgroupReader,
        runtime: ProcessRuntime,
        config: AgentConfig,
        inbox: Path | None,
    ) -> None:
        self.state, self.store, self.log = state, store, log
        self.writer, self.reader, self.runtime = writer, reader, runtime
        self.config, self.inbox = config, inbox

    def running(self) -> dict[str, JobRecord]:
        return {j.workload_id: j for j in self.state.jobs.values() if j.status == "running" and j.workload_id}

    # -- intake ---------------------------------------------------------------------------------
    def intake(self, now: float) -> None:
        if self.inbox is None:
            return
        subs, problems = read_inbox(self.inbox)
        for p in problems:
            self.log.append("rejected-submission", now, problem=p.render())
        if not subs:
            return
        for path, sub in subs:
            old = self.state.jobs.get(sub.name)
            if old is not None and old.status not in ("done", "failed"):
                problem = f"{path}: name: job {sub.name!r} is still {old.status} (value: {sub.name!r})"
                self.log.append("rejected-submission", now, problem=problem)
            else:
                self.state.jobs[sub.name] = sub.job(now)
                self.log.append("submit", now, job=sub.name, priority=sub.priority, requests=sub.requests)
        self.store.save(self.state)  # recorded before the files go: never lost, never twice
        for path, _ in subs:
            take(path)

    # -- ledger rebuild -------------------------------------------------------------------------
    def replace(self, ledger: Ledger, now: float) -> None:
        """Put the running runs back into a freshly built ledger (start, declaration reload)."""
        for job in sorted(self.running().values(), key=lambda j: (j.started_at or 0.0, j.name)):
            res = ledger.apply(PlaceBatch(batch_spec(job), 0, ledger.node_epoch(0)))
            if not res.accepted:
                self._unplaceable(job, res.reasons, now)

    def _unplaceable(self, job: JobRecord, reasons: Sequence[Any], now: float) -> None:
        """A run the rebuilt ledger cannot hold (the node shrank under it): stop it, requeue it."""
        assert job.cgroup is not None and job.workload_id is not None
        self.state.eviction_seq += 1
        rec = EvictionRecord(
            id=f"ev-{self.state.eviction_seq}",
            workload=job.workload_id,
            cgroup=job.cgroup,
            tier="batch",
            cause="readmission-rejected",
            started_at=now,
            deadline=now,
            pids=list(self.reader.procs(job.cgroup)),
            status="killed",
            logged=True,
            requeue_until=now,
            job=job.name,
        )
        self.state.evictions.append(rec)
        job.status = "evicting"
        self.store.save(self.state)
        reasons_json = [reason_json(r) for r in reasons]
        self.log.append(
            "evict", now, sync=True, id=rec.id, workload=rec.workload, cause=rec.cause, reasons=reasons_json
        )
        self.writer.kill(job.cgroup, f"{rec.id}: {job.workload_id} no longer fits the node")

    # -- completion -----------------------------------------------------------------------------
    def reap(self, ledger: Ledger, now: float) -> tuple[str, ...]:
        """Runs whose cgroup emptied on their own: ``RemoveBatch`` (finished or failed)."""
        out = []
        for wid, job in self.running().items():
            done, code = self.runtime.finished(job)
            if not done:
                continue
            ok = code is None or code == 0
            cause = RemovalCause.FINISHED if ok else RemovalCause.FAILED
            ledger.apply(RemoveBatch(wid, 0, ledger.node_epoch(0), cause))
            self.runtime.cleanup(job.cgroup or "", f"{wid} finished")
            job.status, job.exit_code, job.pid = ("done" if ok else "failed"), code, None
            self.log.append("finish", now, workload=wid, exit_code=code, status=job.status)
            out.append(wid)
        return tuple(out)

    def evicted(self, rec: EvictionRecord) -> None:
        """An evicted run's cgroup emptied: clean it up and queue the job after its cooldown."""
        if rec.job is None:
            return
        self.runtime.release(rec.workload)
        self.runtime.cleanup(rec.cgroup, f"{rec.id} done")
        job = self.state.jobs.get(rec.job)
        if job is not None and job.workload_id == rec.workload:
            job.status = "queued"
            job.not_before = rec.requeue_until if rec.requeue_until is not None else (rec.finished_at or 0.0)
            job.workload_id = job.cgroup = None
            job.pid = None

    # -- admission ------------------------------------------------------------------------------
    def admit(self, ledger: Ledger, now: float) -> tuple[str, ...]:
        queued = sorted(
            (j for j in self.state.jobs.values() if j.status == "queued" and j.not_before <= now),
            key=lambda j: (j.submitted_at, j.name),
        )
        if not queued:
            return ()
        until = self.state.slack_ineligible_until
        if until is not None and now < until:
            for j in queued:
                self._pending(j, f"node slack-ineligible until {until:.0f} (escalation)", now)
            return ()
        history = [EvictionEvent(k, n, t) for k, n, t in self.state.eviction_history]
        blacklist = blacklisted_pairs(history, self.config.pairing, now)
        out = []
        for job in queued:
            if (f"batch/{job.name}", self.state.node) in blacklist:
                self._pending(job, "harmful pairing: evicted from this node too often", now)
                continue
            job.run += 1
            job.workload_id = job.cgroup = f"batch/{job.name}.{job.run}"
            res = ledger.apply(PlaceBatch(batch_spec(job), 0, ledger.node_epoch(0)))
            if not res.accepted:
                job.run -= 1
                job.workload_id = job.cgroup = None
                self._pending(job, render_reasons(1, 0, res.reasons), now)
                continue
            job.status, job.started_at, job.why_pending = "running", now, None
            self.store.save(self.state)  # the run exists before its process does
            if self._start(ledger, job, now):
                out.append(job.workload_id)
        return tuple(out)

    def _start(self, ledger: Ledger, job: JobRecord, now: float) -> bool:
        assert job.cgroup is not None and job.workload_id is not None
        quota = max(job.requests.get("cpu", 0.0), self.config.throttle.min_quota_cores)
        self.writer.create(job.cgroup, f"admit {job.workload_id}")
        self.writer.apply(
            [
                KnobWrite(
                    job.cgroup, Knob.CPU_QUOTA, quota, f"admit {job.workload_id}: start at its request"
                ),
                KnobWrite(job.cgroup, Knob.CPU_WEIGHT, self.config.throttle.batch_weight, "batch weight"),
                *knobs.memory_writes(job),
            ]
        )
        try:
            job.pid = self.runtime.start(job, f"admit {job.workload_id}")
        except (OSError, ValueError) as e:
            ledger.apply(RemoveBatch(job.workload_id, 0, ledger.node_epoch(0), RemovalCause.FAILED))
            self.runtime.cleanup(job.cgroup, f"{job.workload_id} failed to start")
            job.status, job.why_pending = "failed", f"failed to start: {e}"
            self.log.append("finish", now, workload=job.workload_id, status="failed", error=str(e))
            return False
        self.log.append("admit", now, workload=job.workload_id, pid=job.pid, priority=job.priority)
        return True

    def _pending(self, job: JobRecord, why: str, now: float) -> None:
        if job.why_pending != why:
            job.why_pending = why
            self.log.append("pending", now, job=job.name, why=why)
