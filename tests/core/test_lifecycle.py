"""The batch lifecycle: the table pinned, every cell of the grid enforced, the record and its JSON."""

from __future__ import annotations

import json
import re
from collections import deque
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kalena.core.enforcement import EvictionCause
from kalena.core.lifecycle import (
    EDGE_REASONS,
    LEGAL,
    LEGAL_REASONS,
    REASONS,
    STATES,
    TERMINAL,
    TRANSITIONS,
    IllegalTransition,
    Lifecycle,
    TaskState,
    Transition,
    TransitionReason,
    eviction_reason,
)

S, R = TaskState, TransitionReason
LIVE = ("starting", "running", "throttled")
EVICT = {"evicted-ledger-breach", "evicted-limit-breach", "escalation-drain", "readmission-rejected"}

# The table written out by hand: a change to the core's table must change this too.
EXPECTED: dict[tuple[str, str], set[str]] = {
    ("pending", "placed"): {"admitted"},
    ("placed", "pending"): {"unplaced"},
    ("placed", "starting"): {"start-requested"},
    ("placed", "evicted"): EVICT | {"node-lost"},
    ("starting", "running"): {"started"},
    ("running", "throttled"): {"throttled"},
    ("throttled", "running"): {"unthrottled"},
    **{(s, "evicting"): EVICT for s in LIVE},
    **{(s, "evicted"): EVICT | {"killed-oom", "exit-error", "node-lost"} for s in ("running", "throttled")},
    ("starting", "evicted"): EVICT | {"killed-oom", "exit-error", "start-failed", "node-lost"},
    **{(s, "succeeded"): {"finished"} for s in LIVE},
    **{(s, "failed"): {"killed-oom", "exit-error"} for s in ("running", "throttled")},
    ("starting", "failed"): {"killed-oom", "exit-error", "start-failed"},
    ("evicting", "evicted"): {"exited", "grace-expired", "killed-oom", "node-lost"},
    ("evicted", "requeued"): {"requeued"},
    ("evicted", "pending"): {"requeued"},
    ("evicted", "failed"): {"given-up"},
    ("requeued", "pending"): {"cooldown-over"},
    **{
        (s, "cancelled"): {"cancelled"}
        for s in ("pending", "placed", "starting", "running", "throttled", "evicting", "evicted", "requeued")
    },
}


def walk_to(target: TaskState) -> list[tuple[TaskState, TransitionReason]]:
    """The shortest legal walk from a new task to ``target`` (first reason by value on each edge)."""
    paths: dict[TaskState, list[tuple[TaskState, TransitionReason]]] = {S.PENDING: []}
    todo = deque([S.PENDING])
    while todo:
        a = todo.popleft()
        for b in sorted(TRANSITIONS[a], key=lambda s: s.code):
            if b not in paths:
                reason = min(EDGE_REASONS[a, b], key=lambda r: r.value)
                paths[b] = [*paths[a], (b, reason)]
                todo.append(b)
    return paths[target]


def one_task_in(state: TaskState, task: str = "t") -> Lifecycle:
    lc = Lifecycle()
    (h,) = lc.add([task], 0.0)
    for i, (to, reason) in enumerate(walk_to(state), start=1):
        lc.move(h, to, float(i), reason)
    assert lc.state_of(task) is state
    return lc


# -- the table ----------------------------------------------------------------------------------
def test_states_and_reasons_keep_their_stable_values():
    assert [s.value for s in TaskState] == [
        "pending", "placed", "starting", "running", "throttled", "evicting", "evicted",
        "requeued", "succeeded", "failed", "cancelled",
    ]  # fmt: skip
    assert [r.value for r in TransitionReason] == [
        "submitted", "admitted", "unplaced", "start-requested", "started", "start-failed",
        "throttled", "unthrottled", "evicted-ledger-breach", "evicted-limit-breach",
        "escalation-drain", "readmission-rejected", "exited", "grace-expired", "killed-oom",
        "exit-error", "finished", "requeued", "cooldown-over", "given-up", "cancelled", "restored",
        "node-lost",
    ]  # fmt: skip
    assert [s.code for s in STATES] == list(range(11)) and [r.code for r in REASONS] == list(range(23))


