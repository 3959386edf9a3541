"""The Stationkeeper's loops (seed 002, issue 15 item 3): hand numbers, epochs, and the two
properties the issue asks for: no oscillation at a threshold, and a missed tick made good."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kalena.core.estimators import MarginClass
from kalena.core.stationkeeper import (
    AdjustmentBook,
    Knob,
    Outcome,
    StationkeeperConfig,
    Workloads,
    propose,
)
from kalena.core.validate import ConfigError

CFG = StationkeeperConfig()
NAN = math.nan


def one(
    cpu: float = 1.0,
    mem: float = 1.0,
    p_cpu: float = NAN,
    p_mem: float = NAN,
    total: float = NAN,
    replicas: int = 1,
    managed: bool = False,
    cls: MarginClass = MarginClass.SERVICE,
    epoch: int = 0,
) -> Workloads:
    return Workloads.of(
        ["ns/w"], classes=[cls], cpu_request=[cpu], memory_request=[mem], replicas=[replicas],
        managed=[managed], cpu_quantile=[p_cpu], memory_quantile=[p_mem], total_cpu_quantile=[total],
        samples=[90], epochs=[epoch],
    )  # fmt: skip


def test_vertical_moves_to_the_class_margin_over_the_p99_when_the_step_is_worth_it():
    (a,) = propose(one(cpu=2.0, p_cpu=1.0), CFG)
    assert (a.knob, a.current, a.epoch) == (Knob.CPU, 2.0, 0)
    assert a.proposed == pytest.approx(1.30)
    assert (a.evidence.samples, a.evidence.quantile, a.evidence.observed, a.evidence.margin) == (
        90,
        0.99,
        1.0,
        1.3,
    )
    assert propose(one(cpu=1.25, p_cpu=1.0), CFG) == []  # 1.30 is 4 % away: under the 10 % step
    (b,) = propose(one(mem=1.0, p_mem=1.0, cls=MarginClass.BATCH), CFG)  # batch: 1.15, +15 %
    assert (b.knob, b.proposed) == (Knob.MEMORY, pytest.approx(1.15))
    assert propose(one(), CFG) == []  # nothing observed: nothing proposed


@pytest.mark.parametrize(
    ("replicas", "total", "managed", "expected"),
    [
        (4, 3.6, True, 6),  # load 0.9: ceil(4 * 0.9 / 0.6)
        (4, 2.0, True, None),  # load 0.5: inside the band
        (4, 0.8, True, 2),  # load 0.2: ceil(4 * 0.2 / 0.6)
        (4, 0.01, True, 1),  # floor at one
        (1, 0.01, True, None),  # already one
        (4, 3.6, False, None),  # the count is pinned
    ],
)
def test_the_replica_loop_has_a_dead_band(replicas, total, managed, expected):
    got = [a for a in propose(one(cpu=1.0, total=total, replicas=replicas, managed=managed), CFG)]
    assert [a.proposed for a in got if a.knob is Knob.REPLICAS] == ([] if expected is None else [expected])


def test_adjustments_are_stamped_in_order_and_a_stale_one_is_rejected():
    w = one(cpu=2.0, mem=2.0, p_cpu=1.0, p_mem=1.0, epoch=7)
    cpu, mem = propose(w, CFG)
    assert (cpu.epoch, mem.epoch) == (7, 8)
    book = AdjustmentBook(epochs={"ns/w": 7})
    assert [book.apply(cpu), book.apply(mem)] == [Outcome.ACCEPTED, Outcome.ACCEPTED]
    assert book.epochs["ns/w"] == 9 and book.settings[("ns/w", Knob.CPU)] == pytest.approx(1.3)
    # the same loop running again on its old view, or racing another: rejected, nothing changes
    assert book.apply(cpu) is Outcome.STALE_EPOCH and book.epochs["ns/w"] == 9
    assert AdjustmentBook().apply(cpu) is Outcome.UNKNOWN_WORKLOAD


def test_bad_settings_and_inputs_name_the_key():
    with pytest.raises(ConfigError, match="target"):
        StationkeeperConfig(target=0.9)
    with pytest.raises(ConfigError, match="min_step"):
        StationkeeperConfig(min_step=0.0)
    with pytest.raises(ValueError, match="replicas"):
        one(replicas=0)


def run(cfg: StationkeeperConfig, observations: list[tuple[float, float]], cpu: float, replicas: int,
        skip: frozenset[int] = frozenset()) -> list[tuple[float, int]]:  # fmt: skip
    """Tick through (per-replica p99, total p99) observations, applying what is accepted."""
    book = AdjustmentBook(epochs={"ns/w": 0})
    states = []
    for t, (per_replica, total) in enumerate(observations):
        w = one(
            cpu=cpu,
            p_cpu=per_replica,
            total=total,
            replicas=replicas,
            managed=True,
            epoch=book.epochs["ns/w"],
        )
        if t not in skip:
            for a in propose(w, cfg):
                assert book.apply(a) is Outcome.ACCEPTED
                if a.knob is Knob.CPU:
                    cpu = a.proposed
                elif a.knob is Knob.REPLICAS:
                    replicas = int(a.proposed)
        states.append((cpu, replicas))
    return states


#: A stream of ticks, one of which (``skip``) is dropped.
MISSED_TICK = {
    "ticks": st.integers(3, 40),
    "skip": st.integers(0, 38),
    "request": st.floats(0.1, 8.0),
    "replicas": st.integers(1, 40),
    "seed": st.integers(0, 2**31 - 1),
}


def moves(states: list[tuple[float, int]], at: int) -> list[float]:
    return [b[at] - a[at] for a, b in itertools.pairwise(states) if b[at] != a[at]]


@settings(max_examples=200, deadline=None)
@given(
    replicas=st.integers(1, 60),
    request=st.floats(0.1, 8.0),
    threshold=st.sampled_from(["up", "down"]),
    noise=st.floats(0.0, 0.045),  # (1 + n) / (1 - n) < 1.1: the widest wobble a 10 % step ignores
    seed=st.integers(0, 2**31 - 1),
)
def test_a_workload_hovering_at_a_threshold_does_not_oscillate(replicas, request, threshold, noise, seed):
    """Usage wandering up to +-4.5 % around a replica threshold, and per-replica usage wandering the
    same around the point where a 10 % step begins: each loop moves at most once, never back."""
    rng = np.random.default_rng(seed)
    line = CFG.scale_up if threshold == "up" else CFG.scale_down
    wobble = 1.0 + rng.uniform(-noise, noise, 300)
    per_replica = request / CFG.margins.margin_service * (1.0 + CFG.min_step) * wobble
    total = line * replicas * request * wobble
    states = run(CFG, list(zip(per_replica, total, strict=True)), request, replicas)
    for at in (0, 1):
        steps = moves(states, at)
        assert len(steps) <= 1, (at, steps)


@settings(max_examples=200, deadline=None)
@given(**MISSED_TICK)
def test_a_missed_tick_is_made_good_by_the_next(ticks, skip, request, replicas, seed):
    """Drop one tick: after the next, the setting is again where the loop puts it from what it
    sees (within one step of its target), exactly as when no tick was missed."""
    skip = min(skip, ticks - 2)
    rng = np.random.default_rng(seed)
    obs = list(zip(rng.uniform(0.05, 6.0, ticks), rng.uniform(0.05, 6.0, ticks) * replicas, strict=True))
    full = run(CFG, obs, request, replicas)
    dropped = run(CFG, obs, request, replicas, skip=frozenset({skip}))
    t = skip + 1
    target = CFG.margins.margin_service * obs[t][0]
    for states in (full, dropped):
        assert abs(target / states[t][0] - 1.0) < CFG.min_step + 1e-9


@settings(max_examples=200, deadline=None)
@given(**MISSED_TICK)
def test_a_missed_tick_of_the_replica_loop_is_made_good_by_the_next(ticks, skip, request, replicas, seed):
    """The replica loop alone (nothing observed per replica): after the tick that follows a
    dropped one, the count is again one the loop keeps for what it sees: inside the dead band,
    or the count it aims at."""
    skip = min(skip, ticks - 2)
    rng = np.random.default_rng(seed)
    obs = [(NAN, u) for u in rng.uniform(0.05, 2.0, ticks) * replicas * request]
    t = skip + 1
    usage = obs[t][1]
    aimed = max(1, math.ceil(usage / (CFG.target * request) - 1e-9))
    for states in (
        run(CFG, obs, request, replicas),
        run(CFG, obs, request, replicas, skip=frozenset({skip})),
    ):
        reps = states[t][1]
        load = usage / (reps * request)
        assert CFG.scale_down <= load <= CFG.scale_up or reps == aimed, (reps, load, aimed)
