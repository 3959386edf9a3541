"""The dual ledger loaded from Kuberina's real Irina blueprint (the bundled copy)."""

import numpy as np
import pytest

from kalena.core.ledger import Blueprint, Ledger, restoration_violations
from kalena.core.resources import CPU, GPU, RAM
from kalena.data import irina_paths
from kalena.ir import load_cluster


@pytest.fixture(scope="module")
def irina():
    p = irina_paths()
    cluster = load_cluster(p.infra, p.workloads, p.blueprint)
    cap = cluster.capacity_matrix()
    ledger = Ledger.from_blueprint(cluster.nodes, cap, cluster.workloads, cluster.placement)
    return cluster, ledger, Blueprint.of(cluster.nodes, cluster.workloads, cluster.placement)


def test_request_ledger_holds_on_every_node(irina):
    _, ledger, blueprint = irina
    assert len(ledger.production_ids()) == 2714
    assert np.all(ledger.request_sum <= ledger.capacity_tol)
    assert restoration_violations(ledger, blueprint) == ()


def test_slack_before_any_estimate_is_what_the_blueprint_left(irina):
    _, ledger, _ = irina
    slack = ledger.slack()
    assert np.all(slack[:, GPU] == 0)  # non-reclaimable, even on the 8 unused GPUs
    # Reservations start at requests, so slack is exactly the unallocated capacity (PROVENANCE:
    # unused cpu on active nodes is 844 cores; the 34 idle nodes add their whole capacity).
    active = ledger.service_count > 0
    assert active.sum() == 152
    assert slack[active, CPU].sum() == pytest.approx(844.0)
    assert slack[:, RAM].sum() == pytest.approx(54400.5 - 27840.0)
