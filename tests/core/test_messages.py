"""Messages between processes: JSON round trips, ledger round trips, hostile and arbitrary input."""

from __future__ import annotations

import contextlib
import copy
import json
import math
import pickle
import re
from collections.abc import Callable, Mapping
from dataclasses import fields, is_dataclass
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kalena.core.enforcement import (
    EscalationConfig,
    EvictionCause,
    EvictionConfig,
    MitigationRound,
    ThrottleCause,
    ThrottleConfig,
    ThrottleDecision,
    decide_escalation,
    eviction_commitments,
    plan_evictions,
    plan_throttle,
    snapshot_from_ledger,
)
from kalena.core.ledger import Eviction, Ledger, PlaceBatch, RemovalCause, RemoveBatch, ReservationUpdate
from kalena.core.messages import (
    KINDS,
    MAX_ITEMS,
    MAX_MESSAGE_CHARS,
    MAX_STR_CHARS,
    MAX_WORKLOADS,
    MESSAGE_VERSION,
    EscalationMsg,
    EvictionMsg,
    Message,
    MessageError,
    PlacementMsg,
    RemovalMsg,
    ReservationEntry,
    ReservationReport,
    ThrottleMsg,
    WhyPendingMsg,
    decode,
    dumps,
    encode,
    escalation_msg,
    eviction_msg,
    loads,
    placement_msg,
    removal_msg,
    reservation_reports,
    throttle_msg,
    to_commitment,
    victim_msgs,
    why_pending_msg,
    wire,
)
from kalena.core.messages.specs import workload_out
from kalena.core.model import PodTerm, Selector, SpreadConstraint, Tier, Toleration, WorkloadSpec
from kalena.core.placement import BindingDimension, why_pending
from kalena.core.resources import DIMS, GPU, NDIM, RAM, Resources
from kalena.core.verdict import Reason, ReasonCode
from kalena.testing.builders import batch, node, workload
from kalena.testing.clusters import ledger_of, pass_state


def same(a: object, b: object) -> bool:
    """Structural equality in which NaN equals NaN (dataclass ``==`` compares NaN unequal)."""
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or a == b
    if is_dataclass(a) and not isinstance(a, type):
        return type(a) is type(b) and all(same(getattr(a, f.name), getattr(b, f.name)) for f in fields(a))
    if isinstance(a, tuple | list):
        return isinstance(b, tuple | list) and len(a) == len(b) and all(map(same, a, b))
    if isinstance(a, Mapping):
        return isinstance(b, Mapping) and list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


# strategies ---------------------------------------------------------------------------------------
IDS = st.text(min_size=1, max_size=24)  # unicode, surrogates excluded (hypothesis's default)
STRS = st.text(max_size=16)
LABELS = st.dictionaries(STRS, STRS, max_size=4)
EPOCHS = st.integers(0, 2**63 - 1)
TIMES = st.floats(allow_nan=False, allow_infinity=False)
NONNEG_INF = st.floats(min_value=0.0)  # finite or +inf
NONNEG = st.floats(min_value=0.0, allow_infinity=False)
ANY_FLOAT = st.floats()  # NaN and both infinities included


def vec(elements: st.SearchStrategy[float]) -> st.SearchStrategy[tuple[float, ...]]:
    return st.tuples(*([elements] * NDIM))


