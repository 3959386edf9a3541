"""Placement configuration (validated when built) and the per-pass context a shell supplies.

Score weights and why each default has its value:

* ``stranded_weight = 1``: the packing term, the unit the others are measured against.
* ``colocation_weight = 1``: as strong as packing; Borg's "mix of high and low priority".
* ``image_weight = 3``: "weighted heavily" (seed 000 §4.3). Every other term lies in [0, 1] with
  weight 1, so a node that already holds the image loses only when *all three* other terms are
  at their worst there and at their best elsewhere: a cold start (~25 s at Borg) costs more than
  any packing difference.
* ``volatility_weight = 1`` with ``volatility_scale = 0.01``: the penalty saturates when the
  variance of the node's normalised reservation series reaches 0.01, i.e. a standard deviation
  of 10% of capacity, about the margin a batch pod sized from the mean slack has before it is
  evicted. Placeholder until calibration (seed 000 §6.4).

Cache and sampling defaults:

* ``bucket_width`` (IR units): 0.25 core, 0.25 GiB, 1 gpu (unused: gpu is never slack), 1 GiB
  storage, 10 MB/s for disk and network. A quarter core or GiB is below what changes a packing
  choice for typical batch requests (0.1-4 cores) yet wider than the tick-to-tick jitter of a
  decayed reservation, so most estimator updates cross no boundary (Borg: "ignoring small
  changes in resource quantities reduces cache invalidations").
* ``sample_above_nodes = 500``, ``sample_feasible = 100``: kube-scheduler scores every node in
  small clusters and stops after ``minFeasibleNodesToFind = 100`` feasible nodes in large ones.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

import numpy as np

from kalena.core.resources import DIMS, GPU, NDIM, RECLAIMABLE, dim_index
from kalena.core.validate import check_bool, check_int, check_number, check_numbers, fail

_EMPTY: Mapping = MappingProxyType({})

DEFAULT_BUCKET_WIDTH: tuple[float, ...] = (0.25, 0.25, 1.0, 1.0, 10.0, 10.0, 10.0, 10.0)
DEFAULT_STRANDED_DIMS: tuple[str, ...] = tuple(d for d, r in zip(DIMS, RECLAIMABLE, strict=True) if r)


@dataclass(frozen=True)
class PlacementConfig:
    stranded_weight: float = 1.0
    colocation_weight: float = 1.0
    image_weight: float = 3.0
    volatility_weight: float = 1.0
    volatility_scale: float = 0.01
    bucket_width: tuple[float, ...] = DEFAULT_BUCKET_WIDTH
    stranded_dims: tuple[str, ...] = DEFAULT_STRANDED_DIMS
    equivalence_reuse: bool = True  # class masks, fit cache and score cache per equivalence key
    relaxed_randomisation: bool = True
    sample_above_nodes: int = 500
    sample_feasible: int = 100
    max_cached_classes: int = 256  # LRU bound on score-cache classes (~80 KB each at 5,000 nodes)

    def __post_init__(self) -> None:
        for key in ("stranded_weight", "colocation_weight", "image_weight", "volatility_weight"):
            check_number(self, key)
        check_number(self, "volatility_scale", lo_open=True)
        # normalised to tuples so that a list read from YAML hashes and compares like the default
        widths = check_numbers(self, "bucket_width", length=NDIM, lo_open=True)
        object.__setattr__(self, "bucket_width", widths)
        dims = self.stranded_dims
        slack = tuple(d for i, d in enumerate(DIMS) if i != GPU)  # gpu is never slack
        if not isinstance(dims, tuple | list) or not all(isinstance(d, str) and d in slack for d in dims):
            raise fail(self, "stranded_dims", dims, f"names from {', '.join(slack)} (gpu is never slack)")
        object.__setattr__(self, "stranded_dims", tuple(dims))
        check_bool(self, "equivalence_reuse")
        check_bool(self, "relaxed_randomisation")
        for key in ("sample_above_nodes", "sample_feasible", "max_cached_classes"):
            check_int(self, key, lo=1)

    @property
    def width_array(self) -> np.ndarray:
        return np.asarray(self.bucket_width, dtype=np.float64)

    @property
    def stranded_mask(self) -> np.ndarray:
        m = np.zeros(NDIM, dtype=bool)
        m[[dim_index(d) for d in self.stranded_dims]] = True
        return m

    def weight(self, score_name: str) -> float:
        """The weight of a score plugin by its name (``stranded`` -> ``stranded_weight``)."""
        return float(getattr(self, f"{score_name}_weight"))


@dataclass(frozen=True, eq=False)
class SchedulingContext:
    """What the shell knows this pass beyond the ledger. Node keys are ledger node indices.

    * ``cooldowns``: ``(equivalence key, node) -> until`` (seconds, same clock as ``now``): an
      evicted class may not return to that node before ``until``.
    * ``blacklist``: ``(equivalence key, node)`` pairings known to be harmful.
    * ``eligible``: ``(N,)`` bool, nodes escalation has not marked slack-ineligible; ``None``: all.
    * ``images``: image -> ``(N,)`` bool of nodes that already hold it (see ``image_masks``).
    * ``volatility``: ``(N,)`` variance of each node's normalised reservation series
      (see ``reservation_volatility``); ``None``: no node is penalised.
    * ``namespace_caps``: namespace -> most running batch workloads allowed.
    """

    now: float = 0.0
    cooldowns: Mapping[tuple[str, int], float] = field(default_factory=lambda: _EMPTY)
    blacklist: frozenset[tuple[str, int]] = frozenset()
    eligible: np.ndarray | None = None
    images: Mapping[str, np.ndarray] = field(default_factory=lambda: _EMPTY)
    volatility: np.ndarray | None = None
    namespace_caps: Mapping[str, int] = field(default_factory=lambda: _EMPTY)

    def __post_init__(self) -> None:
        for ns, cap in self.namespace_caps.items():
            if not isinstance(cap, int) or cap < 0:
                raise ValueError(f"namespace cap for {ns!r} must be an integer >= 0, got {cap!r}")

    def validate(self, n_nodes: int) -> None:
        """Shapes against the ledger; called once per pass."""
        for key in ("eligible", "volatility"):
            a = getattr(self, key)
            if a is not None and np.shape(a) != (n_nodes,):
                raise ValueError(f"scheduling context {key} must have shape ({n_nodes},), got {np.shape(a)}")
        for image, mask in self.images.items():
            if np.shape(mask) != (n_nodes,):
                raise ValueError(
                    f"image mask for {image!r} must have shape ({n_nodes},), got {np.shape(mask)}"
                )
