"""The agent loop: sample, estimate, ask the core, carry out; woken early by kernel notifications.

One :meth:`Agent.step` is one mitigation round, in core calls (``kalena/core/README.md``):

1. intake submissions, finish evictions (SIGKILL after the grace), reap finished runs;
2. sample every resident (telemetry -> usage); every ``estimate_interval_s``:
   ``DecayEstimator.update_in_place`` on ``ledger.rows()`` -> ``ReservationUpdate``;
3. ``snapshot_from_ledger`` (usage of workloads being evicted left out, so what they are about
   to release is not counted twice) -> ``plan_evictions`` -> evictor -> ``eviction_commitments``;
4. ``plan_anti_starvation`` -> ``plan_throttle`` -> the round's desired knobs -> the writer;
5. ``decide_escalation`` over the recent rounds -> drain and slack-ineligible deadline;
6. admit queued batch with ``PlaceBatch`` (the ledger is the admission check) and start it.

The loop (:meth:`Agent.run`) takes the clock and the sleeper (``wait(timeout) -> events``) as
parameters: the product passes ``time.time`` and the PSI/memory-event poller, a test passes a
fake clock and a sleeper that returns at once.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from kalena.agent import knobs
from kalena.agent.actionlog import ActionLog, plan_summary, reason_json, why_throttled
from kalena.agent.batch import BatchRuns
from kalena.agent.cgroupfs import CgroupReader
from kalena.agent.config import AgentConfig
from kalena.agent.declaration import Declaration, DeclarationError, load_declaration
from kalena.agent.estimation import estimate
from kalena.agent.evictor import Evictor
from kalena.agent.layout import CgroupTree
from kalena.agent.notify import AgentEvent, Notifier
from kalena.agent.runtime import ProcessRuntime
from kalena.agent.signals import conditions, read_averages
from kalena.agent.sources import EventSources
from kalena.agent.state import AgentState, EvictionRecord, StateStore
from kalena.agent.telemetry import TelemetrySource, UsageMeter
from kalena.agent.writer import CgroupWriter, Knob, KnobWrite, ManagedScope, WriteRecord
from kalena.core.enforcement import (
    EscalationDecision,
    EvictionPlan,
    MitigationRound,
    NodeSnapshot,
    StarvationDecision,
    ThrottlePlan,
    Victim,
    decide_escalation,
    eviction_commitments,
    plan_anti_starvation,
    plan_evictions,
    plan_throttle,
    snapshot_from_ledger,
)
from kalena.core.estimators import DecayEstimator
from kalena.core.ledger import Ledger, ReservationUpdate
from kalena.core.model import Tier
from kalena.core.resources import Resources


@dataclass(frozen=True, slots=True)
class StepReport:
    """What one round saw and did (for tests, benchmarks and ``--verbose``)."""

    time: float
    events: tuple[AgentEvent, ...]
    eviction_plan: EvictionPlan
    evicted: tuple[str, ...]
    throttle: ThrottlePlan
    writes: tuple[WriteRecord, ...]
    escalation: EscalationDecision
    admitted: tuple[str, ...]
    finished: tuple[str, ...]
    estimated: bool


def scope_of(decl: Declaration) -> ManagedScope:
    """Kalena's root subtree, plus adopted production cgroups outside it; DaemonSets protected."""
    return ManagedScope(
        adopted=frozenset(a.cgroup for a in decl.production if a.cgroup.startswith("/")),
        protected=frozenset(a.cgroup for a in decl.daemonsets),
    )