def test_the_table_is_the_one_written_out_here():
    got = {(a.value, b.value): {r.value for r in rs} for (a, b), rs in EDGE_REASONS.items()}
    assert got == EXPECTED
    assert {a: {b for (f, b) in EDGE_REASONS if f is a} for a in STATES} == dict(TRANSITIONS)
    assert LEGAL.shape == (11, 11) and LEGAL.sum() == len(EDGE_REASONS)


def test_the_table_is_read_only():
    with pytest.raises(TypeError):
        TRANSITIONS[S.PENDING] = frozenset()  # type: ignore[index]
    with pytest.raises(TypeError):
        EDGE_REASONS[S.PENDING, S.RUNNING] = frozenset()  # type: ignore[index]
    with pytest.raises(ValueError):
        LEGAL[0, 0] = True


@pytest.mark.parametrize("state", sorted(TERMINAL, key=lambda s: s.code), ids=lambda s: s.value)
def test_terminal_states_have_no_way_out(state):
    assert state.terminal and TRANSITIONS[state] == frozenset() and not LEGAL[state.code].any()


def test_every_state_is_reachable_and_every_live_one_can_end():
    assert all(walk_to(s) or s is S.PENDING for s in STATES)
    assert all(S.CANCELLED in TRANSITIONS[s] for s in STATES if not s.terminal)
    used = {r for rs in EDGE_REASONS.values() for r in rs} | {R.SUBMITTED, R.RESTORED}
    assert used == set(TransitionReason)  # no reason code without an edge (but the two entries)
    assert not LEGAL_REASONS[:, :, R.RESTORED.code].any()  # restored is a first entry, never a move


@pytest.mark.parametrize("cause", list(EvictionCause), ids=lambda c: c.value)
def test_every_eviction_cause_has_a_reason_on_the_eviction_edges(cause):
    reason = eviction_reason(cause)
    for a in (S.RUNNING, S.THROTTLED, S.STARTING):
        assert reason in EDGE_REASONS[a, S.EVICTING] and reason in EDGE_REASONS[a, S.EVICTED]
    assert reason in EDGE_REASONS[S.PLACED, S.EVICTED]


def test_eviction_causes_map_to_distinct_reasons():
    assert len({eviction_reason(c) for c in EvictionCause}) == len(EvictionCause)
    assert eviction_reason(EvictionCause.RESERVATION_LEDGER_BREACH) is R.EVICTED_LEDGER_BREACH


# -- every cell of the 11 x 11 grid, through the record -------------------------------------------
GRID = [(a, b) for a in STATES for b in STATES]


@pytest.mark.parametrize(("src", "to"), GRID, ids=[f"{a.value}->{b.value}" for a, b in GRID])
def test_grid_cell_is_legal_exactly_with_its_reasons(src, to):
    allowed = EDGE_REASONS.get((src, to), frozenset())
    for reason in TransitionReason:
        lc = one_task_in(src)
        before = lc.history("t")
        if reason in allowed:
            lc.move([0], to, 100.0, reason)
            assert lc.state_of("t") is to
            assert lc.history("t") == (*before, Transition(to, 100.0, reason))
        else:
            with pytest.raises(IllegalTransition) as err:
                lc.move([0], to, 100.0, reason)
            assert (err.value.ids, err.value.from_states, err.value.to, err.value.reason) == (
                ("t",),
                (src,),
                to,
                reason,
            )
            assert lc.state_of("t") is src and lc.history("t") == before


def test_illegal_transition_message_names_ids_from_to_and_reason():
    lc = one_task_in(S.SUCCEEDED, "batch/etl-7")
    with pytest.raises(
        IllegalTransition, match=r"to running \(reason started\).*'batch/etl-7' \(succeeded\)"
    ):
        lc.move(0, S.RUNNING, 99.0, R.STARTED)


# -- the record ---------------------------------------------------------------------------------
def test_add_gives_consecutive_handles_all_pending():
    lc = Lifecycle(capacity=1)
    assert lc.add(["a", "b"], 0.0).tolist() == [0, 1]
    assert lc.add(["c"], 1.0).tolist() == [2]
    assert lc.handles(["c", "a"]).tolist() == [2, 0] and lc.handle("b") == 1 and lc.id_of(2) == "c"
    assert lc.in_state(S.PENDING).tolist() == [0, 1, 2] and len(lc) == 3
    assert lc.history("c") == (Transition(S.PENDING, 1.0, R.SUBMITTED),)
    assert lc.entered([0, 2]).tolist() == [0.0, 1.0]


