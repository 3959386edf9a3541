"""Every filter plugin, table-driven on one hand-built four-node cluster."""

import numpy as np
import pytest

from kalena.core.ledger import PlaceBatch
from kalena.core.model import Selector, SpreadConstraint, Taint
from kalena.core.placement import DEFAULT_FILTERS, SchedulingContext
from kalena.core.placement.runner import explain, prepare
from kalena.core.verdict import ReasonCode
from kalena.testing.builders import batch, node, workload
from kalena.testing.clusters import ledger_of, pass_state

ALL = dict(storage=100, disk_read=100, disk_write=100, net_in=100, net_out=100, gpu=0)


def cluster():
    """n0 (zone a, general), n1 (zone a, highmem), n2 (zone b, taint gpu), n3 (zone b, soft taint)."""
    n2 = node("n2", zone="b", labels={"pool": "general"}, cpu=8, ram=16, **ALL)
    n3 = node("n3", zone="b", labels={"pool": "general"}, cpu=8, ram=16, **ALL)
    nodes = [
        node("n0", zone="a", labels={"pool": "general"}, cpu=8, ram=16, **ALL),
        node("n1", zone="a", labels={"pool": "highmem"}, cpu=8, ram=32, **ALL),
        type(n2)(n2.name, n2.allocatable, n2.labels, (Taint("gpu", effect="NoSchedule"),), n2.zone),
        type(n3)(n3.name, n3.allocatable, n3.labels, (Taint("soft", effect="PreferNoSchedule"),), n3.zone),
    ]
    prod = [
        (workload("p/db", cpu=2, ram=2, anti_affinity_labels={"io": "heavy"}), "n0"),
        (
            workload("p/zonal", cpu=1, ram=1, anti_affinity=("j/loner",), anti_affinity_topology_key="zone"),
            "n2",
        ),
        (workload("p/web", cpu=4, ram=4, labels={"app": "web"}), "n1"),
    ]
    L = ledger_of(nodes, prod)
    for i in range(2):  # two resident batch pods labelled app=batchy on n0
        assert L.apply(
            PlaceBatch(batch(f"j/r{i}", cpu=0.5, labels={"app": "batchy"}), 0, L.node_epoch(0))
        ).accepted
    return L


def check(plugin_name, pod, ctx=None):
    L = cluster()
    state = pass_state(L, ctx or SchedulingContext(now=100.0))
    plugin = next(f for f in DEFAULT_FILTERS if f.name == plugin_name)
    c = plugin.prepare(pod, state)
    nodes = np.arange(4)
    if c is None:
        return [True] * 4, []
    ok = c.passes(nodes)
    return ok.tolist(), list(c.reasons(nodes[~ok]))


