"""Field checks for frozen config dataclasses, called from ``__post_init__``.

Bad configuration fails when the object is built, never mid-decision. Every check reads
``getattr(obj, key)`` and raises ``ValueError`` in one format naming the class, the key and the
value (a :class:`ConfigError`, which is a ``ValueError``)::

    ThrottleConfig.growth_fraction must be in (0, 1], got 0

A *number* is an ``int`` or a ``float`` but never a ``bool`` (Python counts ``True`` as the int 1,
never a sensible duration or fraction) and never NaN (every comparison with NaN is false, so it
would slip through any range check).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import fields


class ConfigError(ValueError):
    """A bad field, its parts kept apart so that a reader can re-state it under its own key path."""

    def __init__(self, owner: str, key: str, value: object, rule: str) -> None:
        self.owner, self.key, self.value, self.rule = owner, key, value, rule
        super().__init__(f"{owner}.{key} must be {rule}, got {value!r}")

    def __reduce__(self) -> tuple[type, tuple[str, str, object, str]]:
        # args holds only the message; rebuild from the parts (pickling across processes)
        return (ConfigError, (self.owner, self.key, self.value, self.rule))


def fail(obj: object, key: str, value: object, rule: str) -> ConfigError:
    """The error for ``obj.key`` (returned, for the caller to raise) when a rule of its own fails."""
    return ConfigError(type(obj).__name__, key, value, rule)


def is_number(value: object) -> bool:
    """``int`` or ``float``, not ``bool``, not NaN (infinities are numbers)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return not math.isnan(value)


def range_rule(
    lo: float, hi: float, *, lo_open: bool = False, hi_open: bool = False, allow_inf: bool = False
) -> str:
    """The accepted range in words: ``in (0, 1]``, ``a finite number >= 0``, ``a number > 1``."""
    if math.isfinite(lo) and math.isfinite(hi):
        return f"in {'(' if lo_open else '['}{lo:g}, {hi:g}{')' if hi_open else ']'}"
    what = "a number" if allow_inf else "a finite number"
    if math.isfinite(lo):
        return f"{what} {'>' if lo_open else '>='} {lo:g}"
    if math.isfinite(hi):
        return f"{what} {'<' if hi_open else '<='} {hi:g}"
    return what


def _in_range(value: float, lo: float, hi: float, lo_open: bool, hi_open: bool, allow_inf: bool) -> bool:
    if math.isinf(value) and not allow_inf:
        return False
    return (value > lo if lo_open else value >= lo) and (value < hi if hi_open else value <= hi)


def check_number(
    obj: object,
    key: str,
    *,
    lo: float = 0.0,
    hi: float = math.inf,
    lo_open: bool = False,
    hi_open: bool = False,
    allow_inf: bool = False,
) -> None:
    """Raise unless ``obj.key`` is a number in the range (default: finite and >= 0).

    The default lower bound is 0 because nearly every knob is a duration, a quantity or a weight.
    """
    value = getattr(obj, key)
    if not is_number(value) or not _in_range(value, lo, hi, lo_open, hi_open, allow_inf):  # type: ignore[arg-type]
        raise fail(obj, key, value, range_rule(lo, hi, lo_open=lo_open, hi_open=hi_open, allow_inf=allow_inf))


def check_fraction(obj: object, key: str, *, lo_open: bool = False, hi_open: bool = False) -> None:
    """Raise unless ``obj.key`` is a number in [0, 1] (either end may be open)."""
    check_number(obj, key, lo=0.0, hi=1.0, lo_open=lo_open, hi_open=hi_open)


def check_seconds(obj: object) -> None:
    """Every dataclass field whose name ends in ``_s`` is a finite, non-negative duration."""
    for f in fields(obj):  # type: ignore[arg-type]
        if f.name.endswith("_s"):
            check_number(obj, f.name)


def check_int(obj: object, key: str, *, lo: int, hi: int | None = None) -> None:
    """Raise unless ``obj.key`` is an ``int`` (not a ``bool``, not ``2.0``) in [lo, hi]."""
    value = getattr(obj, key)
    ok = isinstance(value, int) and not isinstance(value, bool)
    if not ok or value < lo or (hi is not None and value > hi):
        rule = f"an integer >= {lo}" if hi is None else f"an integer in [{lo}, {hi}]"
        raise fail(obj, key, value, rule)


def check_bool(obj: object, key: str) -> None:
    """Raise unless ``obj.key`` is ``True`` or ``False`` (``1`` and ``"yes"`` are mistakes)."""
    value = getattr(obj, key)
    if not isinstance(value, bool):
        raise fail(obj, key, value, "true or false")


def check_choice(obj: object, key: str, choices: tuple[str, ...]) -> None:
    """Raise unless ``obj.key`` is one of ``choices``."""
    value = getattr(obj, key)
    if not isinstance(value, str) or value not in choices:
        raise fail(obj, key, value, f"one of {', '.join(repr(c) for c in choices)}")


def check_type(obj: object, key: str, cls: type) -> None:
    """Raise unless ``obj.key`` is a ``cls`` (a plain mapping passed where a config belongs, say)."""
    value = getattr(obj, key)
    if not isinstance(value, cls):
        raise fail(obj, key, value, f"a {cls.__name__}")


def check_numbers(
    obj: object,
    key: str,
    *,
    length: int,
    lo: float = 0.0,
    hi: float = math.inf,
    lo_open: bool = False,
    hi_open: bool = False,
) -> tuple[float, ...]:
    """Raise unless ``obj.key`` is ``length`` numbers, each in the range; return them as floats.

    A bad item is named by its index (``PlacementConfig.bucket_width[2]``).
    """
    value = getattr(obj, key)
    if isinstance(value, str | bytes | Mapping):
        raise fail(obj, key, value, f"a sequence of {length} numbers")
    try:
        items = tuple(value)
    except TypeError:
        raise fail(obj, key, value, f"a sequence of {length} numbers") from None
    if len(items) != length:
        raise fail(obj, key, value, f"a sequence of {length} numbers")
    for i, item in enumerate(items):
        if not is_number(item) or not _in_range(item, lo, hi, lo_open, hi_open, False):
            raise fail(obj, f"{key}[{i}]", item, range_rule(lo, hi, lo_open=lo_open, hi_open=hi_open))
    return tuple(float(x) for x in items)