RESOURCES = vec(NONNEG_INF).map(Resources)
REASONS = st.builds(Reason, st.sampled_from(ReasonCode), STRS, ANY_FLOAT, ANY_FLOAT, ANY_FLOAT, STRS)
SELECTORS = st.builds(Selector, st.frozensets(STRS, max_size=3), LABELS)
POLICIES = st.sampled_from(["Honor", "Ignore"])
WORKLOADS = st.builds(
    WorkloadSpec,
    id=IDS,
    requests=RESOURCES,
    limits=st.none() | RESOURCES,
    tier=st.sampled_from(Tier),
    priority=st.integers(-(2**63), 2**63 - 1),
    namespace=STRS,
    declaration=STRS,
    labels=LABELS,
    node_selector=LABELS,
    tolerations=st.lists(
        st.builds(Toleration, STRS, st.sampled_from(["Equal", "Exists"]), STRS, STRS, st.booleans()),
        max_size=3,
    ).map(tuple),
    affinity=SELECTORS,
    anti_affinity=SELECTORS,
    anti_affinity_topology_key=STRS,
    spread=st.lists(
        st.builds(
            SpreadConstraint, st.integers(0, 5), STRS, SELECTORS, st.integers(0, 5), POLICIES, POLICIES
        ),
        max_size=2,
    ).map(tuple),
    required_affinity=st.lists(st.builds(PodTerm, SELECTORS, STRS), max_size=2).map(tuple),
    required_anti_affinity=st.lists(st.builds(PodTerm, SELECTORS, STRS), max_size=2).map(tuple),
    node_names=st.none() | st.frozensets(STRS, max_size=3),
    image=STRS,
    owner=STRS,
    slack_cpu=st.booleans(),
    slack_memory=st.booleans(),
    reclaim_disabled=st.booleans(),
    startup_grace_s=NONNEG_INF,
    is_daemonset=st.booleans(),
)
ENTRIES = st.builds(
    ReservationEntry, IDS, vec(NONNEG).map(Resources), st.none() | vec(NONNEG | st.just(math.nan))
)
DECISIONS = st.builds(
    ThrottleDecision,
    IDS,
    st.sampled_from(DIMS),
    NONNEG_INF,
    st.none() | st.integers(1, 10000),
    st.sampled_from(ThrottleCause),
    REASONS,
)
BINDINGS = st.builds(
    BindingDimension,
    st.sampled_from(DIMS),
    st.integers(0, 10_000),
    st.floats(allow_nan=False, allow_infinity=False),
    st.none() | NONNEG_INF,
)


@st.composite
def why_pending_msgs(draw: st.DrawFn) -> WhyPendingMsg:
    total = draw(st.integers(0, 10_000))
    available = draw(st.integers(0, total))
    return WhyPendingMsg(draw(IDS), total, available, draw(st.none() | BINDINGS), draw(STRS))


def unique_entries(entries: list[ReservationEntry]) -> tuple[ReservationEntry, ...]:
    return tuple({e.workload_id: e for e in entries}.values())


MESSAGES: dict[str, st.SearchStrategy[Any]] = {
    "placement": st.builds(PlacementMsg, WORKLOADS, IDS, EPOCHS),
    "eviction": st.builds(
        EvictionMsg,
        IDS,
        IDS,
        EPOCHS,
        st.booleans(),
        st.sampled_from(EvictionCause),
        NONNEG,
        st.none() | TIMES,
        st.lists(REASONS, max_size=3).map(tuple),
    ),
    "removal": st.builds(RemovalMsg, IDS, IDS, EPOCHS, st.sampled_from(RemovalCause)),
    "reservation-report": st.builds(
        ReservationReport, IDS, EPOCHS, TIMES, st.lists(ENTRIES, max_size=5).map(unique_entries)
    ),
    "throttle": st.builds(ThrottleMsg, IDS, TIMES, st.lists(DECISIONS, max_size=4).map(tuple)),
    "escalation": st.builds(
        EscalationMsg,
        IDS,
        st.booleans(),
        st.none() | TIMES,
        st.lists(IDS, max_size=4).map(tuple),
        st.none() | REASONS,
    ),
    "why-pending": why_pending_msgs(),
}
ANY_MESSAGE = st.one_of(*MESSAGES.values())


# JSON round trips ---------------------------------------------------------------------------------
def test_every_kind_in_the_registry_has_a_strategy_and_its_own_class():
    assert set(KINDS) == set(MESSAGES)
    assert all(codec.type.kind == kind for kind, codec in KINDS.items())


@pytest.mark.parametrize("kind", sorted(MESSAGES))
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_json_round_trip(kind: str, data: st.DataObject):
    m = data.draw(MESSAGES[kind])
    text = dumps(m)
    back = loads(text)
    assert same(back, m)
    assert dumps(back) == text  # one spelling per value: equal messages encode to equal text
    # NaN and infinities survive the standard library's defaults too (they are strings on the wire).
    assert same(decode(json.loads(json.dumps(encode(m)))), m)
    assert text.isascii()
    wire = encode(m)
    assert wire["version"] == MESSAGE_VERSION and wire["kind"] == kind
    assert list(wire) == ["version", "kind", *KINDS[kind].keys]


def test_the_workload_codec_writes_every_field_of_workload_spec():
    assert list(workload_out(batch("a/b"))) == list(WorkloadSpec.__dataclass_fields__)


