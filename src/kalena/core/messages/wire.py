"""Reading decoded JSON from a peer that may be hostile: typed readers that fail with the key path.

Every reader takes ``(value, path)`` and returns a checked Python value or raises
:class:`MessageError` ``"workload.requests.cpu: must be a number, got 'x'"``; none lets a
``KeyError``, ``TypeError`` or ``OverflowError`` escape. Sizes are checked before anything is
iterated, so the work a message can cause is bounded by the limits below.

Numbers: finite ones are JSON numbers; NaN and infinities, which standard JSON cannot spell, are
the strings ``"nan"``, ``"inf"`` and ``"-inf"``, accepted only where the field allows them. A
float NaN or infinity in the decoded value (what ``json.loads`` makes of the non-standard
``NaN`` and ``Infinity`` tokens) is refused, so each value has exactly one spelling.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable, Collection, Mapping
from types import MappingProxyType
from typing import NoReturn, TypeAlias, TypeVar

T = TypeVar("T")
E = TypeVar("E", bound=enum.Enum)

Json: TypeAlias = "bool | int | float | str | list[Json] | dict[str, Json] | None"
#: Where a value sits: schema keys, list indices, and mapping keys pre-rendered as ``['key']``.
Path = tuple[str | int, ...]
Reader = Callable[[object, Path], T]

#: Longest string: a label key is at most 317 characters and an image reference a few hundred;
#: 4096 leaves room for a reason's detail sentence without letting one value run to megabytes.
MAX_STR_CHARS = 4096
#: Most entries in a small collection (labels, tolerations, selector names, spread terms, reasons).
MAX_ITEMS = 256
#: Most workloads one node's message lists (report entries, throttle decisions, drained ids):
#: far above kubelet's default of 110 pods per node and what a Swarm host runs.
MAX_WORKLOADS = 4096
#: Deepest container a reader enters. The version-1 schema nests 5 deep
#: (``workload.spread[0].selector.match_labels``); the guard keeps future kinds honest.
MAX_DEPTH = 8
#: Longest text :func:`~kalena.core.messages.codec.loads` parses: a full report of
#: ``MAX_WORKLOADS`` entries with short ids is about 1.2 MB (decoded in ~0.2 s).
MAX_MESSAGE_CHARS = 8 * 2**20
#: Integers must fit int64: epochs and priorities end up in NumPy int64 arrays.
INT_MIN, INT_MAX = -(2**63), 2**63 - 1

NAN, INF, NEG_INF = "nan", "inf", "-inf"
_NON_FINITE: Mapping[str, float] = MappingProxyType({NAN: math.nan, INF: math.inf, NEG_INF: -math.inf})


class MessageError(ValueError):
    """A message that cannot be read or cannot be applied; ``path`` names the key (``$``: the root)."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = path
        self.problem = problem

    def __reduce__(self) -> tuple[type[MessageError], tuple[str, str]]:
        return (MessageError, (self.path, self.problem))


def render(path: Path) -> str:
    """``("workload", "spread", 0, "max_skew")`` -> ``"workload.spread[0].max_skew"``; ``()`` -> ``"$"``."""
    out = ""
    for seg in path:
        if isinstance(seg, int):
            out += f"[{seg}]"
        elif seg.startswith("["):
            out += seg
        else:
            out += f".{seg}" if out else seg
    return out or "$"


def fail(path: Path, problem: str) -> NoReturn:
    raise MessageError(render(path), problem)


def show(value: object) -> str:
    """A short description of a bad value: never a megabyte repr, never a 5,000-digit integer."""
    if isinstance(value, str):
        return repr(value) if len(value) <= 40 else repr(value[:40]) + "..."
    if isinstance(value, bool) or value is None or isinstance(value, float):
        return repr(value)
    if isinstance(value, int):
        return repr(value) if value.bit_length() <= 64 else f"an integer of {value.bit_length()} bits"
    if isinstance(value, list):
        return f"an array of {len(value)} items"
    if isinstance(value, dict):
        return "an object"
    return f"a {type(value).__name__}"


def number_out(x: float) -> float | str:
    """A float as JSON: itself when finite, else ``"nan"``, ``"inf"`` or ``"-inf"``."""
    x = float(x)
    if math.isfinite(x):
        return x
    return NAN if math.isnan(x) else (INF if x > 0 else NEG_INF)


def text(value: object, path: Path, *, nonempty: bool = False) -> str:
    if not isinstance(value, str):
        fail(path, f"must be a string, got {show(value)}")
    if len(value) > MAX_STR_CHARS:
        fail(path, f"string of {len(value)} characters is longer than {MAX_STR_CHARS}")
    if nonempty and not value:
        fail(path, "must not be empty")
    if not value.isascii():
        # json.loads turns "\ud800" into a lone surrogate, which no UTF-8 log or file can hold.
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            fail(path, "must be valid unicode (it holds a lone surrogate)")
    return value


