"""Simulation configuration, validated when built (a bad value names its key and value).

Every policy knob is in one core :class:`~kalena.core.config.PolicyConfig` (``policy``: the estimator
by name and its params, eviction, throttling, anti-starvation, escalation, pairing, placement) with the
core's defaults; the simulator adds only the knobs of the simulated world (clock, horizon, load) and
of its own bookkeeping (intervals).
Why each simulator default has its value:

* ``tick_s = 10``: the estimation tier's sample interval (cAdvisor polls every 10-15 s; Borg's
  Borglet poll p95 is under 10 s). The core's node round (eviction, anti-starvation, throttle,
  escalation) runs once per tick, too, over every node at once.
* ``schedule_interval_s = 30``: a placement pass every third tick, each over the pods the ledger
  could still admit (see :mod:`kalena.sim.placement`); a pod waits at most 30 s for its next pass,
  far below Borg's ~25 s median startup plus the minutes batch tasks run.
* ``prewarm_s = 7200``: production runs and is estimated for 2 h before t = 0, so reservations start
  decayed to their steady state (24 of the default 5-min half-lives) instead of at the request.
* ``enforce = True``: the core's node round runs (throttle, caps, evictions, escalation). Off, with
  ``reclaim`` off too, the run is the **baseline arm**, the cluster an operator has today: batch
  placed by requests into unallocated capacity, no estimation, no throttling of anyone, the
  kernel's CFS sharing by request (``cpu.weight``) and its OOM killer, nothing else.
* ``interference = 0.06``: production needs that much more cpu for the same work per unit of its
  node's capacity that batch used the tick before (so 3 % on a node half batch: Borg's CPI prior,
  seed 000 §6; :mod:`kalena.sim.cpu`). 0 turns interference off.
* ``reaction_s = 1``: how long the node agent takes from a node's memory passing the round's
  trigger level to memory freed (its mitigation round, ``sample_interval_s``; it also wakes on the
  usage eventfd it arms at that level). Memory that arrives at once (a burst's onset, a pod's
  start) and the rest of a tick's rise over that long, where they exceed the room above the
  trigger, reach the kernel's OOM killer before the round (:meth:`Simulation._kernel_first`).
* ``sample_every_s = 60`` (plots) and ``accuracy_every_s = 600`` (reservation CDFs): dense enough to
  draw a day, small enough to keep.

The node round's own rules (the acute and trigger fractions of the node's memory, the
anti-starvation window) are ``policy.round``: the simulated kernel kills at the node's capacity, so
that is the kill level the round measures them against.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kalena.core.config import PolicyConfig
from kalena.core.validate import (
    check_bool,
    check_int,
    check_number,
    check_seconds,
    check_type,
    fail,
)
from kalena.sim.params import BatchParams, ProductionParams, default_batch, default_production


@dataclass(frozen=True)
class SimConfig:
    hours: float = 24.0
    seed: int = 0
    reclaim: bool = True
    enforce: bool = True
    tick_s: float = 10.0
    schedule_interval_s: float = 30.0
    prewarm_s: float = 7200.0
    batch_warm_start: bool = True
    batch_load_factor: float = 1.0
    production_ram_limit_ratio: float | None = None
    interference: float = 0.06
    reaction_s: float = 1.0
    sample_every_s: float = 60.0
    accuracy_every_s: float = 600.0
    production: ProductionParams = field(default_factory=default_production)
    batch: BatchParams = field(default_factory=default_batch)
    policy: PolicyConfig = field(default_factory=PolicyConfig)

    def __post_init__(self) -> None:
        check_seconds(self)
        for key in ("hours", "tick_s"):
            check_number(self, key, lo_open=True)
        for key in ("schedule_interval_s", "sample_every_s", "accuracy_every_s"):
            if getattr(self, key) < self.tick_s:  # a cadence is counted in whole ticks
                raise fail(self, key, getattr(self, key), f">= tick_s ({self.tick_s:g})")
        check_number(self, "batch_load_factor")
        check_number(self, "interference", hi=1.0)
        check_number(self, "reaction_s", lo_open=True)
        if self.production_ram_limit_ratio is not None:  # inf: production has no memory limit
            check_number(self, "production_ram_limit_ratio", lo=1.0, allow_inf=True)
        check_type(self, "policy", PolicyConfig)
        check_int(self, "seed", lo=0)
        check_bool(self, "reclaim")
        check_bool(self, "enforce")
        if self.reclaim and not self.enforce:  # reservations below requests with nobody to restore them
            raise fail(self, "enforce", self.enforce, "true while reclaim is true (none without the other)")
        check_bool(self, "batch_warm_start")

    @property
    def arm(self) -> str:
        """Which arm this is: ``kalena``, ``kalena-no-reclaim`` (Kalena's policy, reservations at
        their requests) or ``baseline`` (no Kalena at all)."""
        if not self.enforce:
            return "baseline"
        return "kalena" if self.reclaim else "kalena-no-reclaim"

    @property
    def estimator(self) -> str:
        """The estimator's name (``policy.estimator``), as the report and the CLI show it."""
        return self.policy.estimator

    @property
    def horizon_s(self) -> float:
        return self.hours * 3600.0

    @property
    def ticks(self) -> int:
        return round(self.horizon_s / self.tick_s)

    def every(self, seconds: float) -> int:
        """A cadence in ticks (at least 1)."""
        return max(1, round(seconds / self.tick_s))
