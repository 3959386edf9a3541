"""Growable row storage: doubling, free-list reuse, zeroed rows."""

import numpy as np
import pytest

from kalena.core.ledger.index import ResidentIndex
from kalena.core.ledger.rows import RowStore, all_per_row, any_per_row
from kalena.core.model import Selector
from kalena.testing.builders import batch, res


def test_grows_by_doubling_and_reuses_freed_rows():
    rs = RowStore(initial=2)
    r = [
        rs.add(batch(f"ns/b{i}"), 0, res(cpu=i).array(), res(cpu=i).array(), is_batch=True, version=i)
        for i in range(5)
    ]
    assert r == [0, 1, 2, 3, 4]
    assert rs.capacity == 8 and len(rs) == 5
    rs.remove(1)
    rs.remove(3)
    assert rs.live_rows().tolist() == [0, 2, 4]
    assert rs.request[3].sum() == 0 and rs.node[3] == -1 and rs.specs[3] is None
    assert (
        rs.add(batch("ns/x"), 2, res(cpu=9).array(), res(cpu=9).array(), is_batch=True, version=7) == 3
    )  # LIFO
    assert len(rs) == 4 and rs.high == 5
    with pytest.raises(KeyError):
        rs.remove(1)


def test_initial_capacity_validated():
    with pytest.raises(ValueError, match="initial row capacity"):
        RowStore(initial=0)


INDEX_CASES = [
    ("by-full-id", Selector(frozenset({"ns/a"})), {0}),
    ("by-bare-name", Selector(frozenset({"b"})), {1}),
    ("by-declaration", Selector(frozenset({"ns/web"})), {0, 1}),
    ("by-label", Selector(match_labels={"app": "web"}), {0, 1}),
    ("by-two-labels", Selector(match_labels={"app": "web", "tier": "front"}), {1}),
    ("label-absent", Selector(match_labels={"app": "db"}), set()),
    ("names-or-labels", Selector(frozenset({"ns/c"}), {"tier": "front"}), {1, 2}),
    ("empty-matches-nothing", Selector(), set()),
]


@pytest.mark.parametrize(("sel", "want"), [c[1:] for c in INDEX_CASES], ids=[c[0] for c in INDEX_CASES])
def test_resident_index_equals_selector_matches(sel, want):
    specs = [
        batch("ns/a", labels={"app": "web"}, declaration="ns/web"),
        batch("ns/b", labels={"app": "web", "tier": "front"}, declaration="ns/web"),
        batch("ns/c", labels={"app": "cache"}),
    ]
    idx = ResidentIndex()
    for i, s in enumerate(specs):
        idx.add(i, s)
    assert set(idx.match(sel)) == want == {i for i, s in enumerate(specs) if sel.matches(s)}
    idx.remove(1, specs[1])
    assert set(idx.match(sel)) == want - {1}


def test_rows_are_float64_columns_column_major_even_after_growing():
    # the round and the estimator read a dimension at a time: a row-major store would give the
    # same values, only slower, so the layout is checked here
    rs = RowStore(initial=2)
    for i in range(5):  # grows twice
        rs.add(batch(f"b{i}", cpu=1.0), 0, np.ones(8), np.ones(8), is_batch=True, version=0)
    for a in (rs.request, rs.reservation):
        assert a.dtype == np.float64 and a.shape == (8, 8) and a.flags.f_contiguous


ROW_BLOCKS = [
    # id, (k, 8) bool block
    ("mixed", np.array([[0] * 8, [1] * 8, [0, 0, 0, 1, 0, 0, 0, 0], [1] * 7 + [0]], dtype=bool)),
    ("empty", np.zeros((0, 8), dtype=bool)),
    ("one-row", np.ones((1, 8), dtype=bool)),
    ("three-wide", np.array([[1, 1, 1], [1, 0, 1], [0, 0, 0]], dtype=bool)),  # no word: the fallback
]


@pytest.mark.parametrize("block", [c[1] for c in ROW_BLOCKS], ids=[c[0] for c in ROW_BLOCKS])
def test_row_reductions_equal_numpys(block):
    for layout in (block, np.asfortranarray(block), block[:, ::-1]):  # a word per row, or the fallback
        assert np.array_equal(any_per_row(layout), layout.any(axis=1))
        assert np.array_equal(all_per_row(layout), layout.all(axis=1))
