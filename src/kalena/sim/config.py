"""Simulation configuration, validated when built (a bad value names its key and value).

Every policy knob is the core's own config object with the core's defaults; the simulator adds only
the knobs of the simulated world (clock, horizon, load) and of its own bookkeeping (intervals).
Why each simulator default has its value:

* ``tick_s = 10``: the estimation tier's sample interval (cAdvisor polls every 10-15 s; Borg's
  Borglet poll p95 is under 10 s). Mitigation (throttle, eviction) runs once per tick, too.
* ``schedule_interval_s = 30``: a placement pass every third tick, each over the pods the ledger
  could still admit (see :mod:`kalena.sim.placement`); a pod waits at most 30 s for its next pass,
  far below Borg's ~25 s median startup plus the minutes batch tasks run.
* ``starvation_interval_s = 300``: anti-starvation is judged over a rolling 300 s window, so each
  node is re-evaluated once per window (staggered across nodes).
* ``prewarm_s = 7200``: production runs and is estimated for 2 h before t = 0, so reservations start
  decayed to their steady state (eight 15-min half-lives) instead of at the request.
* ``memory_high = 0.95``: node memory above 95 % of capacity fires a memory.high-like trigger.
* ``sample_every_s = 60`` (plots) and ``accuracy_every_s = 600`` (reservation CDFs): dense enough to
  draw a day, small enough to keep.
* ``audit_interval_s = 3600``, ``audit_nodes = 4``: the throttle fast path is compared with the
  core's ``plan_throttle`` on 4 nodes every simulated hour (a mismatch is a simulator bug).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from kalena.core.enforcement import (
    EscalationConfig,
    EvictionConfig,
    PairingConfig,
    StarvationConfig,
    ThrottleConfig,
)
from kalena.core.placement import PlacementConfig
from kalena.sim.params import BatchParams, ProductionParams, default_batch, default_production

ESTIMATORS = ("decay", "peak", "histogram")


def _positive(key: str, value: float, *, allow_zero: bool = False) -> None:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or value < 0 or (value == 0 and not allow_zero):
        raise ValueError(
            f"simulation config {key}={value!r}: must be a finite number {'>=' if allow_zero else '>'} 0"
        )


@dataclass(frozen=True)
class SimConfig:
    hours: float = 24.0
    seed: int = 0
    estimator: str = "decay"
    reclaim: bool = True
    tick_s: float = 10.0
    schedule_interval_s: float = 30.0
    starvation_interval_s: float = 300.0
    prewarm_s: float = 7200.0
    batch_warm_start: bool = True
    batch_load_factor: float = 1.0
    memory_high: float = 0.95
    production_ram_limit_ratio: float | None = None
    sample_every_s: float = 60.0
    accuracy_every_s: float = 600.0
    audit_interval_s: float = 3600.0
    audit_nodes: int = 4
    production: ProductionParams = field(default_factory=default_production)
    batch: BatchParams = field(default_factory=default_batch)
    placement: PlacementConfig = field(default_factory=PlacementConfig)
    eviction: EvictionConfig = field(default_factory=EvictionConfig)
    throttle: ThrottleConfig = field(default_factory=ThrottleConfig)
    starvation: StarvationConfig = field(default_factory=StarvationConfig)
    escalation: EscalationConfig = field(default_factory=EscalationConfig)
    pairing: PairingConfig = field(default_factory=PairingConfig)

    def __post_init__(self) -> None:
        _positive("hours", self.hours)
        _positive("tick_s", self.tick_s)
        for key in ("schedule_interval_s", "starvation_interval_s", "sample_every_s", "accuracy_every_s"):
            _positive(key, getattr(self, key))
            if getattr(self, key) < self.tick_s:
                raise ValueError(f"simulation config {key}={getattr(self, key)!r}: must be >= tick_s")
        _positive("audit_interval_s", self.audit_interval_s)
        _positive("prewarm_s", self.prewarm_s, allow_zero=True)
        _positive("batch_load_factor", self.batch_load_factor, allow_zero=True)
        if not 0 < self.memory_high <= 1:
            raise ValueError(f"simulation config memory_high={self.memory_high!r}: must be in (0, 1]")
        if self.production_ram_limit_ratio is not None and not self.production_ram_limit_ratio >= 1:
            raise ValueError(
                "simulation config production_ram_limit_ratio="
                f"{self.production_ram_limit_ratio!r}: must be >= 1 (a limit below the request is invalid)"
            )
        if self.estimator not in ESTIMATORS:
            raise ValueError(
                f"simulation config estimator={self.estimator!r}: must be one of {', '.join(ESTIMATORS)}"
            )
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise ValueError(f"simulation config seed={self.seed!r}: must be an integer >= 0")
        if (
            isinstance(self.audit_nodes, bool)
            or not isinstance(self.audit_nodes, int)
            or self.audit_nodes < 0
        ):
            raise ValueError(f"simulation config audit_nodes={self.audit_nodes!r}: must be an integer >= 0")

    @property
    def horizon_s(self) -> float:
        return self.hours * 3600.0

    @property
    def ticks(self) -> int:
        return round(self.horizon_s / self.tick_s)

    def every(self, seconds: float) -> int:
        """A cadence in ticks (at least 1)."""
        return max(1, round(seconds / self.tick_s))
