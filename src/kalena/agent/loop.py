"""The agent loop: sample, estimate, ask the core, carry out; woken early by kernel notifications.

One :meth:`Agent.step` is one mitigation round, in core calls (``kalena/core/README.md``):

1. intake submissions, finish evictions (SIGKILL after the grace), reap finished runs;
2. sample every resident (telemetry -> usage); every ``estimate_interval_s``:
   ``DecayEstimator.update_in_place`` on ``ledger.rows()`` -> ``ReservationUpdate``, and the
   estimate (usage, reservation, throttled seconds since the last one) to the state store's
   usage archive;
3. ``view_from_ledger`` (this node, with usage, limits, start times, throttled time, evictions in
   flight and the kernel's signals) -> the core's ``node_round``, the same round the simulator runs
   for a whole cluster;
4. carry the decision out: the plan's victims through the evictor (``eviction_commitments``), the
   batch quotas and anti-starvation caps through the writer, an escalation's drain and deadline;
5. admit queued batch through the core's ``schedule`` (priority order, every filter, the context
   of the core's ``ContextKeeper``) and start it.

The loop (:meth:`Agent.run`) takes the clock and the sleeper (``wait(timeout) -> events``) as
parameters: the product passes ``time.time`` and the PSI/memory-event poller, a test passes a
fake clock and a sleeper that returns at once. The round itself reads no clock: the monotonic
clock stamping fallback events (``monotonic``) is passed in too.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from kalena.agent import knobs
from kalena.agent.actionlog import ActionLog, plan_summary, reason_json, why_throttled
from kalena.agent.archiving import ThrottledSince
from kalena.agent.batch import BatchRuns
from kalena.agent.cgroupfs import CgroupReader
from kalena.agent.config import AgentConfig
from kalena.agent.declaration import Declaration, DeclarationError
from kalena.agent.estimation import estimate
from kalena.agent.evictor import Evictor
from kalena.agent.layout import BATCH_PARENT, CgroupTree
from kalena.agent.notify import AgentEvent, Notifier
from kalena.agent.ports import (
    DeclarationSource,
    Disruptor,
    Enforcer,
    FileDeclarations,
    FixedDeclaration,
    ObservationSource,
    PlacedSource,
    Runtime,
    StatePort,
    SubmissionSource,
)
from kalena.agent.runtime import InboxSubmissions
from kalena.agent.signals import conditions, read_averages
from kalena.agent.sources import EventSources
from kalena.agent.state import AgentState, EvictionRecord
from kalena.agent.telemetry import UsageMeter
from kalena.agent.writer import DEFAULT_WEIGHT, Knob, KnobWrite, ManagedScope, WriteRecord
from kalena.core.controller import (
    NodeSignals,
    RoundDecision,
    RoundState,
    node_round,
    spec_limits,
    view_from_ledger,
)
from kalena.core.enforcement import (
    EscalationDecision,
    EvictionPlan,
    StarvationDecision,
    ThrottlePlan,
    Victim,
    eviction_commitments,
    weight_to_shares,
)
from kalena.core.enforcement.nodes import NodesView
from kalena.core.estimators import DecayEstimator
from kalena.core.ledger import Ledger, ReservationUpdate
from kalena.core.model import Tier
from kalena.core.resources import DIM_INDEX, DIMS, NDIM, RAM

GIB = float(2**30)


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
    decision: RoundDecision  # the core round's whole answer (the fields above are this node's part)


def scope_of(decl: Declaration, batch: Iterable[str] = ()) -> ManagedScope:
    """Kalena's root subtree, plus adopted production cgroups outside it and the cgroups of batch
    a cluster placed (``batch``: an enforce-only agent's); DaemonSets protected."""
    outside = [a.cgroup for a in decl.production if a.cgroup.startswith("/")]
    return ManagedScope(
        adopted=frozenset([*outside, *(c for c in batch if c.startswith("/"))]),
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
        writer: Enforcer,
        telemetry: ObservationSource,
        notifier: Notifier,
        store: StatePort,
        log: ActionLog,
        runtime: Runtime,
        inbox: Path | None = None,
        submissions: SubmissionSource | None = None,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.perf_counter,
        declaration_path: Path | None = None,
        declarations: DeclarationSource | None = None,
        node_memory: Callable[[], tuple[float | None, float | None]] | None = None,
        placed: PlacedSource | None = None,
        disruptor: Disruptor | None = None,
    ) -> None:
        self.config = config
        self.placed = placed  # an enforce-only agent's: the batch its cluster placed here
        self.tree, self.reader, self.writer = tree, reader, writer
        self.telemetry, self.notifier, self.store, self.log = telemetry, notifier, store, log
        self.runtime, self.clock = runtime, clock
        self.declaration = declaration
        if declarations is None:
            declarations = (
                FixedDeclaration() if declaration_path is None else FileDeclarations(declaration_path)
            )
        self.declarations = declarations
        # (used, kill level) bytes of the node; None: Kalena's root cgroup and its memory limit
        self.node_memory = node_memory
        self.meter = UsageMeter(config.policy.round.starvation_window_s)
        # the archive's throttled seconds per sample: each resident's cpu.stat counter at an estimate
        self.throttled_since = ThrottledSince()
        self._throttled_ns: dict[str, int | None] = {}
        self.estimator = DecayEstimator(config.policy.decay)
        self.sources = EventSources(notifier, tree, writer, log, config, clock)
        self.state = AgentState(declaration.node.name)
        self.evictor = Evictor(writer, reader, self.state, store, log, config.max_history, runtime, disruptor)
        if submissions is None and inbox is not None:
            submissions = InboxSubmissions(inbox)
        self.batch = BatchRuns(
            self.state, store, log, writer, reader, runtime, config, submissions, self.evictor.signal
        )
        self.monotonic = monotonic
        self.round_state = RoundState.initial(1)
        self.ledger: Ledger | None = None
        #: Called with the agent after each round of :meth:`run` (a cluster link's report).
        self.after_step: list[Callable[[Agent], None]] = []

    # -- lifecycle ------------------------------------------------------------------------------
    def start(self) -> None:
        """Load the state file, restore capped production, rebuild the ledger, arm the triggers."""
        self.store.discard_temp_files()
        loaded = self.store.load(self.clock())  # stamps a lifecycle rebuilt from an old file
        if loaded is not None:
            self.state = self.evictor.state = self.batch.state = loaded
            if loaded.round_state is not None:
                try:
                    self.round_state = RoundState.from_json(loaded.round_state)
                except ValueError as e:  # cheap to lose: the allowance and rounds start afresh
                    self.log.append("warning", self.clock(), what=f"round state not restored: {e}")
        now = self.clock()
        self._set_scope()
        self.writer.create("", "Kalena's root cgroup")
        self._restore_production("restore at start")
        self.evictor.recover()
        self.batch.teardown(now)  # a cancel a crash cut short: its run is killed now
        keep = {j.cgroup for j in self.batch.running().values() if j.cgroup}
        keep |= {e.cgroup for e in self.state.in_flight() if e.tier == "batch"}
        for cg in self.runtime.sweep(keep, "no run of this agent's state: left by a crash or another agent"):
            self.log.append("swept", now, workload=cg)
        self._install(self.declaration, now)
        assert self.ledger is not None
        self.batch.resume(self.ledger, now)  # before a cancel or the round can move a cut-short start
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
        """Restore every capped production cgroup, save, disarm. Batch runs keep running (a
        restarted agent adopts them again); the cgroups Kalena made and nothing uses any more (the
        batch parent, the root) are removed, so a stopped agent leaves no empty tree behind."""
        self._restore_production("restore at shutdown")
        self.store.save(self.state)
        self.sources.disarm()
        if self.config.admit:  # an enforce-only agent's root is its runtime's (the kubelet's kubepods)
            for name in (BATCH_PARENT, ""):
                self.writer.remove_if_empty(name, "shutdown: nothing runs here")
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
                for hook in self.after_step:
                    hook(self)
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
        self._set_scope()
        for a in decl.production:
            if a.started_at is not None:  # started then (its runtime says): the startup grace runs from then
                self.state.first_seen[a.spec.id] = a.started_at
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
        if self.config.admit:  # an enforce-only agent's batch lives in its runtime's cgroups, not Kalena's
            self.writer.apply(self._parent_weights(decl))
        self.sources.install(decl)

    def _set_scope(self, also: Iterable[str] = ()) -> None:
        """What the writer may change: the declaration's, and the cgroups of the batch a cluster
        placed here (an enforce-only agent's: its runs, and those being evicted) with ``also``."""
        placed: list[str] = []
        if not self.config.admit:
            placed = [j.cgroup for j in self.batch.running().values() if j.cgroup]
            placed += [e.cgroup for e in self.state.in_flight() if e.tier == "batch"]
        self.writer.scope = scope_of(self.declaration, [*placed, *also])

    def _parent_weights(self, decl: Declaration) -> list[KnobWrite]:
        """The batch weight on the batch runs' parent, and on Kalena's root when no production lives
        under it (Docker: production is the engine's, elsewhere). A run's own weight only counts
        among its siblings: under contention the kernel first splits the CPU between the parents,
        and a parent at the default weight would take half the node from production, so that
        production's measured use (and with it the throttle) could only follow in steps."""
        w = self.config.policy.throttle.batch_parent_weight
        self.writer.create(BATCH_PARENT, "the batch runs' parent")
        out = [KnobWrite(BATCH_PARENT, Knob.CPU_WEIGHT, w, "batch parent: production first under contention")]
        root = self.tree.root
        beside = [
            a.cgroup
            for a in decl.production
            if not a.cgroup.startswith("/") or (root.startswith("/") and ManagedScope._within(a.cgroup, root))
        ]
        if beside:  # production shares the root: leave its weight, or give back one set for batch only
            if self.writer.current("", Knob.CPU_WEIGHT) in (float(w), float(weight_to_shares(w))):
                out.append(
                    KnobWrite("", Knob.CPU_WEIGHT, DEFAULT_WEIGHT, "Kalena's root holds production now")
                )
        else:
            out.append(KnobWrite("", Knob.CPU_WEIGHT, w, "Kalena's root holds only batch"))
        return out

    def _reload(self, now: float) -> None:
        """A changed declaration is applied whole, or not at all (its problems are logged)."""
        decl = self.declarations.changed()
        if decl is None:
            return
        if isinstance(decl, DeclarationError):
            self.log.append("declaration", now, accepted=False, problems=[p.render() for p in decl.problems])
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
        if self.ledger is None:
            raise RuntimeError("Agent.step before Agent.start")
        now = self.clock()
        steps = self.state.lifecycle.appended
        self._reload(now)
        if self.config.admit:  # an enforce-only agent takes no submissions
            self.batch.intake(self.ledger, now)
        self.evictor.progress(now, self._evicted)
        finished = self.batch.reap(self.ledger, now)
        if not self.config.admit and self.placed is not None:
            self._observe_placed(now)
        events = (*events, *self.sources.poll_fallbacks(now, self.monotonic()))

        estimated = self._estimate_due(now)
        usage = self._sample(now, archived=estimated)
        if estimated:
            self._estimate(now, usage)
        view = self._view(usage, events)
        k = self.ledger.node_index[self.declaration.node.name]  # this node, by name
        previous = self.round_state.allowance[k]
        d = node_round(view, self.round_state, self.config.policy, now)
        self.round_state = d.state
        act = d.actions_of(k)
        plan = d.eviction_plan(k)
        evicted = self._evict(
            plan.victims, {"trigger": self._trigger(events), **plan_summary(plan)}, int(view.epoch[k]), now
        )

        tplan = d.throttle_plan(k, None if math.isnan(previous) else float(previous))
        starv = d.starvation_decision(k)
        runs = self.batch.running()
        production = {a.spec.id: a.cgroup for a in self.declaration.production}
        originals = (dict(self.state.production_originals), dict(self.state.nested_originals))
        writes = knobs.batch_writes(tplan, runs)
        writes += knobs.nested_writes(tplan, runs, self.state.nested_originals, self.writer)
        writes += knobs.production_writes(starv, production, self.state.production_originals, self.writer)
        if (self.state.production_originals, self.state.nested_originals) != originals:
            self.store.save(self.state)  # write-ahead: a cap is never in force without its undo saved
        records = self.writer.apply(writes)
        below = view.ids[d.below_request].tolist()  # the core's rule: quota below the cpu request
        self.batch.throttled(set(below), now)  # the lifecycle: RUNNING <-> THROTTLED
        self._log_throttles(records, tplan, starv, now)

        escalation = d.escalation_decision(k)
        if act is not None and act.escalation is not None:
            self._escalate(act.escalation, act.first_epoch + len(plan.victims), now)
        self.state.round_state = self.round_state.to_json()
        admitted = self.batch.admit(self.ledger, now) if self.config.admit else ()
        # a job's step (started, throttled, ...) is saved in the step that made it; the rest
        # (allowance, rounds, first-seen) is cheap to lose: saved every estimate
        if estimated or self.state.lifecycle.appended != steps:
            self.store.save(self.state)
        return StepReport(
            now, tuple(events), plan, evicted, tplan, records, escalation, admitted, finished, estimated, d
        )

    def _observe_placed(self, now: float) -> None:
        """The batch the cluster placed here, taken as jobs (``None`` from the source: unknown, so
        nothing is concluded this round); the writer's scope follows the runs it holds."""
        assert self.ledger is not None and self.placed is not None
        runs = self.placed.placed()
        if runs is None:
            return
        self._set_scope(r.cgroup for r in runs)  # the new runs' knobs are written as they are taken
        self.batch.observe(self.ledger, runs, now)
        self._set_scope()

    def _view(self, usage: Mapping[str, Mapping[str, float]], events: Sequence[AgentEvent]) -> NodesView:
        """This node as the round reads it: the ledger's rows with what the agent measured."""
        assert self.ledger is not None
        led = self.ledger
        rs = led.row_arrays()
        h = rs.high
        use = np.full((h, NDIM), np.nan)
        lim = np.full((h, NDIM), np.inf)
        started = np.full(h, -np.inf)
        throttled = np.zeros(h)
        busy = np.zeros(h, dtype=bool)
        starts = self._started_at()
        meter = self.meter.throttled_s()
        in_flight = {e.workload for e in self.state.in_flight()}
        for row in rs.live_rows().tolist():
            spec = rs.specs[row]
            assert spec is not None
            wid = spec.id
            for dim, v in usage.get(wid, {}).items():
                use[row, DIM_INDEX[dim]] = v
            lim[row] = spec_limits(spec)
            started[row] = starts.get(wid, -np.inf)
            throttled[row] = meter.get(wid, 0.0)
            busy[row] = wid in in_flight
        production = [a.cgroup for a in self.declaration.production]
        psi = read_averages(self.reader, production, self.tree.layout.v2 is not None)
        cond = conditions(events, psi, self.config)
        used, limit = self._node_memory()
        signals = NodeSignals(
            cond.triggered[None],
            cond.acute[None],
            cond.psi_some[None],
            np.array([cond.memory_events], dtype=np.int64),
            used,
            limit,
        )
        return view_from_ledger(
            led,
            usage=use,
            limit=lim,
            started_at=started,
            signals=signals,
            throttled_s=throttled,
            evicting=busy,
            copy=True,  # the StepReport keeps the decision (and its view) past this round's commitments
        )

    def _sample(self, now: float, archived: bool = False) -> dict[str, dict[str, float]]:
        """Every resident's usage. The throttled time is read for batch every round (the
        anti-starvation window's, which is batch's only) and, in a round whose estimate goes to the
        archive (``archived``), for every resident (production too: a cap, its own CPU limit)."""
        assert self.ledger is not None
        cgroups = self.cgroup_of()
        node = self.ledger.node_index[self.declaration.node.name]
        residents = [w.id for w in self.ledger.workloads_on(node) if w.id in cgroups]
        batch = self.batch.running()
        counters = self.telemetry.counters(
            {w: cgroups[w] for w in residents}, now, throttling=set(residents) if archived else batch
        )
        if archived:
            self._throttled_ns = {w: c.throttled_ns for w, c in counters.items()}
            counters = {
                w: c if w in batch or c.throttled_ns is None else dataclasses.replace(c, throttled_ns=None)
                for w, c in counters.items()
            }
        usage = self.meter.update(counters)
        for wid in usage:
            self.state.first_seen.setdefault(wid, now)
        return usage

    def _trigger(self, events: Sequence[AgentEvent]) -> list[dict[str, Any]]:
        if events:
            return [e.to_json() for e in events]
        return [{"kind": "sample", "detail": f"{self.config.sample_interval_s:g} s usage sample"}]

    def _node_memory(self) -> tuple[np.ndarray, np.ndarray]:
        """(used, kill level) of the node, (1, 8) GiB on ram: its root cgroup's working set (NaN:
        unknown, the round sums the rows) and the declared (or the root's own) memory limit. With no
        known limit the kill level is unknown too (inf: the round's 95% rule cannot apply), since the
        declared capacity is what Kalena may hand out, not where the kernel kills."""
        used = np.full((1, NDIM), np.nan)
        level = np.full((1, NDIM), np.nan)
        level[0, RAM] = np.inf
        if self.node_memory is not None:
            u, limit = self.node_memory()
        else:
            r = self.reader.read("")
            u = r.working_set if r.working_set is not None else r.memory_usage
            limit = self.declaration.memory_limit or r.memory_limit
        if u is not None:
            used[0, RAM] = u / GIB
        if limit is not None and math.isfinite(limit) and limit > 0:
            level[0, RAM] = limit / GIB
        return used, level

    def _started_at(self) -> dict[str, float]:
        out = dict(self.state.first_seen)
        out.update({wid: j.started_at for wid, j in self.batch.running().items() if j.started_at is not None})
        return out

    def _estimate_due(self, now: float) -> bool:
        last = self.state.last_estimate
        return last is None or now - last >= self.config.estimate_interval_s

    def _estimate(self, now: float, usage: Mapping[str, Mapping[str, float]]) -> None:
        """The estimate of a round where one is due (:meth:`_estimate_due`)."""
        assert self.ledger is not None
        last = self.state.last_estimate
        dt = now - last if last is not None else self.config.estimate_interval_s
        reservations, _ = estimate(self.ledger, self.estimator, usage, self._started_at(), now, dt)
        self.state.reservations = reservations
        self.state.last_estimate = now
        throttled = self.throttled_since.take(self._throttled_ns)
        self._throttled_ns = {}
        self.store.record_series(now, usage, reservations, throttled)
        self.store.record_node(now, self.slack_view(now, usage))
        self.sources.rearm(now)

    def slack_view(self, now: float, usage: Mapping[str, Mapping[str, float]]) -> dict[str, Any]:
        """This node's four series of Borg's slack view (capacity; sum of limits, the requests;
        sum of reservations; usage) and its batch tasks, for ``kalena status`` and ``/metrics``."""
        assert self.ledger is not None
        led = self.ledger
        k = led.node_index[self.declaration.node.name]
        rows = led.rows()
        mine = rows.node == k
        used = np.zeros(NDIM)
        for wid in np.asarray(rows.ids, dtype=object)[mine]:
            for d, v in usage.get(wid, {}).items():
                if d in DIM_INDEX and math.isfinite(v):
                    used[DIM_INDEX[d]] += v
        series = {
            "capacity": led.capacity[k],
            "limits": rows.requests[mine].sum(axis=0),
            "reservations": rows.reservations[mine].sum(axis=0),
            "usage": used,
            # production's part, for a cluster daemon's ledger (batch it counts run by run)
            "production_limits": rows.requests[mine & ~rows.is_batch].sum(axis=0),
            "production_reservations": rows.reservations[mine & ~rows.is_batch].sum(axis=0),
        }
        dims = [
            d for i, d in enumerate(DIMS) if any(v[i] > 0 and math.isfinite(v[i]) for v in series.values())
        ]
        out: dict[str, Any] = {
            name: {d: float(v[DIM_INDEX[d]]) if math.isfinite(v[DIM_INDEX[d]]) else None for d in dims}
            for name, v in series.items()
        }
        res = dict(zip(rows.ids, rows.reservations, strict=True))
        out["batch"] = [
            {
                "job": j.name,
                "run": j.run,
                "workload": wid,
                "state": self.state.task(j.name).value,
                "priority": j.priority,
                "requests": j.requests,
                "reservation": {d: float(res[wid][DIM_INDEX[d]]) for d in dims} if wid in res else {},
                "usage": dict(usage.get(wid, {})),
            }
            for wid, j in self.batch.running().items()
        ]
        out["production"] = int(np.count_nonzero(mine & ~rows.is_batch))
        out["at"] = now
        return out

    # -- eviction and escalation ----------------------------------------------------------------
    def _evict(
        self, victims: Sequence[Victim], context: Mapping[str, Any], epoch: int, now: float
    ) -> tuple[str, ...]:
        assert self.ledger is not None
        job_of = {wid: j.name for wid, j in self.batch.running().items()}

        def kept(_rec: EvictionRecord, v: Victim) -> None:  # saved with the eviction record
            if v.tier is Tier.BATCH:  # the harmful-pairing history (and the cooldown) in the keeper
                until = None if v.requeue is None else v.requeue.cooldown_until
                self.batch.evicted_from_node(v.equivalence_key, now, until)
            else:  # its owner restarts it at once (r = R): the estimator's startup grace runs from now
                self.state.first_seen[v.workload] = now

        started = self.evictor.start(victims, self.cgroup_of(), job_of, context, now, on_record=kept)
        if not started:
            return ()
        for res in self.ledger.apply_all(
            eviction_commitments(
                [v for _, v in started], self.ledger.node_index[self.declaration.node.name], epoch
            )
        ):
            if not res.accepted:
                self.log.append("commit-rejected", now, reasons=[reason_json(r) for r in res.reasons])
        self.store.save(self.state)
        return tuple(rec.workload for rec, _ in started)

    def _evicted(self, rec: EvictionRecord) -> None:
        if rec.tier == "batch":  # a run ends with its cgroup; a production cgroup and its counters stay
            self.meter.forget(rec.workload)
        self.batch.evicted(rec)

    def _escalate(self, decision: EscalationDecision, epoch: int, now: float) -> None:
        """Carry out the round's escalation: slack-ineligible deadline, log line, drain."""
        if decision.slack_ineligible_until is not None:
            self.batch.escalated(decision.slack_ineligible_until)
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
        self._evict(decision.drain, context, epoch, now)

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