@pytest.mark.parametrize(
    ("ids", "match"),
    [(["a"], "added twice: \\['a'\\]"), (["x", "x"], "added twice: \\['x'\\]")],
    ids=["known-id", "repeated-in-one-add"],
)
def test_duplicate_ids_raise_and_add_nothing(ids, match):
    lc = Lifecycle()
    lc.add(["a"], 0.0)
    with pytest.raises(ValueError, match=match):
        lc.add(ids, 1.0)
    assert len(lc) == 1 and lc.history_columns().task.tolist() == [0]


BAD_ADDS: list[tuple[str, Callable[[Lifecycle], Any], type[Exception]]] = [
    ("one-string", lambda lc: lc.add("abc", 0.0), TypeError),
    ("non-string-id", lambda lc: lc.add([1], 0.0), TypeError),
    ("reason-not-initial", lambda lc: lc.add(["a"], 0.0, R.ADMITTED), IllegalTransition),
    ("nan-time", lambda lc: lc.add(["a"], float("nan")), ValueError),
]


@pytest.mark.parametrize(("call", "exc"), [c[1:] for c in BAD_ADDS], ids=[c[0] for c in BAD_ADDS])
def test_bad_adds_raise(call, exc):
    lc = Lifecycle()
    with pytest.raises(exc):
        call(lc)
    assert len(lc) == 0


def test_a_move_is_all_or_nothing_and_names_every_offender():
    lc = Lifecycle()
    lc.add(["a", "b", "c", "d"], 0.0)
    lc.move([1, 3], S.PLACED, 1.0, R.ADMITTED)
    cols = lc.history_columns()
    with pytest.raises(IllegalTransition) as err:
        lc.move([0, 1, 2, 3], S.PLACED, 2.0, R.ADMITTED)  # b and d are already placed
    assert err.value.ids == ("b", "d") and err.value.from_states == (S.PLACED, S.PLACED)
    assert lc.state([0, 1, 2, 3]).tolist() == [S.PENDING.code, S.PLACED.code, S.PENDING.code, S.PLACED.code]
    assert len(lc.history_columns().task) == len(cols.task)
    assert lc.counts()[S.PENDING] == 2 and lc.counts()[S.PLACED] == 2


BAD_MOVES: list[tuple[str, Any, float, type[Exception]]] = [
    ("named-twice", [0, 1, 0], 5.0, ValueError),
    ("time-backwards", [0, 1], 0.5, ValueError),
    ("nan-time", [0], float("nan"), ValueError),
    ("out-of-range", [0, 2], 5.0, IndexError),
    ("negative", [-1], 5.0, IndexError),
    ("bool-mask", np.array([True, False]), 5.0, TypeError),
    ("floats", [0.0], 5.0, TypeError),
]


@pytest.mark.parametrize(("handles", "now", "exc"), [c[1:] for c in BAD_MOVES], ids=[c[0] for c in BAD_MOVES])
def test_bad_moves_raise_and_move_nothing(handles, now, exc):
    lc = Lifecycle()
    lc.add(["a"], 0.0)
    lc.add(["b"], 1.0)
    before = lc.to_json()
    with pytest.raises(exc):
        lc.move(handles, S.PLACED, now, R.ADMITTED)
    assert lc.to_json() == before


def test_time_going_backwards_raises_naming_the_task_and_equal_times_are_fine():
    lc = Lifecycle()
    lc.add(["early", "late"], 0.0)
    lc.move([1], S.PLACED, 10.0, R.ADMITTED)
    with pytest.raises(ValueError, match=r"before the last transition of \[\('late', 10.0\)\]"):
        lc.move([0, 1], S.CANCELLED, 5.0, R.CANCELLED)
    lc.move([1], S.STARTING, 10.0, R.START_REQUESTED)  # the same instant: placed and started at once
    assert [t.time for t in lc.history("late")] == [0.0, 10.0, 10.0]


def test_an_empty_move_does_nothing():
    lc = Lifecycle()
    lc.add(["a"], 3.0)
    lc.move([], S.RUNNING, 0.0, R.STARTED)
    assert lc.history("a") == (Transition(S.PENDING, 3.0, R.SUBMITTED),)