def test_non_finite_numbers_are_strings_on_the_wire():
    r = Reason(ReasonCode.LIMIT_BREACH, "ram", used=math.nan, capacity=math.inf, requested=-math.inf)
    wire = encode(EscalationMsg("n0", True, None, (), r))
    assert wire["reason"] == {  # type: ignore[comparison-overlap]
        "code": "limit-breach",
        "dimension": "ram",
        "requested": "-inf",
        "used": "nan",
        "capacity": "inf",
        "detail": "",
        "seconds": 0.0,
        "limit_s": 0.0,
    }
    assert "NaN" not in dumps(EscalationMsg("n0", True, None, (), r))


def test_encode_refuses_what_is_not_a_message():
    with pytest.raises(TypeError, match="not a message: Reason"):
        encode(Reason(ReasonCode.LIMIT_BREACH))  # type: ignore[arg-type]


# through a real ledger ----------------------------------------------------------------------------
DIMS8 = {
    "cpu": 8,
    "ram": 16,
    "storage": 100,
    "disk_read": 100,
    "disk_write": 100,
    "net_in": 1000,
    "net_out": 1000,
}


def small_ledger() -> Ledger:
    return ledger_of(
        [node("n0", gpu=1, **DIMS8), node("n1", gpu=2, **DIMS8)],
        [
            (workload("prod/web-0", cpu=4, ram=8, limits={"cpu": 8, "ram": 12}), "n0"),
            (workload("prod/trainer", cpu=1, ram=1, gpu=1), "n1"),
        ],
    )


def over_the_wire(m: Message) -> Message:
    return loads(dumps(m))


def spec_b(wid: str = "ml/b-0", **kw: Any) -> WorkloadSpec:
    kw.setdefault("cpu", 1)
    kw.setdefault("ram", 2)
    return batch(wid, labels={"job": "train", "é": "ü"}, node_selector={"pool": ""}, **kw)


def test_placement_round_trip_through_the_ledger():
    L = small_ledger()
    c = PlaceBatch(spec_b(tolerations=("gpu",), anti_affinity=("ml/b-1",)), 1, L.node_epoch(1))
    msg = over_the_wire(placement_msg(c, L))
    assert msg == PlacementMsg(c.workload, "n1", c.node_epoch)
    back = to_commitment(msg, L)
    assert back == c
    assert L.apply(back).accepted and L.node_of("ml/b-0") == 1


def test_eviction_and_removal_round_trip_through_the_ledger():
    L = small_ledger()
    for wid in ("ml/b-0", "ml/b-1"):
        assert L.apply(PlaceBatch(spec_b(wid), 0, L.node_epoch(0))).accepted
    reasons = (Reason(ReasonCode.RESERVATION_LEDGER_BREACH, "ram", used=17.0, capacity=16.0),)
    ev = Eviction("ml/b-0", 0, L.node_epoch(0), False, reasons)
    msg = over_the_wire(eviction_msg(ev, L, EvictionCause.RESERVATION_LEDGER_BREACH, 30.0, 1000.0))
    assert isinstance(msg, EvictionMsg) and msg.cooldown_until == 1000.0 and msg.node == "n0"
    assert to_commitment(msg, L) == ev and L.apply(to_commitment(msg, L)).accepted
    rm = RemoveBatch("ml/b-1", 0, L.node_epoch(0), RemovalCause.FAILED)
    rmsg = over_the_wire(removal_msg(rm, L))
    assert rmsg == RemovalMsg("ml/b-1", "n0", rm.node_epoch, RemovalCause.FAILED)
    assert to_commitment(rmsg, L) == rm and L.apply(rm).accepted
    assert L.batch_ids() == ()


def test_an_eviction_of_a_workload_already_gone_is_the_ledgers_stale_answer_not_an_exception():
    L = small_ledger()
    res = L.apply(to_commitment(RemovalMsg("ml/gone", "n0", L.node_epoch(0)), L))
    assert (
        not res.accepted
        and res.reasons[0].code is ReasonCode.STALE_EPOCH
        and "ml/gone" in res.reasons[0].detail
    )


def halved(L: Ledger) -> ReservationUpdate:
    rows = L.rows()
    r = rows.requests * 0.5
    r[:, GPU] = rows.requests[:, GPU]
    return ReservationUpdate(rows.rows, r, rows.global_epoch)


