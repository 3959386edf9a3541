"""The eight resource dimensions, their reclaimability classes and the resource vector.

Units are Kuberina IR v1's: cpu in cores, ram and storage in GiB, gpu in devices, and
disk.read, disk.write, network.in, network.out in MB/s (10^6 bytes per second).

One workload's resources are a :class:`Resources` (an immutable 8-tuple, cheap to build and
hash); many workloads are a NumPy array of shape ``(n, 8)`` in the same dimension order,
which is what the vectorised policies (estimators, ledger, placement) operate on.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import SupportsFloat

import numpy as np

from kalena.core.quantity import parse_quantity

DIMS: tuple[str, ...] = (
    "cpu",
    "ram",
    "gpu",
    "storage",
    "disk.read",
    "disk.write",
    "network.in",
    "network.out",
)
NDIM = len(DIMS)
CPU, RAM, GPU, STORAGE, DISK_READ, DISK_WRITE, NET_IN, NET_OUT = range(NDIM)
DIM_INDEX: dict[str, int] = {d: i for i, d in enumerate(DIMS)}

#: Flat spellings accepted only in legacy (pre-v1) documents.
LEGACY_FLAT_NAMES: dict[str, str] = {
    "disk_read": "disk.read",
    "disk_write": "disk.write",
    "net_in": "network.in",
    "net_out": "network.out",
    "network_in": "network.in",
    "network_out": "network.out",
}


class ResourceClass(enum.Enum):
    """How a dimension is reclaimed (seed 000 §2.4)."""

    COMPRESSIBLE = "compressible"  # throttled under pressure
    NON_COMPRESSIBLE = "non-compressible"  # evicted under pressure
    NON_RECLAIMABLE = "non-reclaimable"  # never slack: reservation == request


DIM_CLASS: dict[str, ResourceClass] = {
    "cpu": ResourceClass.COMPRESSIBLE,
    "ram": ResourceClass.NON_COMPRESSIBLE,
    "gpu": ResourceClass.NON_RECLAIMABLE,
    "storage": ResourceClass.NON_COMPRESSIBLE,
    "disk.read": ResourceClass.COMPRESSIBLE,
    "disk.write": ResourceClass.COMPRESSIBLE,
    "network.in": ResourceClass.COMPRESSIBLE,
    "network.out": ResourceClass.COMPRESSIBLE,
}


def _mask(cls: ResourceClass) -> np.ndarray:
    m = np.array([DIM_CLASS[d] is cls for d in DIMS], dtype=bool)
    m.setflags(write=False)
    return m


COMPRESSIBLE = _mask(ResourceClass.COMPRESSIBLE)
NON_COMPRESSIBLE = _mask(ResourceClass.NON_COMPRESSIBLE)
NON_RECLAIMABLE = _mask(ResourceClass.NON_RECLAIMABLE)
#: Indices of the non-compressible dimensions (ram, storage), for loops and column picks.
NON_COMPRESSIBLE_DIMS = np.flatnonzero(NON_COMPRESSIBLE)
NON_COMPRESSIBLE_DIMS.setflags(write=False)
#: The seven dimensions that may contribute slack (all but gpu).
RECLAIMABLE = ~NON_RECLAIMABLE
RECLAIMABLE.setflags(write=False)


def dim_index(name: str) -> int:
    """Index of a dimension name; raises ``KeyError`` naming the valid set."""
    try:
        return DIM_INDEX[name]
    except KeyError:
        raise KeyError(f"unknown resource dimension {name!r} (expected one of {', '.join(DIMS)})") from None


def dim_indices(dims: Iterable[int]) -> tuple[int, ...]:
    """``dims`` as a tuple of distinct dimension indices in ascending order (a subset of the eight
    that an estimator or a reservation refresh covers); anything else raises ``ValueError``."""
    out = tuple(int(d) for d in dims)
    if not out or list(out) != sorted(set(out)) or out[0] < 0 or out[-1] >= NDIM:
        raise ValueError(
            f"dims must be distinct dimension indices 0..{NDIM - 1} in ascending order, got {out}"
        )
    return out


@dataclass(frozen=True, slots=True)
class Resources:
    """An immutable 8-vector in IR units. ``inf`` means unconstrained (node allocatable only)."""

    values: tuple[float, ...] = (0.0,) * NDIM

    def __post_init__(self) -> None:
        if len(self.values) != NDIM:
            raise ValueError(f"a resource vector has {NDIM} dimensions, got {len(self.values)}")
        for d, v in zip(DIMS, self.values, strict=True):
            if math.isnan(v) or v < 0:
                raise ValueError(f"resource {d} must be a non-negative number, got {v!r}")

    # construction -------------------------------------------------------------------------
    @classmethod
    def zero(cls) -> Resources:
        return _ZERO

    @classmethod
    def unconstrained(cls) -> Resources:
        return cls((math.inf,) * NDIM)

    @classmethod
    def of(cls, default: float = 0.0, **dims: SupportsFloat | str) -> Resources:
        """Keyword form with Python-safe names: ``Resources.of(cpu=2, ram="4Gi", disk_read=50)``."""
        mapping = {LEGACY_FLAT_NAMES.get(k, k): v for k, v in dims.items()}
        return cls.from_mapping(mapping, default=default)

    @classmethod
    def from_mapping(cls, mapping: Mapping[str, SupportsFloat | str], default: float = 0.0) -> Resources:
        """From ``{"cpu": 2, "ram": "4Gi", "disk.read": 50}``; missing dimensions take ``default``."""
        vals = [default] * NDIM
        for key, raw in mapping.items():
            i = dim_index(key)
            vals[i] = parse_quantity(raw, DIMS[i])
        return cls(tuple(vals))

    @classmethod
    def from_array(cls, arr: Iterable[float]) -> Resources:
        return cls(tuple(float(v) for v in arr))

    # views -----------------------------------------------------------------------------------
    def array(self) -> np.ndarray:
        return np.asarray(self.values, dtype=np.float64)

    def to_dict(self, *, skip_zero: bool = False, skip_inf: bool = False) -> dict[str, float]:
        return {
            d: v
            for d, v in zip(DIMS, self.values, strict=True)
            if not (skip_zero and v == 0.0) and not (skip_inf and math.isinf(v))
        }

    def __getitem__(self, key: str | int) -> float:
        return self.values[key if isinstance(key, int) else dim_index(key)]

    def __iter__(self) -> Iterator[float]:
        return iter(self.values)

    # arithmetic ------------------------------------------------------------------------------
    def __add__(self, other: Resources) -> Resources:
        return Resources(tuple(a + b for a, b in zip(self.values, other.values, strict=True)))

    def minus(self, other: Resources) -> Resources:
        """Component-wise difference clipped at zero (``inf - x`` stays ``inf``)."""
        return Resources(tuple(max(0.0, a - b) for a, b in zip(self.values, other.values, strict=True)))

    def scale(self, k: float) -> Resources:
        return Resources(tuple(v * k for v in self.values))

    def fits_within(self, capacity: Resources) -> bool:
        return all(a <= b for a, b in zip(self.values, capacity.values, strict=True))

    def __str__(self) -> str:
        parts = [f"{d}={v:g}" for d, v in zip(DIMS, self.values, strict=True) if v]
        return "{" + ", ".join(parts) + "}" if parts else "{}"


_ZERO = Resources()


def stack(vectors: Iterable[Resources]) -> np.ndarray:
    """Many vectors as one ``(n, 8)`` float64 array."""
    rows = [v.values for v in vectors]
    if not rows:
        return np.zeros((0, NDIM), dtype=np.float64)
    return np.asarray(rows, dtype=np.float64)
