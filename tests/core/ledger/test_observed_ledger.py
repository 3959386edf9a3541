"""A cluster scheduler's ledger from what it observes: production as the blueprint, bound batch as
itself, reported reservations replacing requests; a node the ledger cannot hold is left out (its
pods kept, unbounded there)."""

from __future__ import annotations

import pytest

from kalena.core.ledger.observed import observed_ledger
from kalena.core.model import NodeSpec, Tier, WorkloadSpec
from kalena.core.resources import Resources


def w(wid: str, cpu: float, tier: Tier = Tier.SERVICE) -> WorkloadSpec:
    return WorkloadSpec(id=wid, requests=Resources.from_mapping({"cpu": cpu, "ram": 1.0}), tier=tier)


NODES = [NodeSpec(n, allocatable=Resources.from_mapping({"cpu": 4.0, "ram": 8.0})) for n in ("a", "b", "c")]


def test_residents_reservations_and_the_nodes_left_out():
    residents = [
        (w("p1", 3.0), "a"), (w("b1", 1.0, Tier.BATCH), "a"),
        (w("p2", 5.0), "b"),  # more than b has: b is left out
        (w("p3", 1.0), "c"), (w("b2", 3.5, Tier.BATCH), "c"),  # c's batch does not fit: c is left out
        (w("ghost", 1.0), "gone"),  # a node not observed: ignored
    ]  # fmt: skip
    ledger, left = observed_ledger(NODES, residents, {"p1": Resources.from_mapping({"cpu": 1.0, "ram": 1.0})})
    assert set(left) == {"b", "c"}
    assert "production asks for more cpu" in left["b"] and "c/" not in left["c"] and "b2" in left["c"]
    assert "p1" in ledger and "b1" in ledger and "ghost" not in ledger
    # the left-out nodes' pods stay in the ledger (the topology rules count them), at no limit there
    assert "p2" in ledger and "b2" in ledger
    assert all(ledger.capacity[ledger.node_names.index(n)][0] == float("inf") for n in ("b", "c"))
    assert ledger.capacity[ledger.node_names.index("a")][0] == 4.0
    rows = ledger.rows()
    res = dict(zip(rows.ids, rows.reservations[:, 0], strict=True))
    assert res["p1"] == pytest.approx(1.0)  # its report
    assert res["p3"] == pytest.approx(1.0)  # no report: its request
    assert ledger.node_names[ledger.node_of("b1")] == "a"


def test_bound_batch_is_judged_against_the_reported_reservations_and_gpu_slack_stays_zero():
    gpu_node = NodeSpec("g", allocatable=Resources.from_mapping({"cpu": 4.0, "ram": 8.0, "gpu": 2.0}))
    prod = WorkloadSpec(id="p", requests=Resources.from_mapping({"cpu": 3.0, "ram": 1.0, "gpu": 2.0}))
    residents = [(prod, "g"), (w("b", 2.0, Tier.BATCH), "g")]  # 3 + 2 > 4 by requests
    report = {"p": Resources.from_mapping({"cpu": 1.0, "ram": 1.0, "gpu": 0.0})}
    ledger, left = observed_ledger([gpu_node], residents, report)
    assert left == {} and "b" in ledger  # by its reservation production leaves room for b
    rows = ledger.rows()
    res = dict(zip(rows.ids, rows.reservations, strict=True))
    assert res["p"][0] == pytest.approx(1.0) and res["p"][2] == pytest.approx(2.0)  # gpu at its request
    _, left = observed_ledger([gpu_node], residents)  # no report: requests, and b does not fit
    assert set(left) == {"g"}
