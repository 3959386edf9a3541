"""NodesView.rows_of sorts rows by node on narrow keys: the same stable order as int64 keys."""

import numpy as np

from kalena.core.enforcement.nodes import node_sort_keys, rows_by_node


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
