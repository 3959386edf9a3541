"""Pod-deployability (seed 003): can a pod of type t ever run on node n through legal deploys and deletes?

Public API: the model (:mod:`.model`), :func:`decide`, :func:`deployable_nodes`, :class:`Budget`,
:class:`Answer` / :class:`Step` / :class:`Verdict`, the reference predicate :class:`Evaluator`
and the independent checker's :func:`replay`. See ``README.md`` for the file map and formulas.
"""

from kalena.deployability.answer import Answer, Op, Step, Verdict
from kalena.deployability.checker import Replay, replay
from kalena.deployability.decide import decide, deployable_nodes
from kalena.deployability.fragment import Fragment
from kalena.deployability.model import (
    HOSTNAME,
    PODS,
    Instance,
    LabelSelector,
    Node,
    NodeSelectorTerm,
    PodAffinityTerm,
    PodType,
    Query,
    Requirement,
    Semantics,
    SpreadConstraint,
    Taint,
    Toleration,
)
from kalena.deployability.search import Budget
from kalena.deployability.semantics import Evaluator, Failure, FailureCode

__all__ = [
    "HOSTNAME",
    "PODS",
    "Answer",
    "Budget",
    "Evaluator",
    "Failure",
    "FailureCode",
    "Fragment",
    "Instance",
    "LabelSelector",
    "Node",
    "NodeSelectorTerm",
    "Op",
    "PodAffinityTerm",
    "PodType",
    "Query",
    "Replay",
    "Requirement",
    "Semantics",
    "SpreadConstraint",
    "Step",
    "Taint",
    "Toleration",
    "Verdict",
    "decide",
    "deployable_nodes",
    "replay",
]