SPREAD_ZONE = SpreadConstraint(1, "zone", Selector(match_labels={"app": "batchy"}))
MIXED = Selector(frozenset({"p/zonal"}), {"app": "batchy"})
CASES = [
    # id, plugin, pod, context, expected mask, expected (code, detail) of the first failing node
    ("gpu-none", "GpuRequested", batch("j/x", cpu=1), None, [True] * 4, None),
    ("gpu-requested", "GpuRequested", batch("j/x", gpu=1), None, [False] * 4, (ReasonCode.GPU_REQUESTED, "")),
    (
        "ns-cap-free",
        "NamespaceCap",
        batch("j/x"),
        SchedulingContext(namespace_caps={"j": 3}),
        [True] * 4,
        None,
    ),
    (
        "ns-cap-full",
        "NamespaceCap",
        batch("j/x"),
        SchedulingContext(namespace_caps={"j": 2}),
        [False] * 4,
        (ReasonCode.NAMESPACE_CAP, "j"),
    ),
    ("eligible-all", "SlackEligible", batch("j/x"), None, [True] * 4, None),
    (
        "eligible-mask",
        "SlackEligible",
        batch("j/x"),
        SchedulingContext(eligible=np.array([1, 0, 1, 1], bool)),
        [True, False, True, True],
        (ReasonCode.NODE_SLACK_INELIGIBLE, ""),
    ),
    (
        "selector-general",
        "NodeSelector",
        batch("j/x", node_selector={"pool": "general"}),
        None,
        [True, False, True, True],
        (ReasonCode.NODE_SELECTOR_MISMATCH, ""),
    ),
    (
        "selector-absent-label",
        "NodeSelector",
        batch("j/x", node_selector={"disk": "ssd"}),
        None,
        [False] * 4,
        (ReasonCode.NODE_SELECTOR_MISMATCH, ""),
    ),
    (
        "taint-untolerated",
        "TaintToleration",
        batch("j/x"),
        None,
        [True, True, False, True],
        (ReasonCode.UNTOLERATED_TAINT, "gpu"),
    ),
    ("taint-tolerated", "TaintToleration", batch("j/x", tolerations=("gpu",)), None, [True] * 4, None),
    (
        "cooldown",
        "EvictionCooldown",
        batch("j/x", owner="j/job"),
        SchedulingContext(
            now=100.0, cooldowns={("j/job", 1): 110.0, ("j/job", 2): 99.0, ("other", 3): 500.0}
        ),
        [True, False, True, True],
        (ReasonCode.EVICTION_COOLDOWN, ""),
    ),
    (
        "blacklist",
        "HarmfulPairing",
        batch("j/x", owner="j/job"),
        SchedulingContext(blacklist=frozenset({("j/job", 3), ("other", 0)})),
        [True, True, True, False],
        (ReasonCode.HARMFUL_PAIRING, ""),
    ),
    (
        "fit-cpu-exact-fit-on-n0",
        "ReservationFit",
        batch("j/x", cpu=5),
        None,
        [True, False, True, True],
        (ReasonCode.INSUFFICIENT_RESOURCE, ""),
    ),
    (
        "fit-ram-highmem",
        "ReservationFit",
        batch("j/x", ram=20),
        None,
        [False, True, False, False],
        (ReasonCode.INSUFFICIENT_RESOURCE, ""),
    ),
    (
        "prod-aa-by-label",
        "ProductionAntiAffinity",
        batch("j/x", labels={"io": "heavy"}),
        None,
        [False, True, True, True],
        (ReasonCode.PRODUCTION_ANTI_AFFINITY, ""),
    ),
    (
        "prod-aa-by-name-zone",
        "ProductionAntiAffinity",
        batch("j/loner"),
        None,
        [True, True, False, False],
        (ReasonCode.PRODUCTION_ANTI_AFFINITY, ""),
    ),
    (
        "prod-aa-no-match",
        "ProductionAntiAffinity",
        batch("j/x", labels={"io": "light"}),
        None,
        [True] * 4,
        None,
    ),
    (
        "own-aa-node",
        "OwnAntiAffinity",
        batch("j/x", anti_affinity_labels={"app": "web"}),
        None,
        [True, False, True, True],
        (ReasonCode.OWN_ANTI_AFFINITY, ""),
    ),
    (
        "own-aa-zone",
        "OwnAntiAffinity",
        batch("j/x", anti_affinity_labels={"app": "web"}, anti_affinity_topology_key="zone"),
        None,
        [False, False, True, True],
        (ReasonCode.OWN_ANTI_AFFINITY, ""),
    ),
    (
        "own-aa-no-resident",
        "OwnAntiAffinity",
        batch("j/x", anti_affinity_labels={"app": "none"}),
        None,
        [True] * 4,
        None,
    ),
    (
        "spread-zone",
        "TopologySpread",
        batch("j/x", labels={"app": "batchy"}, spread=(SPREAD_ZONE,)),
        None,
        [False, False, True, True],
        (ReasonCode.SPREAD_SKEW, "zone"),
    ),
    (
        "spread-not-self-matching",
        "TopologySpread",
        batch("j/x", spread=(SPREAD_ZONE,)),
        None,
        [False, False, True, True],
        (ReasonCode.SPREAD_SKEW, "zone"),
    ),
    (
        "spread-skew-2-ok",
        "TopologySpread",
        batch("j/x", labels={"app": "batchy"}, spread=(SpreadConstraint(3, "zone", SPREAD_ZONE.selector),)),
        None,
        [True] * 4,
        None,
    ),
    # pods on nodes failing the nodeSelector do not count (nodeAffinityPolicy: Honor)
    (
        "spread-selector-narrows-domains",
        "TopologySpread",
        batch("j/x", labels={"app": "batchy"}, node_selector={"pool": "highmem"}, spread=(SPREAD_ZONE,)),
        None,
        [True] * 4,
        None,
    ),
    # batchy x2 in zone a (n0), p/zonal in zone b: counts a=2, b=1, min 1: every zone within skew 1 ...
    (
        "spread-min-is-1",
        "TopologySpread",
        batch("j/x", spread=(SpreadConstraint(1, "zone", MIXED),)),
        None,
        [True] * 4,
        None,
    ),
    # ... unless fewer than minDomains zones exist: then min counts as 0 and zone a (2) is over
    (
        "spread-min-domains",
        "TopologySpread",
        batch("j/x", spread=(SpreadConstraint(1, "zone", MIXED, min_domains=3),)),
        None,
        [False, False, True, True],
        (ReasonCode.SPREAD_SKEW, "zone"),
    ),
    (
        "spread-key-missing",
        "TopologySpread",
        batch("j/x", spread=(SpreadConstraint(1, "rack", SPREAD_ZONE.selector),)),
        None,
        [False] * 4,
        (ReasonCode.SPREAD_SKEW, "rack"),
    ),
]