def test_history_keeps_each_tasks_order_through_interleaved_moves():
    lc = Lifecycle()
    lc.add(["a", "b"], 0.0)
    lc.move([0, 1], S.PLACED, 1.0, R.ADMITTED)
    lc.move([1], S.STARTING, 2.0, R.START_REQUESTED)
    lc.move([0], S.PENDING, 3.0, R.UNPLACED)
    lc.move([1], S.FAILED, 4.0, R.START_FAILED)
    assert lc.history("a") == (
        Transition(S.PENDING, 0.0, R.SUBMITTED),
        Transition(S.PLACED, 1.0, R.ADMITTED),
        Transition(S.PENDING, 3.0, R.UNPLACED),
    )
    assert lc.history(1) == (
        Transition(S.PENDING, 0.0, R.SUBMITTED),
        Transition(S.PLACED, 1.0, R.ADMITTED),
        Transition(S.STARTING, 2.0, R.START_REQUESTED),
        Transition(S.FAILED, 4.0, R.START_FAILED),
    )
    cols = lc.history_columns()
    assert cols.task.tolist() == [0, 1, 0, 1, 1, 0, 1]
    with pytest.raises(ValueError):
        cols.time[0] = 9.0  # read-only


def test_reads_name_unknown_ids():
    lc = Lifecycle()
    lc.add(["a"], 0.0)
    for read in (lc.handle, lc.state_of, lc.history, lambda i: lc.handles([i])):
        with pytest.raises(KeyError, match="unknown task id 'zz'"):
            read("zz")


def test_ten_thousand_tasks_move_in_one_call():
    n = 10_000
    lc = Lifecycle()
    h = lc.add([f"batch/{i}" for i in range(n)], 0.0)
    lc.move(h, S.PLACED, 1.0, R.ADMITTED)
    lc.move(h, S.STARTING, 1.0, R.START_REQUESTED)
    lc.move(h[::2], S.RUNNING, 2.0, R.STARTED)
    assert lc.counts()[S.RUNNING] == n // 2 and lc.counts()[S.STARTING] == n // 2
    assert np.array_equal(lc.in_state(S.RUNNING), h[::2])
    live = lc.ids_in(S.STARTING, S.RUNNING, S.THROTTLED)  # by handle, whatever the states' order
    assert live == [f"batch/{i}" for i in range(n)] == lc.ids_in(S.RUNNING, S.STARTING)
    assert lc.ids_in(S.RUNNING) == [f"batch/{i}" for i in range(0, n, 2)] and lc.ids_in() == []
    with pytest.raises(IllegalTransition, match=f"for {n} task\\(s\\): .* and {n - 10} more$"):
        lc.move(h, S.PLACED, 3.0, R.ADMITTED)
    assert len(lc.history_columns().task) == 3 * n + n // 2


