"""``evaluate``: one pod by the filters and scores of ``schedule``, and nothing placed."""

import numpy as np
import pytest

from kalena.core.placement import (
    PlacementCache,
    PlacementConfig,
    SchedulingContext,
    evaluate,
    schedule,
    why_pending,
)
from kalena.core.placement.state import PassState
from kalena.core.verdict import ReasonCode
from kalena.testing.builders import batch, node, workload
from kalena.testing.clusters import estimated_reservations, ledger_of, synthetic_cluster

REST = dict(storage=100, disk_read=100, disk_write=100, net_in=100, net_out=100, gpu=0)


def test_statuses_feasible_and_scores_are_those_of_schedule():
    nodes = [node(f"n{i}", cpu=8, ram=16, **REST) for i in range(3)]
    L = ledger_of(nodes, [(workload("p/big", cpu=7.5, ram=4), "n0")])
    ctx = SchedulingContext(images={"img": np.array([False, False, True])})
    pod = batch("j/a", cpu=1, ram=2, image="img")
    e = evaluate(pod, L, ctx, PlacementConfig())
    assert e.feasible.tolist() == [1, 2]
    assert not e.statuses[0].ok and e.statuses[0].plugin == "ReservationFit"
    assert e.statuses[0].reasons[0].code is ReasonCode.INSUFFICIENT_RESOURCE
    assert e.statuses[1].ok and e.statuses[2].ok
    assert e.message == "2/3 nodes are available: 1 Insufficient cpu."
    assert e.max_score == pytest.approx(6.0)  # 1 + 1 + 3 + 1
    d = schedule([pod], L, ctx, PlacementConfig(), np.random.default_rng(0))
    assert d.placements[0].node == 2 and float(e.scores[1]) == pytest.approx(d.scores[0])
    assert e.scores[1] > e.scores[0]
    assert L.batch_count.sum() == 0  # nothing placed


@pytest.mark.parametrize("seed", range(6))
def test_alone_schedule_places_on_the_best_feasible_node(seed):
    c = synthetic_cluster(120, 300, 40, seed=seed)
    L = c.ledger()
    L.apply(estimated_reservations(L, np.random.default_rng(seed)))
    ctx = SchedulingContext(images=c.images, volatility=c.volatility)
    config = PlacementConfig()
    cache = PlacementCache()
    for pod in c.pending[::7]:
        e = evaluate(pod, L, ctx, config, cache=cache)
        d = schedule([pod], L, ctx, config, np.random.default_rng(0), cache=cache)
        if not len(e.feasible):
            assert not d.placements
            nodes, prod_aa, _ = cache.bind(L, config)
            assert e.message == why_pending(pod, PassState(L, ctx, config, nodes, prod_aa, None)).message
            continue
        best = e.feasible[np.flatnonzero(e.scores == e.scores.max())].min()
        assert d.placements[0].node == best, pod.id
        assert sum(s.ok for s in e.statuses) == len(e.feasible)


def test_production_or_a_placed_pod_is_refused():
    L = ledger_of([node("n0", cpu=8, ram=16, **REST)], [(workload("p/a", cpu=1), "n0")])
    with pytest.raises(ValueError, match="not a batch workload"):
        evaluate(workload("p/b", cpu=1), L, SchedulingContext(), PlacementConfig())
    with pytest.raises(ValueError, match="already placed"):
        evaluate(batch("p/a", cpu=1), L, SchedulingContext(), PlacementConfig())
