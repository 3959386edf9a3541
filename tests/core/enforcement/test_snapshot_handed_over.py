"""A view's per-node snapshot (``NodeSnapshot.handed_over``, unchecked) equals the checked
constructor on the same values, field for field, and is read-only (property test)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kalena.core.enforcement.nodes import NodesView
from kalena.core.enforcement.snapshot import NodeConditions, NodeSnapshot
from kalena.testing.controller import nodes_views

#: every field but the conditions (compared on their own), and the derived r'
FIELDS = (
    *(f for f in NodeSnapshot.__dataclass_fields__ if not f.startswith("_") and f != "conditions"),
    "effective_reservation",
)


def _checked(s: NodeSnapshot) -> NodeSnapshot:
    c = s.conditions
    return NodeSnapshot(
        node=s.node,
        capacity=s.capacity,
        ids=s.ids,
        is_batch=s.is_batch,
        priority=s.priority,
        is_daemonset=s.is_daemonset,
        request=s.request,
        reservation=s.reservation,
        limit=s.limit,
        usage=s.usage,
        started_at=s.started_at,
        slack_cpu=s.slack_cpu,
        equivalence_keys=s.equivalence_keys,
        previous_reservation=s.previous_reservation,
        conditions=NodeConditions(c.triggered, c.acute, c.psi_some, c.psi_full, c.memory_events),
        epoch=s.epoch,
    )


def _same(a: object, b: object) -> bool:
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        a, b = np.asarray(a), np.asarray(b)
        return a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b, equal_nan=True)
    return type(a) is type(b) and a == b


@given(nodes_views(), st.booleans())
def test_handed_over_equals_the_checked_snapshot(view: NodesView, with_previous: bool) -> None:
    view.check()
    w = len(view)
    previous = np.where(np.arange(w)[:, None] % 2 == 0, view.reservation, np.nan) if with_previous else None
    acute, triggered = np.asarray(view.acute), np.asarray(view.triggered)
    for k in range(view.n_nodes):
        fast = view.snapshot(
            k, conditions=view.conditions_of(k, acute, triggered), previous_reservation=previous
        )
        slow = _checked(fast)
        for name in FIELDS:
            assert _same(getattr(fast, name), getattr(slow, name)), name
        for name in ("triggered", "acute", "psi_some", "psi_full", "memory_events"):
            assert _same(getattr(fast.conditions, name), getattr(slow.conditions, name)), name
        for name in FIELDS:
            a = getattr(fast, name)
            if isinstance(a, np.ndarray):
                assert not a.flags.writeable, name
                with pytest.raises(ValueError):
                    a[...] = 0


def test_the_simulators_views_check_and_snapshot_as_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every view the simulator hands the round passes ``check`` and gives the checked snapshots
    (the round's snapshots trust the view, so the view must be sound)."""
    from kalena.sim import SimConfig, Simulation, engine
    from kalena.sim.synthetic import synthetic_cluster

    seen = []
    real = engine.node_round

    def checking(view, state, config, now):  # type: ignore[no-untyped-def]
        view.check()
        for k in range(view.n_nodes):
            fast = view.snapshot(k)
            slow = _checked(fast)
            assert all(_same(getattr(fast, f), getattr(slow, f)) for f in FIELDS)
        seen.append(len(view))
        return real(view, state, config, now)

    monkeypatch.setattr(engine, "node_round", checking)
    Simulation(synthetic_cluster(6, 90, seed=5), SimConfig(hours=0.1, seed=1)).run()
    assert len(seen) == 36 and max(seen) > 90  # every tick's round, batch rows among them
