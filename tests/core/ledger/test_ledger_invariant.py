"""Restoration invariant and sum bookkeeping: silent when they hold, loud (as data) on each bug."""

import numpy as np
import pytest

from kalena.core.ledger import Blueprint, PlaceBatch, restoration_violations, sum_violations
from kalena.core.resources import CPU
from kalena.core.verdict import ReasonCode
from kalena.testing.builders import batch, node, workload
from kalena.testing.clusters import ledger_of

NODES = [node("n0", cpu=8, ram=16), node("n1", cpu=8, ram=16)]
PROD = [(workload("p/a", cpu=2, ram=2), "n0"), (workload("p/b", cpu=1, ram=4), "n1")]


def setup():
    L = ledger_of(NODES, PROD)
    bp = Blueprint.of(NODES, [w for w, _ in PROD], {w.id: n for w, n in PROD})
    L.apply(PlaceBatch(batch("j/x", cpu=1), 0, 0))
    return L, bp


def test_holds_with_batch_resident():
    L, bp = setup()
    assert restoration_violations(L, bp) == ()
    assert sum_violations(L) == ()
    assert bp.request_sum[:, CPU].tolist() == [2, 1]


def _move(L):
    L.row_arrays().node[0] = 1


def _rerequest(L):
    L.row_arrays().request[1, CPU] = 0.5


def _kill(L):
    L.row_arrays().alive[0] = False


def _service_row(L):
    rs = L.row_arrays()
    rs.is_batch[2] = False


def _drift(L):
    L._reservation_sum[0, CPU] += 0.25


TAMPER = [
    ("production-moved", _move, "restoration", "placement or request changed"),
    ("request-rewritten", _rerequest, "restoration", "placement or request changed"),
    ("production-row-freed", _kill, "restoration", "placement or request changed"),
    ("batch-row-became-service", _service_row, "restoration", "outside the blueprint"),
    ("reservation-sum-drift", _drift, "sums", "reservation sum drifted"),
]


@pytest.mark.parametrize(("tamper", "check", "msg"), [c[1:] for c in TAMPER], ids=[c[0] for c in TAMPER])
def test_each_bug_is_reported(tamper, check, msg):
    L, bp = setup()
    tamper(L)
    found = restoration_violations(L, bp) if check == "restoration" else sum_violations(L)
    assert found, "the tampering went unnoticed"
    assert all(r.code is ReasonCode.RESTORATION_VIOLATION for r in found)
    assert any(msg in r.detail for r in found)


def test_blueprint_mismatch_reported():
    L, _ = setup()
    other = Blueprint.of(NODES, [w for w, _ in PROD], {"p/a": "n1", "p/b": "n1"})
    found = restoration_violations(L, other)
    assert any("request ledger" in r.detail and r.dimension == "cpu" for r in found)
    shorter = Blueprint.of(NODES, [PROD[0][0]], {"p/a": "n0"})
    (only,) = restoration_violations(L, shorter)
    assert "2 production rows, blueprint 1" in only.detail


def test_blueprint_arrays_are_read_only():
    _, bp = setup()
    with pytest.raises(ValueError):
        bp.requests[0, 0] = 9.0
    with pytest.raises(ValueError, match="same length"):
        Blueprint(("a",), np.array([0, 1]), np.zeros((2, 8)), 2)
