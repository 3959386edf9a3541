"""The agent's own settings, validated when built (a bad value names its key and value).

The policy settings are the core's (``EvictionConfig``, ``ThrottleConfig``, ...); this adds the
shell's cadence and signal thresholds. Each default states why it has its value.
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
from kalena.core.estimators import DecayParams


def _bad(key: str, value: object, rule: str) -> ValueError:
    return ValueError(f"AgentConfig.{key} must be {rule}, got {value!r}")


@dataclass(frozen=True, slots=True)
class AgentConfig:
    """Cadence and signal thresholds of the node agent.

    * ``sample_interval_s`` = 1: the mitigation round (issue 4's default); PSI triggers and
      memory events wake the loop in between, so this bounds only the sampling-based path.
    * ``estimate_interval_s`` = 10: the estimation tier (seed 000 §3.1: seconds; Borg's
      Borglet polls with p95 under 10 s).
    * ``memory_some_fraction`` = 0.10: memory PSI ``some`` stalled 10% of a window: a task of
      the node waits on reclaim a tenth of the time, the first visible latency cost.
    * ``memory_full_fraction`` = 0.05: ``full`` means every task stalled at once; 5% of the
      window is the kernel's own example of a "nearly OOM" threshold order of magnitude, so it
      marks the pressure acute (no minimum run time, no grace).
    * ``cpu_some_fraction`` = 0.10: a production cgroup waiting for a CPU 10% of the time is
      losing cycles to someone; triggers are armed on production cgroups only.
    * ``io_some_fraction`` = 0.20: disk is advisory in the first release: report only clear
      contention.
    * ``memory_event_fraction`` = 0.90: a v1 usage-threshold eventfd at 90% of the node's memory
      limit wakes the loop before the limit is reached (v2 hosts use ``memory.events``).
    * ``acute_memory_fraction`` = 0.95: node memory above 95% of its limit leaves too little room
      for a SIGTERM grace period, so the eviction is acute.
    * ``starvation_window_s`` = 300: the rolling window of anti-starvation (theta is a fraction
      of it); 5 minutes matches Borg's "multiple minutes" bound (seed 000 §3.4).
    * ``max_history`` = 1000: bound on the records the state file keeps (evictions, rounds).
    """

    sample_interval_s: float = 1.0
    estimate_interval_s: float = 10.0
    memory_some_fraction: float = 0.10
    memory_full_fraction: float = 0.05
    cpu_some_fraction: float = 0.10
    io_some_fraction: float = 0.20
    memory_event_fraction: float = 0.90
    acute_memory_fraction: float = 0.95
    starvation_window_s: float = 300.0
    max_history: int = 1000
    eviction: EvictionConfig = field(default_factory=EvictionConfig)
    throttle: ThrottleConfig = field(default_factory=ThrottleConfig)
    starvation: StarvationConfig = field(default_factory=StarvationConfig)
    escalation: EscalationConfig = field(default_factory=EscalationConfig)
    pairing: PairingConfig = field(default_factory=PairingConfig)
    estimator: DecayParams = field(default_factory=DecayParams)

    def __post_init__(self) -> None:
        for key in ("sample_interval_s", "estimate_interval_s", "starvation_window_s"):
            v = getattr(self, key)
            if isinstance(v, bool) or not isinstance(v, int | float) or not (math.isfinite(v) and v > 0):
                raise _bad(key, v, "a positive finite number of seconds")
        for key in (
            "memory_some_fraction",
            "memory_full_fraction",
            "cpu_some_fraction",
            "io_some_fraction",
            "memory_event_fraction",
            "acute_memory_fraction",
        ):
            v = getattr(self, key)
            if isinstance(v, bool) or not isinstance(v, int | float) or not 0 < v < 1:
                raise _bad(key, v, "a fraction in (0, 1)")
        if self.estimate_interval_s < self.sample_interval_s:
            raise _bad("estimate_interval_s", self.estimate_interval_s, ">= sample_interval_s")
        if (
            isinstance(self.max_history, bool)
            or not isinstance(self.max_history, int)
            or self.max_history < 10
        ):
            raise _bad("max_history", self.max_history, "an integer >= 10")
