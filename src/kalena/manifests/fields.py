"""Small typed readers for Kubernetes object fields: every bad value becomes a logged problem.

Each reader takes the raw value, its location (a tuple of keys and indexes, rendered as
``spec.containers[0].resources.requests.cpu``) and the file's :class:`ProblemLog`, and returns
a clean value or ``None`` after logging ``FILE: KEY.PATH: MESSAGE (value: VALUE)``.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

from kalena.core.quantity import QuantityError, QuantityTooLarge, parse_quantity
from kalena.deployability.model import LabelSelector, Requirement, frozen_map
from kalena.ir.errors import ProblemLog

Loc = tuple[str | int, ...]

#: Dimensions counted in millis (Kubernetes ``MilliValue``); every other one in whole units.
MILLI_DIMS = frozenset({"cpu"})


def mapping(raw: Any, loc: Loc, log: ProblemLog, *, optional: bool = True) -> dict[str, Any] | None:
    if raw is None:
        if not optional:
            log.add(loc, "is required")
        return None
    if not isinstance(raw, dict):
        log.add(loc, "must be a mapping", raw)
        return None
    return raw


def seq(raw: Any, loc: Loc, log: ProblemLog) -> list[Any]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        log.add(loc, "must be a list", raw)
        return []
    return raw


def string(raw: Any, loc: Loc, log: ProblemLog, *, required: bool = False, default: str = "") -> str | None:
    if raw is None:
        if required:
            log.add(loc, "is required")
            return None
        return default
    if not isinstance(raw, str):  # as the API server: a number or a boolean is not a string here
        log.add(
            loc, "must be a string (quote it)" if isinstance(raw, int | float) else "must be a string", raw
        )
        return None
    return raw


def string_map(raw: Any, loc: Loc, log: ProblemLog) -> dict[str, str]:
    m = mapping(raw, loc, log)
    out: dict[str, str] = {}
    for k, v in (m or {}).items():
        if not isinstance(k, str):
            log.add((*loc, str(k)), "keys must be strings", k)
            continue
        if not isinstance(v, str):
            log.add(
                (*loc, k),
                "must be a string (quote it)" if isinstance(v, int | float) else "must be a string",
                v,
            )
            continue
        out[k] = v
    return out


def flag(raw: Any, loc: Loc, log: ProblemLog) -> bool | None:
    """A boolean field, false when absent (YAML's ``true``/``false``, not a string or a number)."""
    if raw is None:
        return False
    if not isinstance(raw, bool):
        log.add(loc, "must be true or false", raw)
        return None
    return raw


def integer(raw: Any, loc: Loc, log: ProblemLog, *, minimum: int, default: int | None = None) -> int | None:
    if raw is None:
        if default is None:
            log.add(loc, "is required")
        return default
    if isinstance(raw, bool) or not isinstance(raw, int):
        log.add(loc, "must be an integer", raw)
        return None
    if raw < minimum:
        log.add(loc, f"must be at least {minimum}", raw)
        return None
    return raw


#: The largest quantity a manifest may give, in its integer units (millicores for cpu, bytes for memory).
MAX_UNITS = 2**53


def units(dim: str, raw: Any, loc: Loc, log: ProblemLog) -> int | None:
    """A Kubernetes quantity as an integer: millicores for cpu, else base units, rounded up.

    ``parse_quantity(raw, "cpu")`` returns the quantity's own value (cpu is not rescaled), so
    ``512Mi`` is 536870912 bytes and ``250m`` is 0.25. Rounding up matches ``Quantity.Value()``
    and ``MilliValue()``; a value within 1e-9 (relative) of an integer is that integer, so that
    ``0.1`` cpu is exactly 100 millicores despite binary floating point.
    """
    milli = dim in MILLI_DIMS
    # a cluster's thousands of objects spell the same few quantities ("100m", "128Mi"): a short
    # text is read once (only texts are cached, as True would hit the entry of 1; only short ones,
    # so that a hostile file's long strings are not kept)
    got = _text_units(milli, raw) if type(raw) is str and len(raw) <= 64 else _units(milli, raw)
    if isinstance(got, int):
        return got
    log.add(loc, f"{got} for {dim}", raw)
    return None


def _units(milli: bool, raw: Any) -> int | str:
    """``raw`` in integer units (millicores where ``milli``), or what is wrong with it."""
    try:  # at most 2**53 units (millicores for cpu), so that every accepted value is exact
        value = parse_quantity(raw, "cpu", limit=MAX_UNITS / 1000 if milli else MAX_UNITS)
    except QuantityTooLarge:
        return f"is above {MAX_UNITS:,} {'milli-units' if milli else 'units'}"
    except QuantityError:
        return "is not a valid Kubernetes quantity"
    scaled = value * 1000 if milli else value
    nearest = round(scaled)
    if abs(scaled - nearest) <= 1e-9 * max(1.0, abs(scaled)):
        return int(nearest)
    return math.ceil(scaled)


_text_units = functools.lru_cache(maxsize=4096)(_units)


def requirement(raw: Any, loc: Loc, log: ProblemLog, *, node: bool) -> Requirement | None:
    m = mapping(raw, loc, log, optional=False)
    if m is None:
        return None
    key = string(m.get("key"), (*loc, "key"), log, required=True)
    op = string(m.get("operator"), (*loc, "operator"), log, required=True)
    values = [
        string(v, (*loc, "values", i), log) for i, v in enumerate(seq(m.get("values"), (*loc, "values"), log))
    ]
    if key is None or op is None or any(v is None for v in values):
        return None
    allowed = (
        ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")
        if node
        else ("In", "NotIn", "Exists", "DoesNotExist")
    )
    if op not in allowed:
        log.add((*loc, "operator"), f"must be one of {', '.join(allowed)}", op)
        return None
    return checked(Requirement, loc, log, raw, key, op, tuple(v for v in values if v is not None))


def label_selector(raw: Any, loc: Loc, log: ProblemLog) -> LabelSelector | None:
    """A non-null selector (``{}`` selects everything); callers map an absent one to None."""
    m = mapping(raw, loc, log, optional=False)
    if m is None:
        return None
    labels = string_map(m.get("matchLabels"), (*loc, "matchLabels"), log)
    exprs = []
    for i, e in enumerate(seq(m.get("matchExpressions"), (*loc, "matchExpressions"), log)):
        r = requirement(e, (*loc, "matchExpressions", i), log, node=False)
        if r is not None:
            exprs.append(r)
    return LabelSelector(frozen_map(labels), tuple(exprs))


def checked(build: Callable[..., Any], loc: Loc, log: ProblemLog, raw: Any, *args: Any, **kwargs: Any) -> Any:
    """``build(*args, **kwargs)``; a model object's own validation error becomes a problem at ``loc``
    naming ``raw`` (the value as written)."""
    try:
        return build(*args, **kwargs)
    except ValueError as e:
        log.add(loc, str(e), raw)
        return None
