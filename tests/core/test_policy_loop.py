"""The whole policy core in one loop, as a shell drives it, under random sequences of events.

A hypothesis state machine places batch through the scheduler, moves reservations through the
decay estimator, relieves random memory pressure through the eviction policy, and finishes
batch work, always through ledger commitments. After every step it checks the invariants the
spec names: the restoration invariant, the untouched request ledger, zero GPU slack, and that
production is evicted only through the limit-breach override (DaemonSets are not even in the
ledger: Phase 0 deducted them).
"""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from kalena.core.enforcement import (
    EvictionCause,
    EvictionConfig,
    NodeConditions,
    eviction_commitments,
    plan_evictions,
    snapshot_from_ledger,
)
from kalena.core.estimators import DecayEstimator
from kalena.core.ledger import Blueprint, Ledger, RemoveBatch, ReservationUpdate, restoration_violations
from kalena.core.model import Tier
from kalena.core.placement import PlacementConfig, SchedulingContext, schedule
from kalena.core.resources import CPU, GPU, RAM, Resources
from kalena.core.verdict import ReasonCode
from kalena.testing.builders import batch, node, workload

DT = 10.0


class PolicyLoop(RuleBasedStateMachine):
    @initialize(
        n_nodes=st.integers(2, 5),
        pods_per_node=st.integers(1, 4),
        seed=st.integers(0, 2**16),
    )
    def build(self, n_nodes: int, pods_per_node: int, seed: int) -> None:
        rng = np.random.default_rng(seed)
        self.rng = rng
        self.nodes = [node(f"n{i}", cpu=16, ram=64, gpu=2) for i in range(n_nodes)]
        capacity = [Resources.of(cpu=16, ram=64, gpu=2) for _ in self.nodes]
        prod, placement = [], {}
        for i in range(n_nodes):
            for j in range(pods_per_node):
                cpu, ram = float(rng.uniform(0.5, 3.5)), float(rng.uniform(1, 14))
                gpu = 1 if (j == 0 and rng.random() < 0.3) else 0
                w = workload(
                    f"prod/p{i}-{j}", cpu=cpu, ram=ram, gpu=gpu, limits={"cpu": cpu * 2, "ram": ram * 1.5}
                )
                prod.append(w)
                placement[w.id] = f"n{i}"
        self.production = {w.id: w for w in prod}
        self.ledger = Ledger.from_blueprint(self.nodes, capacity, prod, placement)
        self.blueprint = Blueprint.of(self.nodes, prod, placement)
        self.request_sum0 = self.ledger.request_sum.copy()
        self.estimator = DecayEstimator()
        self.now = 0.0
        self.serial = 0
        self.evicted_service_without_override = 0

    # ------------------------------------------------------------------ rules
    @rule(
        k=st.integers(1, 6), cpu=st.floats(0.05, 6), ram=st.floats(0.1, 20), gpu=st.sampled_from([0, 0, 0, 1])
    )
    def submit_batch(self, k: int, cpu: float, ram: float, gpu: int) -> None:
        pending = []
        for _ in range(k):
            self.serial += 1
            pending.append(
                batch(
                    f"jobs/b{self.serial}",
                    cpu=cpu,
                    ram=ram,
                    gpu=gpu,
                    owner="jobs/b",
                    priority=int(self.rng.integers(0, 3)),
                )
            )
        decision = schedule(
            pending, self.ledger, SchedulingContext(now=self.now), PlacementConfig(), self.rng
        )
        before = self.ledger.reservation_sum.copy()
        results = self.ledger.apply_all(decision.placements)
        assert all(r.accepted for r in results), [r.reasons for r in results if not r.accepted]
        for c in decision.placements:
            # A placement only ever lands where the reservation ledger had room for its request.
            assert np.all(before[c.node] + c.workload.requests.array() <= self.ledger.capacity_tol[c.node])
            before[c.node] += c.workload.requests.array()
            assert c.workload.requests[GPU] == 0  # no batch workload that asks for a GPU is placed
        if decision.placements:
            event("batch placed")
            again = self.ledger.apply(decision.placements[0])  # computed against an epoch now past
            assert not again.accepted and again.reasons[0].code is ReasonCode.STALE_EPOCH
        placed = {c.workload.id for c in decision.placements}
        assert {p.workload_id for p in decision.pending} == {w.id for w in pending} - placed

    @rule(level=st.floats(0.0, 1.6), noise=st.floats(0.0, 0.5))
    def estimate(self, level: float, noise: float) -> None:
        rows = self.ledger.rows()
        if len(rows.rows) == 0:
            return
        limits = np.array([self._limit(i) for i in rows.ids])
        state = self.estimator.init(rows.requests, limits, np.full(len(rows.rows), -1e9))
        state.reservation[:] = rows.reservations  # continue from the ledger's current estimate
        usage = rows.requests * level * (1 + self.rng.uniform(-noise, noise, rows.requests.shape))
        usage[self.rng.random(len(rows.rows)) < 0.1] = np.nan  # some samples missing
        self.now += DT
        r = self.estimator.update_in_place(state, np.clip(usage, 0, None), self.now, DT)
        result = self.ledger.apply(ReservationUpdate(rows.rows, r.copy(), rows.global_epoch))
        assert result.accepted, result.reasons
        if self.ledger.global_epoch > rows.global_epoch:  # some reservation moved: the old view is stale
            stale = self.ledger.apply(ReservationUpdate(rows.rows, rows.reservations, rows.global_epoch))
            assert not stale.accepted and stale.reasons[0].code is ReasonCode.STALE_EPOCH

    @rule(data=st.data())
    def memory_pressure(self, data: st.DataObject) -> None:
        n = data.draw(st.integers(0, self.ledger.n_nodes - 1))
        residents = self.ledger.workloads_on(n)
        if not residents:
            return
        usage = {}
        for w in residents:
            factor = data.draw(st.floats(0.0, 2.5))
            usage[w.id] = Resources.of(cpu=w.requests["cpu"], ram=w.requests["ram"] * factor)
        acute = data.draw(st.booleans())
        snap = snapshot_from_ledger(
            self.ledger,
            n,
            usage=usage,
            started_at={w.id: self.now - 1000 for w in residents},
            conditions=NodeConditions.of(triggered=("ram",), acute=("ram",) if acute else ()),
        )
        plan = plan_evictions(snap, EvictionConfig(), self.now)
        for v in plan.victims:
            event(f"evicted {v.tier.value} ({v.cause.value})")
            spec = self.ledger.spec(v.workload)
            assert not spec.is_daemonset
            if spec.tier is Tier.SERVICE:
                assert v.cause is EvictionCause.LIMIT_BREACH
                assert usage[v.workload]["ram"] > self._limit(v.workload)[RAM]
        results = self.ledger.apply_all(eviction_commitments(plan.victims, n, snap.epoch))
        assert all(r.accepted for r in results), [r.reasons for r in results if not r.accepted]
        for v in plan.victims:
            if v.tier is Tier.BATCH:
                assert v.workload not in self.ledger
            else:
                assert v.workload in self.ledger  # production keeps its placement and request

    @precondition(lambda self: len(self.ledger.batch_ids()) > 0)
    @rule(data=st.data())
    def finish_batch(self, data: st.DataObject) -> None:
        wid = data.draw(st.sampled_from(sorted(self.ledger.batch_ids())))
        n = self.ledger.node_of(wid)
        assert self.ledger.apply(RemoveBatch(wid, n, self.ledger.node_epoch(n))).accepted

    # ------------------------------------------------------------- invariants
    @invariant()
    def restoration_holds(self) -> None:
        assert restoration_violations(self.ledger, self.blueprint) == ()

    @invariant()
    def request_ledger_untouched(self) -> None:
        assert np.array_equal(self.ledger.request_sum, self.request_sum0)
        assert set(self.ledger.production_ids()) == set(self.production)

    @invariant()
    def gpu_slack_is_zero(self) -> None:
        assert np.all(self.ledger.slack()[:, GPU] == 0)

    @invariant()
    def sums_match(self) -> None:
        inc, full = self.ledger.incremental(), self.ledger.recompute()
        assert np.allclose(inc.reservation, full.reservation)
        assert np.array_equal(inc.batch_count, full.batch_count)

    @invariant()
    def reservations_within_limits(self) -> None:
        rows = self.ledger.rows()
        for i, wid in enumerate(rows.ids):
            assert np.all(rows.reservations[i] <= self._limit(wid) + 1e-9)
            assert rows.reservations[i][GPU] == rows.requests[i][GPU]
            assert rows.reservations[i][CPU] >= 0

    # ------------------------------------------------------------------ helpers
    def _limit(self, wid: str) -> np.ndarray:
        """L: the workload's own limit where it has one, else the node's capacity."""
        spec = self.ledger.spec(wid)
        cap = self.ledger.capacity[self.ledger.node_of(wid)]
        if spec.limits is None:
            return cap.copy()
        lim = spec.limits.array()
        return np.where(lim > 0, np.minimum(lim, cap), cap)


PolicyLoop.TestCase.settings = settings(
    max_examples=150, stateful_step_count=40, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
test_policy_loop = PolicyLoop.TestCase
