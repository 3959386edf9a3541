"""The simulator's three arms and Borg's task-level count.

* the baseline arm (no Kalena: ``reclaim`` and ``enforce`` off) never runs the core's round;
  reclamation without enforcement is refused;
* each placement's "needed reclaimed capacity" flag is what a plain request count says at that
  moment (checked against a loop over the pass's placements, in order, on the real run);
* an arm without reclamation places nothing beyond requests; Kalena's arm does."""

from __future__ import annotations

import numpy as np
import pytest

from kalena.core.resources import CPU, NON_COMPRESSIBLE_DIMS, RAM
from kalena.core.tolerance import REL_TOL
from kalena.core.validate import ConfigError
from kalena.data import irina_paths
from kalena.ir import load_cluster
from kalena.sim import SimConfig, Simulation, build_report

CLUSTER = load_cluster(*irina_paths())


def test_reclamation_without_enforcement_is_refused():
    with pytest.raises(ConfigError) as e:
        SimConfig(reclaim=True, enforce=False)
    assert e.value.key == "enforce"
    assert SimConfig(reclaim=False, enforce=False).arm == "baseline"
    assert SimConfig(reclaim=False).arm == "kalena-no-reclaim" and SimConfig().arm == "kalena"


class Watched(Simulation):
    """Records each pass's flags beside a plain recount of the node's requests, made here."""

    def _beyond_requests(self, rows, nodes):  # type: ignore[no-untyped-def]
        got = super()._beyond_requests(rows, nodes)
        led = self.ledger
        rs = led.row_arrays()
        fresh = set(rows.tolist())
        used = {}
        for n in set(nodes.tolist()):
            on = [r for r in rs.live_rows().tolist() if rs.node[r] == n and rs.is_batch[r] and r not in fresh]
            older = sum((rs.request[r, [CPU, RAM]] for r in on), np.zeros(2))
            used[n] = led.request_sum[n, [CPU, RAM]] + older
        want = []
        for r, n in zip(rows.tolist(), nodes.tolist(), strict=True):
            used[n] = used[n] + rs.request[r, [CPU, RAM]]
            cap = led.capacity[n, [CPU, RAM]]
            want.append(bool((used[n] > cap + REL_TOL * np.maximum(1.0, cap)).any()))
        self.checked.append((got.tolist(), want))
        return got

    checked: list


@pytest.mark.parametrize("reclaim", [True, False])
def test_each_placement_is_flagged_as_a_request_count_says(reclaim):
    sim = Watched(CLUSTER, SimConfig(hours=0.25, seed=0, reclaim=reclaim))
    sim.checked = []
    sim.run()
    assert sim.checked, "no placement pass ran"
    flagged = 0
    for got, want in sim.checked:
        assert got == want
        flagged += sum(got)
    report = build_report(sim)
    if reclaim:
        assert flagged > 0 and report["task_reclaimed_work_fraction"] > 0
    else:  # the ledger fits by requests: nothing is placed beyond them (up to the fit's rounding)
        assert flagged <= 2 and report["task_reclaimed_work_fraction"] < 1e-4


def test_the_baseline_never_runs_the_round():
    class NoRound(Simulation):
        def _round(self, now):  # type: ignore[no-untyped-def]
            raise AssertionError("the baseline ran Kalena's round")

    sim = NoRound(CLUSTER, SimConfig(hours=0.1, seed=0, reclaim=False, enforce=False))
    sim.run()
    report = build_report(sim)
    assert report["arm"] == "baseline" and report["mitigation"]["node_rounds"] == 0
    assert report["batch_tasks_submitted"] > 0 and report["batch_cpu_core_hours"] > 0


def test_a_pods_story_has_every_step_and_says_why_it_waits():
    from kalena.core.lifecycle import TaskState
    from kalena.sim.report import task_index, task_story

    # three times the load: the half hour holds evictions and pods still waiting at its end
    sim = Simulation(CLUSTER, SimConfig(hours=0.5, seed=0, batch_load_factor=3.0))
    sim.run()
    states = sim.task_states()
    evicted = int(np.flatnonzero(sim.ts.evictions > 0)[0])
    story = task_story(sim, evicted)
    assert task_index(sim, story["task"]) == evicted
    assert [s["state"] for s in story["history"]] == [t.state.value for t in sim.life.history(evicted)]
    assert "evicting" in [s["state"] for s in story["history"]] and story["evictions"] >= 1
    pending = int(np.flatnonzero(states == TaskState.PENDING.code)[0])
    waiting = task_story(sim, pending)
    assert waiting["state_at_end"] == "pending" and waiting["node_at_end"] is None
    assert waiting["why_pending"]  # the core's answer, in words
    late = int(np.flatnonzero(states < 0)[0]) if (states < 0).any() else None
    if late is not None:  # a pod the run never reached
        assert task_story(sim, late)["state_at_end"] == "not submitted"


def test_the_kernels_screen_finds_every_node_a_node_by_node_sum_finds():
    """The baseline's kernel judges every node every tick. It sums them all at once first and sums
    node by node only those near their capacity: the nodes it kills on are exactly those the
    node-by-node rule picks. At one tick two nodes' memory is set a hair (1e-9) above and below
    their capacity, well inside the screen's margin, so the exact sums decide."""

    class Judged(Simulation):
        def _oom(self, now, triggered):  # type: ignore[no-untyped-def]
            rs, t, nc = self.ledger.row_arrays(), self.table, NON_COMPRESSIBLE_DIMS
            live = np.flatnonzero(rs.alive[: rs.high])
            if now == 600.0:  # the hair's breadth, on the first two nodes with three rows or more
                busy = [n for n in range(self.ledger.n_nodes) if np.count_nonzero(rs.node[live] == n) >= 3]
                for n, side in zip(busy[:2], (1.0 + 1e-9, 1.0 - 1e-9), strict=True):
                    on = live[rs.node[live] == n]
                    t.limit[on, RAM] = np.inf
                    t.usage[on, RAM] = self.cap[n, RAM] * side / len(on)
                self.hair = busy[:2]
            want = set()
            for n in np.flatnonzero(triggered[:, nc].any(axis=1)).tolist():
                on = live[rs.node[live] == n]
                if len(on) and np.any(np.nansum(t.usage[on][:, nc], axis=0) > self.cap[n, nc]):
                    want.add(n)
            over_limit = live[(t.usage[live][:, nc] > t.limit[live][:, nc]).any(axis=1)]
            want |= set(rs.node[over_limit].tolist())
            self.got = set()
            super()._oom(now, triggered)
            assert self.got == want, (now, sorted(self.got), sorted(want))
            if now == 600.0:
                self.at_hair = self.got

        def _kill_over(self, nodes, now):  # type: ignore[no-untyped-def]
            self.got = set(nodes)
            super()._kill_over(nodes, now)

    sim = Judged(CLUSTER, SimConfig(hours=0.5, seed=0, reclaim=False, enforce=False))
    sim.run()
    above, below = sim.hair
    assert above in sim.at_hair and below not in sim.at_hair