def test_a_simulator_day_in_miniature():
    """submit, admit, start, run, throttle, unthrottle, evict, requeue, pending again, admit, succeed."""
    lc = Lifecycle()
    a, b, c = lc.add(["batch/a", "batch/b", "batch/c"], 0.0)
    lc.move([a, b], S.PLACED, 10.0, R.ADMITTED)
    lc.move([a, b], S.STARTING, 10.0, R.START_REQUESTED)
    lc.move([a, b], S.RUNNING, 40.0, R.STARTED)
    lc.move([a], S.THROTTLED, 100.0, R.THROTTLED)
    lc.move([a], S.RUNNING, 160.0, R.UNTHROTTLED)
    lc.move([a], S.EVICTING, 200.0, eviction_reason(EvictionCause.RESERVATION_LEDGER_BREACH))
    lc.move([b], S.EVICTED, 230.0, R.KILLED_OOM)  # the kernel's: no grace, requeued at once
    lc.move([a], S.EVICTED, 230.0, R.GRACE_EXPIRED)
    lc.move([b], S.PENDING, 230.0, R.REQUEUED)
    lc.move([a], S.REQUEUED, 230.0, R.REQUEUED)
    lc.move([c], S.CANCELLED, 500.0, R.CANCELLED)
    assert lc.in_state(S.PENDING).tolist() == [b]  # a waits out its cooldown: not schedulable
    lc.move([a], S.PENDING, 830.0, R.COOLDOWN_OVER)
    lc.move([a, b], S.PLACED, 840.0, R.ADMITTED)
    lc.move([a, b], S.STARTING, 840.0, R.START_REQUESTED)
    lc.move([a, b], S.RUNNING, 870.0, R.STARTED)
    lc.move([a, b], S.SUCCEEDED, 2000.0, R.FINISHED)
    assert [(t.state.value, t.time, t.reason.value) for t in lc.history("batch/a")] == [
        ("pending", 0.0, "submitted"),
        ("placed", 10.0, "admitted"),
        ("starting", 10.0, "start-requested"),
        ("running", 40.0, "started"),
        ("throttled", 100.0, "throttled"),
        ("running", 160.0, "unthrottled"),
        ("evicting", 200.0, "evicted-ledger-breach"),
        ("evicted", 230.0, "grace-expired"),
        ("requeued", 230.0, "requeued"),
        ("pending", 830.0, "cooldown-over"),
        ("placed", 840.0, "admitted"),
        ("starting", 840.0, "start-requested"),
        ("running", 870.0, "started"),
        ("succeeded", 2000.0, "finished"),
    ]
    assert [t.reason for t in lc.history("batch/b")][4:6] == [R.KILLED_OOM, R.REQUEUED]
    assert {s: n for s, n in lc.counts().items() if n} == {S.SUCCEEDED: 2, S.CANCELLED: 1}
    assert lc.entered([a, b, c]).tolist() == [2000.0, 2000.0, 500.0]
    assert repr(lc) == "Lifecycle(3 tasks: 2 succeeded, 1 cancelled)"


def test_restore_enters_each_given_state_with_one_restored_entry():
    lc = Lifecycle(capacity=0)
    lc.add(["new"], 1.0)
    h = lc.restore(["q", "r", "e", "d"], [S.REQUEUED, S.RUNNING, S.EVICTING, S.SUCCEEDED], 5.0)
    assert h.tolist() == [1, 2, 3, 4]
    assert lc.history("r") == (Transition(S.RUNNING, 5.0, R.RESTORED),)
    assert {s: n for s, n in lc.counts().items() if n} == {
        S.PENDING: 1, S.REQUEUED: 1, S.RUNNING: 1, S.EVICTING: 1, S.SUCCEEDED: 1,
    }  # fmt: skip
    lc.move(h[1], S.EVICTING, 6.0, R.EVICTED_LEDGER_BREACH)  # restored tasks go on by the table
    lc.move(h[1:3], S.EVICTED, 7.0, R.EXITED)
    with pytest.raises(IllegalTransition):
        lc.move(h[3], S.RUNNING, 6.0, R.STARTED)
    back = Lifecycle.from_json(json.loads(json.dumps(lc.to_json())))
    assert back == lc and back.history("e")[0] == Transition(S.EVICTING, 5.0, R.RESTORED)


@pytest.mark.parametrize(
    ("call", "exc"),
    [
        (lambda lc: lc.restore(["a"], [S.RUNNING, S.PENDING], 0.0), TypeError),
        (lambda lc: lc.restore(["a"], ["running"], 0.0), TypeError),
        (lambda lc: lc.restore(["known"], [S.RUNNING], 0.0), ValueError),
        (lambda lc: lc.restore(["a"], [S.RUNNING], float("inf")), ValueError),
    ],
    ids=["lengths-differ", "state-a-string", "known-id", "infinite-time"],
)
def test_bad_restores_raise_and_add_nothing(call, exc):
    lc = Lifecycle()
    lc.add(["known"], 0.0)
    before = lc.to_json()
    with pytest.raises(exc):
        call(lc)
    assert lc.to_json() == before


