"""The controller: the node round every shell runs, and the state it carries between rounds.

See README.md. ``node_round(view, state, config, now)`` is pure: a shell builds a
:class:`~kalena.core.enforcement.nodes.NodesView` from what it observed, calls it, carries out the
:class:`RoundDecision` and keeps :attr:`RoundDecision.state` for the next round.
"""

from kalena.core.controller.config import RoundConfig
from kalena.core.controller.estimation import estimator_limits
from kalena.core.controller.round import (
    SCREEN_RTOL,
    NodeActions,
    RoundDecision,
    RoundPolicy,
    eviction_screen,
    node_round,
    node_signals,
)
from kalena.core.controller.state import RoundState
from kalena.core.controller.view import NodeSignals, spec_limits, view_from_ledger

__all__ = [
    "SCREEN_RTOL",
    "NodeActions",
    "NodeSignals",
    "RoundConfig",
    "RoundDecision",
    "RoundPolicy",
    "RoundState",
    "estimator_limits",
    "eviction_screen",
    "node_round",
    "node_signals",
    "spec_limits",
    "view_from_ledger",
]
