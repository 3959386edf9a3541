"""One relative tolerance: every ledger comparison of the core accepts and rejects at the same slack."""

from __future__ import annotations

import numpy as np
import pytest

from kalena.core.enforcement import ledger_holds
from kalena.core.ledger import tolerant_capacity
from kalena.core.tolerance import REL_TOL

CASES = [
    ("sum-noise", 0.1 + 0.2, 0.3, True),  # 0.30000000000000004: rounding, not a breach
    ("inside-slack", 64.0 * (1 + REL_TOL / 2), 64.0, True),
    ("beyond-slack", 64.0 * (1 + 2 * REL_TOL), 64.0, False),
    ("a-millicore-over-1000-cores", 1000.001, 1000.0, False),
    ("small-capacity-absolute-slack", 1e-3 + REL_TOL / 2, 1e-3, True),
]


@pytest.mark.parametrize(("total", "cap", "holds"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_snapshot_and_fit_rule_agree(total: float, cap: float, holds: bool) -> None:
    assert ledger_holds(total, cap) is holds
    assert bool(total <= tolerant_capacity(np.array([cap]))[0]) is holds


def test_infinite_capacity_stays_infinite() -> None:
    assert tolerant_capacity(np.array([np.inf]))[0] == np.inf and ledger_holds(1e300, np.inf)
