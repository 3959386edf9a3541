"""The eviction order as a table: each case says which of two candidates goes first."""

from __future__ import annotations

import pytest

from kalena.core.enforcement import CandidateGroup, EvictionCandidate, eviction_sort_key

LB, BATCH = CandidateGroup.LIMIT_BREACH, CandidateGroup.BATCH


def c(wid: str, group: CandidateGroup, priority: int = 0, amount: float = 0.0) -> EvictionCandidate:
    return EvictionCandidate(wid, group, priority, amount)


# (id, first, second): ``first`` must be evicted before ``second``.
CASES = [
    ("override-before-batch", c("z", LB, 9, 0.1), c("a", BATCH, 0, 100.0)),
    ("override-ignores-priority", c("a", LB, 9, 1.0), c("b", LB, 0, 1.0)),
    ("override-larger-excess-first", c("z", LB, 0, 3.0), c("a", LB, 0, 1.0)),
    ("override-high-priority-larger-excess-first", c("z", LB, 100, 3.0), c("a", LB, 0, 1.0)),
    ("batch-ascending-priority", c("z", BATCH, 1, 0.1), c("a", BATCH, 2, 100.0)),
    ("batch-priority-beats-usage", c("z", BATCH, 0, 0.1), c("a", BATCH, 5, 64.0)),
    ("batch-tie-larger-user-first", c("z", BATCH, 3, 8.0), c("a", BATCH, 3, 2.0)),
    ("batch-final-tie-break-id", c("a", BATCH, 3, 2.0), c("b", BATCH, 3, 2.0)),
    ("override-final-tie-break-id", c("a", LB, 0, 2.0), c("b", LB, 7, 2.0)),
]


@pytest.mark.parametrize(("first", "second"), [(f, s) for _, f, s in CASES], ids=[x[0] for x in CASES])
def test_order(first: EvictionCandidate, second: EvictionCandidate) -> None:
    assert eviction_sort_key(first) < eviction_sort_key(second)
    assert sorted([second, first], key=eviction_sort_key) == [first, second]


def test_key_shape_is_a_tuple_ending_in_the_id() -> None:
    key = eviction_sort_key(c("ns/w", BATCH, 4, 2.5))
    assert key == (1, 4, -2.5, "ns/w")


def test_equal_keys_only_for_the_same_workload() -> None:
    assert eviction_sort_key(c("a", BATCH, 1, 1.0)) == eviction_sort_key(c("a", BATCH, 1, 1.0))
    assert eviction_sort_key(c("a", BATCH, 1, 1.0)) != eviction_sort_key(c("b", BATCH, 1, 1.0))
