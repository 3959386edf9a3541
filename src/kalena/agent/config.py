"""The agent's own settings, validated when built (a bad value names its key and value).

The policy settings are the core's, bundled in one :class:`~kalena.core.config.PolicyConfig`
(``policy``); this adds the shell's cadence and signal thresholds. Each default states why it has
its value.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kalena.core.config import PolicyConfig
from kalena.core.validate import check_bool, check_fraction, check_int, check_number, check_type, fail


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
    * ``max_history`` = 1000: bound on the records the state file keeps (evictions, rounds).
    * ``admit`` = True: this agent takes batch submissions and admits them. A node whose batch is
      placed by a cluster scheduler (a Kubernetes DaemonSet agent) enforces only: ``False``.
    * ``policy``: the core's configs; the agent runs the decay estimator only (``policy.estimator``
      must be ``"decay"``: its estimation tick re-creates the estimator's state from the ledger each
      time, which only the decay estimator's state allows). The node round's rules are
      ``policy.round``: the memory trigger and the acute level as fractions of the node's memory
      limit (the v1 usage eventfd is armed at ``trigger_fraction``), the anti-starvation window.
    """

    sample_interval_s: float = 1.0
    estimate_interval_s: float = 10.0
    memory_some_fraction: float = 0.10
    memory_full_fraction: float = 0.05
    cpu_some_fraction: float = 0.10
    io_some_fraction: float = 0.20
    max_history: int = 1000
    admit: bool = True
    policy: PolicyConfig = field(default_factory=PolicyConfig)

    def __post_init__(self) -> None:
        for key in ("sample_interval_s", "estimate_interval_s"):
            check_number(self, key, lo_open=True)
        for key in (
            "memory_some_fraction",
            "memory_full_fraction",
            "cpu_some_fraction",
            "io_some_fraction",
        ):
            check_fraction(self, key, lo_open=True, hi_open=True)
        if self.estimate_interval_s < self.sample_interval_s:
            raise fail(
                self,
                "estimate_interval_s",
                self.estimate_interval_s,
                f">= sample_interval_s ({self.sample_interval_s:g})",
            )
        check_int(self, "max_history", lo=10)
        check_bool(self, "admit")
        check_type(self, "policy", PolicyConfig)
        if self.policy.estimator != "decay":  # the estimation tick rebuilds a DecayEstimator state
            raise fail(self, "policy.estimator", self.policy.estimator, "'decay' (the agent's one estimator)")