@pytest.mark.parametrize(
    ("plugin", "pod", "ctx", "mask", "first"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_filter(plugin, pod, ctx, mask, first):
    ok, reasons = check(plugin, pod, ctx)
    assert ok == mask
    if first is None:
        assert reasons == []
    else:
        code, detail = first
        assert reasons[0][0].code is code
        if detail:
            assert reasons[0][0].detail == detail


def test_reason_numbers():
    _, r = check("ReservationFit", batch("j/x", cpu=5.5))
    # n0: prod db 2 + two batch 0.5 = 3 used of 8
    assert [(x.dimension, x.requested, x.used, x.capacity) for x in r[0]] == [("cpu", 5.5, 3.0, 8.0)]
    _, r = check(
        "EvictionCooldown",
        batch("j/x", owner="j/job"),
        SchedulingContext(now=100.0, cooldowns={("j/job", 1): 110.0}),
    )
    assert (r[0][0].seconds, r[0][0].used, r[0][0].capacity) == (10.0, 0.0, 0.0)  # 10 s left; no quantity
    _, r = check("NamespaceCap", batch("j/x"), SchedulingContext(namespace_caps={"j": 2}))
    assert (r[0][0].used, r[0][0].capacity) == (2.0, 2.0)
    _, r = check("TopologySpread", batch("j/x", labels={"app": "batchy"}, spread=(SPREAD_ZONE,)))
    assert (r[0][0].used, r[0][0].capacity) == (3.0, 1.0)  # count 2 + self, min 0 + maxSkew 1


def test_production_spread_never_binds_batch():
    """A production workload's own spread constraint selecting batch pods does not filter them."""
    L = cluster()
    state = pass_state(L)
    pod = batch("j/x", labels={"app": "web"})
    checks = prepare(DEFAULT_FILTERS, pod, state)
    assert "TopologySpread" not in [name for name, _ in checks]


def test_runner_stamps_first_failing_plugin():
    L = cluster()
    state = pass_state(L)
    pod = batch("j/x", cpu=7, node_selector={"pool": "general"})
    st = explain(prepare(DEFAULT_FILTERS, pod, state), 4)
    assert [s.plugin for s in st] == ["ReservationFit", "NodeSelector", "TaintToleration", ""]
    assert st[3].ok and not st[0].ok
    assert st[0].reasons[0].dimension == "cpu"
