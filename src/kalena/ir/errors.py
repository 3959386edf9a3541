"""Problems found in IR documents: one record per problem, all of a file collected, never a traceback.

A :class:`Problem` names the file, the key path inside the document (``nodes[3].allocatable.cpu``,
``namespaces.ai[2].requests.ram``, ``solution.ai/foo-0``), the offending value and a message.
It renders as one line::

    FILE: KEYPATH: MESSAGE (value: VALUE)

Readers accumulate problems in a :class:`ProblemLog` and raise one :class:`IRError` carrying
all of them at the end, so a user fixes a file in one pass instead of one error per run. The node
agent's declaration and inbox readers report with the same :class:`Problem`, so every input file
of every shell renders its problems alike.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final


class _Missing:
    """Marks a problem that has no value (a required key that is absent)."""

    def __repr__(self) -> str:
        return "MISSING"


MISSING: Final = _Missing()

#: Key path used for problems about the document as a whole (syntax, top level, kind).
DOCUMENT = "<document>"

#: Values longer than this are cut in messages: a whole mapping helps nobody on one line.
_VALUE_WIDTH = 80


def key_path(loc: Iterable[str | int]) -> str:
    """``("nodes", 3, "allocatable", "cpu")`` -> ``nodes[3].allocatable.cpu``."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out or DOCUMENT


def render_value(value: Any) -> str:
    """A short, unambiguous spelling of a value: JSON (strings quoted), cut at 80 characters."""
    try:
        text = json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError):  # e.g. a mapping with non-string keys
        text = repr(value)
    # One problem is one line: escape line separators and other non-printables (e.g. U+0085).
    text = "".join(ch if ch.isprintable() else f"\\u{ord(ch):04x}" for ch in text)
    if len(text) > _VALUE_WIDTH:
        text = text[: _VALUE_WIDTH - 3] + "..."
    return text


@dataclass(frozen=True, slots=True)
class Problem:
    """One problem in one file."""

    file: str
    path: str
    message: str
    value: Any = MISSING

    def render(self) -> str:
        tail = "" if self.value is MISSING else f" (value: {render_value(self.value)})"
        return f"{self.file}: {self.path}: {self.message}{tail}"

    def __str__(self) -> str:
        return self.render()


class IRError(Exception):
    """Every problem found in one or more documents. ``str()`` is one problem per line."""

    def __init__(self, problems: Sequence[Problem]) -> None:
        if not problems:
            raise ValueError("an IRError needs at least one problem")
        self.problems: tuple[Problem, ...] = tuple(problems)
        super().__init__("\n".join(p.render() for p in self.problems))


@dataclass
class ProblemLog:
    """An accumulator of problems for one file (``file`` is stamped on each record)."""

    file: str
    problems: list[Problem] = field(default_factory=list)
    _seen: set[str] = field(default_factory=set, repr=False)

    def add(self, path: str | Iterable[str | int], message: str, value: Any = MISSING) -> None:
        """Record a problem; an identical line already recorded (e.g. once per replica) is skipped."""
        text = path if isinstance(path, str) else key_path(path)
        problem = Problem(self.file, text, message, value)
        line = problem.render()
        if line not in self._seen:
            self._seen.add(line)
            self.problems.append(problem)

    def extend(self, problems: Iterable[Problem]) -> None:
        self.problems.extend(problems)

    def __bool__(self) -> bool:
        return bool(self.problems)

    def raise_if_any(self) -> None:
        if self.problems:
            raise IRError(self.problems)
