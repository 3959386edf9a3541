"""The vectorised throttle: many nodes in one call equal each node alone (the scalar API is N = 1)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kalena.core.enforcement import ThrottleConfig, batch_cpu_allowance, water_fill
from kalena.core.enforcement.throttle import batch_cpu_allowances, water_fill_groups

CFG = ThrottleConfig()

# (id, capacity, service claim, batch used (None = unsampled), pressured, previous (None = first))
ALLOWANCE = [
    ("first-round-takes-target", 10, 4, None, False, None),
    ("shrink-at-once", 10, 8, None, False, 5.5),
    ("grow-slowly", 10, 4, None, False, 1.5),
    ("growth-stops-at-target", 10, 4, None, False, 5.3),
    ("service-above-capacity", 10, 12, None, False, 3.0),
    ("pressure-halves-batch-usage", 10, 4, 4.0, True, 5.5),
    ("pressure-uses-smaller-previous", 10, 4, 5.0, True, 3.0),
    ("pressure-without-history", 10, 4, None, True, None),
    ("pressure-never-grows", 10, 1, 4.0, True, 1.0),
    ("unconstrained-node", math.inf, 4, None, False, None),
    ("unconstrained-node-growing", math.inf, 4, 1.0, False, 2.0),
]


def _vector(cases):
    cap = np.array([c[0] for c in cases], dtype=float)
    claim = np.array([c[1] for c in cases], dtype=float)
    used = np.array([0.0 if c[2] is None else c[2] for c in cases])
    sampled = np.array([c[2] is not None for c in cases])
    pressured = np.array([c[3] for c in cases])
    prev = np.array([math.nan if c[4] is None else c[4] for c in cases])
    return batch_cpu_allowances(cap, claim, np.where(sampled, used, np.nan), pressured, prev, CFG)[1]


@pytest.mark.parametrize("case", [c[1:] for c in ALLOWANCE], ids=[c[0] for c in ALLOWANCE])
def test_vectorised_allowance_equals_the_core_scalar(case):
    got = _vector([case])[0]
    want = batch_cpu_allowance(*case, CFG)[1]
    assert got == pytest.approx(want, rel=1e-12) or (math.isinf(got) and math.isinf(want))


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.floats(1, 128),
            st.floats(0, 160),
            st.one_of(st.none(), st.floats(0, 128)),
            st.booleans(),
            st.one_of(st.none(), st.floats(0, 128)),
        ),
        min_size=1,
        max_size=20,
    )
)
def test_vectorised_allowance_equals_the_core_on_random_nodes(cases):
    got = _vector(cases)
    for g, case in zip(got, cases, strict=True):
        assert g == pytest.approx(batch_cpu_allowance(*case, CFG)[1], rel=1e-9, abs=1e-12)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.one_of(st.floats(0, 40), st.just(math.inf)),
            st.lists(st.tuples(st.floats(0, 10), st.floats(0.01, 5)), min_size=0, max_size=6),
        ),
        min_size=1,
        max_size=6,
    ),
    st.randoms(use_true_random=False),
)
def test_grouped_water_fill_equals_each_group_alone(groups, rnd):
    """Rows of several groups, interleaved in any order, get what their group alone would give."""
    rows = [(g, cap, basis) for g, (_, members) in enumerate(groups) for cap, basis in members]
    rnd.shuffle(rows)
    total = np.array([t for t, _ in groups])
    group = np.array([g for g, _, _ in rows], dtype=np.int64)
    caps = np.array([c for _, c, _ in rows])
    basis = np.array([b for _, _, b in rows])
    got = water_fill_groups(total, group, caps, basis)
    for g in range(len(groups)):
        mine = group == g
        alone = water_fill(float(total[g]), caps[mine], basis[mine])
        assert got[mine].tolist() == alone.tolist()
        if np.isfinite(total[g]):
            assert got[mine].sum() == pytest.approx(min(total[g], caps[mine].sum()), rel=1e-9, abs=1e-9)
