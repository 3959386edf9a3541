"""The simulator's row table: growing it keeps every row and gives new rows free-row values."""

from __future__ import annotations

import pickle

import numpy as np

from kalena.core.resources import NDIM, RAM
from kalena.sim.rows import BATCH, FREE, RowTable


def _fill(t: RowTable, rows: range) -> None:
    for r in rows:
        t.kind[r] = BATCH
        t.task[r] = r
        t.usage[r, RAM] = float(r)
        t.ids[r] = f"b/{r}"
        t.throttled[r % t.window, r] = r + 1


def _check(t: RowTable, used: range) -> None:
    for r in used:
        assert (t.kind[r], t.task[r], t.usage[r, RAM], t.ids[r]) == (BATCH, r, float(r), f"b/{r}")
        assert t.throttled[r % t.window, r] == r + 1
    new = slice(len(used), t.capacity)  # rows never written: free-row values
    assert (t.kind[new] == FREE).all() and (t.task[new] == -1).all()
    assert np.isnan(t.usage[new]).all() and np.isinf(t.limit[new]).all() and (t.ids[new] == "").all()
    assert not t.throttled[:, new].any() and (t.weight[new] == 1.0).all()


def test_growing_row_by_row_keeps_what_each_row_held():
    t = RowTable(4, window=3)
    used = 0
    for size in (5, 6, 7, 9, 14, 15, 40):  # some within the store, some past it
        _fill(t, range(used, t.capacity))
        used = t.capacity
        t.grow(size)
        assert t.capacity == size == len(t.usage) == t.throttled.shape[1] == len(t.ids)
        assert t.usage.shape == (size, NDIM)
        # column-major, as the ledger: each column is one contiguous run
        assert t.usage[:, RAM].flags.contiguous and t.limit[:, RAM].flags.contiguous
        _check(t, range(used))
    t.grow(10)  # never shrinks
    assert t.capacity == 40


def test_the_ring_counts_still_add_up_after_a_grow():
    t = RowTable(3, window=2)
    t.record_throttled(3, 0, np.array([0.5, 0.0, 1.0]))
    t.grow(50)
    t.record_throttled(4, 1, np.array([0.25, 0.0, 0.0, 2.0]))
    assert t.window_s(4).tolist() == [0.75, 0.0, 1.0, 2.0]
    t.record_throttled(4, 0, np.zeros(4))  # slot 0 turns over: its 0.5 and 1.0 leave the window
    assert t.window_s(4).tolist() == [0.25, 0.0, 0.0, 2.0]
    assert t.total_s(np.arange(4)).tolist() == [0.75, 0.0, 1.0, 2.0]


def test_a_pickled_table_still_writes_into_what_it_grows_from():
    t = RowTable(8, window=3)
    _fill(t, range(4))
    u = pickle.loads(pickle.dumps(t))
    _fill(u, range(4, 8))  # written through the unpickled table's columns
    u.grow(30)  # past its store: the store is copied, with what was written through the columns
    _check(u, range(8))


def test_a_freed_row_holds_what_a_new_row_holds():
    t = RowTable(6, window=3)
    _fill(t, range(6))
    for name in ("demand", "quota", "floor", "cap", "weight", "started", "work", "work_total"):
        getattr(t, name)[:] = 7.0
    t.slack_cpu[:] = False
    t.free(np.array([1, 3]))
    t.grow(8)
    fresh = RowTable(8, window=3)
    for name in vars(fresh):
        a, b = getattr(t, name), getattr(fresh, name)
        if not isinstance(a, np.ndarray) or name.startswith("_"):
            continue
        freed = a[:, [1, 3, 6, 7]] if name == "throttled" else a[[1, 3, 6, 7]]
        like = b[:, [1, 3, 6, 7]] if name == "throttled" else b[[1, 3, 6, 7]]
        assert np.array_equal(freed, like, equal_nan=freed.dtype.kind == "f"), name
    assert t.task[[0, 2, 4, 5]].tolist() == [0, 2, 4, 5] and t.ids[2] == "b/2"