def test_reservation_reports_become_updates_the_ledger_accepts():
    L = small_ledger()
    assert L.apply(PlaceBatch(spec_b(), 1, L.node_epoch(1))).accepted
    up = halved(L)
    usage = np.full((len(up.rows), NDIM), math.nan)
    usage[:, RAM] = 0.25
    reports = reservation_reports(up, L, time=60.0, usage=usage)
    assert [(r.node, r.node_epoch, len(r.entries)) for r in reports] == [("n0", 0, 1), ("n1", 1, 2)]
    # A placement on n1 after the agent read it must not starve the report (row versions, not node epochs).
    assert L.apply(PlaceBatch(spec_b("ml/late"), 1, L.node_epoch(1))).accepted
    for report in reports:
        back = over_the_wire(report)
        assert same(back, report)
        assert isinstance(back, ReservationReport)
        c = to_commitment(back, L)
        assert c.global_epoch == L.global_epoch
        assert L.apply(c).accepted
    for wid in ("prod/web-0", "prod/trainer", "ml/b-0"):
        want = L.spec(wid).requests.array() * 0.5
        want[GPU] = L.spec(wid).requests.values[GPU]
        assert np.array_equal(L.reservation_of(wid), want)
    assert L.reservation_of("ml/late")[RAM] == 2.0  # not covered: untouched


REPORT_ERRORS = [
    ("unknown-node", "n9", "prod/web-0", 4.0, 0.0, "node: unknown node 'n9'"),
    ("unknown-workload", "n0", "ml/zzz", 4.0, 0.0, "entries[0].workload_id: unknown workload 'ml/zzz'"),
    (
        "wrong-node",
        "n1",
        "prod/web-0",
        4.0,
        0.0,
        "entries[0].workload_id: 'prod/web-0' is on node 'n0', not 'n1'",
    ),
    ("gpu-differs", "n0", "prod/web-0", 4.0, 1.0, "entries[0].reservation.gpu: must equal the request 0"),
    ("infinite", "n0", "prod/web-0", math.inf, 0.0, "entries[0].reservation: must be finite"),
]


@pytest.mark.parametrize(
    ("node_name", "wid", "ram", "gpu", "message"),
    [c[1:] for c in REPORT_ERRORS],
    ids=[c[0] for c in REPORT_ERRORS],
)
def test_a_report_the_ledger_cannot_place_raises_naming_it(node_name, wid, ram, gpu, message):
    L = small_ledger()
    r = [1.0] * NDIM
    r[RAM], r[GPU] = ram, gpu
    report = ReservationReport(node_name, 0, 1.0, (ReservationEntry(wid, Resources(tuple(r))),))
    with pytest.raises(MessageError, match=re.escape(message)):
        to_commitment(report, L)


def test_placement_of_service_or_daemonset_from_a_peer_is_refused():
    L = small_ledger()
    with pytest.raises(MessageError, match=r"workload\.tier: a placement places batch workloads only"):
        to_commitment(PlacementMsg(workload("a/s"), "n0", 0), L)
    with pytest.raises(MessageError, match=r"workload\.is_daemonset"):
        to_commitment(PlacementMsg(batch("a/ds", is_daemonset=True), "n0", 0), L)
    with pytest.raises(MessageError, match="node: no node index 5"):
        placement_msg(PlaceBatch(spec_b(), 5, 0), L)


def breached_ledger() -> Ledger:
    """web-0's ram reservation rose to 12 after a 6 GiB batch landed: U = 18 > C = 16 on n0."""
    L = small_ledger()
    assert L.apply(PlaceBatch(spec_b(ram=6), 0, L.node_epoch(0))).accepted
    rows = L.rows()
    r = rows.reservations.copy()
    r[list(rows.ids).index("prod/web-0"), RAM] = 12.0
    assert L.apply(ReservationUpdate(rows.rows, r, rows.global_epoch)).accepted
    return L


def test_an_eviction_plan_goes_over_the_wire_and_its_commitments_apply():
    L = breached_ledger()
    plan = plan_evictions(snapshot_from_ledger(L, 0), EvictionConfig(), now=500.0)
    assert [v.workload for v in plan.victims] == ["ml/b-0"]
    msgs = tuple(over_the_wire(m) for m in victim_msgs(plan.victims, plan.epoch))
    assert msgs == victim_msgs(plan.victims, plan.epoch)
    assert msgs[0].cooldown_until == plan.victims[0].requeue.cooldown_until  # type: ignore[union-attr]
    commitments = tuple(to_commitment(m, L) for m in msgs)  # type: ignore[call-overload]
    assert commitments == eviction_commitments(plan.victims, 0, plan.epoch)
    assert all(r.accepted for r in L.apply_all(commitments))


