"""The batch queue and the pre-pass admission bound."""

from __future__ import annotations

import numpy as np
import pytest

from kalena.core.enforcement import PairingConfig
from kalena.core.placement import PlacementConfig
from kalena.sim.batch import BatchTasks
from kalena.sim.placement import BatchQueue, PlacementShell, admitted, fit_counts, fit_counts_many
from kalena.testing.builders import batch, node
from kalena.testing.clusters import ledger_of

# (id, request (cpu, ram), slack rows, counts)
COUNTS = [
    ("binding-dimension-decides", (1.0, 2.0), [[4.0, 4.0], [10.0, 100.0]], [2, 10]),
    ("negative-slack-is-zero", (1.0, 1.0), [[-3.0, 5.0]], [0]),
    ("ineligible-node", (1.0, 1.0), [[-np.inf, -np.inf]], [0]),
    ("unconstrained-dimension", (1.0, 0.0), [[3.5, -1.0]], [3]),
]


@pytest.mark.parametrize(("req", "slack", "counts"), [c[1:] for c in COUNTS], ids=[c[0] for c in COUNTS])
def test_fit_counts(req, slack, counts):
    assert fit_counts(np.array(req), np.array(slack, dtype=float)).tolist() == counts


def test_queue_keeps_pod_order_within_a_class_and_counts():
    q = BatchQueue()
    for key, task in (("a", 5), ("b", 1), ("a", 2), ("a", 9)):
        q.add(key, task)
    assert q.classes == {"a": [2, 5, 9], "b": [1]} and len(q) == 4
    q.take("a", [2, 9])
    q.take("b", [1])
    assert q.classes == {"a": [5]} and len(q) == 1


@pytest.mark.parametrize("seed", range(40))
def test_fit_counts_many_equals_fit_counts_row_by_row(seed: int):
    """Also where many nodes are full (fit_counts_many skips the nodes no class can use) and where
    some classes leave a dimension out that others ask for."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 60))
    slack = rng.uniform(-2, 10, (n, 8))
    slack[rng.random(n) < 0.5] *= 0.01  # nearly full nodes
    slack[rng.random(n) < 0.1] = -np.inf  # not eligible
    slack[:, rng.random(8) < 0.2] = np.inf  # unbounded dimensions
    k = int(rng.integers(1, 12))
    reqs = np.zeros((k, 8))
    reqs[:, 0] = rng.uniform(0.01, 3, k)
    for d in (1, 3):
        asks = rng.random(k) < rng.choice([0.5, 1.0])
        reqs[asks, d] = rng.uniform(0.01, 4, int(asks.sum()))
    many = fit_counts_many(reqs, slack)
    for j in range(k):
        assert many[j].tolist() == fit_counts(reqs[j], slack).tolist()


@pytest.mark.parametrize("seed", range(40))
def test_admitted_is_the_bound_over_every_node(seed: int, monkeypatch: pytest.MonkeyPatch):
    """Block by block with classes leaving once they reach their size, the bound is what every
    node's count gives (blocked nodes counting 0), capped at the class's size."""
    rng = np.random.default_rng(seed)
    monkeypatch.setattr("kalena.sim.placement.ADMIT_BLOCK", int(rng.integers(1, 8)))
    n, k = int(rng.integers(1, 40)), int(rng.integers(1, 10))
    slack = rng.uniform(-1, 6, (n, 8))
    slack[rng.random(n) < 0.3] *= 0.05
    reqs = np.zeros((k, 8))
    reqs[:, 0] = rng.uniform(0.1, 2, k)
    reqs[rng.random(k) < 0.5, 1] = 0.5
    sizes = rng.integers(0, 25, k)
    blocked = [sorted(set(rng.integers(0, n, int(rng.integers(0, 4))).tolist())) for _ in range(k)]
    want = []
    for j in range(k):
        per = fit_counts(reqs[j], slack)
        per[blocked[j]] = 0
        want.append(min(int(sizes[j]), int(per.sum())))
    assert admitted(reqs, slack, sizes, blocked).tolist() == want


def _tasks(specs: list) -> BatchTasks:
    n = len(specs)
    zeros = np.zeros(n)
    return BatchTasks(
        job=np.arange(n),
        submit=zeros,
        requests=np.array([s.requests.array() for s in specs]),
        priority=np.array([s.priority for s in specs]),
        nominal=zeros,
        work=zeros,
        demand=zeros,
        ram_use=zeros,
        warm=np.zeros(n, dtype=bool),
        specs=tuple(specs),
    )


def test_the_shell_keeps_its_context_in_the_cores_keeper():
    ledger = ledger_of([node("n0", cpu=8, ram=16), node("n1", cpu=8, ram=16)])
    shell = PlacementShell(ledger, PlacementConfig(), PairingConfig(max_evictions=1, window_s=100.0))
    shell.keeper.ineligible(1, 50.0)  # what the engine does on an escalation
    assert shell.keeper.ineligible_until.tolist() == [-np.inf, 50.0]
    shell.evicted("j/a", 0, 10.0, 20.0)  # one strike: also a harmful pairing here
    tasks = _tasks([batch("j/a-0", owner="j/a", cpu=1)])
    queue = BatchQueue()
    queue.add("j/a", 0)
    assert shell.select(queue, tasks, 15.0) == []  # n0 blacklisted and cooling, n1 ineligible
    assert shell.blacklist == {("j/a", 0)} and dict(shell.cooldowns) == {("j/a", 0): 20.0}
    assert shell.select(queue, tasks, 50.0) == [0]  # n1 is eligible again
    d = shell.run([0], tasks, 50.0, np.random.default_rng(0))
    assert [p.node for p in d.placements] == [1] and shell.stats["pods_sent"] == 1
    assert dict(shell.cooldowns) == {}  # over at 20


@pytest.mark.slow
def test_the_admission_bound_changes_no_outcome():
    """A run sending every pending pod to the core each pass places, evicts and finishes exactly
    what the run with the bound does: the bound only spares the core answers it knows."""
    from kalena.data import irina_paths
    from kalena.ir import load_cluster
    from kalena.sim import SimConfig, Simulation

    cluster = load_cluster(*irina_paths())
    cfg = SimConfig(hours=1.0, prewarm_s=600.0)
    bounded = Simulation(cluster, cfg)
    every = Simulation(cluster, cfg)
    every.shell.select = lambda queue, tasks, now: sorted(t for ids in queue.classes.values() for t in ids)
    bounded.run()
    every.run()
    assert every.shell.stats["pods_sent"] > bounded.shell.stats["pods_sent"]  # the bound held some back
    assert bounded.shell.stats["placed"] == every.shell.stats["placed"] > 1000
    assert np.array_equal(bounded.task_states(), every.task_states())
    assert bounded.life == every.life  # every pod's history: states, times, reasons
    assert bounded.metrics.evictions == every.metrics.evictions
    rs_b, rs_e = bounded.ledger.row_arrays(), every.ledger.row_arrays()
    assert np.array_equal(rs_b.reservation[: rs_b.high], rs_e.reservation[: rs_e.high])
