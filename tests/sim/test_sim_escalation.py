"""The simulator asks ``decide_escalation`` only when the core's own condition can hold."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from kalena.core.enforcement import EscalationConfig, MitigationRound, decide_escalation
from kalena.sim.engine import could_escalate
from kalena.testing.enforcement import batch_resident, node_snapshot

SNAP = node_snapshot(batch_resident("b", cpu=1, ram=1), cpu=4, ram=4)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.floats(0, 20), st.booleans()), min_size=0, max_size=8),
    st.integers(1, 5),
    st.floats(1, 60),
)
def test_could_escalate_is_exactly_the_cores_condition(steps, rounds, persist):
    t, history = 0.0, []
    for gap, persisted in steps:
        t += gap
        history.append(MitigationRound(t, persisted, ("ram",)))
    config = EscalationConfig(rounds=rounds, persist_s=persist)
    assert could_escalate(history, config) == decide_escalation(SNAP, history, config, t).escalate
