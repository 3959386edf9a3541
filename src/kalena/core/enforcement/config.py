"""Validated configuration for the node enforcement policies (SPEC: Enforcement on the node).

Every config is a frozen dataclass checked when it is built: a bad value raises ``ValueError``
naming the key and the value, so a misconfigured agent fails at start, never mid-mitigation.
The defaults are placeholders in the same sense as the estimator's (SPEC: The reservation):
each one states why it has its value, and the calibration protocol (seed 000 §6.4) may move it.
"""

from __future__ import annotations

from dataclasses import dataclass

from kalena.core.validate import check_fraction, check_int, check_number, check_seconds, fail

#: What the kernel's OOM killer weighs a batch process by (``/proc/PID/oom_score_adj``): the most,
#: as Kubernetes does for BestEffort pods. The kernel kills the highest badness first, a process's
#: memory plus this many thousandths of the memory it may use, so a batch process goes before any
#: process left at the default 0, whatever their sizes. Where memory arrives faster than the node
#: agent can evict (a burst's onset), the kernel acts first; measured on real cgroups, left at the
#: scores the kubelet gives by request it took a production process above its request before a
#: batch process within its own (``kalena/sim/params/contention/README.md``). Shells that start
#: batch processes themselves (the node agent's process runtime, the Docker runtime) set it.
BATCH_OOM_SCORE_ADJ = 1000


@dataclass(frozen=True, slots=True)
class EvictionConfig:
    """Eviction under non-compressible pressure (seed 000 §3.3, §3.5, §4.3).

    * ``min_run_time_s`` = 120: Borg's median task startup is ~25 s (seed 000 §4.3); a batch
      workload evicted before it has run a few startup times did almost no useful work, so it is
      exempt for ~5 startups unless the pressure is acute (correctness overrides efficiency).
    * ``grace_period_s`` = 30: Kubernetes' default terminationGracePeriodSeconds, the notice
      workloads are already written for; SIGKILL follows SIGTERM after it.
    * ``acute_grace_period_s`` = 0: under acute pressure the alternative is a kernel OOM kill,
      which gives no notice at all (seed 000 §3.5), so waiting only risks the OOM killer
      choosing a production victim first.
    * ``cooldown_s`` = 600: a victim may not return to the node for 10 minutes. The reservation
      that rose decays with the estimator's half-life (5 minutes by default, the calibration's
      knee), so the node looks tight for some minutes anyway; 10 minutes breaks the
      place-evict-place loop of §4.3 while leaving a workload with few feasible nodes its home
      back within two decay periods.
    """

    min_run_time_s: float = 120.0
    grace_period_s: float = 30.0
    acute_grace_period_s: float = 0.0
    cooldown_s: float = 600.0

    def __post_init__(self) -> None:
        check_seconds(self)
        if self.acute_grace_period_s > self.grace_period_s:
            raise fail(
                self,
                "acute_grace_period_s",
                self.acute_grace_period_s,
                f"<= grace_period_s ({self.grace_period_s:g}; acute pressure only shortens the grace)",
            )


@dataclass(frozen=True, slots=True)
class PairingConfig:
    """Harmful (equivalence key, node) pairings (seed 000 §4.3, Borg's task::machine rule).

    * ``max_evictions`` = 3: one eviction is bad luck, two may be a coincidence of two spikes,
      the third eviction of the same template from the same node within the window is a
      pattern (the node's production load spikes whenever this work lands there).
    * ``window_s`` = 3600: an hour covers several eviction cooldowns (600 s), so three strikes
      can accumulate, and a pairing that caused trouble yesterday is forgiven today.
    """

    max_evictions: int = 3
    window_s: float = 3600.0

    def __post_init__(self) -> None:
        check_int(self, "max_evictions", lo=1)
        check_number(self, "window_s", lo_open=True)