def test_throttle_escalation_and_why_pending_decisions_go_over_the_wire():
    L = breached_ledger()
    snap = snapshot_from_ledger(L, 0)
    tm = throttle_msg(plan_throttle(snap, ThrottleConfig(), now=10.0))
    assert tm.decisions and same(over_the_wire(tm), tm)
    history = [MitigationRound(float(t), True, ("ram",)) for t in range(0, 40, 10)]
    d = decide_escalation(snap, history, EscalationConfig(), now=40.0)
    em = escalation_msg(d)
    assert em.escalate and em.drained == ("ml/b-0",) and em.slack_ineligible_until == 940.0
    assert same(over_the_wire(em), em)
    wp = why_pending(batch("ml/huge", cpu=1, ram=100), pass_state(small_ledger()))
    wm = why_pending_msg(wp)
    assert wm.binding is not None and wm.binding.dimension == "ram"
    assert same(over_the_wire(wm), wm)


# hostile input ------------------------------------------------------------------------------------
BASES: dict[str, Message] = {
    "placement": PlacementMsg(spec_b(tolerations=("gpu",)), "n0", 3),
    "report": ReservationReport(
        "n0", 1, 5.0, (ReservationEntry("ml/b-0", Resources.of(cpu=1, ram=2), (0.5,) + (math.nan,) * 7),)
    ),
    "why": WhyPendingMsg("ml/b-0", 3, 0, BindingDimension("ram", 3, 1.0, None), "0/3 nodes are available."),
    "throttle": ThrottleMsg(
        "n0",
        1.0,
        (ThrottleDecision("ml/b-0", "cpu", 2.0, 1, ThrottleCause.SLACK, Reason(ReasonCode.LIMIT_BREACH)),),
    ),
}

Mutation = Callable[[dict[str, Any]], Any]


def at(path: str, value: object) -> Mutation:
    """Set ``a.b.0.c`` (digits index lists) to ``value``; the sentinel ``DELETE`` removes the key."""

    def mutate(d: dict[str, Any]) -> dict[str, Any]:
        *parents, last = path.split(".")
        cur: Any = d
        for p in parents:
            cur = cur[int(p)] if p.isdigit() else cur[p]
        if value is DELETE:
            del cur[last]
        elif last.isdigit():
            cur[int(last)] = value
        else:
            cur[last] = value
        return d

    return mutate


DELETE = object()


def nested(depth: int) -> object:
    v: object = "x"
    for _ in range(depth):
        v = [v]
    return v


