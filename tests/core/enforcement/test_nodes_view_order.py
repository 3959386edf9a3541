"""NodesView.rows_of sorts rows by node on narrow keys: the same stable order as int64 keys."""

import dataclasses

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from kalena.core.enforcement.nodes import NodesView, node_sort_keys, rows_by_node
from kalena.testing.controller import nodes_views


def test_sort_keys_give_the_int64_stable_order() -> None:
    rng = np.random.default_rng(0)
    for n in (1, 7, 5000, 1 << 16, (1 << 16) + 1):
        node = rng.integers(0, n, 20000)
        keys = node_sort_keys(node, n)
        assert keys.dtype == (np.uint16 if n <= 1 << 16 else node.dtype)
        assert np.array_equal(np.argsort(keys, kind="stable"), np.argsort(node, kind="stable"))


def test_rows_by_node_groups_each_nodes_rows_in_their_order() -> None:
    rng = np.random.default_rng(1)
    rows = np.sort(rng.choice(10_000, 3_000, replace=False))
    node = rng.integers(0, 40, len(rows))
    grouped, bounds = rows_by_node(rows, node, 40)
    for k in range(40):
        assert np.array_equal(grouped[bounds[k] : bounds[k + 1]], rows[node == k])


@given(nodes_views(), st.data())
def test_group_rows_gives_what_the_full_grouping_gives(view: NodesView, data: st.DataObject) -> None:
    n = view.n_nodes
    some = data.draw(st.lists(st.integers(0, n - 1), max_size=n))
    grouped = dataclasses.replace(view)  # a fresh cache: only the named nodes grouped
    grouped.group_rows(np.array(some, dtype=np.int64))
    grouped.group_rows(np.array(some[:1], dtype=np.int64))  # again: kept, not redone
    live = np.flatnonzero(view.live)
    for k in range(n):
        want = live[np.asarray(view.node)[live] == k]
        assert np.array_equal(grouped.rows_of(k), want)
        assert np.array_equal(view.rows_of(k), want)
