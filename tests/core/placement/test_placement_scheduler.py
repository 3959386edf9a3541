"""The scheduler end to end: choices by score, epochs, why-pending, sort keys, reuse and sampling."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kalena.core.ledger import Blueprint, PlaceBatch, restoration_violations
from kalena.core.model import Selector, SpreadConstraint
from kalena.core.placement import (
    PlacementCache,
    PlacementConfig,
    SchedulingContext,
    candidate_sort_key,
    pending_sort_key,
    schedule,
)
from kalena.core.placement.scheduler import UNEXPLAINED
from kalena.core.verdict import ReasonCode
from kalena.testing.builders import batch, node, workload
from kalena.testing.clusters import estimated_reservations, ledger_of, synthetic_cluster

REST = dict(storage=100, disk_read=100, disk_write=100, net_in=100, net_out=100, gpu=0)
CPU_RAM = PlacementConfig(stranded_dims=("cpu", "ram"))  # hand-computable stranded term


def nodes3(**extra):
    return [node(f"n{i}", cpu=8, ram=16, **REST, **extra) for i in range(3)]


def run(L, pods, ctx=None, config=CPU_RAM, seed=0, cache=None):
    return schedule(pods, L, ctx or SchedulingContext(), config, np.random.default_rng(seed), cache=cache)


def test_image_locality_wins_and_the_score_is_the_weighted_sum():
    L = ledger_of(nodes3())
    ctx = SchedulingContext(images={"img": np.array([False, False, True])})
    d = run(L, [batch("j/a", cpu=1, ram=2, image="img")], ctx)
    (p,) = d.placements
    # stranded: f = (7/8, 14/16) is balanced -> 1; colocation 0; image 3 x 1; stability 1
    assert (p.node, d.scores[0]) == (2, pytest.approx(5.0))


def test_colocation_prefers_mixed_then_service_nodes():
    prod = [(workload("p/a", cpu=2, ram=4), "n1"), (workload("p/b", cpu=1, ram=2), "n2")]
    L = ledger_of(nodes3(), prod)
    assert L.apply(PlaceBatch(batch("j/old", cpu=1, ram=2), 2, 0)).accepted
    d = run(L, [batch("j/a", cpu=1, ram=2)])
    # every node stays balanced (stranded 1); colocation 0 / 0.5 / 1
    assert d.placements[0].node == 2 and d.scores[0] == pytest.approx(1 + 1 + 0 + 1)


def test_stranded_slack_prefers_the_balanced_node():
    prod = [(workload("p/cpu-heavy", cpu=4), "n0"), (workload("p/even", cpu=2, ram=4), "n1")]
    L = ledger_of(nodes3()[:2], prod)
    d = run(L, [batch("j/a", cpu=1, ram=2)])
    # n0 after: f = (3/8, 14/16) -> std 0.25 -> 0.5;  n1 after: f = (5/8, 10/16) -> 1
    assert d.placements[0].node == 1 and d.scores[0] == pytest.approx(1 + 0.5 + 1)


def test_volatility_penalty():
    L = ledger_of(nodes3())
    ctx = SchedulingContext(volatility=np.array([0.02, 0.005, 0.0]))
    d = run(L, [batch("j/a", cpu=1, ram=2)], ctx)
    assert d.placements[0].node == 2


def test_ties_go_to_the_lowest_node_index_and_epochs_are_stamped_in_sequence():
    L = ledger_of(nodes3())
    pods = [batch(f"j/p{i}", cpu=2, ram=4, owner="j/job") for i in range(5)]
    d = run(L, pods)
    # all nodes equal at first; pods keep balance so they fill n0 (4 fit), then n1
    assert [(p.node, p.node_epoch) for p in d.placements] == [(0, 0), (0, 1), (0, 2), (0, 3), (1, 0)]
    assert all(r.accepted for r in L.apply_all(d.placements))
    assert d.global_epoch == 0 and L.global_epoch == 5


def test_pending_why_with_binding_dimension():
    L = ledger_of([node("n0", cpu=2, ram=16, **REST), node("n1", cpu=8, ram=16, taints=("t",), **REST)])
    d = run(L, [batch("j/big", cpu=4, ram=1)])
    (w,) = d.pending
    assert w.workload_id == "j/big" and (w.total_nodes, w.available) == (2, 0)
    assert w.message == "0/2 nodes are available: 1 Insufficient cpu, 1 Untolerated taint (t)."
    assert w.binding is not None
    assert (w.binding.dimension, w.binding.nodes, w.binding.margin, w.binding.fits_request) == (
        "cpu",
        1,
        2.0,
        2.0,
    )
    assert [s.plugin for s in w.statuses] == ["ReservationFit", "TaintToleration"]


def test_gpu_requests_are_never_placed():
    L = ledger_of([node("g", cpu=8, ram=16, gpu=8)])
    d = run(L, [batch("j/g", gpu=1)])
    assert not d.placements
    assert d.pending[0].message == "0/1 nodes are available: 1 Gpu requested."
    assert d.pending[0].binding is None


def test_namespace_cap_and_own_anti_affinity_count_this_pass():
    L = ledger_of(nodes3())
    capped = run(L, [batch(f"j/c{i}", cpu=1) for i in range(3)], SchedulingContext(namespace_caps={"j": 2}))
    assert len(capped.placements) == 2
    assert capped.pending[0].reasons[0].code is ReasonCode.NAMESPACE_CAP
    loners = [
        batch(f"j/l{i}", cpu=1, labels={"app": "l"}, anti_affinity_labels={"app": "l"}) for i in range(4)
    ]
    d = run(L, loners)
    assert sorted(p.node for p in d.placements) == [0, 1, 2]
    assert d.pending[0].message == "0/3 nodes are available: 3 Own anti affinity."


def test_identical_pending_pods_share_one_answer():
    L = ledger_of(nodes3())
    pods = [batch(f"j/x{i}", cpu=99, owner="j/job") for i in range(3)]
    d = run(L, pods)
    assert [w.workload_id for w in d.pending] == [p.id for p in pods]
    assert len({w.message for w in d.pending}) == 1
    assert d.pending[0].statuses is d.pending[2].statuses  # reused, not recomputed


SORT_CASES = [
    ("priority-first", [("a", 0, "k"), ("b", 5, "k")], ["b", "a"]),
    ("then-class", [("a", 0, "k2"), ("b", 0, "k1")], ["b", "a"]),
    ("then-id", [("b", 0, "k"), ("a", 0, "k")], ["a", "b"]),
]


@pytest.mark.parametrize(("pods", "want"), [c[1:] for c in SORT_CASES], ids=[c[0] for c in SORT_CASES])
def test_pending_sort_key(pods, want):
    ws = [batch(f"j/{i}", priority=p, owner=o) for i, p, o in pods]
    assert [w.name for w in sorted(ws, key=pending_sort_key)] == want


CAND_CASES = [
    ("higher-score-first", [(0.5, 1), (0.9, 7)], [(0.9, 7), (0.5, 1)]),
    ("tie-lowest-index", [(0.9, 7), (0.9, 2)], [(0.9, 2), (0.9, 7)]),
]


@pytest.mark.parametrize(("items", "want"), [c[1:] for c in CAND_CASES], ids=[c[0] for c in CAND_CASES])
def test_candidate_sort_key(items, want):
    assert sorted(items, key=lambda t: candidate_sort_key(*t)) == want


BAD_PENDING = [
    ("service-tier", lambda L: [workload("p/s", cpu=1)], "not a batch workload"),
    ("duplicate", lambda L: [batch("j/a"), batch("j/a")], "pending twice"),
    ("already-placed", lambda L: [batch("j/old")], "already placed"),
    # among good pods, and with several faults: the first in pending order is named
    ("placed-among-good", lambda L: [batch("j/b"), batch("j/old"), batch("j/a")], "'j/old' is pending"),
    ("first-fault-named", lambda L: [batch("j/z"), batch("j/z"), batch("j/old")], "'j/old' is pending"),
    ("service-among-good", lambda L: [batch("j/a"), workload("p/s", cpu=1)], "'p/s' is not a batch"),
]


@pytest.mark.parametrize(("make", "msg"), [c[1:] for c in BAD_PENDING], ids=[c[0] for c in BAD_PENDING])
def test_bad_pending_lists_are_bugs(make, msg):
    L = ledger_of(nodes3())
    L.apply(PlaceBatch(batch("j/old", cpu=1), 0, 0))
    with pytest.raises(ValueError, match=msg):
        run(L, make(L))


def test_context_shapes_validated():
    L = ledger_of(nodes3())
    with pytest.raises(ValueError, match="eligible"):
        run(L, [batch("j/a")], SchedulingContext(eligible=np.ones(2, bool)))
    with pytest.raises(ValueError, match="namespace cap"):
        SchedulingContext(namespace_caps={"j": -1})


def cluster(seed: int):
    c = synthetic_cluster(40, 150, 160, seed=seed, per_class=8, n_images=10, images_per_node=3)
    L = c.ledger()
    assert L.apply(estimated_reservations(L, np.random.default_rng(seed))).accepted
    return c, L, SchedulingContext(images=c.images, volatility=c.volatility)


def key(d):
    return [(p.workload.id, p.node, p.node_epoch) for p in d.placements], [w.message for w in d.pending]


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 10_000))
def test_reuse_and_caches_never_change_the_decision(seed):
    c, L, ctx = cluster(seed)
    exact = PlacementConfig(relaxed_randomisation=False)
    plain = PlacementConfig(relaxed_randomisation=False, equivalence_reuse=False)
    a = schedule(c.pending, L, ctx, exact, np.random.default_rng(0))
    b = schedule(c.pending, L, ctx, plain, np.random.default_rng(0))
    assert key(a) == key(b) and a.scores == b.scores  # the winning scores too, to the last bit
    assert a.stats.classes > 0 and b.stats.classes == 0
    # placements are feasible in the ledger's own judgement, and the blueprint is untouched
    assert all(r.accepted for r in L.apply_all(a.placements))
    assert restoration_violations(L, Blueprint.of(c.nodes, c.production, c.placement)) == ()


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 10_000), st.booleans())
def test_leaving_pending_pods_unexplained_changes_no_placement(seed, relaxed):
    c, L, ctx = cluster(seed)
    cfg = PlacementConfig(relaxed_randomisation=relaxed, sample_above_nodes=4)
    a = schedule(c.pending, L, ctx, cfg, np.random.default_rng(seed))
    b = schedule(c.pending, L, ctx, cfg, np.random.default_rng(seed), explain=False)
    assert key(a)[0] == key(b)[0] and a.scores == b.scores
    assert [w.workload_id for w in a.pending] == [w.workload_id for w in b.pending]
    assert all(w.message == UNEXPLAINED and w.statuses == () for w in b.pending)


def test_a_cache_kept_across_passes_gives_the_same_answers_as_a_fresh_one():
    c, L, ctx = cluster(7)
    cfg = PlacementConfig(relaxed_randomisation=False)
    cache = PlacementCache()
    first = schedule(c.pending[:80], L, ctx, cfg, np.random.default_rng(0), cache=cache)
    L.apply_all(first.placements[::2])  # apply only some: the rest of the pass never happened
    kept = schedule(c.pending[80:], L, ctx, cfg, np.random.default_rng(0), cache=cache)
    fresh = schedule(c.pending[80:], L, ctx, cfg, np.random.default_rng(0))
    assert key(kept) == key(fresh)
    assert kept.stats.score_cache_hits > 0


def test_relaxed_randomisation_samples_and_stays_feasible_and_seeded():
    c, L, ctx = cluster(3)
    cfg = PlacementConfig(sample_above_nodes=10, sample_feasible=4)
    a = schedule(c.pending, L, ctx, cfg, np.random.default_rng(42))
    b = schedule(c.pending, L, ctx, cfg, np.random.default_rng(42))
    full = schedule(
        c.pending, L, ctx, PlacementConfig(relaxed_randomisation=False), np.random.default_rng(42)
    )
    assert key(a) == key(b)
    assert a.stats.nodes_examined < full.stats.nodes_examined
    assert len(a.placements) >= 1
    assert all(r.accepted for r in L.apply_all(a.placements))


def test_production_anti_affinity_binds_through_the_scheduler():
    prod = [(workload("p/db", cpu=1, anti_affinity_labels={"io": "heavy"}), "n0")]
    L = ledger_of(nodes3()[:1], prod)
    d = run(L, [batch("j/io", cpu=1, labels={"io": "heavy"}), batch("j/ok", cpu=1)])
    assert [p.workload.id for p in d.placements] == ["j/ok"]
    assert d.pending[0].workload_id == "j/io"
    assert d.pending[0].message == "0/1 nodes are available: 1 Production anti affinity."


def test_a_class_no_ledger_admits_is_answered_without_a_search_and_the_same_way():
    # 3 nodes of 8 cores: a 9-core class fits no node's ledger, whatever the other filters say.
    # With equivalence reuse the pass answers it from the fit alone (no candidate search); the
    # answer and the placements around it are those of the full path.
    L = ledger_of(nodes3())
    pods = [batch("a/small", cpu=1, owner="a"), *(batch(f"b/big-{i}", cpu=9, owner="b") for i in range(3))]
    pods.append(batch("c/small", cpu=2, owner="c"))
    reuse = run(L, pods, config=PlacementConfig(stranded_dims=("cpu", "ram"), relaxed_randomisation=False))
    plain = run(
        L,
        pods,
        config=PlacementConfig(
            stranded_dims=("cpu", "ram"), relaxed_randomisation=False, equivalence_reuse=False
        ),
    )
    assert key(reuse) == key(plain)
    assert [w.workload_id for w in reuse.pending] == ["b/big-0", "b/big-1", "b/big-2"]
    assert reuse.pending[0].message == "0/3 nodes are available: 3 Insufficient cpu."
    assert [p.workload.id for p in reuse.placements] == ["a/small", "c/small"]


def test_in_a_crowded_pass_a_class_whose_fitting_nodes_its_filters_exclude_is_not_searched(monkeypatch):
    # n2 has room but a taint no pod tolerates. Class a fills n0 and n1; a's third pod finds no
    # node, so the pass is crowded. Class b's ledger fits n2 only: the pass answers it from the
    # fit on the nodes b's own filters leave, without preparing b's checks, and every answer and
    # placement is the full path's.
    from kalena.core.placement.scheduler import _Pass

    L = ledger_of([node("n0", cpu=2, ram=16, **REST), node("n1", cpu=2, ram=16, **REST),
                   node("n2", cpu=8, ram=16, taints=("t",), **REST)])  # fmt: skip
    pods = [*(batch(f"a/x-{i}", cpu=2, owner="a") for i in range(3)), batch("b/y-0", cpu=1, owner="b")]
    prepared: list[str] = []
    checks = _Pass.pod_checks

    def spy(self, pod, cls):  # type: ignore[no-untyped-def]
        prepared.append(pod.id)
        return checks(self, pod, cls)

    monkeypatch.setattr(_Pass, "pod_checks", spy)
    cfg = PlacementConfig(stranded_dims=("cpu", "ram"), relaxed_randomisation=False)
    reuse = run(L, pods, config=cfg)
    assert prepared == ["a/x-0", "a/x-1", "a/x-2"]
    plain = run(L, pods, config=plain_of(cfg))
    assert key(reuse) == key(plain)
    assert reuse.stats.nodes_examined == 4 * 2  # as if searched: each pod's class leaves n0 and n1
    assert [(p.workload.id, p.node) for p in reuse.placements] == [("a/x-0", 0), ("a/x-1", 1)]
    assert [w.workload_id for w in reuse.pending] == ["a/x-2", "b/y-0"]
    assert reuse.pending[1].message == plain.pending[1].message


def plain_of(config: PlacementConfig) -> PlacementConfig:
    return PlacementConfig(
        stranded_dims=config.stranded_dims, relaxed_randomisation=False, equivalence_reuse=False
    )


def test_a_class_that_found_no_node_is_not_searched_again_in_the_pass():
    # One per node by its own anti-affinity, 3 nodes, 40 pods: once the 4th finds no node, the
    # 36 after it are answered from that (a placement only shrinks what the filters admit), and
    # the answers are the full path's.
    L = ledger_of(nodes3())
    loner = {"app": "loner"}
    pods = [
        batch(f"w/p{i:02d}", cpu=1, owner="w", labels=loner, anti_affinity_labels=loner) for i in range(40)
    ]
    cfg = PlacementConfig(stranded_dims=("cpu", "ram"), relaxed_randomisation=False)
    reuse, plain = run(L, pods, config=cfg), run(L, pods, config=plain_of(cfg))
    assert key(reuse) == key(plain)
    assert [p.node for p in reuse.placements] == [0, 1, 2]
    assert reuse.stats.nodes_examined == 4 * 3 < plain.stats.nodes_examined == 40 * 3
    assert reuse.pending[-1].message == "0/3 nodes are available: 3 Own anti affinity."


def test_a_spread_class_is_searched_again_after_a_placement_elsewhere():
    # Spread is the filter a placement can open: a-0 may only go to z0 (its ledger), where the
    # skew would be 2; b then lands in z1, the minimum rises to 1, and a-1 fits in z0. The same
    # class (priority is not part of it) must not answer a-1 from a-0's failure.
    x = {"app": "x"}
    spread = (SpreadConstraint(1, "zone", Selector(match_labels=x)),)
    L = ledger_of(
        [
            node("n0", cpu=8, ram=16, zone="z0", **REST),
            node("n1", cpu=1, ram=16, zone="z1", labels={"disk": "ssd"}, **REST),
        ],
    )
    assert L.apply(PlaceBatch(batch("old/x", cpu=1, labels=x), 0, 0)).accepted
    pods = [
        batch("a/a-0", cpu=2, owner="a", labels=x, spread=spread, priority=5),
        batch("b/b", cpu=1, owner="b", labels=x, priority=4, node_selector={"disk": "ssd"}),
        batch("a/a-1", cpu=2, owner="a", labels=x, spread=spread, priority=3),
    ]
    cfg = PlacementConfig(stranded_dims=("cpu", "ram"), relaxed_randomisation=False)
    reuse, plain = run(L, pods, config=cfg), run(L, pods, config=plain_of(cfg))
    assert key(reuse) == key(plain)
    assert [(p.workload.id, p.node) for p in reuse.placements] == [("b/b", 1), ("a/a-1", 0)]
    assert [w.workload_id for w in reuse.pending] == ["a/a-0"]


def test_a_request_no_node_admits_is_answered_once_for_every_class_that_asks_it():
    # Three jobs ask 4 cpu on nodes with 3 free; a fourth asks 1 cpu and fits. Unexplained, the
    # first pod of the first job examines every node and the request is then known to fit nowhere
    # for the rest of the pass: the other jobs' pods (other classes, same request) and pods named
    # by nothing else get the same answer without a search. The answers equal the explained pass's.
    L = ledger_of(nodes3(), [(workload(f"p/s{i}", cpu=5, ram=1), f"n{i}") for i in range(3)])
    big = [
        batch(f"j{j}/b-{i}", cpu=4, ram=1, owner=f"j{j}", labels={"job": f"j{j}"})
        for j in range(3)
        for i in range(5)
    ]
    small = [batch("k/s-0", cpu=1, ram=1, owner="k")]
    cfg = PlacementConfig(stranded_dims=("cpu", "ram"), relaxed_randomisation=False)
    quiet = schedule(big + small, L, SchedulingContext(), cfg, np.random.default_rng(0), explain=False)
    told = schedule(big + small, L, SchedulingContext(), cfg, np.random.default_rng(0))
    assert [p.workload.id for p in quiet.placements] == [p.workload.id for p in told.placements] == ["k/s-0"]
    assert [w.workload_id for w in quiet.pending] == [w.workload_id for w in told.pending]
    assert len(quiet.pending) == 15 and all(w.message == UNEXPLAINED for w in quiet.pending)
    assert all(w.total_nodes == 3 and w.available == 0 for w in quiet.pending)
    # one search over the 3 nodes for the unfit request (then none), one for the pod that fits
    assert quiet.stats.nodes_examined == 3 + 3
    assert told.stats.nodes_examined > quiet.stats.nodes_examined


class _Unkeyed:
    """A per-class filter with its ``class_key`` hidden: the pass works out its nodes per class."""

    def __init__(self, inner):  # type: ignore[no-untyped-def]
        self.inner, self.name, self.per_class = inner, inner.name, inner.per_class
        self.monotone = getattr(inner, "monotone", False)

    def prepare(self, pod, state):  # type: ignore[no-untyped-def]
        return self.inner.prepare(pod, state)


class _Counted(_Unkeyed):
    """The same filter, keyed, counting how often the pass prepares it."""

    def __init__(self, inner):  # type: ignore[no-untyped-def]
        super().__init__(inner)
        self.prepared = 0

    def prepare(self, pod, state):  # type: ignore[no-untyped-def]
        self.prepared += 1
        return self.inner.prepare(pod, state)

    def class_key(self, pod, state):  # type: ignore[no-untyped-def]
        return self.inner.class_key(pod, state)


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_classes_the_per_class_filters_key_alike_share_their_nodes_with_the_same_decisions(seed):
    """Random nodes (two zones, some tainted) and jobs (selector, toleration, gpu, size), with
    cooldowns, harmful pairings and slack-ineligible nodes: the pass that works out the per-class
    filters' nodes once per combination of their keys decides exactly as the one that works them
    out per class, and does work them out fewer times once jobs repeat a combination."""
    from kalena.core.placement.filters import DEFAULT_FILTERS, EvictionCooldown

    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 9))
    nodes = [
        node(f"n{i}", cpu=int(rng.integers(2, 9)), ram=16, labels={"zone": "ab"[i % 2]},
             taints=("t",) if rng.random() < 0.3 else (), **REST)
        for i in range(n)
    ]  # fmt: skip
    L = ledger_of(nodes)
    jobs = int(rng.integers(2, 12))
    pods = [
        batch(
            f"j{j}/p-{k}",
            owner=f"j{j}",
            cpu=1 + j % 3,
            gpu=1 if j == 5 else 0,
            node_selector={"zone": "a"} if j % 4 == 1 else None,
            tolerations=("t",) if j % 3 == 2 else (),
        )
        for j in range(jobs)
        for k in range(int(rng.integers(1, 4)))
    ]
    cooling = {(f"j{j}", int(rng.integers(n))): 100.0 for j in range(jobs) if rng.random() < 0.3}
    harmful = frozenset((f"j{j}", int(rng.integers(n))) for j in range(jobs) if rng.random() < 0.2)
    ctx = SchedulingContext(now=10.0, cooldowns=cooling, blacklist=harmful, eligible=rng.random(n) < 0.8)
    counted = [_Counted(f) if f.per_class else f for f in DEFAULT_FILTERS]
    unkeyed = [_Unkeyed(f) if f.per_class else f for f in DEFAULT_FILTERS]
    cfg = PlacementConfig(stranded_dims=("cpu", "ram"), relaxed_randomisation=False)
    keyed = schedule(pods, L, ctx, cfg, np.random.default_rng(0), filters=counted, explain=False)
    plain = schedule(pods, L, ctx, cfg, np.random.default_rng(0), filters=unkeyed, explain=False)
    assert key(keyed) == key(plain) and keyed.stats == plain.stats
    cooldown = next(f for f in counted if isinstance(getattr(f, "inner", None), EvictionCooldown))
    # (a class is prepared at most once; classes alike share it: at most one per combination)
    assert cooldown.prepared <= keyed.stats.classes
    combos = {(p.requests.values[2] > 0, tuple(p.node_selector.items()), p.tolerations,
               p.owner if any(k == p.owner for k, _ in cooling) else None,
               p.owner if any(k == p.owner for k, _ in harmful) else None) for p in pods}  # fmt: skip
    assert cooldown.prepared <= len(combos)
