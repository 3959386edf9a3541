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


class QuantityError(ValueError):
    """A value that is not a valid quantity; the message names the value and the dimension."""


def parse_quantity(raw: SupportsFloat | str, dim: str = "cpu") -> float:
    """Convert ``raw`` to a non-negative float in the IR unit of ``dim``.

    Raises :class:`QuantityError` for anything else (negative, NaN, infinite, a boolean,
    an unknown suffix), with a message that names the value.
    """
    if isinstance(raw, bool):
        raise QuantityError(f"{raw!r} is not a quantity for {dim}")
    if isinstance(raw, int | float):
        value = float(raw)
        if math.isnan(value) or math.isinf(value) or value < 0:
            raise QuantityError(f"{raw!r} is not a finite non-negative quantity for {dim}")
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
    if exp is None and suffix is None:
        return float(number)  # a bare number: already in IR units
    scaled = number * Decimal(10) ** int(exp[1:]) if exp is not None else number * _SUFFIX[suffix or ""]
    if dim in _BYTE_DIMS:
        scaled = scaled / _GIB
    elif dim in _RATE_DIMS:
        scaled = scaled / _MB
    return float(scaled)