def test_forget_drops_ended_tasks_and_renumbers_the_rest_in_order():
    lc = Lifecycle()
    a, b, c, _ = lc.add(["a", "b", "c", "d"], 0.0)
    lc.move([a, c], S.CANCELLED, 1.0, R.CANCELLED)
    lc.move([b], S.PLACED, 2.0, R.ADMITTED)
    kept = {i: lc.history(i) for i in ("b", "d")}
    cols = lc.history_columns()
    assert lc.forget([c, a]).tolist() == [-1, 0, -1, 1]
    assert len(lc) == 2 and lc.handle("b") == 0 and lc.handle("d") == 1
    assert {i: lc.history(i) for i in ("b", "d")} == kept
    assert lc.history_columns().task.tolist() == [0, 1, 0]
    assert cols.task.tolist() == [0, 1, 2, 3, 0, 2, 1]  # a column read before is unchanged
    assert {s: n for s, n in lc.counts().items() if n} == {S.PLACED: 1, S.PENDING: 1}
    with pytest.raises(KeyError):
        lc.handle("a")
    assert lc.add(["a"], 3.0).tolist() == [2]  # the id comes back with a fresh history
    assert lc.history("a") == (Transition(S.PENDING, 3.0, R.SUBMITTED),)
    assert Lifecycle.from_json(json.loads(json.dumps(lc.to_json()))) == lc


@pytest.mark.parametrize("state", [s for s in STATES if not s.terminal], ids=lambda s: s.value)
def test_forgetting_a_task_that_has_not_ended_raises_and_forgets_nothing(state):
    lc = one_task_in(state, "live")
    lc.add(["done"], 100.0)
    lc.move(1, S.CANCELLED, 100.0, R.CANCELLED)
    before = lc.to_json()
    with pytest.raises(ValueError, match=f"only terminal tasks may be forgotten: 'live' \\({state.value}\\)"):
        lc.forget([1, 0])
    with pytest.raises(ValueError, match="twice"):
        lc.forget([1, 1])
    assert lc.to_json() == before
    assert lc.forget([]).tolist() == [0, 1] and lc.to_json() == before


# -- equality and JSON --------------------------------------------------------------------------
def test_equality_compares_histories_per_task_not_call_order():
    one, two = Lifecycle(), Lifecycle(capacity=0)
    for lc in (one, two):
        lc.add(["a", "b"], 0.0)
    one.move([0], S.PLACED, 1.0, R.ADMITTED)
    one.move([1], S.CANCELLED, 1.0, R.CANCELLED)
    two.move([1], S.CANCELLED, 1.0, R.CANCELLED)
    assert one != two
    two.move([0], S.PLACED, 1.0, R.ADMITTED)
    assert one == two
    two.move([0], S.STARTING, 2.0, R.START_REQUESTED)
    assert one != two and one != "a lifecycle"


MAIN_LINE = {
    S.PENDING: S.PLACED,
    S.PLACED: S.STARTING,
    S.STARTING: S.RUNNING,
    S.RUNNING: S.THROTTLED,
    S.THROTTLED: S.RUNNING,
    S.EVICTING: S.EVICTED,
    S.EVICTED: S.REQUEUED,
    S.REQUEUED: S.PENDING,
}


@st.composite
def legal_walks(draw: st.DrawFn) -> Lifecycle:
    """Any sequence of adds and legal moves of random subsets of tasks, at non-decreasing times."""
    lc = Lifecycle(capacity=draw(st.integers(0, 4)))
    now = draw(st.floats(-1e6, 1e6))
    for _ in range(draw(st.integers(0, 40))):
        now += draw(st.sampled_from([0.0, 1e-3, 10.0]) | st.floats(0, 1e5))
        movable = [s for s, n in lc.counts().items() if n and TRANSITIONS[s]]
        if not movable or draw(st.integers(0, 3)) == 0:
            k = draw(st.integers(1, 3))
            ids = [f"{len(lc) + i}/{draw(st.text(max_size=4))}" for i in range(k)]
            if draw(st.integers(0, 4)) == 0:  # sometimes rebuilt from a record without history
                lc.restore(ids, draw(st.lists(st.sampled_from(STATES), min_size=k, max_size=k)), now)
            else:
                lc.add(ids, now)
            continue
        src = draw(st.sampled_from(movable))
        onward = sorted(TRANSITIONS[src] - {S.CANCELLED}, key=lambda s: s.code)
        if not onward or draw(st.integers(0, 9)) == 0:  # rarely: it would end most walks early
            to = S.CANCELLED
        elif src in MAIN_LINE and draw(st.booleans()):  # reach the deep states (throttled) often
            to = MAIN_LINE[src]
        else:
            to = draw(st.sampled_from(onward))
        reason = draw(st.sampled_from(sorted(EDGE_REASONS[src, to], key=lambda r: r.code)))
        tasks = draw(st.lists(st.sampled_from(lc.in_state(src).tolist()), min_size=1, unique=True))
        lc.move(tasks, to, now, reason)
    return lc


