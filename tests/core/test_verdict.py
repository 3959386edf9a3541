"""Verdicts render from data, kube-scheduler style."""

from kalena.core.verdict import Code, Reason, ReasonCode, Status, render_reasons


def test_render_groups_and_counts():
    reasons = [Reason(ReasonCode.INSUFFICIENT_RESOURCE, "ram", 4, 60, 62)] * 3 + [
        Reason(ReasonCode.NODE_SELECTOR_MISMATCH)
    ] * 183
    assert render_reasons(186, 0, reasons) == (
        "0/186 nodes are available: 183 Node selector mismatch, 3 Insufficient ram."
    )


def test_shortfall_and_status():
    r = Reason(ReasonCode.INSUFFICIENT_RESOURCE, "cpu", requested=2, used=61, capacity=61.75)
    assert r.shortfall == 1.25
    assert not Status(Code.UNSCHEDULABLE, (r,)).ok and Status(Code.SKIP).ok
    assert render_reasons(3, 3, []) == "3/3 nodes are available."