class Agent:
    """The node agent (see the module docstring). Build with :func:`kalena.agent.build.build_agent`."""

    def __init__(
        self,
        declaration: Declaration,
        config: AgentConfig,
        *,
        tree: CgroupTree,
        reader: CgroupReader,
        writer: CgroupWriter,
        telemetry: TelemetrySource,
        notifier: Notifier,
        store: StateStore,
        log: ActionLog,
        runtime: ProcessRuntime,
        inbox: Path | None = None,
        clock: Callable[[], float] = time.time,
        declaration_path: Path | None = None,
    ) -> None:
        self.config = config
        self.tree, self.reader, self.writer = tree, reader, writer
        self.telemetry, self.notifier, self.store, self.log = telemetry, notifier, store, log
        self.runtime, self.clock = runtime, clock
        self.declaration = declaration
        self.declaration_path = declaration_path
        self._decl_mtime = self._mtime()
        self.meter = UsageMeter(config.starvation_window_s)
        self.estimator = DecayEstimator(config.estimator)
        self.sources = EventSources(notifier, tree, writer, log, config, clock)
        self.state = AgentState(declaration.node.name)
        self.evictor = Evictor(writer, reader, self.state, store, log, config.max_history)
        self.batch = BatchRuns(self.state, store, log, writer, reader, runtime, config, inbox)
        self._prev_res: dict[str, Resources] = {}
        self._last_round: tuple[float, list[str]] | None = None
        self.ledger: Ledger | None = None

    # -- lifecycle ------------------------------------------------------------------------------
    def start(self) -> None:
        """Load the state file, restore capped production, rebuild the ledger, arm the triggers."""
        self.store.discard_temp_files()
        loaded = self.store.load()
        if loaded is not None:
            self.state = self.evictor.state = self.batch.state = loaded
        now = self.clock()
        self.writer.scope = scope_of(self.declaration)
        self.writer.create("", "Kalena's root cgroup")
        self._restore_production("restore at start")
        self.evictor.recover()
        self._install(self.declaration, now)
        self.log.append(
            "start",
            now,
            node=self.state.node,
            layout=self.tree.layout.describe(),
            telemetry=self.telemetry.name,
            resumed=loaded is not None,
            in_flight=[e.id for e in self.state.in_flight()],
            **self.sources.report(),
        )
        self.store.save(self.state)

    def shutdown(self) -> None:
        """Restore every capped production cgroup, save, disarm. Batch runs keep running."""
        self._restore_production("restore at shutdown")
        self.store.save(self.state)
        self.sources.disarm()
        self.log.append("stop", self.clock())

    def run(
        self,
        wait: Callable[[float], list[AgentEvent]] | None = None,
        should_stop: Callable[[], bool] = lambda: False,
        on_step: Callable[[StepReport], None] | None = None,
    ) -> None:
        """Step every ``sample_interval_s``, at once when ``wait`` returns events, and at each
        SIGKILL deadline of an eviction in flight."""
        wait = wait or self.notifier.wait
        next_tick = self.clock()
        while not should_stop():
            now = self.clock()
            due = next_tick
            deadline = self.evictor.next_deadline()
            if deadline is not None:
                due = min(due, deadline)
            events = wait(max(0.0, due - now))
            now = self.clock()
            if events or now >= due:
                report = self.step(events)
                if on_step is not None:
                    on_step(report)
            if now >= next_tick:
                next_tick = max(next_tick + self.config.sample_interval_s, now)

    def _restore_production(self, reason: str) -> None:
        before = dict(self.state.production_originals)
        records = self.writer.apply(
            knobs.restore_writes(self.state.production_originals, self.writer, reason)
        )
        for cg in before:
            if not any(r.cgroup == cg and r.ok for r in records) and not self.writer.scope.allows(cg):
                self.log.append("warning", self.clock(), what=f"cannot restore {cg}: no longer adopted")

    # -- declaration and ledger -----------------------------------------------------------------
    def _install(self, decl: Declaration, now: float) -> None:
        """(Re)build the ledger from ``decl`` and the running batch, and (re)arm the sources."""
        self.declaration = decl
        self.writer.scope = scope_of(decl)
        node = decl.node
        prod = [a.spec for a in decl.production]
        ledger = Ledger.from_blueprint([node], [decl.capacity()], prod, {w.id: node.name for w in prod})
        self.batch.replace(ledger, now)
        rows = ledger.rows()
        if len(rows.rows):
            saved = self.state.reservations
            res = np.array([saved.get(i, list(rows.requests[k])) for k, i in enumerate(rows.ids)])
            ledger.apply(ReservationUpdate(rows.rows, res, rows.global_epoch))
        self.ledger = ledger
        if decl.memory_limit is not None:
            self.writer.apply([KnobWrite("", Knob.MEMORY_MAX, decl.memory_limit, "the node's memory limit")])
        self.sources.install(decl)

    def _mtime(self) -> float | None:
        try:
            return None if self.declaration_path is None else self.declaration_path.stat().st_mtime
        except OSError:
            return None

    def _reload(self, now: float) -> None:
        """A changed declaration file is applied whole, or not at all (its problems are logged)."""
        m = self._mtime()
        if m == self._decl_mtime or self.declaration_path is None:
            return
        self._decl_mtime = m
        try:
            decl = load_declaration(self.declaration_path)
        except DeclarationError as e:
            self.log.append("declaration", now, accepted=False, problems=[p.render() for p in e.problems])
            return
        self._install(decl, now)
        self.log.append("declaration", now, accepted=True, workloads=[a.spec.id for a in decl.workloads])

    def cgroup_of(self) -> dict[str, str]:
        """Workload id -> cgroup, for adopted workloads and running batch."""
        out = {a.spec.id: a.cgroup for a in self.declaration.workloads}
        out.update({wid: j.cgroup for wid, j in self.batch.running().items() if j.cgroup})
        return out

    # -- one round ------------------------------------------------------------------------------
    def step(self, events: Sequence[AgentEvent] = ()) -> StepReport:
        """One mitigation round at ``clock()`` (see the module docstring)."""
        assert self.ledger is not None, "start() first"
        now = self.clock()
        self._reload(now)
        self.batch.intake(now)
        self.evictor.progress(now, self._evicted)
        finished = self.batch.reap(self.ledger, now)
        events = (*events, *self.sources.poll_fallbacks(now, time.perf_counter()))

        usage = self._sample(now)
        estimated = self._estimate(now, usage)
        # an eviction in flight counts as released: its usage is left out (r' = r)
        busy = {e.workload for e in self.state.in_flight()}
        snap_usage = {w: u for w, u in usage.items() if w not in busy}
        production = {a.spec.id: a.cgroup for a in self.declaration.production}
        psi = read_averages(self.reader, production.values(), self.tree.layout.v2 is not None)
        cond = conditions(events, psi, self._memory_ratio(), self.config)
        started_at = self._started_at()
        snap = snapshot_from_ledger(
            self.ledger,
            0,
            usage=snap_usage,
            started_at=started_at,
            previous_reservations=self._prev_res or None,
            conditions=cond,
        )
        self._prev_res = {w: Resources.from_array(self.ledger.reservation_of(w)) for w in snap.ids}
        plan = plan_evictions(snap, self.config.eviction, now)
        victims = [v for v in plan.victims if not self.evictor.busy(v.workload)]
        evicted = self._evict(
            victims, {"trigger": self._trigger(events), **plan_summary(plan)}, snap.epoch, now
        )

        snap2 = snap
        if evicted:  # the ledger changed: the throttle sees the node without the victims
            snap2 = snapshot_from_ledger(
                self.ledger, 0, usage=snap_usage, started_at=started_at, conditions=cond
            )
        cfg = self.config
        starv = plan_anti_starvation(
            snap2, self.meter.throttled_s(), cfg.starvation_window_s, cfg.starvation, now
        )
        tplan = plan_throttle(snap2, cfg.throttle, now, self.state.previous_allowance, starv.floors)
        runs = self.batch.running()
        writes = knobs.batch_writes(tplan, runs)
        originals = dict(self.state.production_originals)
        writes += knobs.production_writes(starv, production, self.state.production_originals, self.writer)
        if self.state.production_originals != originals:
            self.store.save(self.state)  # write-ahead: a cap is never in force without its undo saved
        records = self.writer.apply(writes)
        self.state.previous_allowance = tplan.allowance
        self._log_throttles(records, tplan, starv, now)

        escalation = self._escalate(snap2, plan, tplan, now)
        admitted = self.batch.admit(self.ledger, now)
        if estimated:  # the rest (allowance, rounds, first-seen) is cheap to lose: saved every estimate
            self.store.save(self.state)
        return StepReport(
            now, tuple(events), plan, evicted, tplan, records, escalation, admitted, finished, estimated
        )

    def _sample(self, now: float) -> dict[str, dict[str, float]]:
        assert self.ledger is not None
        cgroups = self.cgroup_of()
        residents = [w.id for w in self.ledger.workloads_on(0) if w.id in cgroups]
        batch = self.batch.running()
        counters = self.telemetry.counters({w: cgroups[w] for w in residents}, now, throttling=batch)
        usage = self.meter.update(counters)
        for wid in usage:
            self.state.first_seen.setdefault(wid, now)
        return usage

    def _trigger(self, events: Sequence[AgentEvent]) -> list[dict[str, Any]]:
        if events:
            return [e.to_json() for e in events]
        return [{"kind": "sample", "detail": f"{self.config.sample_interval_s:g} s usage sample"}]

    def _memory_ratio(self) -> float | None:
        """The node's memory (its root cgroup's working set) over its limit."""
        r = self.reader.read("")
        used = r.working_set if r.working_set is not None else r.memory_usage
        limit = self.declaration.memory_limit or r.memory_limit
        if used is None or limit is None or not math.isfinite(limit) or limit <= 0:
            return None
        return used / limit

    def _started_at(self) -> dict[str, float]:
        out = dict(self.state.first_seen)
        out.update({wid: j.started_at for wid, j in self.batch.running().items() if j.started_at is not None})
        return out

    def _estimate(self, now: float, usage: Mapping[str, Mapping[str, float]]) -> bool:
        last = self.state.last_estimate
        if last is not None and now - last < self.config.estimate_interval_s:
            return False
        assert self.ledger is not None
        dt = now - last if last is not None else self.config.estimate_interval_s
        reservations, _ = estimate(self.ledger, self.estimator, usage, self._started_at(), now, dt)
        self.state.reservations = reservations
        self.state.last_estimate = now
        self.sources.rearm(now)
        return True

    # -- eviction and escalation ----------------------------------------------------------------
    def _evict(
        self, victims: Sequence[Victim], context: Mapping[str, Any], epoch: int, now: float
    ) -> tuple[str, ...]:
        assert self.ledger is not None
        job_of = {wid: j.name for wid, j in self.batch.running().items()}
        started = self.evictor.start(victims, self.cgroup_of(), job_of, context, now)
        if not started:
            return ()
        for rec, v in started:
            if rec.job is not None:
                self.state.jobs[rec.job].status = "evicting"
            if v.tier is Tier.BATCH:
                self.state.eviction_history.append((v.equivalence_key, v.node, now))
        for res in self.ledger.apply_all(eviction_commitments([v for _, v in started], 0, epoch)):
            if not res.accepted:
                self.log.append("commit-rejected", now, reasons=[reason_json(r) for r in res.reasons])
        horizon = now - self.config.pairing.window_s
        self.state.eviction_history = [e for e in self.state.eviction_history if e[2] > horizon]
        self.store.save(self.state)
        return tuple(rec.workload for rec, _ in started)

    def _evicted(self, rec: EvictionRecord) -> None:
        self.meter.forget(rec.workload)
        self.batch.evicted(rec)

    def _escalate(
        self, snap: NodeSnapshot, plan: EvictionPlan, tplan: ThrottlePlan, now: float
    ) -> EscalationDecision:
        """A round's pressure persisted when the next round still sees pressure on a
        non-compressible dimension, or cpu pressure once throttling is exhausted (every batch
        quota at the kernel minimum): before that, the halving allowance is local mitigation
        still converging, not failing."""
        floor = self.config.throttle.min_quota_cores * (1 + 1e-9)
        exhausted = bool(tplan.decisions) and all(d.quota <= floor for d in tplan.decisions)
        dims = [p.condition.dimension for p in plan.pressures]
        if tplan.pressured and exhausted:
            dims.append("cpu")
        if self._last_round is not None:
            t_prev, dims_prev = self._last_round
            self.state.mitigation_rounds.append((t_prev, bool(dims), dims_prev))
            del self.state.mitigation_rounds[: -self.config.max_history]
        self._last_round = (now, dims) if dims else None
        history = [MitigationRound(t, p, tuple(d)) for t, p, d in self.state.mitigation_rounds]
        decision = decide_escalation(snap, history, self.config.escalation, now)
        if not decision.escalate:
            return decision
        self.state.slack_ineligible_until = decision.slack_ineligible_until
        self.state.mitigation_rounds.clear()
        self._last_round = None
        self.log.append(
            "escalate",
            now,
            sync=True,
            reason=None if decision.reason is None else reason_json(decision.reason),
            failed_rounds=decision.failed_rounds,
            persisted_s=decision.persisted_s,
            slack_ineligible_until=decision.slack_ineligible_until,
            drain=[v.workload for v in decision.drain],
        )
        context = {
            "trigger": [{"kind": "escalation", "detail": "mitigation not converging"}],
            "victim_order": [v.workload for v in decision.drain],
        }
        self._evict(decision.drain, context, snap.epoch, now)
        return decision

    def _log_throttles(
        self, records: Sequence[WriteRecord], tplan: ThrottlePlan, starv: StarvationDecision, now: float
    ) -> None:
        """A "throttle" line for each batch run whose CPU quota was actually rewritten."""
        written = {r.cgroup for r in records if r.ok and r.action == "write" and "cpu" in Path(r.path).name}
        runs = self.batch.running()
        for d in tplan.decisions:
            job = runs.get(d.workload)
            if job is not None and job.cgroup in written:
                self.log.append("throttle", now, why=why_throttled(d, tplan))
        for d in starv.caps:
            self.log.append("cap", now, why=why_throttled(d, None))
