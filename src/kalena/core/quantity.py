"""Kubernetes quantity strings and plain numbers, converted to Kuberina IR units.

A plain number (or a numeric string without suffix or exponent) is already in IR units:
cores, GiB, devices or MB/s. A string with a Kubernetes suffix is a Kubernetes quantity:

* ``cpu`` and ``gpu``: the quantity itself (``2500m`` -> 2.5 cores);
* ``ram`` and ``storage``: bytes converted to GiB (``512Mi`` -> 0.5, ``5G`` -> 4.656...);
* ``disk.*`` and ``network.*``: bytes per second converted to MB/s (``5G`` -> 5000, ``500M`` -> 500).

Parsing goes through :class:`decimal.Decimal` so that ``"0.1"`` and ``"100m"`` give the same float.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal, InvalidOperation
from typing import SupportsFloat

_SUFFIX: dict[str, Decimal] = {
    "": Decimal(1),
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
    "Ki": Decimal(2**10),
    "Mi": Decimal(2**20),
    "Gi": Decimal(2**30),
    "Ti": Decimal(2**40),
    "Pi": Decimal(2**50),
    "Ei": Decimal(2**60),
}

_QUANTITY = re.compile(
    r"^(?P<num>[+]?(?:\d+(?:\.\d*)?|\.\d+))"
    r"(?:(?P<exp>[eE][+-]?\d+)|(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E))?$"
)

_GIB = Decimal(2**30)
_MB = Decimal(10**6)
_BYTE_DIMS = frozenset({"ram", "storage"})
_RATE_DIMS = frozenset({"disk.read", "disk.write", "network.in", "network.out"})


#: The largest quantity accepted, in IR units: 2**42, about 4.4e12 cores, GiB, devices or MB/s.
#: Far beyond any machine, and below it a float still tells apart every thousandth of a unit
#: (its spacing there is 2**-10); a typo such as ``1e400`` would otherwise read as infinite, an
#: unbounded node.
MAX_QUANTITY = 2.0**42

#: Exponents beyond this are refused before any arithmetic (``1e999999999`` costs nothing to write);
#: below ``-_MIN_EXPONENT`` the value is 0 in any float.
_MAX_EXPONENT = 64
_MIN_EXPONENT = 400


class QuantityError(ValueError):
    """A value that is not a valid quantity; the message names the value and the dimension."""


class QuantityTooLarge(QuantityError):
    """A valid quantity above the limit it was read against."""


def parse_quantity(raw: SupportsFloat | str, dim: str = "cpu", limit: float = MAX_QUANTITY) -> float:
    """Convert ``raw`` to a non-negative float in the IR unit of ``dim``, at most ``limit``.

    Raises :class:`QuantityError` for anything else (negative, NaN, infinite, above ``limit``,
    a boolean, ``None``, an unknown suffix), with a message that names the value.
    """
    if isinstance(raw, bool) or raw is None:
        raise QuantityError(f"{raw!r} is not a quantity for {dim}")
    if isinstance(raw, int | float):
        try:
            value = float(raw)
        except OverflowError:  # an int beyond any float
            raise QuantityTooLarge(_too_large(raw, dim, limit)) from None
        if math.isnan(value) or math.isinf(value) or value < 0:
            raise QuantityError(f"{raw!r} is not a finite non-negative quantity for {dim}")
        if value > limit:
            raise QuantityTooLarge(_too_large(raw, dim, limit))
        return value
    if not isinstance(raw, str):
        raise QuantityError(f"{raw!r} is not a quantity for {dim}")
    text = raw.strip()
    m = _QUANTITY.match(text)
    if m is None:
        raise QuantityError(f"{raw!r} is not a valid quantity for {dim}")
    try:
        number = Decimal(m.group("num"))
    except InvalidOperation:  # pragma: no cover - the regex admits only valid decimals
        raise QuantityError(f"{raw!r} is not a valid quantity for {dim}") from None
    exp, suffix = m.group("exp"), m.group("suffix")
    if (exp is None and suffix is None) or number == 0:
        scaled = number  # a bare number (already in IR units), or zero in any unit
    else:
        power = int(exp[1:]) if exp is not None else 0
        if power > _MAX_EXPONENT:  # refused before Decimal spends time and memory on it
            raise QuantityTooLarge(_too_large(raw, dim, limit))
        if power < -_MIN_EXPONENT:
            return 0.0  # below the smallest float there is (5e-324)
        scaled = number * Decimal(10) ** power if exp is not None else number * _SUFFIX[suffix or ""]
        if dim in _BYTE_DIMS:
            scaled = scaled / _GIB
        elif dim in _RATE_DIMS:
            scaled = scaled / _MB
    if scaled > Decimal(limit):
        raise QuantityTooLarge(_too_large(raw, dim, limit))
    return float(scaled)


def _too_large(raw: object, dim: str, limit: float) -> str:
    shown = raw if not isinstance(raw, int) or raw < 10**30 else f"an integer of {len(str(raw))} digits"
    return f"{shown!r} is above the largest quantity accepted for {dim} ({limit:.4g})"