def integer(value: object, path: Path, lo: int = INT_MIN, hi: int = INT_MAX) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        fail(path, f"must be an integer, got {show(value)}")
    if not lo <= value <= hi:
        fail(path, f"must be in [{lo}, {hi}], got {show(value)}")
    return int(value)


def number(
    value: object, path: Path, *, nan: bool = False, inf: bool = False, negative: bool = False
) -> float:
    """A float; ``nan``/``inf`` allow those spellings (``inf`` allows ``-inf`` only with ``negative``)."""
    if isinstance(value, str) and value in _NON_FINITE:
        x = _NON_FINITE[value]
        if math.isnan(x) and not nan:
            fail(path, "must not be nan")
        if math.isinf(x) and not inf:
            fail(path, f"must be finite, got {value!r}")
    elif isinstance(value, bool) or not isinstance(value, int | float):
        fail(path, f"must be a number, got {show(value)}")
    else:
        try:
            x = float(value)
        except OverflowError:
            fail(path, f"must be a number in float range, got {show(value)}")
        if not math.isfinite(x):
            fail(path, f"non-finite numbers are spelled {NAN!r}, {INF!r} or {NEG_INF!r}, got {show(value)}")
    if x < 0 and not negative:
        fail(path, f"must be non-negative, got {show(value)}")
    return x


def flag(value: object, path: Path) -> bool:
    if not isinstance(value, bool):
        fail(path, f"must be true or false, got {show(value)}")
    return value


def choice(value: object, path: Path, cls: type[E]) -> E:
    """An enum member by its stable string value."""
    if isinstance(value, str):
        for member in cls:
            if member.value == value:
                return member
    fail(path, f"must be one of {', '.join(repr(m.value) for m in cls)}, got {show(value)}")


def _enter(path: Path) -> None:
    if len(path) >= MAX_DEPTH:
        fail(path, f"nested deeper than {MAX_DEPTH} levels")


def array(value: object, path: Path, read: Reader[T], limit: int = MAX_ITEMS) -> tuple[T, ...]:
    """A JSON array of at most ``limit`` items, each read by ``read``."""
    _enter(path)
    if not isinstance(value, list):
        fail(path, f"must be an array, got {show(value)}")
    if len(value) > limit:
        fail(path, f"array of {len(value)} items is longer than {limit}")
    return tuple(read(v, (*path, i)) for i, v in enumerate(value))


def labels(value: object, path: Path) -> Mapping[str, str]:
    """A string -> string object (labels, selectors), read-only as the model keeps them."""
    _enter(path)
    if not isinstance(value, dict):
        fail(path, f"must be an object, got {show(value)}")
    if len(value) > MAX_ITEMS:
        fail(path, f"object of {len(value)} keys is larger than {MAX_ITEMS}")
    out: dict[str, str] = {}
    for k, v in value.items():
        key = text(k, (*path, "<key>"))
        out[key] = text(v, (*path, f"[{key[:40]!r}]"))
    return MappingProxyType(out)


def optional(read: Reader[T]) -> Reader[T | None]:
    """``read``, with JSON ``null`` meaning ``None``."""

    def read_optional(value: object, path: Path) -> T | None:
        return None if value is None else read(value, path)

    return read_optional


class Obj:
    """One JSON object whose key set must be exactly ``keys`` (missing and unknown keys both fail)."""

    __slots__ = ("_d", "path")

    def __init__(self, value: object, path: Path, keys: Collection[str]) -> None:
        _enter(path)
        if not isinstance(value, dict):
            fail(path, f"must be an object, got {show(value)}")
        if len(value) != len(keys) or any(k not in value for k in keys):
            for k in keys:
                if k not in value:
                    fail((*path, k), "missing")
            # Stops within len(keys) + 1 steps, however many keys a hostile object has.
            extra = next(k for k in value if k not in keys)
            seg = extra[:40] if isinstance(extra, str) and not extra.startswith("[") else "<key>"
            fail((*path, seg), f"unknown key {show(extra)}")
        self._d = value
        self.path = path

    def get(self, key: str, read: Reader[T]) -> T:
        return read(self._d[key], (*self.path, key))

    def text(self, key: str, *, nonempty: bool = False) -> str:
        return text(self._d[key], (*self.path, key), nonempty=nonempty)

    def integer(self, key: str, lo: int = INT_MIN, hi: int = INT_MAX) -> int:
        return integer(self._d[key], (*self.path, key), lo, hi)

    def number(self, key: str, *, nan: bool = False, inf: bool = False, negative: bool = False) -> float:
        return number(self._d[key], (*self.path, key), nan=nan, inf=inf, negative=negative)

    def flag(self, key: str) -> bool:
        return flag(self._d[key], (*self.path, key))

    def choice(self, key: str, cls: type[E]) -> E:
        return choice(self._d[key], (*self.path, key), cls)

    def array(self, key: str, read: Reader[T], limit: int = MAX_ITEMS) -> tuple[T, ...]:
        return array(self._d[key], (*self.path, key), read, limit)

    def labels(self, key: str) -> Mapping[str, str]:
        return labels(self._d[key], (*self.path, key))
