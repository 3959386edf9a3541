"""The ContextKeeper: cooldowns, the harmful-pairing blacklist, eligibility, images, volatility, JSON."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kalena.core.enforcement import EvictionEvent, PairingConfig, harmful_pairs
from kalena.core.placement import ContextKeeper, reservation_volatility, schedule
from kalena.core.placement.config import PlacementConfig
from kalena.core.resources import NDIM, RECLAIMABLE
from kalena.core.verdict import ReasonCode
from kalena.testing.builders import batch, node
from kalena.testing.clusters import ledger_of

NODES = ("n0", "n1", "n2")
PAIRING = PairingConfig(max_evictions=2, window_s=100.0)


def keeper(**kw) -> ContextKeeper:
    return ContextKeeper(NODES, PAIRING, **kw)


def test_a_cooldown_holds_until_its_end_and_keeps_the_latest_end():
    k = keeper()
    k.evicted("j/a", 1, now=10.0, cooldown_until=50.0)
    k.evicted("j/a", 1, now=12.0, cooldown_until=40.0)  # an earlier end never shortens it
    assert dict(k.context(20.0).cooldowns) == {("j/a", 1): 50.0}
    assert dict(k.context(50.0).cooldowns) == {}  # over at its end: dropped
    assert dict(k.cooldowns) == {}


def test_an_eviction_without_a_cooldown_only_counts_for_the_pairing():
    k = keeper()
    k.evicted("j/a", 0, now=1.0)
    k.evicted("j/a", 0, now=2.0)
    ctx = k.context(3.0)
    assert dict(ctx.cooldowns) == {} and ctx.blacklist == {("j/a", 0)}


@pytest.mark.parametrize(
    ("times", "now", "blacklisted"),
    [
        pytest.param([1.0], 5.0, False, id="one-eviction"),
        pytest.param([1.0, 60.0], 61.0, True, id="two-in-the-window"),
        pytest.param([1.0, 60.0], 100.9, True, id="still-in-the-window"),
        pytest.param([1.0, 60.0], 101.0, False, id="oldest-left-the-window"),
        pytest.param([1.0, 150.0], 151.0, False, id="apart-by-more-than-the-window"),
    ],
)
def test_the_blacklist_after_k_evictions_in_the_window_and_its_expiry(times, now, blacklisted):
    k = keeper()
    for t in times:
        k.evicted("j/a", 2, t, t + 5.0)
    assert (("j/a", 2) in k.context(now).blacklist) is blacklisted


def test_the_blacklist_is_the_cores_harmful_pairs_at_every_pass():
    """Recomputed lazily, yet at each pass equal to harmful_pairs over the whole history."""
    rng = np.random.default_rng(3)
    k = keeper()
    events: list[EvictionEvent] = []
    now = 0.0
    for _ in range(300):
        now += float(rng.exponential(8.0))
        if rng.random() < 0.5:
            key, n = f"j/{rng.integers(3)}", int(rng.integers(3))
            k.evicted(key, n, now, now + 30.0)
            events.append(EvictionEvent(key, NODES[n], now))
        want = {(p.key, NODES.index(p.node)) for p in harmful_pairs(events, PAIRING, now)}
        assert k.context(now).blacklist == want
        assert all(e.time > now - PAIRING.window_s for e in k.history)  # pruned to the window


def test_eligibility_follows_the_escalation_deadline():
    k = keeper()
    k.ineligible(1, 30.0)
    assert k.eligible(29.9).tolist() == [True, False, True]
    assert k.context(30.0).eligible.tolist() == [True, True, True]
    k.ineligible(1, 10.0)  # a later escalation's deadline replaces it
    assert k.eligible(10.0).all()


def test_image_masks_for_the_pods_of_the_pass():
    k = keeper()
    k.started("img/a", 2)
    k.started("img/a", 0)
    k.started("img/b", 1)
    k.started("", 1)  # no image
    ctx = k.context(0.0, [batch("j/x", image="img/a"), batch("j/y", image="img/c")])
    assert set(ctx.images) == {"img/a"} and ctx.images["img/a"].tolist() == [True, False, True]
    k.started("img/a", 1)  # a context already handed out does not change
    assert ctx.images["img/a"].tolist() == [True, False, True]
    assert k.images["img/a"].tolist() == [True, True, True] and "" not in k.images


def test_volatility_is_the_cores_over_the_last_samples():
    rng = np.random.default_rng(0)
    k = keeper(samples=4)
    cap = rng.uniform(4, 16, (3, NDIM))
    # 8 samples into a ring of 4: the slots hold the last four in time order, so the sums (and
    # their rounding) are the same as over series[-4:]
    series = rng.uniform(0, 4, (8, 3, NDIM))
    assert k.volatility.tolist() == [0.0, 0.0, 0.0]
    for u in series:
        k.sample(u)
    k.refresh_volatility(cap)
    want = reservation_volatility(series[-4:], cap, RECLAIMABLE)  # the ring keeps the last four
    assert np.array_equal(k.volatility, want) and np.array_equal(k.context(0.0).volatility, want)
    assert np.array_equal(k.samples(), series[-4:])


def test_the_context_feeds_the_cores_filters():
    L = ledger_of([node("n0", cpu=8, ram=16), node("n1", cpu=8, ram=16)])
    k = ContextKeeper.of(L, PairingConfig(max_evictions=1, window_s=100.0))
    k.evicted("j/a", 0, 5.0, 7.0)  # one strike is enough here: n0 is a harmful pairing for j/a
    k.ineligible(1, 20.0)
    pods = [batch("j/a-0", owner="j/a", cpu=1)]
    d = schedule(pods, L, k.context(10.0, pods), PlacementConfig(), np.random.default_rng(0))
    (why,) = d.pending
    assert [s.reasons[0].code for s in why.statuses] == [
        ReasonCode.HARMFUL_PAIRING,
        ReasonCode.NODE_SLACK_INELIGIBLE,
    ]
    assert why.message == "0/2 nodes are available: 1 Harmful pairing, 1 Node slack ineligible."


# -- JSON ---------------------------------------------------------------------------------------------
def _equal(a: ContextKeeper, b: ContextKeeper, now: float) -> None:
    assert a.to_json() == b.to_json()
    ca, cb = a.context(now, []), b.context(now, [])
    assert dict(ca.cooldowns) == dict(cb.cooldowns) and ca.blacklist == cb.blacklist
    assert np.array_equal(ca.eligible, cb.eligible) and np.array_equal(ca.volatility, cb.volatility)
    assert {i: m.tolist() for i, m in a.images.items()} == {i: m.tolist() for i, m in b.images.items()}
    assert np.array_equal(a.samples(), b.samples(), equal_nan=True)


_time = st.floats(0.0, 500.0, allow_nan=False)
_node = st.integers(0, len(NODES) - 1)
_op = st.one_of(
    st.tuples(st.just("evicted"), st.sampled_from(["j/a", "j/b"]), _node, _time, st.none() | _time),
    st.tuples(st.just("started"), st.sampled_from(["img/a", "img/b"]), _node),
    st.tuples(st.just("ineligible"), _node, _time),
    st.tuples(
        st.just("sample"),
        st.lists(st.floats(0, 64) | st.just(float("nan")), min_size=3 * NDIM, max_size=3 * NDIM),
    ),
    st.tuples(st.just("volatility")),
    st.tuples(st.just("refresh"), _time),
)


@settings(max_examples=60, deadline=None)
@given(ops=st.lists(_op, max_size=30), later=_time)
def test_json_round_trip(ops, later):
    k = keeper(samples=3)
    cap = np.full((3, NDIM), 32.0)
    for op in ops:
        if op[0] == "evicted":
            k.evicted(op[1], op[2], op[3], op[4])
        elif op[0] == "started":
            k.started(op[1], op[2])
        elif op[0] == "ineligible":
            k.ineligible(op[1], op[2])
        elif op[0] == "sample":
            k.sample(np.array(op[1]).reshape(3, NDIM))
        elif op[0] == "volatility":
            k.refresh_volatility(cap)
        else:
            k.refresh(op[1])
    data = k.to_json()
    text = json.dumps(data, allow_nan=False)  # plain JSON: no NaN, no infinity, no NumPy types
    back = ContextKeeper.from_json(json.loads(text), PAIRING)
    assert back.nodes == NODES and back.to_json() == data
    _equal(k, back, later)  # and both go on alike


def _good() -> dict:
    k = keeper()
    k.evicted("j/a", 1, 5.0, 9.0)
    k.started("img/a", 0)
    k.ineligible(2, 40.0)
    k.sample(np.ones((3, NDIM)))
    return k.to_json()


def _with(path: tuple, value) -> dict:
    data = copy.deepcopy(_good())
    *head, last = path
    target = data
    for p in head:
        target = target[p]
    if value is KeyError:
        del target[last]
    else:
        target[last] = value
    return data


BAD = [
    ("not-a-mapping", None, "scheduling context: must be a mapping"),
    ("version", _with(("version",), 2), "scheduling context version: must be 1, got 2"),
    ("missing-key", _with(("evictions",), KeyError), "scheduling context evictions: missing"),
    ("unknown-key", {**_good(), "extra": 1}, "scheduling context extra: unknown key"),
    ("duplicate-nodes", _with(("nodes",), ["n0", "n0", "n2"]), "scheduling context nodes: must be a list"),
    ("unknown-node", _with(("cooldowns", 0, 1), "n9"), r"cooldowns\[0\]: node 'n9' is not one of the nodes"),
    ("infinite-time", _with(("evictions", 0, 2), float("inf")), r"evictions\[0\]: must be a finite number"),
    ("bad-triple", _with(("evictions", 0), ["j/a", "n1"]), r"evictions\[0\]: must be \[equivalence key"),
    ("deadline-node", _with(("ineligible_until",), {"n9": 1.0}), "ineligible_until.n9: not one of the nodes"),
    ("deadline-value", _with(("ineligible_until", "n2"), "soon"), "ineligible_until.n2: must be a finite"),
    ("image-nodes", _with(("images", "img/a"), []), "images.img/a: must be a non-empty list"),
    ("ring", _with(("ring",), 0), "scheduling context ring: must be an integer >= 1"),
    ("sample-count", _with(("samples_taken",), 2), r"reservation_samples.n0: must be a list of 2 samples"),
    ("sample-width", _with(("reservation_samples", "n1", 0), [1.0]), r"reservation_samples.n1\[0\]: must be"),
    ("volatility", _with(("volatility",), {"n0": 0.0}), "volatility: must have one entry per node"),
]


@pytest.mark.parametrize(("data", "message"), [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_json_names_the_key(data, message):
    with pytest.raises(ValueError, match=message):
        ContextKeeper.from_json(data)


def test_bad_calls_fail_loudly():
    with pytest.raises(ValueError, match="distinct non-empty names"):
        ContextKeeper(["n0", "n0"])
    k = keeper()
    with pytest.raises(ValueError, match="equivalence key must be a non-empty string"):
        k.evicted("", 0, 1.0)
    with pytest.raises(ValueError, match="cooldown_until must be finite"):
        k.evicted("j/a", 0, 1.0, float("inf"))
    with pytest.raises(ValueError, match=r"must have shape \(3, 8\)"):
        k.sample(np.zeros((2, NDIM)))
    with pytest.raises(ValueError, match="ineligible until must be finite"):
        k.ineligible(0, float("nan"))


def test_a_blacklist_computed_for_a_later_time_is_not_reused_when_the_clock_steps_back():
    # the case hypothesis found: evictions at 0, 1 and 1, a refresh at 1, then a pass at 0; the
    # keeper and its JSON copy must agree, and both answer for 0 (one eviction by then: no pairing)
    k = keeper(samples=3)
    for t in (0.0, 1.0, 1.0):
        k.evicted("j/a", 0, t, None)
    k.refresh(1.0)
    at_one = k.blacklist
    back = ContextKeeper.from_json(json.loads(json.dumps(k.to_json())), PAIRING)
    assert k.context(0.0).blacklist == back.context(0.0).blacklist
    assert k.context(1.0).blacklist == at_one == back.context(1.0).blacklist
