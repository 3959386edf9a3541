"""The one field-check helper of the core: every rule accepts and rejects as its table says."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from kalena.core.validate import (
    check_bool,
    check_choice,
    check_fraction,
    check_int,
    check_number,
    check_numbers,
    check_seconds,
    check_type,
    fail,
    range_rule,
)


@dataclass(frozen=True)
class Knob:
    """One field under test; ``x`` is whatever the case puts there."""

    x: Any = None


Check = Callable[[object], object]

# (id, check, value, None if accepted else the message's rule)
CASES: list[tuple[str, Check, Any, str | None]] = [
    ("number-default-zero", lambda o: check_number(o, "x"), 0, None),
    ("number-default-negative", lambda o: check_number(o, "x"), -1.0, "a finite number >= 0"),
    ("number-bool", lambda o: check_number(o, "x"), True, "a finite number >= 0"),
    ("number-nan", lambda o: check_number(o, "x", lo=-math.inf), math.nan, "a finite number"),
    ("number-inf", lambda o: check_number(o, "x"), math.inf, "a finite number >= 0"),
    ("number-inf-allowed", lambda o: check_number(o, "x", allow_inf=True), math.inf, None),
    ("number-string", lambda o: check_number(o, "x"), "1", "a finite number >= 0"),
    ("number-lo-open", lambda o: check_number(o, "x", lo_open=True), 0.0, "a finite number > 0"),
    ("number-hi-closed", lambda o: check_number(o, "x", hi=0.5), 0.5, None),
    ("number-hi-over", lambda o: check_number(o, "x", hi=0.5), 0.6, "in [0, 0.5]"),
    ("number-hi-open", lambda o: check_number(o, "x", hi=1.0, hi_open=True), 1.0, "in [0, 1)"),
    ("number-below-hi-only", lambda o: check_number(o, "x", lo=-math.inf, hi=2), 3, "a finite number <= 2"),
    ("fraction-open", lambda o: check_fraction(o, "x", lo_open=True, hi_open=True), 0.0, "in (0, 1)"),
    ("fraction-closed", lambda o: check_fraction(o, "x"), 1, None),
    ("int-ok", lambda o: check_int(o, "x", lo=1), 3, None),
    ("int-float", lambda o: check_int(o, "x", lo=1), 3.0, "an integer >= 1"),
    ("int-bool", lambda o: check_int(o, "x", lo=0), False, "an integer >= 0"),
    ("int-range", lambda o: check_int(o, "x", lo=1, hi=10), 11, "an integer in [1, 10]"),
    ("bool-ok", lambda o: check_bool(o, "x"), False, None),
    ("bool-int", lambda o: check_bool(o, "x"), 1, "true or false"),
    ("choice-ok", lambda o: check_choice(o, "x", ("a", "b")), "b", None),
    ("choice-unknown", lambda o: check_choice(o, "x", ("a", "b")), "c", "one of 'a', 'b'"),
    ("choice-unhashable", lambda o: check_choice(o, "x", ("a",)), ["a"], "one of 'a'"),
    ("type-ok", lambda o: check_type(o, "x", Knob), Knob(), None),
    ("type-dict", lambda o: check_type(o, "x", Knob), {"x": 1}, "a Knob"),
    ("numbers-ok", lambda o: check_numbers(o, "x", length=2, lo_open=True), [1, 2.5], None),
    ("numbers-short", lambda o: check_numbers(o, "x", length=2), (1.0,), "a sequence of 2 numbers"),
    ("numbers-string", lambda o: check_numbers(o, "x", length=2), "12", "a sequence of 2 numbers"),
    ("numbers-not-iterable", lambda o: check_numbers(o, "x", length=2), 12, "a sequence of 2 numbers"),
]


@pytest.mark.parametrize(("check", "value", "rule"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_check(check: Check, value: Any, rule: str | None) -> None:
    obj = Knob(value)
    if rule is None:
        check(obj)
        return
    with pytest.raises(ValueError) as info:
        check(obj)
    assert str(info.value) == f"Knob.x must be {rule}, got {value!r}"


def test_a_bad_item_is_named_by_its_index_and_items_come_back_as_floats() -> None:
    assert check_numbers(Knob([1, 2]), "x", length=2) == (1.0, 2.0)
    with pytest.raises(ValueError, match=re.escape("Knob.x[1] must be a finite number > 0, got nan")):
        check_numbers(Knob((1.0, math.nan)), "x", length=2, lo_open=True)
    with pytest.raises(ValueError, match=re.escape("Knob.x[0] must be a finite number >= 0, got True")):
        check_numbers(Knob((True, 1.0)), "x", length=2)


@dataclass(frozen=True)
class Durations:
    wait_s: Any = 1.0
    size: Any = -1.0  # not a duration: not checked


@pytest.mark.parametrize(
    ("value", "ok"),
    [(0.0, True), (5, True), (-1.0, False), (math.inf, False), (math.nan, False), (True, False)],
    ids=["zero", "int", "negative", "inf", "nan", "bool"],
)
def test_check_seconds_checks_every_field_ending_in_s(value: Any, ok: bool) -> None:
    obj = Durations(wait_s=value)
    if ok:
        check_seconds(obj)
    else:
        with pytest.raises(ValueError, match=r"Durations\.wait_s must be a finite number >= 0"):
            check_seconds(obj)


def test_fail_and_range_rule() -> None:
    assert str(fail(Knob(), "x", 3, "odd")) == "Knob.x must be odd, got 3"
    assert range_rule(1.0, math.inf, lo_open=True, allow_inf=True) == "a number > 1"
    assert range_rule(-math.inf, math.inf) == "a finite number"
