"""The simulation loop: one tick of simulated time through the unchanged policy core.

One tick (``dt`` = 10 s by default) at time ``t``, in order:

1. arrivals: batch pods submitted by ``t`` join the queue;
2. usage: production from its profiles, batch from its demand; cpu contention shares each node
   (:mod:`kalena.sim.cpu`), records unmet production demand and throttled batch, advances batch work;
3. completions: batch pods whose work is done leave (``RemoveBatch``);
4. estimation: the estimator's in-place update on every row, committed as one ``ReservationUpdate``
   (skipped with reclamation off: every reservation stays at its request);
5. mitigation, memory: nodes the screen flags get the core's ``plan_evictions``; its victims are
   committed as ``Eviction``s (batch requeued with its cooldown); the kernel OOM-kills what still
   does not fit (:mod:`kalena.sim.memory`);
6. escalation: nodes whose pressure persisted through mitigation go to ``decide_escalation``;
7. placement every ``schedule_interval_s``: the core's ``schedule`` over the pods that could fit
   (:mod:`kalena.sim.placement`), its ``PlaceBatch`` commitments applied;
8. mitigation, cpu: batch quotas for the next tick (the core's throttle, fast path audited) and,
   once per window per node, anti-starvation;
9. the restoration invariant (``restoration_violations``) and the metrics.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from kalena.core.cluster import Cluster
from kalena.core.enforcement import (
    EscalationConfig,
    MitigationRound,
    decide_escalation,
    failed_run,
    plan_anti_starvation,
    plan_evictions,
)
from kalena.core.estimators import (
    DecayEstimator,
    DecayingHistogram,
    MarginClass,
    PeakWithMargin,
    append_rows,
    assign_rows,
)
from kalena.core.ledger import (
    Blueprint,
    Eviction,
    Ledger,
    RemovalCause,
    RemoveBatch,
    ReservationUpdate,
    restoration_violations,
)
from kalena.core.resources import CPU, NDIM, RAM
from kalena.sim import cpu, memory
from kalena.sim.batch import BatchTasks, generate
from kalena.sim.config import SimConfig
from kalena.sim.metrics import Metrics
from kalena.sim.nodeview import NodeRows, snapshot
from kalena.sim.placement import BatchQueue, PlacementShell
from kalena.sim.production import ProductionUsage
from kalena.sim.rows import BATCH, PRODUCTION, RowTable, cpu_weight

FUTURE, PENDING, RUNNING, DONE = 0, 1, 2, 3
LONG_AGO = -1e12  # production started before the run (finite: the estimator needs a time)
GROW_CHUNK = 1024  # rows added to the simulator's columns at a time
HISTORY_KEEP = 16  # mitigation rounds kept per node (escalation needs the trailing run only)


def starvation_rows(rows: np.ndarray, table: RowTable, rs) -> np.ndarray:  # type: ignore[no-untyped-def]
    """The residents ``plan_anti_starvation`` can act on: batch, and service running above its
    reservation (``u > r``). No other resident enters its sums or its caps, so the decision over
    these rows equals the decision over the whole node (checked in the tests); the snapshot is smaller.
    """
    u = table.usage[rows, CPU]
    greedy = ~rs.is_batch[rows] & ~np.isnan(u) & (u > rs.reservation[rows, CPU])
    return rows[rs.is_batch[rows] | greedy]


def could_escalate(history: list[MitigationRound], config: EscalationConfig) -> bool:
    """``decide_escalation``'s own condition on its history: the trailing failed run is ``rounds``
    long or spans ``persist_s`` (checked against the core in the tests)."""
    run = failed_run(history)
    return bool(run) and (len(run) >= config.rounds or run[-1].time - run[0].time >= config.persist_s)


def make_estimator(name: str):  # type: ignore[no-untyped-def]
    """The core estimator by name, with the core's default parameters."""
    return {"decay": DecayEstimator, "peak": PeakWithMargin, "histogram": DecayingHistogram}[name]()


