"""The simulation loop: one tick of simulated time through the unchanged policy core.

One tick (``dt`` = 10 s by default) at time ``t``, in order:

1. arrivals: batch pods submitted by ``t`` join the queue, and so do the last tick's eviction
   victims, gone now (EVICTING -> EVICTED -> PENDING);
2. usage: production from its profiles, batch from its demand; cpu contention shares each node
   (:mod:`kalena.sim.cpu`), records unmet production demand and throttled batch, advances batch work;
3. completions: batch pods whose work is done leave (``RemoveBatch``);
4. estimation: the estimator's in-place update on every row, committed as one ``ReservationRefresh``
   (skipped with reclamation off: every reservation stays at its request);
5. the core's node round over every node at once (``kalena.core.controller.node_round``): its
   evictions and escalation drains committed as ``Eviction``s (batch requeued with its cooldown),
   slack-ineligibility deadlines, the batch quotas and service caps for the next tick; then the
   kernel OOM-kills what still does not fit (:mod:`kalena.sim.memory`);
6. placement every ``schedule_interval_s``: the core's ``schedule`` over the pods that could fit
   (:mod:`kalena.sim.placement`), its ``PlaceBatch`` commitments applied; a placed pod starts at
   the core's start quota;
7. the restoration invariant (``restoration_violations``) and the metrics.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from kalena.archive import Archive, ArchiveEvent
from kalena.core.cluster import Cluster
from kalena.core.config import make_estimator
from kalena.core.controller import (
    SCREEN_RTOL,
    NodeSignals,
    RoundDecision,
    RoundState,
    estimator_limits,
    node_round,
    view_from_ledger,
)
from kalena.core.enforcement import start_quota
from kalena.core.enforcement.nodes import group_sum, rows_by_node
from kalena.core.estimators import (
    MarginClass,
    append_rows,
    assign_rows,
)
from kalena.core.ledger import (
    Blueprint,
    Eviction,
    Ledger,
    RemovalCause,
    RemoveBatch,
    ReservationRefresh,
    ReservationUpdate,
    restoration_violations,
    running_fit,
)
from kalena.core.lifecycle import Lifecycle, TaskState, TransitionReason, eviction_reason
from kalena.core.resources import CPU, GPU, NDIM, NON_COMPRESSIBLE_DIMS, RAM
from kalena.core.tolerance import REL_TOL
from kalena.sim import cpu, memory
from kalena.sim.batch import BatchTasks, generate
from kalena.sim.config import SimConfig
from kalena.sim.metrics import Metrics
from kalena.sim.placement import BatchQueue, PlacementShell
from kalena.sim.production import Lookahead, ProductionUsage
from kalena.sim.recorded import RecordedUsage, Samples
from kalena.sim.rows import BATCH, PRODUCTION, RowTable, cpu_weight

LONG_AGO = -1e12  # production started before the run (finite: the estimator needs a time)
GROW_CHUNK = 1024  # rows added to the simulator's columns at a time
# Production's next step is drawn on a second thread (sim.production.Lookahead) from this many pods:
# at 100,000 a step takes about 6 ms, which the thread hides; at Irina's 2,714 it takes 0.16 ms,
# about what handing it to the thread and back costs
LOOKAHEAD_MIN_PODS = 20_000


class SimulationBug(RuntimeError):
    """The core rejected a commitment the simulator built from its own fresh state: a bug, always."""


def _accepted(result) -> None:  # type: ignore[no-untyped-def]
    if not result.accepted:
        raise SimulationBug("; ".join(r.detail or r.code.value for r in result.reasons))


@dataclass
class TaskColumns:
    """Per-pod bookkeeping of the batch population (arrays of length T); the pods' states and their
    histories are the core's lifecycle record (``Simulation.life``; handle = task index)."""

    row: np.ndarray
    node: np.ndarray
    first_start: np.ndarray
    finish: np.ndarray
    evictions: np.ndarray
    kills: np.ndarray
    throttled_s: np.ndarray

    @classmethod
    def of(cls, n: int) -> TaskColumns:
        return cls(
            row=np.full(n, -1, dtype=np.int64),
            node=np.full(n, -1, dtype=np.int64),
            first_start=np.full(n, np.nan),
            finish=np.full(n, np.nan),
            evictions=np.zeros(n, dtype=np.int64),
            kills=np.zeros(n, dtype=np.int64),
            throttled_s=np.zeros(n),
        )


def population(capacity: np.ndarray, cfg: SimConfig) -> BatchTasks:
    """The batch population ``cfg`` generates for nodes of ``capacity`` (N, 8): offered in
    proportion to their finite cpu, memory per core as theirs (:func:`kalena.sim.batch.generate`).
    A run on another cluster with this population (a compacted one, say) faces the same work."""
    cap_cpu, cap_ram = capacity[:, CPU], capacity[:, RAM]
    finite_cpu = float(cap_cpu[np.isfinite(cap_cpu)].sum())
    gib_per_core = float(cap_ram[np.isfinite(cap_ram)].sum()) / max(finite_cpu, 1e-9)
    return generate(
        cfg.batch,
        finite_cpu,
        gib_per_core,
        cfg.horizon_s,
        cfg.seed,
        warmup=48 * 3600.0 if cfg.batch_warm_start else 0.0,
        load_factor=cfg.batch_load_factor,
    )


