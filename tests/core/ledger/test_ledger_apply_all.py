"""One decision's commitments on a node stand or fall together once one is rejected."""

from kalena.core.ledger import Ledger, PlaceBatch
from kalena.core.resources import Resources
from kalena.core.verdict import ReasonCode
from kalena.testing.builders import batch, node


def test_later_placements_on_a_node_are_stale_after_a_rejection():
    ledger = Ledger([node("a", cpu=8, ram=8), node("b", cpu=8, ram=8)], [Resources.of(cpu=8, ram=8)] * 2)
    e = ledger.node_epoch(0)
    decision = [
        PlaceBatch(batch("j/x0", cpu=1), 0, e),
        PlaceBatch(batch("j/x1", cpu=1), 0, e + 1),
        PlaceBatch(batch("j/y0", cpu=1), 1, ledger.node_epoch(1)),
    ]
    # An outside change bumps node a once: x0 is stale, and x1's e+1 now equals the node's epoch.
    assert ledger.apply(PlaceBatch(batch("j/other", cpu=1), 0, e)).accepted
    results = ledger.apply_all(decision)
    assert [r.accepted for r in results] == [False, False, True]  # node b is unaffected
    assert all(r.reasons[0].code is ReasonCode.STALE_EPOCH for r in results[:2])
    assert "j/x1" not in ledger and "j/y0" in ledger
