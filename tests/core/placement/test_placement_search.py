"""The sampled candidate search reads chunks of the rotated order without rotating all of it: the
same candidates and the same examined count as the rotation (property test)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from kalena.core.placement.runner import feasible
from kalena.core.placement.scheduler import _Pass


class _Mask:
    def __init__(self, ok: np.ndarray) -> None:
        self.ok = ok

    def passes(self, nodes: np.ndarray) -> np.ndarray:
        return self.ok[nodes]


def _rotated(order: np.ndarray, start: int, k: int, chunk: int, checks: list) -> tuple[list[int], int]:
    """The search as the rotation defines it: rotate the whole order, then take chunks of it."""
    rolled = np.concatenate((order[start:], order[:start]))
    found, got, pos = [], 0, 0
    while pos < len(rolled) and got < k:
        part = feasible(checks, rolled[pos : pos + chunk])
        pos += chunk
        found.append(part)
        got += len(part)
    return np.concatenate(found)[:k].tolist(), min(pos, len(rolled))


@settings(max_examples=300, deadline=None)
@given(
    st.integers(1, 120), st.integers(1, 12), st.integers(1, 40), st.integers(0, 2**32 - 1), st.floats(0, 1)
)
def test_search_equals_the_rotated_order(n: int, k: int, chunk: int, seed: int, share: float) -> None:
    rng = np.random.default_rng(seed)
    order = rng.permutation(n)
    checks = [("fit", _Mask(rng.random(n) < share))]
    run = object.__new__(_Pass)  # only the fields search reads
    run.k, run.chunk, run.examined, run.rng = k, chunk, 0, np.random.default_rng(seed)
    got = run.search(checks, order).tolist()
    start = int(np.random.default_rng(seed).integers(n))  # the start search drew
    assert (got, run.examined) == _rotated(order, start, k, chunk, checks)