class Simulation:
    """A cluster, its production usage, a batch population, and the core deciding everything."""

    #: When production started, for the estimator's startup grace: long before the run (a replay
    #: of a recorded node sets the recording's first round, when a node agent first saw it).
    production_started = LONG_AGO

    def __init__(
        self,
        cluster: Cluster,
        config: SimConfig,
        tasks: BatchTasks | None = None,
        production: Samples | None = None,
        *,
        measured: bool = True,
    ) -> None:
        """``tasks``: a recorded batch population instead of the generated one (``config.batch``);
        ``production``: recorded usage samples instead of the synthetic model (``config.production``).

        ``measured=False``: a run kept for its state alone (compaction's checkpoints) skips what
        only the report reads, the per-tick figures and the restoration check (about 5 % of a
        day); it runs the same and cannot be reported."""
        self.cfg = cfg = config
        self.measured = measured
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
        self.prod: ProductionUsage | RecordedUsage = (
            ProductionUsage(rs.request[:p], cfg.production, streams[0], streams[1])
            if production is None
            else RecordedUsage(rs.request[:p], [s.id for s in rs.specs[:p]], production)  # type: ignore[union-attr]
        )
        self._lookahead: Lookahead | None = None  # while ``run`` runs: the next step drawn ahead
        self.tasks: BatchTasks = tasks if tasks is not None else population(self.cap, cfg)
        self.ts = TaskColumns.of(len(self.tasks))
        self.life = Lifecycle(capacity=max(64, len(self.tasks)))
        self.next_task = 0
        self.queue = BatchQueue()
        # victims signalled this round: their processes exit before the next (a batch pod honours
        # SIGTERM at once), when they are EVICTED and requeued, as a node agent sees them go
        self.dying: list[tuple[int, TransitionReason]] = []
        # the tasks each pass started, with when their startup ends, oldest first (every start
        # waits the same ``startup_s``): the tasks that may be up, without scanning every task
        self.starting: deque[tuple[float, np.ndarray]] = deque()
        self.policy = cfg.policy
        self.window = cfg.every(self.policy.round.starvation_window_s)
        self.table = RowTable(p + GROW_CHUNK, self.window)
        self.shell = PlacementShell(led, cfg.policy.placement, cfg.policy.pairing)
        self.metrics = Metrics(self.cap, led.request_sum, cfg.ticks, cfg.every(cfg.sample_every_s))
        self.round_state = RoundState.initial(led.n_nodes)
        self.psi = np.zeros(led.n_nodes)
        self.cap_ok = np.isfinite(self.cap[:, CPU]) & (self.cap[:, CPU] > 0)
        self.batch_share = np.zeros(led.n_nodes)  # batch cpu / capacity per node, last tick
        self.harm = (0.0, 0, 0)  # this tick's interference cores, production rows above r, alive
        # per node, after the last round
        self.memory_after = np.zeros((led.n_nodes, len(NON_COMPRESSIBLE_DIMS)))
        self.memory_steps = np.zeros_like(self.memory_after)  # per node, arrived at once this tick
        self.now = 0.0
        self.tick_no = 0
        self.wall_seconds = 0.0
        self._brows: np.ndarray | None = None
        self._rows_version = 0  # bumped whenever rows are added or freed (_rows_changed)
        self._memory_seen: tuple[int, np.ndarray] | None = None  # (version, _node_memory()) this tick
        #: where each minute's usage, reservations and the events go (``kalena simulate --archive``)
        self.archive: Archive | None = None
        self._archived_events: list[ArchiveEvent] = []
        self._throttled_seen = np.zeros(0, dtype=np.int64)
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
        self.estimator = make_estimator(cfg.policy)
        cap = t.capacity
        req = np.zeros((cap, NDIM))
        req[:p] = rs.request[:p]
        lim = np.zeros((cap, NDIM))
        lim[:p] = self._estimator_limits(np.arange(p))
        start = np.zeros(cap)
        start[:p] = self.production_started
        grace = np.zeros(cap)
        specs = rs.specs[:p]
        grace[:p] = [s.startup_grace_s for s in specs]  # type: ignore[union-attr]
        pinned = np.ones(cap, dtype=bool)
        pinned[:p] = [(not cfg.reclaim) or s.reclaim_disabled for s in specs]  # type: ignore[union-attr]
        classes = np.full(cap, int(MarginClass.BATCH))
        classes[:p] = int(MarginClass.SERVICE)
        self.est_dims = self._estimated_dims(p)
        self.est_state = self.estimator.init(
            req, lim, start, grace=grace, pinned=pinned, classes=classes, dims=self.est_dims
        )

    def _estimated_dims(self, p: int) -> tuple[int, ...] | None:
        """The dimensions the estimator works on (``dims`` of :mod:`kalena.core.estimators.base`):
        cpu, ram and every other one some pod requests, gpu aside (rule 4 holds it at R). Usage
        is never anything else: batch and recorded usage fill cpu and ram, the synthetic model the
        requested dimensions. None (all 8) where leaving one out could change the estimator's
        answer, or where it would save nothing."""
        if not self.estimator.zero_stays_zero:
            return None
        asked = self.ledger.row_arrays().request[:p].any(axis=0) | self.tasks.requests.any(axis=0)
        asked[[CPU, RAM]] = True
        asked[GPU] = False
        dims = tuple(np.flatnonzero(asked).tolist())
        return None if len(dims) == NDIM - 1 else dims

    def _production(self, t: float, dt: float) -> tuple[np.ndarray, np.ndarray]:
        """Production's usage at ``t`` and the pods whose burst began with it (drawn ahead in ``run``)."""
        if self._lookahead is not None:
            return self._lookahead.step(t, dt)
        return self.prod.step(t, dt), self.prod.burst_started

    def _restart(self, rows: np.ndarray) -> None:
        (self._lookahead or self.prod).restart(rows)

    def _estimator_limits(self, rows: np.ndarray) -> np.ndarray:
        """L for the estimator: the core's rule, ``max(min(limit, C), R)``."""
        rs = self.ledger.row_arrays()
        return estimator_limits(self.table.limit[rows], self.cap[rs.node[rows]], rs.request[rows])

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
            dims=self.est_dims,
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
            dims=self.est_dims,
        )
        assign_rows(self.est_state, rows, new)
        self.table.started[rows] = now

    def _rows_changed(self) -> None:
        """Rows were added or freed: drop what was derived from the row set."""
        self._brows = None
        self._rows_version += 1

    def task_states(self) -> np.ndarray:
        """Every batch pod's lifecycle state code (``TaskState.code``); -1 before its submission."""
        out = np.full(len(self.tasks), -1, dtype=np.int64)
        n = len(self.life)
        out[:n] = self.life.state(np.arange(n))
        return out

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
                self._production(-cfg.prewarm_s + (k + 1) * cfg.tick_s, cfg.tick_s)
            return
        p = self.n_prod
        for k in range(steps):
            now = -cfg.prewarm_s + (k + 1) * cfg.tick_s
            self.table.usage[:p] = self._production(now, cfg.tick_s)[0]
            r = self.estimator.update_in_place(self.est_state, self.table.usage, now, cfg.tick_s)
        # nothing reads the ledger before t = 0: it takes the estimator's last reservations once
        self.ledger.apply(ReservationUpdate(np.arange(p), r[:p], self.ledger.global_epoch))

    def run(
        self, progress: Callable[[int, int], None] | None = None, progress_every: int | None = None
    ) -> None:
        """Every tick; ``progress(k, total)`` after every ``progress_every`` ticks (default: 200
        calls over the run) and after the last."""
        t0 = time.perf_counter()
        with ThreadPoolExecutor(1, thread_name_prefix="kalena-production") as pool:
            if isinstance(self.prod, ProductionUsage) and self.n_prod >= LOOKAHEAD_MIN_PODS:
                self._lookahead = Lookahead(self.prod, pool)
            try:
                self.prewarm()
                total = self.cfg.ticks
                every = progress_every or max(1, total // 200)
                for k in range(1, total + 1):
                    self.step(k)
                    if progress is not None and (k % every == 0 or k == total):
                        progress(k, total)
            finally:
                if self._lookahead is not None:
                    self._lookahead.close()
                    self._lookahead = None
        if self.archive is not None and self._archived_events:  # those since the last sample
            self.archive.record_events(self._archived_events)
            self._archived_events = []
        self.wall_seconds = time.perf_counter() - t0

    def step(self, k: int) -> None:
        cfg = self.cfg
        dt = cfg.tick_s
        self.tick_no = k
        self.now = now = k * dt
        self._arrivals(now)
        self._evictions_done(now)
        unmet, capped = self._usage_and_cpu(k, now, dt)
        self._completions(now)
        if cfg.enforce:  # in the baseline the kernel judges every node anyway, with nobody to race
            self._kernel_first(now, dt)
        if cfg.reclaim:
            self._estimate(now, dt)
        if cfg.enforce:
            self._round(now)
        else:
            self._kernel_only(now)
        if k % cfg.every(cfg.schedule_interval_s) == 0:
            self._place(now)
        if k % cfg.every(60.0) == 0:
            self.shell.sample_reservations()
            if self.archive is not None:
                self._archive_sample(now)
        if k % cfg.every(300.0) == 0:
            self.shell.update_volatility()
        if self.measured:
            self._check(now)
            self._account(k, dt, unmet, capped)

    def _archive_sample(self, now: float) -> None:
        """Every live pod's usage, reservation and throttled seconds since the last sample, and the
        events since then, into the archive (one transaction each)."""
        assert self.archive is not None
        led, t = self.ledger, self.table
        rs = led.row_arrays()
        live = rs.live_rows()
        total = t.throttled_total[: rs.high]
        seen = np.zeros(rs.high, dtype=np.int64)
        seen[: min(rs.high, len(self._throttled_seen))] = self._throttled_seen[: rs.high]
        # a reused row restarts its count at 0: its first interval counts from there
        thr = np.where(total >= seen, total - seen, total)[live] * 1e-6
        self._throttled_seen = total.copy()
        names = np.asarray(led.node_names, dtype=object)[rs.node[live]]
        self.archive.record(
            now, names.tolist(), rs.ids[live].tolist(), t.usage[live], rs.reservation[live], thr
        )
        if self._archived_events:
            self.archive.record_events(self._archived_events)
            self._archived_events = []

    def _archive_event(self, now: float, kind: str, workload: str, node: int, cause: str) -> None:
        if self.archive is not None:
            self._archived_events.append(
                ArchiveEvent(now, kind, self.ledger.node_names[node], workload, cause)
            )

    # 1-3 ------------------------------------------------------------------------------------------
    def _arrivals(self, now: float) -> None:
        tasks = self.tasks
        i = j = self.next_task
        while j < len(tasks) and tasks.submit[j] <= now:
            self.queue.add(tasks.specs[j].equivalence_key, j)
            j += 1
        if j > i:
            self.life.add([tasks.specs[k].id for k in range(i, j)], now, TransitionReason.SUBMITTED)
        self.next_task = j

    def _evictions_done(self, now: float) -> None:
        """Last round's victims are gone: EVICTED, then PENDING again (requeued, with their cooldown)."""
        if not self.dying:
            return
        for task, reason in self.dying:
            handle = np.array([task])
            self.life.move(handle, TaskState.EVICTED, now, reason)
            self.life.move(handle, TaskState.PENDING, now, TransitionReason.REQUEUED)
            self.queue.add(self.tasks.specs[task].equivalence_key, task)
        self.dying = []

    def _usage_and_cpu(self, k: int, now: float, dt: float) -> tuple[float, float]:
        """Usage of every row, cpu contention, throttled time and batch progress (whole-array, by row)."""
        t, rs, p = self.table, self.ledger.row_arrays(), self.n_prod
        h = rs.high
        prod, burst_started = self._production(now, dt)
        # memory that arrives at once this tick (a burst's onset, a placed pod's start) is a step
        # the node agent cannot meet in time (_kernel_first); the rest rises evenly over the tick
        nc = NON_COMPRESSIBLE_DIMS
        jump = np.flatnonzero(burst_started)
        steps = np.maximum(prod[jump][:, nc] - np.fmax(t.usage[jump][:, nc], 0.0), 0.0)  # NaN: 0
        t.usage[:p] = prod
        batch = t.kind[:h] == BATCH
        fresh = batch & np.isnan(t.usage[:h, RAM])  # placed last tick: its memory is now in use
        if fresh.any():
            rows = np.flatnonzero(fresh)
            t.usage[rows] = 0.0
            t.usage[rows, RAM] = self.tasks.ram_use[t.task[rows]]
            jump = np.concatenate([jump, rows])
            steps = np.concatenate([steps, t.usage[rows][:, nc]])
        on, n = rs.node[jump], len(self.cap)
        self.memory_steps = np.column_stack(
            [np.bincount(on, weights=steps[:, i], minlength=n) for i in range(len(nc))]
        )
        demand, quota = t.demand[:h], t.quota[:h]
        want = np.where(batch, np.minimum(demand, quota), 0.0)
        cap_eff = np.maximum(t.cap[:p], rs.reservation[:p, CPU])  # a starvation cap never below r
        # interference: production needs more cpu for the same work beside last tick's batch
        slowed = cpu.interference_cores(prod[:, CPU], self.batch_share[rs.node[:p]], self.cfg.interference)
        need = prod[:, CPU] + slowed
        want[:p] = np.minimum(need, cap_eff)
        live = rs.live_rows()
        granted, self.psi = cpu.contend(live, rs.node, want, t.weight[:h], self.cap[:, CPU])
        t.usage[:h, CPU] = np.where(rs.alive[:h], granted, np.nan)
        # over every row, free ones at node 0 with weight 0: the same terms in the same order as
        # over the live rows (a +0.0 never moves a sum), without gathering three columns
        b_cpu = np.bincount(np.maximum(rs.node[:h], 0), np.where(batch, granted, 0.0), len(self.cap))
        self.batch_share = np.divide(b_cpu, self.cap[:, CPU], out=np.zeros(len(b_cpu)), where=self.cap_ok)
        # the SLO proxy's time above reservation: against the reservation this usage met (the
        # tick's estimate comes after it; measured after it, usage would never stand above)
        up = rs.alive[:p]
        h_above = int(np.count_nonzero(granted[:p][up] > rs.reservation[:p, CPU][up] * (1.0 + REL_TOL)))
        self.harm = (float(slowed.sum()), h_above, int(np.count_nonzero(up)))
        # cpu.stat throttled time of a cpu-bound pod: the share of the tick its quota did not cover
        with np.errstate(invalid="ignore", divide="ignore"):
            lost = np.where(batch & (demand > 0), np.clip((demand - quota) / demand, 0.0, 1.0) * dt, 0.0)
        t.record_throttled(h, k % self.window, lost)
        ran = np.clip(now - t.startup_until[:h], 0.0, dt)  # no progress while starting up (inf: never)
        t.work[:h] += np.where(batch, granted * ran, 0.0)
        return float((need - granted[:p]).sum()), float((need - want[:p]).sum())

    def _completions(self, now: float) -> None:
        t, ts, tasks = self.table, self.ts, self.tasks
        done = self._finished_rows(self.ledger.row_arrays().high)
        if not len(done):
            return
        t_done = t.task[done]
        led = self.ledger
        for i, n in zip(t_done.tolist(), ts.node[t_done].tolist(), strict=True):
            _accepted(led.apply(RemoveBatch(tasks.specs[i].id, n, led.node_epoch(n), RemovalCause.FINISHED)))
        # the rows' own bookkeeping at once (each task and row once: no repeat to add in order)
        ts.throttled_s[t_done] += t.total_s(done)
        t.free(done)
        ts.row[t_done], ts.finish[t_done] = -1, now
        self.life.move(t_done, TaskState.SUCCEEDED, now, TransitionReason.FINISHED)
        self._rows_changed()

    def _finished_rows(self, h: int) -> np.ndarray:
        """The batch rows whose work is done (a replay overrides it with recorded completions)."""
        t = self.table
        return np.flatnonzero((t.kind[:h] == BATCH) & (t.work[:h] >= t.work_total[:h] * (1.0 - 1e-12)))

    def _estimate(self, now: float, dt: float) -> None:
        r = self.estimator.update_in_place(self.est_state, self.table.usage, now, dt)
        led = self.ledger
        h = led.row_arrays().high
        # the estimator's rows are the ledger's: every live row at once, by row (its first
        # ``high`` rows copied, as the estimator writes the array again); only the columns it
        # estimates when it leaves the others at r = R, as the ledger holds them
        dims = self.est_state.dims
        if dims is None:
            refresh = ReservationRefresh(r[:h], led.global_epoch)
        else:
            refresh = ReservationRefresh(self.est_state.reservation[:h], led.global_epoch, dims=dims)
        _accepted(led.apply(refresh))

    # 5-6 ------------------------------------------------------------------------------------------
    def _round(self, now: float) -> None:
        """The core's node round over every node; its decision carried out; then the kernel's OOM."""
        led, t = self.ledger, self.table
        h = led.row_arrays().high
        window = t.window_s(h)
        view = view_from_ledger(
            led,
            usage=t.usage,
            limit=t.limit,
            started_at=t.started,
            signals=self.signals(),
            throttled_s=window,
        )
        d = node_round(view, self.round_state, self.policy, now)
        self.round_state = d.state
        self._decided(d)
        m = self.metrics
        m.counts["rounds"] += 1
        for act in d.actions:
            if act.plan is not None:
                m.counts["eviction_plans"] += 1
            if act.escalation is not None:
                m.counts["escalations"] += 1
                m.counts["escalations_draining"] += bool(act.escalation.drain)
            for i, v in enumerate(act.victims):
                self._evict(v, act.node, act.first_epoch + i, now)
            if act.escalation is not None and act.escalation.slack_ineligible_until is not None:
                self.shell.keeper.ineligible(act.node, act.escalation.slack_ineligible_until)
        if any(act.victims for act in d.actions):  # (a plan with pressure and no victim moves nothing)
            self._rows_changed()
        # the next tick's cpu knobs: batch quotas, service caps (the floors are inside the quotas)
        rows = view.slot
        t.quota[rows[d.throttle.rows]] = d.throttle.quota
        t.cap[rows] = d.starvation.cap
        m.counts["starvation_caps"] += int(np.isfinite(d.starvation.cap).sum())
        self._lifecycle(view.is_batch & ~d.gone, rows, d.below_request, now)
        self._oom(now, d.triggered)
        self.memory_after = self._memory_now()

    def _kernel_only(self, now: float) -> None:
        """The baseline arm's tick where Kalena's round would be: nobody throttles, caps or evicts;
        pods come up after their startup, and the kernel's OOM killer judges every node."""
        none = np.zeros(0, dtype=np.int64)
        self._lifecycle(np.zeros(0, dtype=bool), none, np.zeros(0, dtype=bool), now)
        self._oom(now, np.ones((self.ledger.n_nodes, NDIM), dtype=bool))

    def _decided(self, decision: RoundDecision) -> None:
        """The round's decision, before it is carried out (its view is of live arrays): a hook for
        observers (the conformance test compares it with the node agent's)."""

    def _lifecycle(self, batch: np.ndarray, rows: np.ndarray, below: np.ndarray, now: float) -> None:
        """Started once past the startup; throttled while the round's quota is below the request."""
        life, t = self.life, self.table
        due: list[np.ndarray] = []
        while self.starting and self.starting[0][0] <= now:
            due.append(self.starting.popleft()[1])
        if due:  # those still starting (not evicted since) whose startup (this run's) is over
            cand = np.unique(np.concatenate(due)) if len(due) > 1 else due[0]
            cand = cand[life.state(cand) == TaskState.STARTING.code]
            up = cand[t.startup_until[self.ts.row[cand]] <= now]
            if len(up):
                life.move(up, TaskState.RUNNING, now, TransitionReason.STARTED)
        tasks = t.task[rows[batch]]
        below = below[batch]
        state = life.state(tasks)
        throttle = tasks[(state == TaskState.RUNNING.code) & below]
        release = tasks[(state == TaskState.THROTTLED.code) & ~below]
        if len(throttle):
            life.move(throttle, TaskState.THROTTLED, now, TransitionReason.THROTTLED)
        if len(release):
            life.move(release, TaskState.RUNNING, now, TransitionReason.UNTHROTTLED)

    def signals(self) -> NodeSignals:
        """What the simulated kernel signals: cpu PSI ``some`` (the contention model); memory has no
        notifications of its own here, the round's rule on the node's use stands in for them."""
        s = NodeSignals.quiet(self.ledger.n_nodes)
        s.psi_some[:, CPU] = self.psi
        return s

    def _memory_now(self) -> np.ndarray:
        """:meth:`_node_memory` now: the kernel's look before the round, while no row has come or
        gone since (the round changes no memory usage), else summed again."""
        seen = self._memory_seen
        if seen is not None and seen[0] == self._rows_version:
            return seen[1]
        return self._node_memory()

    def _node_memory(self) -> np.ndarray:
        """(N, 2) ram and storage in use per node, over the live rows."""
        rs, n = self.ledger.row_arrays(), self.ledger.n_nodes
        h = rs.high
        bins = np.where(rs.alive[:h], rs.node[:h], n)  # the free rows in group_sum's spare bin
        out = np.empty((n, len(NON_COMPRESSIBLE_DIMS)))
        for i, d in enumerate(NON_COMPRESSIBLE_DIMS.tolist()):  # a column at a time: no (h, 8) copy
            # usage is non-negative or NaN: fmax(u, 0) is nan_to_num(u), at a fraction of its cost
            out[:, i] = group_sum(np.fmax(self.table.usage[:h, d], 0.0), bins, n)
        return out

    def _kernel_first(self, now: float, dt: float) -> None:
        """The kernel before the round: a node whose memory went past its capacity faster than the
        node agent can free any. Memory that arrived at once this tick (a production burst's onset,
        a placed pod's start) is a step; the rest is taken to rise evenly over the tick from what
        the last round left. The agent wakes when the node passes the round's trigger level (its
        usage eventfd) and needs ``reaction_s`` to free memory, so where the steps plus the even
        rise over ``reaction_s`` exceed the room between that level (or the start, if above it)
        and capacity, the OOM killer acts before the round (:mod:`kalena.sim.memory`)."""
        used = self._node_memory()
        self._memory_seen = (self._rows_version, used)
        cap = self.cap[:, NON_COMPRESSIBLE_DIMS]
        before, steps = self.memory_after, self.memory_steps
        rise = steps + np.maximum(used - before - steps, 0.0) * (self.cfg.reaction_s / dt)
        with np.errstate(invalid="ignore"):  # an unbounded dimension (inf - inf) never overflows
            room = cap - np.maximum(before, self.policy.round.trigger_fraction * cap)
        fast = np.flatnonzero(((used > cap) & (rise > room)).any(axis=1))
        if len(fast):
            self._kill_over(fast.tolist(), now)

    def _oom(self, now: float, triggered: np.ndarray) -> None:
        """The kernel: a row over its own memory limit, or a node whose memory use still exceeds capacity.

        Only nodes the round saw above its trigger fraction on ram or storage can be over capacity
        (evictions only lower use), so only those are summed; limits are checked on every row.
        """
        led, t = self.ledger, self.table
        rs = led.row_arrays()
        h = rs.high
        nc = NON_COMPRESSIBLE_DIMS
        alive = rs.alive[:h]
        over_limit = np.zeros(h, dtype=bool)
        with np.errstate(invalid="ignore"):  # NaN (no sample, free row) is never over anything
            for d in nc.tolist():  # column views: no (h, 2) copies
                over_limit |= t.usage[:h, d] > t.limit[:h, d]
        over_limit &= alive
        node = rs.node[:h]
        nodes = set(node[over_limit].tolist())
        trig = triggered[:, nc].any(axis=1)
        if trig.any():
            # Every node's sums at once first (the baseline's kernel judges every node, every
            # tick): they add in another order than the exact sum below, so a node within
            # SCREEN_RTOL of its capacity is judged exactly too (the terms are >= 0).
            trig &= (self._memory_now() * (1.0 + SCREEN_RTOL) > self.cap[:, nc]).any(axis=1)
            rows = np.flatnonzero(alive)
            rows = rows[trig[node[rows]]]  # the nodes left's rows, grouped by node, each group ascending
            grouped, bounds = rows_by_node(rows, node[rows], led.n_nodes)
            for n in np.flatnonzero(trig).tolist():
                grp = grouped[bounds[n] : bounds[n + 1]]
                if len(grp) and np.any(np.nansum(t.usage[grp][:, nc], axis=0) > self.cap[n, nc]):
                    nodes.add(n)
        if nodes:
            self._kill_over(sorted(nodes), now)

    def _kill_over(self, nodes: list[int], now: float) -> None:
        """The OOM killer's victims on each of ``nodes`` (ascending), killed."""
        rs, t = self.ledger.row_arrays(), self.table
        live = rs.live_rows()
        grouped, bounds = rows_by_node(live, rs.node[live], self.ledger.n_nodes, only=nodes)  # ascending
        for n in nodes:
            rows = grouped[bounds[n] : bounds[n + 1]]
            for row in memory.oom_victims(rows, rs.request, t.usage, t.limit, self.cap[n]):
                self._kernel_kill(row, n, now)
        self._rows_changed()

    def _evict(self, victim, n: int, epoch: int, now: float) -> None:  # type: ignore[no-untyped-def]
        led, m = self.ledger, self.metrics
        row = led.row_of(victim.workload)
        res = led.apply(Eviction(victim.workload, n, epoch, victim.limit_breach_override, victim.reasons))
        if not res.accepted:
            m.counts["stale_evictions"] += 1
            return
        m.evictions[victim.cause.value] += 1
        self._archive_event(now, "eviction", victim.workload, n, victim.cause.value)
        if row < self.n_prod:  # service: only through the override; placement and request stay
            m.counts["production_evictions"] += 1
            if not victim.limit_breach_override:
                m.counts["production_evictions_without_override"] += 1
            self._restart(np.array([row]))
            self._reinit_rows(np.array([row]), now)
            self.table.usage[row] = np.nan  # stopped: the kernel's OOM check this tick must not see it
            return
        task = int(self.table.task[row])
        # killed at once without a grace (acute), else it exits on the SIGTERM
        done = TransitionReason.GRACE_EXPIRED if victim.grace_period_s <= 0 else TransitionReason.EXITED
        self._requeue(task, row, now, eviction_reason(victim.cause), done)
        if victim.requeue is not None:
            self.shell.evicted(victim.equivalence_key, n, now, victim.requeue.cooldown_until)

    def _requeue(
        self, task: int, row: int, now: float, reason: TransitionReason, done: TransitionReason | None = None
    ) -> None:
        """Off its node; its work is lost: no checkpoint, restarted from scratch (seed 000 §4.4).
        A kernel kill is EVICTED and pending at once; an eviction is EVICTING until the next round
        (``done``: how it ends). The eviction cooldown is per node (a placement filter), so the pod
        is pending as soon as it is gone."""
        ts = self.ts
        ts.throttled_s[task] += self.table.total_s(row)
        self.table.free(row)
        handle = np.array([task])
        ts.row[task], ts.node[task] = -1, -1
        ts.evictions[task] += 1
        if done is not None:
            self.life.move(handle, TaskState.EVICTING, now, reason)
            self.dying.append((task, done))
            return
        self.life.move(handle, TaskState.EVICTED, now, reason)
        self.life.move(handle, TaskState.PENDING, now, TransitionReason.REQUEUED)
        self.queue.add(self.tasks.specs[task].equivalence_key, task)

    def _kernel_kill(self, row: int, n: int, now: float) -> None:
        led, m = self.ledger, self.metrics
        self._archive_event(now, "oom-kill", str(led.row_arrays().ids[row]), n, "kernel-oom")
        if row < self.n_prod:
            m.counts["production_oom_kills"] += 1
            self._restart(np.array([row]))
            self._reinit_rows(np.array([row]), now)
            self.table.usage[row] = np.nan
            return
        task = int(self.table.task[row])
        spec = self.tasks.specs[task]
        _accepted(led.apply(RemoveBatch(spec.id, n, led.node_epoch(n), RemovalCause.FAILED)))
        m.counts["batch_oom_kills"] += 1
        self.ts.kills[task] += 1
        self._requeue(task, row, now, TransitionReason.KILLED_OOM)
        self.ts.evictions[task] -= 1  # a kill is not an eviction

    # 7-8 ------------------------------------------------------------------------------------------
    def _place(self, now: float) -> None:
        send = self.shell.select(self.queue, self.tasks, now)
        if not send:
            return
        decision = self.shell.run(send, self.tasks, now, self.rng_schedule)
        results = self.ledger.apply_all(decision.placements)
        placed: list[int] = []
        handle = self.life.handle  # a task's lifecycle handle is its index (every task is added)
        for res in results:
            if not res.accepted:
                self.shell.stats["stale"] += 1
                continue
            placed.append(handle(res.commitment.workload.id))  # type: ignore[union-attr]
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
        t.floor[rows] = 0.0
        t.cap[rows] = np.inf
        if self.cfg.enforce:
            t.quota[rows] = start_quota(tasks.requests[ids, CPU], self.policy.throttle)
            t.weight[rows] = self.cfg.policy.throttle.batch_weight
        else:  # the baseline: no quota, cpu.weight from the request as the kubelet sets it
            t.quota[rows] = np.inf
            t.weight[rows] = cpu_weight(tasks.requests[ids, CPU])
        t.by_reclaim[rows] = self._beyond_requests(rows, nodes)
        t.describe(rows, [tasks.specs[i] for i in placed])
        t.usage[rows] = np.nan
        t.throttled[:, rows] = 0
        t.throttled_window[rows] = 0
        t.throttled_total[rows] = 0
        t.work[rows] = 0.0
        t.work_total[rows] = tasks.work[ids]
        t.startup_until[rows] = now + self.cfg.batch.startup_s
        self._reinit_rows(rows, now)
        self.life.move(ids, TaskState.PLACED, now, TransitionReason.ADMITTED)
        self.life.move(ids, TaskState.STARTING, now, TransitionReason.START_REQUESTED)
        if self.cfg.batch.startup_s <= 0:  # no startup to wait for: up once started, as on a node
            self.life.move(ids, TaskState.RUNNING, now, TransitionReason.STARTED)
        else:
            self.starting.append((now + self.cfg.batch.startup_s, np.sort(ids)))
        ts.row[ids] = rows
        ts.node[ids] = nodes
        first = np.isnan(ts.first_start[ids])
        ts.first_start[ids[first]] = now
        for i, n in zip(placed, nodes.tolist(), strict=True):
            self.shell.started(tasks.specs[i].image, n)

    def _beyond_requests(self, rows: np.ndarray, nodes: np.ndarray) -> np.ndarray:
        """Which of this pass's placements (``rows``, in placement order, on ``nodes``) needed
        reclaimed capacity: by requests (production's and every batch pod's before it on the
        node, this one included) the node was full on cpu or ram (Borg's task-level count)."""
        led = self.ledger
        rs = led.row_arrays()
        older = rs.alive[: rs.high] & rs.is_batch[: rs.high]
        older[rows] = False
        older = np.flatnonzero(older)
        dims = [CPU, RAM]
        used = np.ascontiguousarray(led.request_sum[:, dims].T)  # (2, N): a 1-D add.at per dimension
        on = rs.node[older]
        for j, d in enumerate(dims):  # the same sums in the same order as a 2-D add.at, ~10x faster
            np.add.at(used[j], on, rs.request[:, d][older])
        used = used.T
        # the core's fit rule, counted by requests: each placement with the earlier ones there
        _, fits = running_fit(used, nodes, rs.request[rows][:, dims], led.capacity_tol[:, dims])
        return ~fits

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
        p_use = np.bincount(rs.node[:p], weights=np.fmax(t.usage[:p, CPU], 0.0), minlength=n)  # NaN: 0
        b_rows = self._batch_rows()
        b_on = rs.node[b_rows]
        b_cpu = np.fmax(t.usage[:, CPU][b_rows], 0.0)
        b_use = np.bincount(b_on, weights=b_cpu, minlength=n)
        b_res_cpu = np.bincount(b_on, weights=rs.reservation[:, CPU][b_rows], minlength=n)
        b_res_ram = np.bincount(b_on, weights=rs.reservation[:, RAM][b_rows], minlength=n)
        by_reclaim = float(b_cpu[t.by_reclaim[b_rows]].sum())
        m.tick(dt, p_use, b_use, b_res_cpu, b_res_ram, unmet, capped, by_reclaim, self.harm)
        if k % m.sample_every == 0 or k == 1:
            b_req = np.bincount(b_on, weights=rs.request[:, CPU][b_rows], minlength=n)
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
