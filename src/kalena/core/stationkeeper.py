"""The Stationkeeper (seed 002): three independent recommendation loops over many workloads.

Each tick, for every workload, each loop looks at the current setting and the observed usage and
proposes at most one adjustment, or none:

* **cpu** and **memory** (vertical): the request should be ``m_class * p`` where ``p`` is the
  usage quantile of a deep window (p99 by default) and ``m_class`` the margin of the workload's
  class (service 1.30, batch 1.15, best-effort 1.05: :class:`~kalena.core.estimators.PeakParams`).
  A proposal is made only when it moves the request by at least ``min_step`` (10 %) of it, so
  a few per cent of drift never rewrites anything.
* **replicas** (horizontal, only for workloads whose replica count is managed): with ``load`` =
  the cpu quantile of the whole workload over (replicas x per-replica cpu request), above
  ``scale_up`` (80 %) it proposes ``ceil(replicas * load / target)``, below ``scale_down`` (40 %)
  the same, at least 1; in between it does nothing. ``target`` (60 %) sits inside the band, so
  the count a move lands on is one the next tick keeps (no ping-pong across a single line).

The loops are idempotent: each proposal is a function of the current setting and the observation
alone, never of a remembered delta, so a dropped tick is made good by the next one and a restart
loses nothing. Proposals become :class:`Adjustment` records stamped with the workload's epoch; a
:class:`AdjustmentBook` accepts one only at the epoch it was computed against and bumps it, so a
stale or racing loop is rejected as data (seed 002's airlock, the ledger's optimistic
concurrency). Applying an accepted adjustment (``docker update``, a VPA-style recommendation, a
request change) is a shell's.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import ArrayLike

from kalena.core.estimators.peak import PeakParams
from kalena.core.validate import check_fraction, check_number, fail


class Knob(enum.Enum):
    """What an adjustment moves."""

    CPU = "cpu"  # cores requested per replica
    MEMORY = "memory"  # GiB requested per replica
    REPLICAS = "replicas"


@dataclass(frozen=True, slots=True)
class StationkeeperConfig:
    """The loops' settings (seed 002), checked when built.

    * ``quantile`` 0.99: "how much it really uses, ignoring the rarest spike"; the margin buys the
      spike back.
    * ``min_step`` 0.10: a vertical change under 10 % of the request is not worth a rewrite.
    * ``scale_up`` 0.80 / ``scale_down`` 0.40: the dead band of the replica loop.
    * ``target`` 0.60: where a replica move aims, inside the band.
    * ``margins``: per class, as PeakWithMargin's.
    """

    quantile: float = 0.99
    min_step: float = 0.10
    scale_up: float = 0.80
    scale_down: float = 0.40
    target: float = 0.60
    margins: PeakParams = field(default_factory=PeakParams)

    def __post_init__(self) -> None:
        check_fraction(self, "quantile")
        for key in ("min_step", "scale_up", "scale_down", "target"):
            check_number(self, key, lo=0.0, hi=1.0, lo_open=True)
        if not self.scale_down < self.target < self.scale_up:
            raise fail(
                self,
                "target",
                self.target,
                f"between scale_down ({self.scale_down}) and scale_up ({self.scale_up})",
            )


@dataclass(frozen=True, slots=True)
class Evidence:
    """What a proposal was computed from: the window, the quantile read and the margin applied."""

    samples: int
    quantile: float
    observed: float  # the window's quantile: per replica (cpu, memory), whole workload (replicas)
    margin: float  # the class margin (vertical) or the load the replica loop saw (horizontal)


@dataclass(frozen=True, slots=True)
class Adjustment:
    """One loop's proposal for one workload, stamped with the epoch it was computed against."""

    workload: str
    knob: Knob
    current: float
    proposed: float
    epoch: int
    evidence: Evidence


@dataclass(frozen=True, slots=True)
class Workloads:
    """The loops' input for W workloads (arrays of length W): what is set now and what was seen.

    ``cpu_quantile``/``memory_quantile``: the ``quantile`` of each replica's usage over the window
    (NaN: nothing observed, so nothing is proposed); ``total_cpu_quantile``: the quantile of the
    workload's summed cpu (for the replica loop); ``samples``: the window's sample count.
    """

    ids: tuple[str, ...]
    classes: np.ndarray  # kalena.core.estimators.MarginClass codes
    cpu_request: np.ndarray
    memory_request: np.ndarray
    replicas: np.ndarray  # int
    managed: np.ndarray  # bool: the replica count is the Stationkeeper's
    cpu_quantile: np.ndarray
    memory_quantile: np.ndarray
    total_cpu_quantile: np.ndarray
    samples: np.ndarray  # int
    epochs: np.ndarray  # int: each workload's adjustment epoch

    @classmethod
    def of(cls, ids: ArrayLike, **columns: ArrayLike) -> Workloads:
        """Build from columns, checking that every one has one value per workload."""
        names = tuple(str(i) for i in np.asarray(ids, dtype=object).tolist())
        n = len(names)
        kinds = {"classes": np.intp, "replicas": np.int64, "managed": np.bool_, "samples": np.int64,
                 "epochs": np.int64}  # fmt: skip
        arrays = {k: np.asarray(v, dtype=kinds.get(k, np.float64)) for k, v in columns.items()}
        for key, a in arrays.items():
            if a.shape != (n,):
                raise ValueError(f"{key} must have one value per workload ({n}), got shape {a.shape}")
        if np.any(arrays["replicas"] < 1):
            i = int(np.argmax(arrays["replicas"] < 1))
            raise ValueError(f"replicas[{names[i]}] must be >= 1, got {arrays['replicas'][i]}")
        return cls(ids=names, **arrays)