HOSTILE: list[tuple[str, str, Mutation, str]] = [
    ("not-an-object", "placement", lambda d: [d], "$: a message must be an object, got an array of 1 items"),
    ("missing-version", "placement", at("version", DELETE), "version: missing"),
    (
        "version-2",
        "placement",
        at("version", 2),
        "version: unsupported version 2 (this reader knows version 1)",
    ),
    ("version-bool", "placement", at("version", True), "version: must be an integer, got True"),
    ("missing-kind", "placement", at("kind", DELETE), "kind: missing"),
    ("unknown-kind", "placement", at("kind", "teleport"), "kind: unknown kind 'teleport' (known: placement,"),
    ("kind-not-a-string", "placement", at("kind", 7), "kind: must be a string, got 7"),
    ("missing-key", "placement", at("workload.requests.cpu", DELETE), "workload.requests.cpu: missing"),
    ("missing-top-key", "placement", at("node_epoch", DELETE), "node_epoch: missing"),
    ("extra-key", "placement", at("surprise", 1), "surprise: unknown key 'surprise'"),
    ("extra-nested-key", "placement", at("workload.annotations", {}), "workload.annotations: unknown key"),
    (
        "string-for-number",
        "placement",
        at("workload.requests.cpu", "x"),
        "workload.requests.cpu: must be a number, got 'x'",
    ),
    (
        "bool-for-number",
        "placement",
        at("workload.requests.cpu", True),
        "workload.requests.cpu: must be a number, got True",
    ),
    (
        "negative-request",
        "placement",
        at("workload.requests.ram", -1),
        "workload.requests.ram: must be non-negative",
    ),
    (
        "nan-request",
        "placement",
        at("workload.requests.cpu", "nan"),
        "workload.requests.cpu: must not be nan",
    ),
    (
        "float-nan",
        "placement",
        at("workload.requests.cpu", math.nan),
        "workload.requests.cpu: non-finite numbers are spelled",
    ),
    (
        "float-inf",
        "placement",
        at("workload.requests.cpu", math.inf),
        "workload.requests.cpu: non-finite numbers are spelled",
    ),
    (
        "huge-int-number",
        "placement",
        at("workload.requests.cpu", 10**400),
        "workload.requests.cpu: must be a number in float range, got an integer of 1329 bits",
    ),
    (
        "epoch-negative",
        "placement",
        at("node_epoch", -1),
        "node_epoch: must be in [0, 9223372036854775807], got -1",
    ),
    ("epoch-huge", "placement", at("node_epoch", 2**64), "node_epoch: must be in [0,"),
    ("epoch-float", "placement", at("node_epoch", 3.0), "node_epoch: must be an integer, got 3.0"),
    (
        "bad-enum",
        "placement",
        at("workload.tier", "gold"),
        "workload.tier: must be one of 'service', 'batch', got 'gold'",
    ),
    (
        "label-not-string",
        "placement",
        at("workload.labels", {"a": 1}),
        "workload.labels['a']: must be a string, got 1",
    ),
    (
        "labels-array",
        "placement",
        at("workload.labels", ["a"]),
        "workload.labels: must be an object, got an array",
    ),
    ("empty-id", "placement", at("workload.id", ""), "workload.id: must not be empty"),
    (
        "long-string",
        "placement",
        at("workload.id", "x" * (MAX_STR_CHARS + 1)),
        "workload.id: string of 4097 characters",
    ),
    ("lone-surrogate", "placement", at("node", "n\ud800"), "node: must be valid unicode"),
    (
        "bad-toleration",
        "placement",
        at("workload.tolerations.0.key", None),
        "workload.tolerations[0].key: must be a string, got None",
    ),
    (
        "huge-list",
        "placement",
        at("workload.tolerations", [{}] * (MAX_ITEMS + 1)),
        "workload.tolerations: array of 257 items is longer than 256",
    ),
    (
        "huge-object",
        "placement",
        at("workload.labels", {str(i): "" for i in range(MAX_ITEMS + 1)}),
        "workload.labels: object of 257 keys",
    ),
    (
        "deeply-nested",
        "placement",
        at("workload.labels", nested(10_000)),
        "workload.labels: must be an object, got an array of 1 items",
    ),
    (
        "nested-in-number",
        "placement",
        at("workload.requests.cpu", nested(50)),
        "workload.requests.cpu: must be a number, got an array",
    ),
    (
        "huge-report",
        "report",
        at("entries", [{}] * (MAX_WORKLOADS + 1)),
        "entries: array of 4097 items is longer than 4096",
    ),
    (
        "report-entry-twice",
        "report",
        lambda d: at("entries", d["entries"] * 2)(d),
        "entries[1].workload_id: names workload 'ml/b-0' twice",
    ),
    (
        "reservation-inf",
        "report",
        at("entries.0.reservation.cpu", "inf"),
        "entries[0].reservation.cpu: must be finite, got 'inf'",
    ),
    (
        "usage-inf",
        "report",
        at("entries.0.usage.ram", "inf"),
        "entries[0].usage.ram: must be finite, got 'inf'",
    ),
    (
        "usage-spelling",
        "report",
        at("entries.0.usage.ram", "NaN"),
        "entries[0].usage.ram: must be a number, got 'NaN'",
    ),
    ("time-nan", "report", at("time", "nan"), "time: must not be nan"),
    ("available-over-total", "why", at("available", 4), "available: must be at most total_nodes (3), got 4"),
    (
        "binding-dimension",
        "why",
        at("binding.dimension", "vram"),
        "binding.dimension: must be one of cpu, ram,",
    ),
    (
        "weight-zero",
        "throttle",
        at("decisions.0.weight", 0),
        "decisions[0].weight: must be in [1, 10000], got 0",
    ),
    (
        "reason-code",
        "throttle",
        at("decisions.0.reason.code", "oops"),
        "decisions[0].reason.code: must be one of",
    ),
]


