"""Score cache: keyed on quantised slack, invalidated only by a bucket crossing, LRU-bounded."""

import numpy as np
import pytest

from kalena.core.placement import PlacementCache, PlacementConfig, ScoreCache, stranded_balance
from kalena.core.resources import Resources
from kalena.testing.builders import node
from kalena.testing.clusters import ledger_of

DIMS = np.array([1, 1, 0, 0, 0, 0, 0, 0], dtype=bool)
WIDTH = np.array([0.25, 0.25, 1, 1, 1, 1, 1, 1], dtype=float)
CAP = np.tile(np.array([8.0, 16.0, 0, 0, 0, 0, 0, 0]), (2, 1))


def slack(cpu0: float, cpu1: float = 4.0) -> np.ndarray:
    s = np.zeros((2, 8))
    s[:, 1] = 8.0
    s[0, 0], s[1, 0] = cpu0, cpu1
    return s


MOVES = [
    # id, slack before, slack after, node 0 invalidated
    ("inside-bucket", 4.0, 4.2, False),
    ("up-a-bucket", 4.0, 4.25, True),
    ("down-a-bucket", 4.0, 3.99, True),
    ("no-change", 4.0, 4.0, False),
]


@pytest.mark.parametrize(("before", "after", "bumped"), [c[1:] for c in MOVES], ids=[c[0] for c in MOVES])
def test_only_a_bucket_crossing_invalidates(before, after, bumped):
    cache = ScoreCache(2, WIDTH, DIMS, max_classes=4)
    req = Resources.of(cpu=1, ram=1)
    nodes = np.arange(2)
    cache.sync(slack(before))
    first = cache.stranded(req, req.array(), CAP, nodes)
    assert (cache.hits, cache.misses) == (0, 2)
    cache.sync(slack(after))
    again = cache.stranded(req, req.array(), CAP, nodes)
    assert (cache.hits, cache.misses) == ((1, 3) if bumped else (2, 2))
    # the cached value is exactly the formula on the quantised slack
    q = np.floor(slack(after) / WIDTH) * WIDTH
    assert np.array_equal(again, stranded_balance(q, req.array(), CAP, DIMS))
    assert bumped or np.array_equal(first, again)


def test_sync_node_and_lru_bound():
    cache = ScoreCache(2, WIDTH, DIMS, max_classes=1)
    cache.sync(slack(4.0))
    g = cache.gen.copy()
    cache.sync_node(0, slack(4.1)[0])
    assert np.array_equal(cache.gen, g)
    cache.sync_node(0, slack(3.0)[0])
    assert cache.gen[0] == g[0] + 1 and cache.gen[1] == g[1]
    a, b = Resources.of(cpu=1), Resources.of(cpu=2)
    cache.stranded(a, a.array(), CAP, np.arange(2))
    cache.stranded(b, b.array(), CAP, np.arange(2))
    assert len(cache) == 1  # a was evicted
    cache.stranded(a, a.array(), CAP, np.arange(2))
    assert cache.misses == 6


def test_placement_cache_rebinds_on_new_ledger_or_config():
    L1 = ledger_of([node("a", cpu=4, ram=4)])
    L2 = ledger_of([node("a", cpu=4, ram=4)])
    pc = PlacementCache()
    n1, _, s1 = pc.bind(L1, PlacementConfig())
    n1b, _, s1b = pc.bind(L1, PlacementConfig())
    assert n1 is n1b and s1 is s1b
    _, _, s2 = pc.bind(L1, PlacementConfig(bucket_width=(1.0,) * 8))
    assert s2 is not s1
    n3, _, _ = pc.bind(L2, PlacementConfig())
    assert n3 is not n1