@dataclass
class TaskState:
    """Mutable per-pod state of the batch population (arrays of length T)."""

    state: np.ndarray
    row: np.ndarray
    node: np.ndarray
    first_start: np.ndarray
    finish: np.ndarray
    evictions: np.ndarray
    kills: np.ndarray
    throttled_s: np.ndarray

    @classmethod
    def of(cls, n: int) -> TaskState:
        return cls(
            state=np.zeros(n, dtype=np.int8),
            row=np.full(n, -1, dtype=np.int64),
            node=np.full(n, -1, dtype=np.int64),
            first_start=np.full(n, np.nan),
            finish=np.full(n, np.nan),
            evictions=np.zeros(n, dtype=np.int64),
            kills=np.zeros(n, dtype=np.int64),
            throttled_s=np.zeros(n),
        )


class Simulation:
    """A cluster, its production usage, a batch population, and the core deciding everything."""

    def __init__(self, cluster: Cluster, config: SimConfig) -> None:
        self.cfg = cfg = config
        self.cluster = cluster
        streams = np.random.default_rng(cfg.seed).spawn(5)
        self.rng_schedule = streams[3]
        nodes = cluster.nodes
        self.ledger = Ledger.from_blueprint(
            nodes, cluster.capacity_matrix(), cluster.workloads, cluster.placement
        )
        self.blueprint = Blueprint.of(nodes, cluster.workloads, cluster.placement)
        led = self.ledger
        rs = led.row_arrays()
        self.n_prod = p = led.production_count
        self.cap = led.capacity
        cap_cpu = self.cap[:, CPU]
        finite_cpu = float(cap_cpu[np.isfinite(cap_cpu)].sum())
        cap_ram = self.cap[:, RAM]
        gib_per_core = float(cap_ram[np.isfinite(cap_ram)].sum()) / max(finite_cpu, 1e-9)
        self.prod = ProductionUsage(rs.request[:p], cfg.production, streams[0], streams[1])
        self.tasks: BatchTasks = generate(
            cfg.batch,
            finite_cpu,
            gib_per_core,
            cfg.horizon_s,
            cfg.seed,
            warmup=48 * 3600.0 if cfg.batch_warm_start else 0.0,
            load_factor=cfg.batch_load_factor,
        )
        self.ts = TaskState.of(len(self.tasks))
        self.next_task = 0
        self.queue = BatchQueue()
        self.window = cfg.every(cfg.starvation_interval_s)
        self.table = RowTable(p + GROW_CHUNK, self.window)
        self.node_rows = NodeRows(led)
        self.shell = PlacementShell(led, cfg.placement, cfg.pairing)
        self.metrics = Metrics(self.cap, led.request_sum, cfg.ticks, cfg.every(cfg.sample_every_s))
        self.prev_allowance = np.full(led.n_nodes, np.nan)
        self.history: dict[int, list[MitigationRound]] = {}
        self.psi = np.zeros(led.n_nodes)
        self.now = 0.0
        self.tick_no = 0
        self.wall_seconds = 0.0
        self._brows: np.ndarray | None = None
        self._init_production(p)

    # rows -----------------------------------------------------------------------------------------
    def _init_production(self, p: int) -> None:
        t, rs, cfg = self.table, self.ledger.row_arrays(), self.cfg
        t.kind[:p] = PRODUCTION
        t.weight[:p] = cpu_weight(rs.request[:p, CPU])
        t.describe(np.arange(p), rs.specs[:p])
        if cfg.production_ram_limit_ratio is not None:
            req = rs.request[:p, RAM]
            t.limit[:p, RAM] = np.where(req > 0, req * cfg.production_ram_limit_ratio, np.inf)
        self.estimator = make_estimator(cfg.estimator)
        cap = t.capacity
        req = np.zeros((cap, NDIM))
        req[:p] = rs.request[:p]
        lim = np.zeros((cap, NDIM))
        lim[:p] = self._estimator_limits(np.arange(p))
        start = np.zeros(cap)
        start[:p] = LONG_AGO
        grace = np.zeros(cap)
        specs = rs.specs[:p]
        grace[:p] = [s.startup_grace_s for s in specs]  # type: ignore[union-attr]
        pinned = np.ones(cap, dtype=bool)
        pinned[:p] = [(not cfg.reclaim) or s.reclaim_disabled for s in specs]  # type: ignore[union-attr]
        classes = np.full(cap, int(MarginClass.BATCH))
        classes[:p] = int(MarginClass.SERVICE)
        self.est_state = self.estimator.init(req, lim, start, grace=grace, pinned=pinned, classes=classes)

    def _estimator_limits(self, rows: np.ndarray) -> np.ndarray:
        """L for the estimator: the row's limit, or its node's capacity where it has none."""
        node = self.ledger.row_arrays().node[rows]
        return np.minimum(self.table.limit[rows], self.cap[node])

    def _grow(self) -> None:
        """Cover every row the ledger has used (``high``), in chunks, so whole-array work stays small."""
        high = self.ledger.row_arrays().high
        if high <= self.table.capacity:
            return
        size = -(-high // GROW_CHUNK) * GROW_CHUNK + GROW_CHUNK
        extra = size - self.table.capacity
        self.table.grow(size)
        spare = self.estimator.init(
            np.zeros((extra, NDIM)),
            np.zeros((extra, NDIM)),
            np.zeros(extra),
            pinned=np.ones(extra, dtype=bool),
            classes=np.full(extra, int(MarginClass.BATCH)),
        )
        self.est_state = append_rows(self.est_state, spare)

    def _reinit_rows(self, rows: np.ndarray, now: float) -> None:
        """(Re)start the estimator on ``rows``: r_0 = R, startup grace from ``now``."""
        rs, cfg = self.ledger.row_arrays(), self.cfg
        specs = [rs.specs[r] for r in rows]
        new = self.estimator.init(
            rs.request[rows],
            self._estimator_limits(rows),
            np.full(len(rows), now),
            grace=np.array([s.startup_grace_s for s in specs]),  # type: ignore[union-attr]
            pinned=np.array([(not cfg.reclaim) or s.reclaim_disabled for s in specs]),  # type: ignore[union-attr]
            classes=np.where(rs.is_batch[rows], int(MarginClass.BATCH), int(MarginClass.SERVICE)),
        )
        assign_rows(self.est_state, rows, new)
        self.table.started[rows] = now

    def _rows_changed(self) -> None:
        """Rows were added or freed: drop what was derived from the row set."""
        self.node_rows.invalidate()
        self._brows = None

    def _batch_rows(self) -> np.ndarray:
        """The live batch rows, ascending (production holds rows 0..P-1, batch the rest)."""
        if self._brows is None:
            rs = self.ledger.row_arrays()
            self._brows = np.flatnonzero(rs.is_batch[self.n_prod : rs.high]) + self.n_prod
        return self._brows

    # the run -------------------------------------------------------------------------------------
    def prewarm(self) -> None:
        """Production only, for ``prewarm_s`` before t = 0: reservations reach their steady state."""
        cfg = self.cfg
        steps = round(cfg.prewarm_s / cfg.tick_s)
        if not cfg.reclaim or steps == 0:
            for k in range(steps):
                self.prod.step(-cfg.prewarm_s + (k + 1) * cfg.tick_s, cfg.tick_s)
            return
        p = self.n_prod
        rows = np.arange(p)
        for k in range(steps):
            now = -cfg.prewarm_s + (k + 1) * cfg.tick_s
            self.table.usage[:p] = self.prod.step(now, cfg.tick_s)
            r = self.estimator.update_in_place(self.est_state, self.table.usage, now, cfg.tick_s)
            self.ledger.apply(ReservationUpdate(rows, r[:p], self.ledger.global_epoch))

    def run(self, progress: Callable[[int, int], None] | None = None) -> None:
        t0 = time.perf_counter()
        self.prewarm()
        total = self.cfg.ticks
        every = max(1, total // 200)
        for k in range(1, total + 1):
            self.step(k)
            if progress is not None and (k % every == 0 or k == total):
                progress(k, total)
        self.wall_seconds = time.perf_counter() - t0

    def step(self, k: int) -> None:
        cfg = self.cfg
        dt = cfg.tick_s
        self.tick_no = k
        self.now = now = k * dt
        self._arrivals(now)
        unmet, capped = self._usage_and_cpu(k, now, dt)
        self._completions(now)
        if cfg.reclaim:
            self._estimate(now, dt)
        rounds = self._memory(now)
        self._escalation(now, rounds)
        if k % cfg.every(cfg.schedule_interval_s) == 0:
            self._place(now)
        self._throttle(k, now)
        if k % cfg.every(60.0) == 0:
            self.shell.sample_reservations()
        if k % cfg.every(300.0) == 0:
            self.shell.update_volatility()
        self._check(now)
        self._account(k, dt, unmet, capped)

    # 1-3 ------------------------------------------------------------------------------------------
    def _arrivals(self, now: float) -> None:
        tasks, ts = self.tasks, self.ts
        i = self.next_task
        while i < len(tasks) and tasks.submit[i] <= now:
            ts.state[i] = PENDING
            self.queue.add(tasks.specs[i].equivalence_key, i)
            i += 1
        self.next_task = i

    def _usage_and_cpu(self, k: int, now: float, dt: float) -> tuple[float, float]:
        """Usage of every row, cpu contention, throttled time and batch progress (whole-array, by row)."""
        t, rs, p = self.table, self.ledger.row_arrays(), self.n_prod
        h = rs.high
        prod = self.prod.step(now, dt)
        t.usage[:p] = prod
        batch = t.kind[:h] == BATCH
        fresh = batch & np.isnan(t.usage[:h, RAM])  # placed last tick: its memory is now in use
        if fresh.any():
            rows = np.flatnonzero(fresh)
            t.usage[rows] = 0.0
            t.usage[rows, RAM] = self.tasks.ram_use[t.task[rows]]
        demand, quota = t.demand[:h], t.quota[:h]
        want = np.where(batch, np.minimum(demand, quota), 0.0)
        cap_eff = np.maximum(t.cap[:p], rs.reservation[:p, CPU])  # a starvation cap never below r
        want[:p] = np.minimum(prod[:, CPU], cap_eff)
        live = rs.live_rows()
        granted, self.psi = cpu.contend(live, rs.node, want, t.weight[:h], self.cap[:, CPU])
        t.usage[:h, CPU] = np.where(rs.alive[:h], granted, np.nan)
        # cpu.stat throttled time of a cpu-bound pod: the share of the tick its quota did not cover
        with np.errstate(invalid="ignore", divide="ignore"):
            lost = np.where(batch & (demand > 0), np.clip((demand - quota) / demand, 0.0, 1.0) * dt, 0.0)
        t.throttled[:h, k % self.window] = lost
        t.throttled_total[:h] += lost
        ran = np.clip(now - t.startup_until[:h], 0.0, dt)  # no progress while starting up (inf: never)
        t.work[:h] += np.where(batch, granted * ran, 0.0)
        return float((prod[:, CPU] - granted[:p]).sum()), float((prod[:, CPU] - want[:p]).sum())

    def _completions(self, now: float) -> None:
        t, ts, tasks = self.table, self.ts, self.tasks
        h = self.ledger.row_arrays().high
        done = np.flatnonzero((t.kind[:h] == BATCH) & (t.work[:h] >= t.work_total[:h] * (1.0 - 1e-12)))
        for row in done.tolist():
            i = int(t.task[row])
            n = int(ts.node[i])
            res = self.ledger.apply(
                RemoveBatch(tasks.specs[i].id, n, self.ledger.node_epoch(n), RemovalCause.FINISHED)
            )
            assert res.accepted, res.reasons
            ts.throttled_s[i] += t.throttled_total[row]
            t.free(row)
            ts.state[i], ts.row[i], ts.finish[i] = DONE, -1, now
        if len(done):
            self._rows_changed()

    def _estimate(self, now: float, dt: float) -> None:
        r = self.estimator.update_in_place(self.est_state, self.table.usage, now, dt)
        led = self.ledger
        rows = led.row_arrays().live_rows()
        res = led.apply(ReservationUpdate(rows, np.take(r, rows, axis=0), led.global_epoch))
        assert res.accepted, res.reasons

    # 5-6 ------------------------------------------------------------------------------------------
    def _memory(self, now: float) -> dict[int, tuple[bool, tuple[str, ...]]]:
        """Memory mitigation; returns the nodes that had a mitigation round and whether pressure persisted."""
        led, t = self.ledger, self.table
        rs = led.row_arrays()
        live = rs.live_rows()
        flagged = memory.screen(live, rs.node, rs.reservation, t.usage, led.reservation_sum, led.capacity_tol)
        nodes = set(np.flatnonzero(flagged.any(axis=1)).tolist())
        if self.cfg.production_ram_limit_ratio is not None:  # own-limit breaches anywhere
            p = self.n_prod
            over_limit = np.flatnonzero(np.nan_to_num(t.usage[:p, RAM]) > t.limit[:p, RAM])
            nodes.update(rs.node[over_limit].tolist())
        rounds: dict[int, tuple[bool, tuple[str, ...]]] = {}
        for n in sorted(nodes):
            rows = self.node_rows.of(n)
            persisted = False
            if flagged[n].any():
                over, high = memory.node_pressure(t.usage[rows], self.cap[n], self.cfg.memory_high)
                snap = snapshot(led, t, n, rows, memory.conditions(over, high))
                plan = plan_evictions(snap, self.cfg.eviction, now)
                for i, v in enumerate(plan.victims):
                    self._evict(v, n, plan.epoch + i, now)
                persisted = bool(plan.unresolved)
                rows = rows[t.kind[rows] != 0]
            kills = memory.oom_victims(
                rows[led.row_arrays().alive[rows]], rs.is_batch, t.usage, t.limit, self.cap[n]
            )
            for row in kills:
                self._kernel_kill(row, n, now)
            if flagged[n].any():
                rounds[n] = (persisted or bool(kills), ("ram",))
        if nodes:
            self._rows_changed()
        return rounds

    def _evict(self, victim, n: int, epoch: int, now: float) -> None:  # type: ignore[no-untyped-def]
        led, m = self.ledger, self.metrics
        row = led.row_of(victim.workload)
        res = led.apply(Eviction(victim.workload, n, epoch, victim.limit_breach_override, victim.reasons))
        if not res.accepted:
            m.counts["stale_evictions"] += 1
            return
        m.evictions[victim.cause.value] += 1
        if row < self.n_prod:  # service: only through the override; placement and request stay
            m.counts["production_evictions"] += 1
            if not victim.limit_breach_override:
                m.counts["production_evictions_without_override"] += 1
            self.prod.restart(np.array([row]))
            self._reinit_rows(np.array([row]), now)
            return
        task = int(self.table.task[row])
        self._requeue(task, row, now)
        if victim.requeue is not None:
            self.shell.evicted(victim.equivalence_key, n, now, victim.requeue.cooldown_until)

    def _requeue(self, task: int, row: int, now: float) -> None:
        """Back to the queue; its work is lost: no checkpoint, restarted from scratch (seed 000 §4.4)."""
        ts = self.ts
        ts.throttled_s[task] += self.table.throttled_total[row]
        self.table.free(row)
        ts.state[task], ts.row[task], ts.node[task] = PENDING, -1, -1
        ts.evictions[task] += 1
        self.queue.add(self.tasks.specs[task].equivalence_key, task)

    def _kernel_kill(self, row: int, n: int, now: float) -> None:
        led, m = self.ledger, self.metrics
        if row < self.n_prod:
            m.counts["production_oom_kills"] += 1
            self.prod.restart(np.array([row]))
            self._reinit_rows(np.array([row]), now)
            self.table.usage[row] = np.nan
            return
        task = int(self.table.task[row])
        spec = self.tasks.specs[task]
        res = led.apply(RemoveBatch(spec.id, n, led.node_epoch(n), RemovalCause.FAILED))
        assert res.accepted, res.reasons
        m.counts["batch_oom_kills"] += 1
        self.ts.kills[task] += 1
        self._requeue(task, row, now)
        self.ts.evictions[task] -= 1  # a kill is not an eviction

    def _escalation(self, now: float, rounds: dict[int, tuple[bool, tuple[str, ...]]]) -> None:
        thr, esc = self.cfg.throttle.psi_some_threshold, self.cfg.escalation
        for n in np.flatnonzero(self.psi >= thr).tolist():
            persisted, dims = rounds.get(n, (False, ()))
            rounds[n] = (True, (*dims, "cpu"))
        for n in [n for n in self.history if n not in rounds]:
            del self.history[n]  # pressure is gone: the run of failed rounds ends
        for n, (persisted, dims) in sorted(rounds.items()):
            hist = self.history.setdefault(n, [])
            hist.append(MitigationRound(now, persisted, dims))
            del hist[:-HISTORY_KEEP]
            if not could_escalate(hist, esc):
                continue  # no snapshot to build for a round where the core cannot escalate
            rows = self.node_rows.of(n)
            snap = snapshot(self.ledger, self.table, n, rows)
            decision = decide_escalation(snap, hist, self.cfg.escalation, now)
            if not decision.escalate:
                continue
            self.metrics.counts["escalations"] += 1
            for i, v in enumerate(decision.drain):
                self._evict(v, n, decision.epoch + i, now)
            if decision.slack_ineligible_until is not None:
                self.shell.ineligible_until[n] = decision.slack_ineligible_until
            self._rows_changed()
            del self.history[n]

    # 7-8 ------------------------------------------------------------------------------------------
    def _place(self, now: float) -> None:
        send = self.shell.select(self.queue, self.tasks, now)
        if not send:
            return
        decision = self.shell.run(send, self.tasks, now, self.rng_schedule)
        results = self.ledger.apply_all(decision.placements)
        index = {self.tasks.specs[i].id: i for i in send}
        placed: list[int] = []
        for res in results:
            if not res.accepted:
                self.shell.stats["stale"] += 1
                continue
            placed.append(index[res.commitment.workload.id])  # type: ignore[union-attr]
        if not placed:
            return
        self._grow()
        self._start(placed, now)
        by_class: dict[str, list[int]] = {}
        for i in placed:
            by_class.setdefault(self.tasks.specs[i].equivalence_key, []).append(i)
        for key, ids in by_class.items():
            self.queue.take(key, ids)
        self.shell.stats["placed"] += len(placed)
        self._rows_changed()

    def _start(self, placed: list[int], now: float) -> None:
        led, t, ts, tasks = self.ledger, self.table, self.ts, self.tasks
        ids = np.array(placed)
        rows = np.array([led.row_of(tasks.specs[i].id) for i in placed])
        nodes = led.row_arrays().node[rows]
        t.kind[rows] = BATCH
        t.task[rows] = ids
        t.limit[rows] = np.inf
        t.limit[rows, RAM] = tasks.requests[ids, RAM]  # slack memory denied: its limit is its request
        t.demand[rows] = tasks.demand[ids]
        t.quota[rows] = np.inf
        t.floor[rows] = 0.0
        t.cap[rows] = np.inf
        t.weight[rows] = self.cfg.throttle.batch_weight
        t.describe(rows, [tasks.specs[i] for i in placed])
        t.usage[rows] = np.nan
        t.throttled[rows] = 0.0
        t.throttled_total[rows] = 0.0
        t.work[rows] = 0.0
        t.work_total[rows] = tasks.work[ids]
        t.startup_until[rows] = now + self.cfg.batch.startup_s
        self._reinit_rows(rows, now)
        ts.state[ids] = RUNNING
        ts.row[ids] = rows
        ts.node[ids] = nodes
        first = np.isnan(ts.first_start[ids])
        ts.first_start[ids[first]] = now
        for i, n in zip(placed, nodes.tolist(), strict=True):
            self.shell.started(tasks.specs[i].image, n)

    def _throttle(self, k: int, now: float) -> None:
        led, t, cfg = self.ledger, self.table, self.cfg
        rs = led.row_arrays()
        n_nodes, p = led.n_nodes, self.n_prod
        # the service claim: production holds rows 0..P-1 (the blueprint) and no other row is service
        u, r = t.usage[:p, CPU], rs.reservation[:p, CPU]
        eff = np.where(np.isnan(u), r, np.fmax(r, u))
        claim = np.bincount(rs.node[:p], weights=eff, minlength=n_nodes)
        brow = self._batch_rows()
        bon = rs.node[brow]
        ub = t.usage[brow, CPU]
        known = ~np.isnan(ub)
        used = np.bincount(bon[known], weights=ub[known], minlength=n_nodes)
        sampled = np.bincount(bon[known], minlength=n_nodes) > 0
        pressured = self.psi >= cfg.throttle.psi_some_threshold
        previous = self.prev_allowance.copy()
        cap_cpu = self.cap[:, CPU]
        allow = cpu.allowances(cap_cpu, claim, used, sampled, pressured, previous, cfg.throttle)
        self.prev_allowance = allow
        self._starvation(k, now)
        if not len(brow):
            return
        caps = np.minimum(t.limit[brow, CPU], cap_cpu[bon])
        caps = np.where(t.slack_cpu[brow], caps, np.minimum(caps, rs.request[brow, CPU]))
        q, binds = cpu.fast_quotas(
            bon, rs.request[brow, CPU], caps, t.floor[brow], allow, cap_cpu, cfg.throttle
        )
        t.quota[brow] = q
        slow = np.flatnonzero((pressured | binds) & (np.bincount(bon, minlength=n_nodes) > 0))
        for n in slow.tolist():
            self._core_quotas(n, now, previous[n])
        if cfg.audit_nodes and k % cfg.every(cfg.audit_interval_s) == 0:
            self._audit(now, bon, slow, previous)

    def _core_quotas(self, n: int, now: float, previous: float) -> dict[str, float]:
        t, led = self.table, self.ledger
        rows = self.node_rows.of(n)
        has = rows[t.floor[rows] > 0]
        floors = dict(zip(t.ids[has].tolist(), t.floor[has].tolist(), strict=True))
        snap = snapshot(led, t, n, rows, cpu.pressure_conditions(float(self.psi[n])))
        prev = None if math.isnan(previous) else previous
        quotas = cpu.core_quotas(snap, self.cfg.throttle, now, prev, floors)
        for wid, q in quotas.items():
            t.quota[led.row_of(wid)] = q
        self.metrics.counts["throttle_core_plans"] += 1
        return quotas

    def _audit(self, now: float, bon: np.ndarray, slow: np.ndarray, previous: np.ndarray) -> None:
        fast_nodes = np.setdiff1d(np.unique(bon), slow)
        if not len(fast_nodes):
            return
        start = (self.tick_no // self.cfg.every(self.cfg.audit_interval_s)) * self.cfg.audit_nodes
        pick = fast_nodes[(start + np.arange(self.cfg.audit_nodes)) % len(fast_nodes)]
        t = self.table
        for n in np.unique(pick).tolist():
            rows = self.node_rows.of(n)
            b = rows[t.kind[rows] == BATCH]
            fast = dict(zip(t.ids[b].tolist(), t.quota[b].tolist(), strict=True))
            core = self._core_quotas(n, now, float(previous[n]))
            self.metrics.counts["throttle_audits"] += 1
            self.metrics.counts["throttle_audit_mismatches"] += cpu.audit(fast, core)

    def _starvation(self, k: int, now: float) -> None:
        """Anti-starvation for the nodes whose turn it is (each node once per window, staggered)."""
        every = self.cfg.every(self.cfg.starvation_interval_s)
        led, t, cfg = self.ledger, self.table, self.cfg
        rs = led.row_arrays()
        live = rs.live_rows()
        turn = (rs.node[live] + k) % every == 0
        rows = live[turn]
        if not len(rows):
            return
        t.floor[rows] = 0.0  # last round's floors and caps end with the node's new round
        t.cap[rows] = np.inf
        window_s = self.window * cfg.tick_s
        b = rows[t.kind[rows] == BATCH]
        starved = b[t.throttled[b].sum(axis=1) > cfg.starvation.theta * window_s]
        for n in np.unique(rs.node[starved]).tolist():
            on = self.node_rows.of(n)
            brows = on[t.kind[on] == BATCH]
            throttled = dict(zip(t.ids[brows].tolist(), t.throttled[brows].sum(axis=1).tolist(), strict=True))
            snap = snapshot(led, t, n, starvation_rows(on, t, rs))
            decision = plan_anti_starvation(snap, throttled, window_s, cfg.starvation, now)
            for s in decision.starved:
                t.floor[led.row_of(s.workload)] = s.allocation
            for c in decision.caps:
                t.cap[led.row_of(c.workload)] = c.quota
            self.metrics.counts["starvation_rounds"] += 1
            self.metrics.counts["starvation_caps"] += len(decision.caps)

    # 9 --------------------------------------------------------------------------------------------
    def _check(self, now: float) -> None:
        bad = restoration_violations(self.ledger, self.blueprint)
        if bad:
            m = self.metrics
            m.counts["restoration_violation_ticks"] += 1
            m.counts["restoration_violations"] += len(bad)
            if len(m.violations) < 10:
                m.violations.extend(f"t={now:g}s: {r.detail}" for r in bad[: 10 - len(m.violations)])

    def _account(self, k: int, dt: float, unmet: float, capped: float) -> None:
        led, t, m, p = self.ledger, self.table, self.metrics, self.n_prod
        rs = led.row_arrays()
        n = led.n_nodes
        p_use = np.bincount(rs.node[:p], weights=np.nan_to_num(t.usage[:p, CPU]), minlength=n)
        b_rows = self._batch_rows()
        b_on = rs.node[b_rows]
        b_use = np.bincount(b_on, weights=np.nan_to_num(t.usage[b_rows, CPU]), minlength=n)
        b_res = np.take(rs.reservation, b_rows, axis=0)
        b_res_cpu = np.bincount(b_on, weights=b_res[:, CPU], minlength=n)
        b_res_ram = np.bincount(b_on, weights=b_res[:, RAM], minlength=n)
        m.tick(dt, p_use, b_use, b_res_cpu, b_res_ram, unmet, capped)
        if k % m.sample_every == 0 or k == 1:
            b_req = np.bincount(b_on, weights=rs.request[b_rows, CPU], minlength=n)
            m.sample(
                self.now,
                led.request_sum[:, CPU] + b_req,
                led.reservation_sum[:, CPU],
                p_use + b_use,
                float(p_use.sum()),
            )
        if self.cfg.reclaim and k % self.cfg.every(self.cfg.accuracy_every_s) == 0:
            past = ~self.est_state.pinned[:p] & (self.now >= self.est_state.grace_until[:p])
            m.record_accuracy(rs.request[:p][past], rs.reservation[:p][past], t.usage[:p][past])