def vertical(requests: np.ndarray, observed: np.ndarray, margin: np.ndarray, min_step: float) -> np.ndarray:
    """The request each workload should have: ``margin * observed`` where that moves it by at least
    ``min_step`` of itself (or from 0), else the request as it is (also where nothing was observed)."""
    proposed = margin * observed
    with np.errstate(divide="ignore", invalid="ignore"):
        step = np.abs(proposed / requests - 1.0)
    moved = np.isfinite(proposed) & ((step >= min_step) | ((requests == 0) & (proposed > 0)))
    return np.where(moved, proposed, requests)


def horizontal(replicas: np.ndarray, load: np.ndarray, cfg: StationkeeperConfig) -> np.ndarray:
    """The replica count the dead band asks for (the current one inside it or with no load seen)."""
    aimed = np.ceil(replicas * load / cfg.target - 1e-9)  # 1e-9: a load exactly on target stays put
    outside = np.isfinite(load) & ((load > cfg.scale_up) | (load < cfg.scale_down))
    return np.where(outside, np.maximum(aimed, 1), replicas).astype(np.int64)


def propose(w: Workloads, cfg: StationkeeperConfig) -> list[Adjustment]:
    """Every loop's proposal for every workload (cpu, memory, replicas, in that order per workload),
    each stamped with the next epoch of its workload: e, e+1, ... as they will be applied."""
    margin = cfg.margins.margins()[w.classes]
    cpu = vertical(w.cpu_request, w.cpu_quantile, margin, cfg.min_step)
    mem = vertical(w.memory_request, w.memory_quantile, margin, cfg.min_step)
    with np.errstate(divide="ignore", invalid="ignore"):
        load = w.total_cpu_quantile / (w.replicas * w.cpu_request)
    reps = np.where(w.managed, horizontal(w.replicas, load, cfg), w.replicas)
    changes = (
        (Knob.CPU, w.cpu_request, cpu, w.cpu_quantile, margin),
        (Knob.MEMORY, w.memory_request, mem, w.memory_quantile, margin),
        (Knob.REPLICAS, w.replicas, reps, w.total_cpu_quantile, load),
    )
    moved = [set(np.flatnonzero(new != old).tolist()) for _, old, new, _, _ in changes]
    out: list[Adjustment] = []
    for i in sorted(set().union(*moved)):
        epoch = int(w.epochs[i])
        for (knob, old, new, seen, m), rows in zip(changes, moved, strict=True):
            if i in rows:
                ev = Evidence(int(w.samples[i]), cfg.quantile, float(seen[i]), float(m[i]))
                out.append(Adjustment(w.ids[i], knob, float(old[i]), float(new[i]), epoch, ev))
                epoch += 1
    return out


class Outcome(enum.Enum):
    ACCEPTED = "accepted"
    STALE_EPOCH = "stale-epoch"  # computed against an epoch the workload has moved past
    UNKNOWN_WORKLOAD = "unknown-workload"


@dataclass(slots=True)
class AdjustmentBook:
    """Each workload's adjustment epoch and current setting: the one place adjustments are accepted.

    A shell owns it (the archive persists it) and changes it only through :meth:`apply`.
    """

    epochs: dict[str, int] = field(default_factory=dict)
    settings: dict[tuple[str, Knob], float] = field(default_factory=dict)

    def apply(self, adjustment: Adjustment) -> Outcome:
        """Accept ``adjustment`` if its workload is still at the epoch it was computed against."""
        now = self.epochs.get(adjustment.workload)
        if now is None:
            return Outcome.UNKNOWN_WORKLOAD
        if adjustment.epoch != now:
            return Outcome.STALE_EPOCH
        self.epochs[adjustment.workload] = now + 1
        self.settings[(adjustment.workload, adjustment.knob)] = adjustment.proposed
        return Outcome.ACCEPTED


__all__ = [
    "Adjustment",
    "AdjustmentBook",
    "Evidence",
    "Knob",
    "Outcome",
    "StationkeeperConfig",
    "Workloads",
    "horizontal",
    "propose",
    "vertical",
]
