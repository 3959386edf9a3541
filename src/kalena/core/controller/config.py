"""The node round's own settings: the rules every shell used to write for itself.

* ``acute_fraction`` = 0.95: a node whose memory use is above 95% of the level at which its
  kernel kills (its memory limit; the capacity where it has none) has too little room left for a
  SIGTERM grace period: the pressure is acute (no minimum run time, the acute grace).
* ``trigger_fraction`` = 0.90: above 90% of that level the round counts a memory trigger even if
  no kernel notification arrived (the agent arms its usage eventfd at the same fraction, so the
  simulator, which has no kernel, sees the signal the agent would).
* ``starvation_window_s`` = 300: the rolling window of anti-starvation (theta is a fraction of
  it); 5 minutes matches Borg's "multiple minutes" bound (seed 000 §3.4).
"""

from __future__ import annotations

from dataclasses import dataclass

from kalena.core.validate import check_number, fail


@dataclass(frozen=True, slots=True)
class RoundConfig:
    acute_fraction: float = 0.95
    trigger_fraction: float = 0.90
    starvation_window_s: float = 300.0

    def __post_init__(self) -> None:
        check_number(self, "acute_fraction", lo_open=True, hi=1.0)
        check_number(self, "trigger_fraction", lo_open=True, hi=1.0)
        if self.trigger_fraction > self.acute_fraction:
            raise fail(
                self,
                "trigger_fraction",
                self.trigger_fraction,
                f"<= acute_fraction ({self.acute_fraction:g})",
            )
        check_number(self, "starvation_window_s", lo_open=True)
