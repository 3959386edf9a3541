"""What a deployability question returns: a verdict, a witness (deploy/delete steps), and why.

Plain data shared by the decision procedures, the independent checker and the shells.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Verdict(enum.Enum):
    DEPLOYABLE = "deployable"
    NOT_DEPLOYABLE = "not-deployable"
    UNKNOWN = "unknown"  # a budget ran out before the search finished: never a guess


class Op(enum.Enum):
    DEPLOY = "deploy"
    DELETE = "delete"


@dataclass(frozen=True, slots=True)
class Step:
    """One transition: deploy one pod of ``pod_type`` on ``node``, or delete one running there."""

    op: Op
    pod_type: str
    node: str

    def to_json(self) -> dict[str, str]:
        return {"op": self.op.value, "pod_type": self.pod_type, "node": self.node}


@dataclass(frozen=True, slots=True)
class Answer:
    """The answer to one (type, node) or co-occurrence question.

    ``witness`` is non-empty only for ``DEPLOYABLE`` answers reached by at least one step (an
    initial configuration that already holds the target needs none). ``reasons`` say why a
    placement is impossible (the failing constraint in the empty configuration) or why the
    search stopped; ``reductions`` name what the search applied, with their sizes.
    """

    verdict: Verdict
    pod: str
    node: str
    co_occur: str | None = None
    witness: tuple[Step, ...] = ()
    states_explored: int = 0
    fragment: str = ""
    procedure: str = ""
    reasons: tuple[str, ...] = ()
    reductions: tuple[str, ...] = ()
    checked: bool = False  # the independent checker replayed the witness

    def to_json(self) -> dict[str, object]:
        """The CLI's ``--json`` shape: exactly these three keys."""
        return {
            "answer": self.verdict.value,
            "witness": [s.to_json() for s in self.witness],
            "states_explored": self.states_explored,
        }