@settings(max_examples=80, deadline=None)
@given(legal_walks())
def test_json_round_trip_of_random_legal_walks(lc):
    back = Lifecycle.from_json(json.loads(json.dumps(lc.to_json())))
    assert back == lc
    assert back.to_json() == lc.to_json()
    assert back.counts() == lc.counts()
    for h in range(len(lc)):
        assert back.history(h) == lc.history(h)
        assert back.entered(h).tolist() == lc.entered(h).tolist()
    movable = [s for s, n in lc.counts().items() if n and TRANSITIONS[s]]
    if movable:  # the copy goes on as the original does
        src = movable[0]
        to = min(TRANSITIONS[src], key=lambda x: x.code)
        reason = min(EDGE_REASONS[src, to], key=lambda r: r.code)
        later = float(lc.history_columns().time.max()) + 1.0
        for x in (lc, back):
            x.move(x.in_state(src), to, later, reason)
        assert back == lc


def base_json() -> dict[str, Any]:
    """history rows: 0 a pending, 1 b pending, 2 a placed (t = 5)."""
    lc = Lifecycle()
    lc.add(["a", "b"], 0.0)
    lc.move([0], S.PLACED, 5.0, R.ADMITTED)
    return lc.to_json()


def _set(path: tuple[Any, ...], value: Any) -> Callable[[dict[str, Any]], Any]:
    def edit(d: dict[str, Any]) -> dict[str, Any]:
        at = d
        for k in path[:-1]:
            at = at[k]
        at[path[-1]] = value
        return d

    return edit


def _del(*path: Any) -> Callable[[dict[str, Any]], Any]:
    def edit(d: dict[str, Any]) -> dict[str, Any]:
        at = d
        for k in path[:-1]:
            at = at[k]
        del at[path[-1]]
        return d

    return edit


MALFORMED: list[tuple[str, Callable[[dict[str, Any]], Any], str]] = [
    ("not-an-object", lambda d: [d], "lifecycle: "),
    ("version-2", _set(("version",), 2), "version: "),
    ("version-bool", _set(("version",), True), "version: "),
    ("version-missing", _del("version"), "lifecycle.version: missing"),
    ("unknown-key", _set(("states",), []), "lifecycle.states: unknown key"),
    ("ids-not-a-list", _set(("ids",), "ab"), "ids: "),
    ("id-twice", _set(("ids",), ["a", "a"]), "ids[1]: "),
    ("id-not-a-string", _set(("ids", 0), 7), "ids[0]: "),
    ("history-not-an-object", _set(("history",), []), "history: "),
    ("column-missing", _del("history", "reason"), "history.reason: missing"),
    ("column-short", _del("history", "time", -1), "history.time: "),
    ("task-out-of-range", _set(("history", "task", 0), 2), "history.task[0]: "),
    ("task-a-float", _set(("history", "task", 0), 0.0), "history.task[0]: "),
    ("unknown-state", _set(("history", "state", 1), "done"), "history.state[1]: "),
    ("unknown-reason", _set(("history", "reason", 2), "placed"), "history.reason[2]: "),
    ("time-nan", _set(("history", "time", 0), float("nan")), "history.time[0]: "),
    ("time-a-string", _set(("history", "time", 0), "0"), "history.time[0]: "),
    ("task-without-history", _set(("ids",), ["a", "b", "c"]), "history.task: task 'c'"),
    ("not-pending-first", _set(("history", "state", 1), "running"), "history.state[1]: "),
    ("illegal-step", _set(("history", "state", 2), "running"), "history.state[2]: illegal transition"),
    ("restored-mid-walk", _set(("history", "reason", 2), "restored"), "history.state[2]: illegal transition"),
    ("time-backwards", _set(("history", "time", 2), -1.0), "history.time[2]: "),
]


@pytest.mark.parametrize(("edit", "key"), [c[1:] for c in MALFORMED], ids=[c[0] for c in MALFORMED])
def test_malformed_json_raises_naming_the_key(edit, key):
    assert len(Lifecycle.from_json(base_json())) == 2  # unedited, it reads
    with pytest.raises(ValueError, match="^" + re.escape(key)):
        Lifecycle.from_json(edit(base_json()))
