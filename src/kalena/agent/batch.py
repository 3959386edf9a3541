"""Batch runs through the core's lifecycle, in ledger commitments (the process runtime's bookkeeping).

Every job is one task of the state's ``Lifecycle`` (``kalena.core.lifecycle``), its id the job's
name; each change below is a move of the core's table, so an illegal one raises::

    submit        -> PENDING (submitted)
    PlaceBatch    PENDING -> PLACED (admitted) -> STARTING (start-requested), saved, then started:
                  -> RUNNING (started) once the runtime returns its pid (exec succeeded), or
                  -> FAILED (start-failed); a start the runtime still has under way after its
                  short wait (a slow container start) stays STARTING: each later admit asks
                  again first, -> RUNNING (started) | FAILED (start-failed) once it answered
    reap          LIVE -> SUCCEEDED (finished, exit 0) | FAILED (exit-error), RemoveBatch; a run
                  the kernel's OOM killer ended (its cgroup counts an ``oom_kill``): LIVE ->
                  EVICTED (killed-oom) -> PENDING (requeued), as the simulator's kernel kill;
                  first, after a crash, STARTING -> RUNNING (started) for a start it cut short,
                  its process up; a run the runtime says never started is started now
    throttled     RUNNING <-> THROTTLED (throttled | unthrottled): quota below its cpu request
    evictor       LIVE -> EVICTING (the victim's cause) -> EVICTED (exited | grace-expired)
    evicted       EVICTED -> PENDING (requeued), as in the simulator: its cooldown on this node is
                  the ``ContextKeeper``'s, so it waits with the core's "eviction-cooldown" why
    admit         PENDING -> PLACED for each ``PlaceBatch`` of the core's ``schedule`` (a job
                  restored REQUEUED from an old state file: -> PENDING (cooldown-over) first)
    rebuild       LIVE -> EVICTING (readmission-rejected): the rebuilt ledger cannot hold it
    observe       (an enforce-only agent) a run the cluster placed and started: submitted and
                  PENDING -> PLACED -> STARTING -> RUNNING at once (admitted, start-requested,
                  started: its scheduler admitted it, its runtime started it); evicted, it ends
                  EVICTED -> FAILED (given-up): its next run is its controller's (a new pod)

(LIVE: STARTING, RUNNING, THROTTLED.) A job's name may be submitted again once it ended; its
old task and history are forgotten (``Lifecycle.forget``).

* intake: submissions from the source (the inbox folder, the store's queue) are taken together
  with the save of the state holding them (never lost, never taken twice); a cancel request
  moves the job to CANCELLED (from any state not ended) and its run, if any, is killed once that
  is saved (:meth:`BatchRuns.teardown`, also after a crash);
* admission: the PENDING jobs (their next runs as batch ``WorkloadSpec``s) go through the core's
  ``schedule`` on the one-node ledger, with the context of the core's ``ContextKeeper``: the
  core's priority order and every filter, so slack-ineligibility after an escalation and a
  harmful pairing (the job evicted from this node too often) are the ``SlackEligible`` and
  ``HarmfulPairing`` filters. Its ``PlaceBatch``es are applied with ``ledger.apply_all``; a job
  left pending keeps the core's "why pending" (message and reason codes, logged when they
  change). The run's knobs are written before its process starts, so it never runs unthrottled;
* the keeper (eviction history, cooldowns, the slack-ineligible deadline) is fed by the loop
  through :meth:`BatchRuns.evicted_from_node` and :meth:`BatchRuns.escalated` and kept in the
  state file as its JSON (``AgentState.placement_context``);
* each run is a new workload id ``batch/<job>.<run>`` in cgroup ``batch/<job>.<run>``: an
  eviction is of one run, and a requeued job is a new run.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from kalena.agent import knobs
from kalena.agent.actionlog import ActionLog, reason_json
from kalena.agent.cgroupfs import CgroupReader
from kalena.agent.config import AgentConfig
from kalena.agent.layout import BATCH_PARENT
from kalena.agent.ports import PlacedRun, Runtime, StatePort, SubmissionSource
from kalena.agent.runtime import Intake
from kalena.agent.state import LIVE, AgentState, EvictionRecord, JobRecord
from kalena.agent.writer import CgroupWriter, Knob, KnobWrite
from kalena.core.enforcement import EvictionCause, start_quota
from kalena.core.ledger import Ledger, PlaceBatch, RemovalCause, RemoveBatch
from kalena.core.lifecycle import TaskState, TransitionReason, eviction_reason
from kalena.core.model import Tier, WorkloadSpec
from kalena.core.placement import ContextKeeper, schedule
from kalena.core.resources import Resources
from kalena.core.verdict import Reason, render_reasons

TERMINAL_STATES = tuple(t for t in TaskState if t.terminal)
#: A placed run's labels: the cluster's identity of it, and its equivalence class (its controller).
UID_LABEL = "kalena.naughtian.io/uid"
OWNER_LABEL = "kalena.naughtian.io/owner"


def batch_spec(job: JobRecord, workload_id: str | None = None) -> WorkloadSpec:
    """The current run of ``job`` (or the run ``workload_id``) as the core sees it (owner, its
    equivalence key: the job, or a placed run's controller)."""
    return WorkloadSpec(
        id=workload_id or job.workload_id or "",
        requests=Resources.from_mapping(job.requests),
        limits=None if job.limits is None else Resources.from_mapping(job.limits),
        tier=Tier.BATCH,
        priority=job.priority,
        namespace=BATCH_PARENT,
        owner=(job.labels or {}).get(OWNER_LABEL) or f"{BATCH_PARENT}/{job.name}",
        slack_memory=job.slack_memory,
    )


def take_submissions(state: AgentState, log: ActionLog, new: Intake, now: float) -> dict[object, str]:
    """Each valid submission of ``new`` becomes a PENDING job of ``state``, unless a job of its name
    has not ended (then it is rejected and logged); returns what became of each token. The agent
    and the cluster daemon take their queues through this one rule; the lines go with the save
    that takes the tokens (a crash keeps both or neither: no line lost, none written twice)."""
    outcomes: dict[object, str] = {}
    for token, where, sub in new.submissions:
        if sub.name in state.jobs and not state.task(sub.name).terminal:
            still = state.status(sub.name)
            problem = f"{where}: name: job {sub.name!r} is still {still} (value: {sub.name!r})"
            log.append("rejected-submission", now, with_save=True, problem=problem)
            outcomes[token] = f"rejected: still {still}"
            continue
        job = sub.job(now)
        job.submission = token if isinstance(token, int) else None
        state.submit(job, now)  # a finished job of that name is forgotten
        log.append("submit", now, with_save=True, job=sub.name, priority=sub.priority, requests=sub.requests)
        outcomes[token] = "accepted"
    return outcomes


class BatchRuns:
    def __init__(
        self,
        state: AgentState,
        store: StatePort,
        log: ActionLog,
        writer: CgroupWriter,
        reader: CgroupReader,
        runtime: Runtime,
        config: AgentConfig,
        submissions: SubmissionSource | None,
        signal: Callable[[EvictionRecord, float, str, float], None],
        rng: np.random.Generator | None = None,
    ) -> None:
        self.signal = signal  # the evictor's: carry out a saved eviction record (one way for all)
        self.store, self.log = store, log
        self.writer, self.reader, self.runtime = writer, reader, runtime
        self.config, self.submissions = config, submissions
        # schedule takes a generator; relaxed randomisation never applies to one node, so any seed does
        self.rng = rng if rng is not None else np.random.default_rng(0)
        self.state = state  # builds the keeper from it (the setter)

    # -- the scheduling context -----------------------------------------------------------------
    @property
    def state(self) -> AgentState:
        return self._state

    @state.setter
    def state(self, state: AgentState) -> None:
        """Take ``state`` (at start: the loaded one) and its keeper, folding legacy fields into it."""
        self._state = state
        raw, pairing = state.placement_context, self.config.policy.pairing
        self.keeper = (
            ContextKeeper([state.node], pairing) if raw is None else ContextKeeper.from_json(raw, pairing)
        )
        self._fold_legacy()
        self._sync()

    def _fold_legacy(self) -> None:
        """Move ``eviction_history`` / ``slack_ineligible_until`` (a file from before the keeper, or
        a loop still writing them) into the keeper; both are empty afterwards (one copy)."""
        st = self._state
        for key, node, t in st.eviction_history:
            if node == st.node:  # an event of another node name never applied to this one
                self.keeper.evicted(key, 0, t)
        st.eviction_history = []
        if st.slack_ineligible_until is not None:
            self.keeper.ineligible(0, st.slack_ineligible_until)
            st.slack_ineligible_until = None

    def node_of(self, ledger: Ledger) -> int:
        """This node's index in ``ledger``, by its name (the ledger may hold more than this node)."""
        return ledger.node_index[self._state.node]

    def _sync(self) -> None:
        self._state.placement_context = self.keeper.to_json()

    def evicted_from_node(self, key: str, now: float, cooldown_until: float | None) -> None:
        """A run of equivalence class ``key`` was evicted from this node at ``now`` (it may not
        return before ``cooldown_until``; ``None``: no cooldown): the harmful-pairing history."""
        self.keeper.evicted(key, 0, now, cooldown_until)
        self._sync()

    def escalated(self, until: float) -> None:
        """Escalation made this node slack-ineligible until ``until``; saved at once (write-ahead
        of the drain that follows)."""
        self.keeper.ineligible(0, until)
        self._sync()
        self.store.save(self._state)

    def running(self) -> dict[str, JobRecord]:
        """Workload id -> job, for every run whose process is (or may be) on the node (LIVE)."""
        jobs = (self.state.jobs[n] for n in self.state.names_in(*LIVE))
        return {j.workload_id: j for j in jobs if j.workload_id}

    def throttled(self, workloads_below_request: set[str], now: float) -> tuple[str, ...]:
        """RUNNING -> THROTTLED for the runs in ``workloads_below_request`` (their round quota is
        below their cpu request), THROTTLED -> RUNNING for the others; returns the runs moved.
        A STARTING run is left alone (the table: it is started first, then throttled)."""
        moved = []
        for wid, job in self.running().items():
            state, below = self.state.task(job.name), wid in workloads_below_request
            if state is TaskState.RUNNING and below:
                self.state.move(job.name, TaskState.THROTTLED, now, TransitionReason.THROTTLED)
            elif state is TaskState.THROTTLED and not below:
                self.state.move(job.name, TaskState.RUNNING, now, TransitionReason.UNTHROTTLED)
            else:
                continue
            moved.append(wid)
        return tuple(moved)

    # -- intake ---------------------------------------------------------------------------------
    def intake(self, ledger: Ledger, now: float) -> None:
        """Take what the submission source has waiting: new jobs (PENDING), cancel requests. Taken
        together with the save of the state holding them (never lost, never taken twice); a run a
        cancel ends is killed only after that save (write-ahead), by :meth:`teardown`."""
        if self.submissions is None:
            return
        new = self.submissions.new()
        for p in new.problems:
            self.log.append("rejected-submission", now, problem=p.render())
        if not new.submissions and not new.cancels:
            return
        outcomes = take_submissions(self.state, self.log, new, now)
        for token, name in new.cancels:
            outcomes[token] = self.cancel(ledger, name, now)
        self.submissions.commit(outcomes, lambda: self.store.save(self.state))
        self.teardown(now)

    def cancel(self, ledger: Ledger, name: str, now: float) -> str:
        """The job ends CANCELLED (the core's table: from any state that has not ended); a run it
        has on the node leaves the ledger now and is killed by :meth:`teardown` once this is saved.
        Returns what became of the request."""
        if name not in self.state.jobs:
            return "rejected: no such job"
        state = self.state.task(name)
        if state.terminal:
            return f"rejected: already {self.state.status(name)}"
        job = self.state.jobs[name]
        wid = job.workload_id
        if wid is not None and wid in ledger.batch_ids():
            node = self.node_of(ledger)
            ledger.apply(RemoveBatch(wid, node, ledger.node_epoch(node), RemovalCause.DELETED))
        self.state.move(name, TaskState.CANCELLED, now, TransitionReason.CANCELLED)
        job.why_pending = job.why_pending_codes = None
        self.log.append("cancel", now, with_save=True, job=name, workload=wid, was=state.value)
        return "cancelled"

    def teardown(self, now: float) -> None:
        """Kill and clean up the runs of cancelled jobs (a cancelled job whose ``workload_id`` is
        still set: its run may be on the node, also right after a crash), then forget the run."""
        done = False
        for name in self.state.names_in(TaskState.CANCELLED):
            job = self.state.jobs[name]
            if job.workload_id is None or job.cgroup is None:
                continue
            why = f"cancel {name}: stop {job.workload_id}"
            self.runtime.kill(job, why)
            self.runtime.release(job.workload_id)
            self.runtime.cleanup(job.cgroup, why)
            job.workload_id = job.cgroup = job.pid = None
            done = True
        if done:
            self.store.save(self.state)

    # -- ledger rebuild -------------------------------------------------------------------------
    def replace(self, ledger: Ledger, now: float) -> None:
        """Put the running runs back into a freshly built ledger (start, declaration reload): the
        highest priority first (then the oldest), so what no longer fits is the lowest priority."""
        runs = self.running().values()
        for job in sorted(runs, key=lambda j: (-j.priority, j.started_at or 0.0, j.name)):
            res = ledger.apply(
                PlaceBatch(batch_spec(job), self.node_of(ledger), ledger.node_epoch(self.node_of(ledger)))
            )
            if not res.accepted:
                self._unplaceable(job, res.reasons, now)

    def _unplaceable(self, job: JobRecord, reasons: Sequence[Any], now: float) -> None:
        """A run the rebuilt ledger cannot hold (the node shrank under it, or production arrived):
        stop it as any eviction, its stop signal first and SIGKILL after the grace period (the
        evictor keeps the deadline), and requeue it."""
        assert job.cgroup is not None and job.workload_id is not None
        cause = EvictionCause.READMISSION_REJECTED
        grace = self.config.policy.eviction.grace_period_s
        self.state.move(job.name, TaskState.EVICTING, now, eviction_reason(cause))
        self.state.eviction_seq += 1
        rec = EvictionRecord(
            id=f"ev-{self.state.eviction_seq}",
            workload=job.workload_id,
            cgroup=job.cgroup,
            tier="batch",
            cause=cause.value,
            started_at=now,
            deadline=now + grace,
            pids=list(self.reader.procs(job.cgroup)),
            status="terminating",  # the evictor's signal says "killed" when it kills at once
            logged=True,
            requeue_until=now,
            job=job.name,
        )
        self.state.evictions.append(rec)
        self.store.save(self.state)  # write-ahead, as the evictor's: recorded before the signal
        reasons_json = [reason_json(r) for r in reasons]
        said = {"workload": rec.workload, "cause": rec.cause, "reasons": reasons_json}
        self.log.append(
            "evict", now, sync=True, id=rec.id, workload=rec.workload, cause=rec.cause, reasons=reasons_json,
            deadline=rec.deadline, why=said,
        )  # fmt: skip
        self.signal(rec, grace, f"{rec.id}: {job.workload_id} no longer fits the node", now)

    # -- completion -----------------------------------------------------------------------------
    def reap(self, ledger: Ledger, now: float) -> tuple[str, ...]:
        """Runs whose cgroup emptied on their own: ``RemoveBatch`` (finished or failed)."""
        out = []
        self.resume(ledger, now)
        for wid, job in self.running().items():
            done, code = self.runtime.finished(job)
            if not done:
                continue
            ok = code is None or code == 0
            oom = not ok and self._oom_killed(job)
            if ok:
                self.state.move(job.name, TaskState.SUCCEEDED, now, TransitionReason.FINISHED)
            elif oom:  # the kernel's kill: its work is lost, the job is requeued (no cooldown)
                self.state.move(job.name, TaskState.EVICTED, now, TransitionReason.KILLED_OOM)
            else:
                self.state.move(job.name, TaskState.FAILED, now, TransitionReason.EXIT_ERROR)
            cause = RemovalCause.FINISHED if ok else RemovalCause.FAILED
            ledger.apply(
                RemoveBatch(wid, self.node_of(ledger), ledger.node_epoch(self.node_of(ledger)), cause)
            )
            job.exit_code, job.pid = code, None
            # the end's line goes in the save that records the end: a crash after that save
            # must not leave a run ended with no word of how (the restart has no run to reap)
            self.log.append(
                "oom-killed" if oom else "finish",
                now,
                with_save=True,
                workload=wid,
                exit_code=code,
                status=self.state.status(job.name),
            )
            # write-ahead: the run's end is saved before its container (which holds the exit
            # code) is removed; a crash in between must not turn a failed run into a finished one
            self.store.save(self.state)
            self.runtime.cleanup(job.cgroup or "", f"{wid} finished")
            if oom:
                self._requeue(job, now)
            out.append(wid)
        return tuple(out)

    def resume(self, ledger: Ledger, now: float) -> None:
        """Runs saved STARTING whose start a crash cut short (the agent calls this at start, before
        anything else can move them, and each round): one the runtime says never started is
        started now; one that did is RUNNING, with the admit line its start may have lost. A start
        the runtime has under way is left to :meth:`admit`."""
        for wid, job in self.running().items():
            if self.state.task(job.name) is not TaskState.STARTING:
                continue
            up = self.runtime.started(job)
            if up == "starting":
                continue
            if up is False:
                self._start(ledger, job, now)
                continue
            self.state.move(job.name, TaskState.RUNNING, now, TransitionReason.STARTED)
            prio = job.priority
            self.log.append("admit", now, workload=wid, pid=job.pid, priority=prio, resumed=True)

    def _oom_killed(self, job: JobRecord) -> bool:
        """The kernel's OOM killer ended a process of the run (v2 ``memory.events`` or v1
        ``memory.oom_control`` count an ``oom_kill``; kernels without the counter never say so)."""
        said = self.runtime.oom_killed(job)
        if said is not None:
            return said
        events = None if job.cgroup is None else self.reader.memory_events(job.cgroup)
        return bool(events) and events.get("oom_kill", 0) > 0

    def evicted(self, rec: EvictionRecord) -> None:
        """An evicted run's cgroup emptied (the evictor moved it to EVICTED): clean it up and
        requeue the job: PENDING at once, the keeper's cooldown keeps it off this node meanwhile."""
        if rec.job is None:
            return
        self.runtime.release(rec.workload)
        self.runtime.cleanup(rec.cgroup, f"{rec.id} done")
        job = self.state.jobs.get(rec.job)
        if job is not None and job.workload_id == rec.workload:
            assert rec.finished_at is not None
            self._requeue(job, rec.finished_at)

    def _requeue(self, job: JobRecord, at: float) -> None:
        """EVICTED -> PENDING (requeued): the run is over, the job's next run is a new workload. An
        enforce-only agent never starts a run: the job ends (given-up), its controller makes the next."""
        if not self.config.admit:
            self.state.move(job.name, TaskState.FAILED, at, TransitionReason.GIVEN_UP)
            self.log.append("requeue", at, job=job.name, by="the cluster: its controller makes the next run")
            job.cgroup = job.pid = None
            return
        self.state.move(job.name, TaskState.PENDING, at, TransitionReason.REQUEUED)
        job.workload_id = job.cgroup = None
        job.pid = None

    # -- runs placed by a cluster scheduler (an enforce-only agent) -------------------------------
    def observe(self, ledger: Ledger, placed: Sequence[PlacedRun], now: float) -> tuple[str, ...]:
        """Take the runs the cluster placed here that are not jobs yet (module docstring), highest
        priority first; one the ledger cannot hold (it was placed on a staler view) is evicted as
        a rebuilt ledger's would be. Ended jobs the source no longer lists are forgotten beyond
        ``max_history``. Returns the runs taken."""
        live = self.running()
        node = self.node_of(ledger)
        out = []
        for p in sorted(placed, key=lambda p: (-p.priority, p.started_at, p.workload_id)):
            if p.workload_id in live:
                continue
            name = p.workload_id
            if name in self.state.jobs and not self.state.task(name).terminal:
                continue  # being evicted (or cut short by a crash): the evictor's until it ends
            job = JobRecord(
                name=name,
                command=[],
                requests=dict(p.requests),
                limits=None if p.limits is None else dict(p.limits),
                priority=p.priority,
                submitted_at=p.started_at,
                grace_s=p.grace_s,
                labels={UID_LABEL: p.uid, OWNER_LABEL: p.owner},
            )
            self.state.submit(job, now)
            job.run += 1
            job.workload_id, job.cgroup, job.started_at = name, p.cgroup, p.started_at
            for to, why in (
                (TaskState.PLACED, TransitionReason.ADMITTED),
                (TaskState.STARTING, TransitionReason.START_REQUESTED),
                (TaskState.RUNNING, TransitionReason.STARTED),
            ):
                self.state.move(name, to, now, why)
            res = ledger.apply(PlaceBatch(batch_spec(job), node, ledger.node_epoch(node)))
            fits = res.accepted
            self.log.append("adopt", now, workload=name, cgroup=p.cgroup, priority=p.priority, fits=fits)
            if not res.accepted:
                self._unplaceable(job, res.reasons, now)
                continue
            self.writer.apply(
                [
                    KnobWrite(
                        job.cgroup, Knob.CPU_WEIGHT, self.config.policy.throttle.batch_weight, "batch weight"
                    ),
                    *knobs.memory_writes(job),
                ]
            )
            out.append(name)
        listed = {p.workload_id for p in placed}
        ended = [n for n in self.state.names_in(*TERMINAL_STATES) if n not in listed]
        self.state.forget(ended[: max(0, len(ended) - self.config.max_history)])
        if out:
            self.store.save(self.state)
        return tuple(out)

    # -- admission ------------------------------------------------------------------------------
    def admit(self, ledger: Ledger, now: float) -> tuple[str, ...]:
        """One scheduling pass over the PENDING jobs (module docstring), after the answers of the
        starts left under way; returns the runs admitted whose start did not fail (RUNNING, or
        STARTING while the runtime's start is under way)."""
        self._take_answers(ledger, now)
        for name in self.state.names_in(TaskState.REQUEUED):  # only a state file from before the keeper
            if self.state.jobs[name].not_before <= now:
                self.state.move(name, TaskState.PENDING, now, TransitionReason.COOLDOWN_OVER)
        self._fold_legacy()  # a loop writing the legacy fields (until it calls the methods above)
        self.keeper.refresh(now)  # prunes the history kept in the state file even with nothing queued
        self._sync()
        jobs: dict[str, JobRecord] = {}  # the next run's workload id -> its job
        for name in self.state.names_in(TaskState.PENDING):
            job = self.state.jobs[name]
            jobs[f"{BATCH_PARENT}/{job.name}.{job.run + 1}"] = job
        if not jobs:
            return ()
        pods = [batch_spec(j, wid) for wid, j in jobs.items()]
        context = self.keeper.context(now, pods)
        decision = schedule(pods, ledger, context, self.config.policy.placement, self.rng)
        for why in decision.pending:
            self._pending(jobs[why.workload_id], why.message, why.reasons, now)
        out = []
        for res in ledger.apply_all(decision.placements):
            wid = res.commitment.workload.id  # type: ignore[union-attr]
            job = jobs[wid]
            if not res.accepted:  # stale: the ledger moved under the pass (not expected on one node)
                self._pending(job, render_reasons(1, 0, res.reasons), res.reasons, now)
                continue
            job.run += 1
            job.workload_id = job.cgroup = wid
            self.state.move(job.name, TaskState.PLACED, now, TransitionReason.ADMITTED)
            self.state.move(job.name, TaskState.STARTING, now, TransitionReason.START_REQUESTED)
            job.started_at, job.why_pending, job.why_pending_codes = now, None, None
            self.store.save(self.state)  # the run exists before its process does
            if self._start(ledger, job, now):
                out.append(wid)
        return tuple(out)

    def _take_answers(self, ledger: Ledger, now: float) -> None:
        """Ask again for each start the runtime left under way: RUNNING or FAILED once it answered
        (its knobs stay as the rounds since have written them). Here, at the end of the round, as
        a start: a run enters RUNNING where the rounds that follow throttle it."""
        for job in list(self.running().values()):
            if self.state.task(job.name) is TaskState.STARTING and self.runtime.started(job) == "starting":
                self._launch(ledger, job, now, again=True)

    def _start(self, ledger: Ledger, job: JobRecord, now: float) -> bool:
        """Write the run's cgroup and knobs, so it never runs unthrottled, then start it."""
        assert job.cgroup is not None and job.workload_id is not None
        quota = float(start_quota(job.requests.get("cpu", 0.0), self.config.policy.throttle))
        self.writer.create(job.cgroup, f"admit {job.workload_id}")
        self.writer.apply(
            [
                KnobWrite(
                    job.cgroup, Knob.CPU_QUOTA, quota, f"admit {job.workload_id}: start at its request"
                ),
                KnobWrite(
                    job.cgroup, Knob.CPU_WEIGHT, self.config.policy.throttle.batch_weight, "batch weight"
                ),
                *knobs.memory_writes(job),
            ]
        )
        return self._launch(ledger, job, now)

    def _launch(self, ledger: Ledger, job: JobRecord, now: float, again: bool = False) -> bool:
        """Ask the runtime to start the run (``again``: for a start it has under way; it never
        starts a run twice). Its pid: RUNNING; ``None``: still under way, the run stays STARTING
        and the next round asks again; an error: FAILED. ``False`` only for the failure. The
        run's admit line is written by the first ask whatever the start does next (a run cancelled
        or evicted while it starts was admitted all the same), with the pid if it answered; a
        start that answers later writes a "started" line with it."""
        assert job.cgroup is not None and job.workload_id is not None
        try:
            pid = self.runtime.start(job, f"admit {job.workload_id}")
        except (OSError, ValueError) as e:
            self.state.move(job.name, TaskState.FAILED, now, TransitionReason.START_FAILED)
            ledger.apply(
                RemoveBatch(
                    job.workload_id,
                    self.node_of(ledger),
                    ledger.node_epoch(self.node_of(ledger)),
                    RemovalCause.FAILED,
                )
            )
            self.runtime.cleanup(job.cgroup, f"{job.workload_id} failed to start")
            job.why_pending = f"failed to start: {e}"
            self.log.append(
                "finish", now, with_save=True, workload=job.workload_id, status="failed", error=str(e)
            )
            return False
        wid, prio = job.workload_id, job.priority
        if pid is None:
            if not again:
                self.log.append("admit", now, workload=wid, pid=None, priority=prio, starting=True)
            return True
        # the runtime answered with a pid: the command was exec'd (an exec failure raises above)
        job.pid = pid
        self.state.move(job.name, TaskState.RUNNING, now, TransitionReason.STARTED)
        self.log.append("started" if again else "admit", now, workload=wid, pid=pid, priority=prio)
        return True

    def _pending(self, job: JobRecord, why: str, reasons: Sequence[Reason], now: float) -> None:
        """Keep the core's answer on the job; log it when it changed."""
        codes = list(dict.fromkeys(r.code.value for r in reasons))
        if job.why_pending != why or job.why_pending_codes != codes:
            job.why_pending, job.why_pending_codes = why, codes
            self.log.append("pending", now, job=job.name, why=why, codes=codes)
