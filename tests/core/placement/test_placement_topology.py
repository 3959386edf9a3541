"""Topology helpers: spread arithmetic, node domains and production-only skew counting."""

import numpy as np
import pytest

from kalena.core.ledger import PlaceBatch
from kalena.core.model import Selector, SpreadConstraint, Taint, Toleration
from kalena.core.placement import NodeIndex, domain_counts, spread_ok
from kalena.testing.builders import batch, node, workload
from kalena.testing.clusters import ledger_of

SPREAD = [
    # id, domain ids per node, eligible, resident nodes, self match, maxSkew, minDomains, expected ok
    ("even-spread", [0, 0, 1, 1], [1, 1, 1, 1], [0, 2], True, 1, 1, [True] * 4),
    ("zone0-ahead", [0, 0, 1, 1], [1, 1, 1, 1], [0, 1], True, 1, 1, [False, False, True, True]),
    ("skew-2-allows", [0, 0, 1, 1], [1, 1, 1, 1], [0, 1], True, 2, 1, [False, False, True, True]),
    ("skew-3-allows-all", [0, 0, 1, 1], [1, 1, 1, 1], [0, 1], True, 3, 1, [True] * 4),
    ("not-self-matching", [0, 0, 1, 1], [1, 1, 1, 1], [0, 1], False, 2, 1, [True] * 4),
    ("keyless-node-fails", [0, -1, 1, 1], [1, 1, 1, 1], [], True, 1, 1, [True, False, True, True]),
    # without the eligibility mask min would be 0 (zone 1 empty) and zone 0 (1 + self) would be over
    ("ineligible-domain-ignored-for-min", [0, 0, 1, 1], [1, 1, 0, 0], [0], True, 1, 1, [True] * 4),
    ("counts-2-1-min-1", [0, 0, 1, 1], [1, 1, 1, 1], [0, 0, 2], True, 1, 1, [False, False, True, True]),
    ("min-domains-forces-zero", [0, 0, 1, 1], [1, 1, 1, 1], [0, 0, 2], True, 1, 3, [False] * 4),
]


@pytest.mark.parametrize(
    ("ids", "elig", "resident", "self_match", "skew", "min_dom", "want"),
    [c[1:] for c in SPREAD],
    ids=[c[0] for c in SPREAD],
)
def test_spread_ok(ids, elig, resident, self_match, skew, min_dom, want):
    c = SpreadConstraint(skew, "zone", Selector(match_labels={"a": "b"}), min_domains=min_dom)
    ids = np.array(ids)
    ok, _, _ = spread_ok(
        c, ids, int(ids.max()) + 1, np.array(elig, bool), np.array(resident, int), self_match
    )
    assert ok.tolist() == want


def test_spread_ok_numbers():
    c = SpreadConstraint(1, "zone", Selector(match_labels={"a": "b"}))
    _, count, gmin = spread_ok(c, np.array([0, 0, 1]), 2, np.ones(3, bool), np.array([0, 1, 1, 2]), True)
    assert count.tolist() == [3, 1] and gmin == 1


def test_node_index_lookups():
    ns = [
        node("a", zone="z1", labels={"pool": "x"}),
        node("b", zone="z1", labels={"pool": "y"}),
        node("c", rack="r9", labels={"pool": "x"}),
    ]
    ns[2] = type(ns[2])(
        ns[2].name, ns[2].allocatable, ns[2].labels, (Taint("t", effect="NoSchedule"),), "", "r9"
    )
    idx = NodeIndex(ns)
    assert idx.selector_mask({"pool": "x"}).tolist() == [True, False, True]
    assert idx.selector_mask({}).tolist() == [True] * 3
    assert idx.toleration_mask(()).tolist() == [True, True, False]
    assert idx.toleration_mask((Toleration("t"),)).tolist() == [True] * 3
    ids, n = idx.domains("zone")
    assert ids.tolist() == [0, 0, -1] and n == 1
    assert idx.domains("")[0].tolist() == [0, 1, 2]  # "" = the node itself
    assert idx.same_domain("zone", np.array([1])).tolist() == [True, True, False]
    assert idx.same_domain("rack", np.array([0])).tolist() == [False, False, False]  # a has no rack


def test_batch_never_counts_toward_production_skew():
    ns = [node("a", zone="z1", cpu=8), node("b", zone="z2", cpu=8)]
    web = Selector(match_labels={"app": "web"})
    L = ledger_of(ns, [(workload("p/web-0", cpu=1, labels={"app": "web"}), "a")])
    idx = NodeIndex(L.nodes)
    c = SpreadConstraint(1, "zone", web)
    before = domain_counts(L, idx, c, include_batch=False)
    for i in range(3):  # batch pods carrying the production selector's label
        assert L.apply(
            PlaceBatch(batch(f"j/b{i}", cpu=1, labels={"app": "web"}), 1, L.node_epoch(1))
        ).accepted
    assert domain_counts(L, idx, c, include_batch=False).tolist() == before.tolist() == [1, 0]
    assert domain_counts(L, idx, c, include_batch=True).tolist() == [1, 3]