@dataclass(frozen=True, slots=True)
class ThrottleConfig:
    """CPU throttling of batch under compressible pressure (seed 000 §3.2).

    * ``headroom_fraction`` = 0.05: batch's allowance stops 5% of capacity short of the
      service claim, so a service burst between two samples lands in idle CPU, not in batch.
    * ``growth_fraction`` = 0.05: the allowance rises by at most 5% of capacity per mitigation
      round (from zero to full in 20 rounds, ~20 s at a 1 s round): slower than the PSI avg10
      window, so a rise that hurts production is seen before it completes and no oscillation
      builds up. It falls at once (no limit on shrinking).
    * ``pressure_cut`` = 0.5: under PSI pressure the allowance drops to half of what batch
      uses now (the multiplicative decrease of AIMD), since the slack arithmetic evidently
      overstates what is free.
    * ``psi_some_threshold`` = 0.20: cpu PSI ``some`` avg10 as a fraction; at 20% of wall time
      with a runnable task waiting, latency-sensitive services are visibly delayed, while an
      ordinary busy node stays in the low single digits.
    * ``batch_weight`` = 1: cgroup v2 ``cpu.weight`` for batch (range 1..10000, default 100), the
      minimal share seed 000 §3.2 asks. On v1 it becomes ``cpu.shares`` by the linear map of the two
      ranges (1 -> 2, 10000 -> 262144; the runc/crun mapping inverted), ``shares = 2 +
      round((weight - 1) * 262142 / 9999)`` (``weight_to_shares``): weight 1 is the kernel's minimum
      of 2 shares.
    * ``min_quota_cores`` = 0.01: the kernel's smallest CFS quota is 1 ms per 100 ms period;
      a quota of zero is not writable and would freeze the workload.
    * ``batch_parent_weight`` = 1: the weight of the cgroups that hold only batch (the runs'
      parent; Kalena's root when production lives elsewhere). A run's own weight counts only
      among its siblings: the kernel first splits a busy CPU between those parents and
      production's, so at the default weight they would take half the node from a production
      surge until the throttle caught up. Minimal by default; a host whose non-production
      processes keep every core busy (a shared test machine) may want more, since batch then
      starts only in the gaps.
    """

    headroom_fraction: float = 0.05
    growth_fraction: float = 0.05
    pressure_cut: float = 0.5
    psi_some_threshold: float = 0.20
    batch_weight: int = 1
    min_quota_cores: float = 0.01
    batch_parent_weight: int = 1

    def __post_init__(self) -> None:
        check_number(self, "headroom_fraction", hi=0.5)
        check_fraction(self, "growth_fraction", lo_open=True)
        check_fraction(self, "pressure_cut")
        check_fraction(self, "psi_some_threshold", lo_open=True)
        check_int(self, "batch_weight", lo=1, hi=10000)
        check_number(self, "min_quota_cores", lo_open=True, hi=1.0)
        check_int(self, "batch_parent_weight", lo=1, hi=10000)


@dataclass(frozen=True, slots=True)
class StarvationConfig:
    """Anti-starvation (seed 000 §3.4): production may starve batch, but not indefinitely.

    * ``theta`` = 0.5: a batch workload throttled for more than half of the rolling window is
      making less than half the progress it was placed for; Borg's bound is "multiple minutes",
      which half of a 5-minute window matches.
    * ``min_allocation_cores`` = 0.25: the CPU released to each starved batch workload (never
      more than it may use): a quarter core keeps a single-threaded job progressing at a
      quarter speed, enough for forward progress without touching any service's reservation.
    """

    theta: float = 0.5
    min_allocation_cores: float = 0.25

    def __post_init__(self) -> None:
        check_fraction(self, "theta")
        check_number(self, "min_allocation_cores", lo_open=True)


@dataclass(frozen=True, slots=True)
class EscalationConfig:
    """Escalation when local mitigation does not converge (seed 000 §3.1, tens of seconds).

    * ``rounds`` = 3: one round can fail on a transient (PSI avg10 still carries the stall that
      triggered it), two in a row can be lag; three consecutive failed rounds mean local
      throttling and eviction are not converging.
    * ``persist_s`` = 30: the seed's escalation budget is "tens of seconds"; pressure that
      outlives 30 s of mitigation escalates even if rounds are slow.
    * ``cooldown_s`` = 900: the drained node stays slack-ineligible for 15 minutes, three of the
      decay estimator's default half-lives (5 min), by which time the reservation that caused
      the trouble has shed seven eighths of its excess.
    * ``drain_grace_period_s`` = 30: a drain is not an acute kill, so batch gets the ordinary
      Kubernetes termination grace.
    """

    rounds: int = 3
    persist_s: float = 30.0
    cooldown_s: float = 900.0
    drain_grace_period_s: float = 30.0

    def __post_init__(self) -> None:
        check_int(self, "rounds", lo=1)
        check_seconds(self)
        check_number(self, "persist_s", lo_open=True)