@pytest.mark.parametrize(("base", "mutate", "message"), [c[1:] for c in HOSTILE], ids=[c[0] for c in HOSTILE])
def test_hostile_input_raises_message_error_with_the_key_path(base: str, mutate: Mutation, message: str):
    wire = mutate(copy.deepcopy(encode(BASES[base])))
    with pytest.raises(MessageError) as err:
        decode(wire)
    assert str(err.value).startswith(message), str(err.value)
    assert str(err.value).startswith(err.value.path + ": ")


HOSTILE_TEXT = [
    ("not-json", "{", "$: not JSON:"),
    ("nan-token", '{"version": NaN}', "$: NaN is not JSON"),
    ("infinity-token", "[Infinity]", "$: Infinity is not JSON"),
    ("deep-text", "[" * 100_000 + "]" * 100_000, "$: nested too deeply to parse"),
    ("int-digits", "1" * 5000, "$: not JSON: Exceeds the limit"),
    ("bad-utf8", b'{"a": "\xff"}', "$: not JSON:"),
    ("too-long", " " * (MAX_MESSAGE_CHARS + 1), "$: message of 8388609 characters is longer than 8388608"),
    ("not-text", 12, "$: a message must be JSON text, got 12"),
    ("text-ok-kind-bad", '{"version": 1, "kind": "x"}', "kind: unknown kind 'x'"),
]


@pytest.mark.parametrize(("data", "message"), [c[1:] for c in HOSTILE_TEXT], ids=[c[0] for c in HOSTILE_TEXT])
def test_hostile_text_raises_message_error(data: Any, message: str):
    with pytest.raises(MessageError) as err:
        loads(data)
    assert str(err.value).startswith(message), str(err.value)


def test_message_error_is_a_value_error_and_pickles():
    e = MessageError("node", "unknown node 'n9'")
    assert isinstance(e, ValueError)
    back = pickle.loads(pickle.dumps(e))
    assert (back.path, back.problem, str(back)) == ("node", "unknown node 'n9'", "node: unknown node 'n9'")


# fuzz ---------------------------------------------------------------------------------------------
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)
ENVELOPES = st.fixed_dictionaries(
    {"version": st.just(1), "kind": st.sampled_from(sorted(KINDS))},
    optional={k: JSON_VALUES for k in sorted({k for c in KINDS.values() for k in c.keys})},
)


def decodes_or_refuses(value: object) -> None:
    try:
        m = decode(value)
    except MessageError:
        return
    assert type(m) in {c.type for c in KINDS.values()}


@settings(max_examples=300, deadline=None)
@given(JSON_VALUES | ENVELOPES)
def test_decode_of_arbitrary_json_returns_a_message_or_raises_message_error(value: object):
    decodes_or_refuses(value)


def locations(v: object, prefix: tuple[str | int, ...] = ()) -> list[tuple[str | int, ...]]:
    out = [prefix]
    if isinstance(v, dict):
        for k, x in v.items():
            out += locations(x, (*prefix, k))
    elif isinstance(v, list):
        for i, x in enumerate(v):
            out += locations(x, (*prefix, i))
    return out


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ANY_MESSAGE, st.data())
def test_decode_of_a_valid_message_with_one_part_replaced_never_crashes(m: Message, data: st.DataObject):
    wire = encode(m)
    where = data.draw(st.sampled_from(locations(wire)[1:]))
    *parents, last = where
    cur: Any = wire
    for p in parents:
        cur = cur[p]
    cur[last] = data.draw(JSON_VALUES)
    decodes_or_refuses(wire)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=64) | JSON_VALUES.map(lambda v: json.dumps(v)))
def test_loads_of_arbitrary_text_returns_a_message_or_raises_message_error(text: str):
    with contextlib.suppress(MessageError):
        loads(text)


def test_the_depth_guard_stops_a_reader_before_it_enters_a_container_too_deep():
    deep = ("a",) * wire.MAX_DEPTH
    with pytest.raises(MessageError, match=f"^a(\\.a)*: nested deeper than {wire.MAX_DEPTH} levels"):
        wire.Obj({}, deep, ())
    with pytest.raises(MessageError, match="nested deeper"):
        wire.array([], deep, wire.text)
    assert wire.array(["x"], deep[:-1], wire.text) == ("x",)
