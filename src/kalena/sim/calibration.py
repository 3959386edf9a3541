"""The calibration protocol (seed 000 §6.4) on the simulator: the decay estimator's margin and
half-life swept, the safety curve, and its knee.

Each setting of the grid runs on the same seeds (the same workload: the simulator replays it
exactly, so the A/B/A/B arrangement's purpose, keeping drift in the workload apart from the
setting's effect, is met by pairing every setting on every seed; runs are submitted setting by
setting within a seed, A/B/A/B). Per run it records reclaimed capacity, evictions, kernel OOM
kills and the SLO proxy (production cpu unmet, cpu lost to interference, time above reservation).

**The safety curve** puts, for each setting (means over the seeds), the capacity reclaimed
(core-hours of batch reservation standing in capacity the blueprint allocated to production)
against the disruption rate (evictions plus kernel OOM kills, per simulated hour: Borg tracked
OOM events; Kalena's evictions are the graceful form of the same event). **The knee**: among the
settings no other beats on both axes (the Pareto front), normalised to [0, 1] on each axis over
the front, the one farthest above the chord from the front's least disruptive to its most
reclaiming end (the Kneedle rule); ties go to the less disruptive. With one or two settings on the
front, the less disruptive one: there is no curve to bend.

Pure functions of plain data: the command (``kalena calibrate``) runs the simulations.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

#: The default grid: the placeholders (1.15, 900 s) and settings on either side of them, 12 runs of
#: a day on 2 seeds, under 10 minutes on 2 cores; a longer half-life (3,600 s) is left out to keep
#: it there (``--half-lives 300,900,3600`` adds it).
DEFAULT_MARGINS = (1.0, 1.15, 1.3)
DEFAULT_HALF_LIVES_S = (300.0, 900.0)
DEFAULT_SEEDS = 2
DEFAULT_HOURS = 24.0

#: What a run keeps of its report (``kalena.sim.report``).
KEEP = (
    "reclaimed_cpu_core_hours",
    "batch_cpu_core_hours",
    "evictions_total",
    "production_oom_kills",
    "batch_oom_kills",
    "production_unmet_cpu_core_seconds",
    "production_interference_cpu_core_seconds",
    "production_above_reservation_fraction",
    "production_cpu_core_hours",
)


@dataclass(frozen=True)
class Setting:
    margin: float
    half_life_s: float

    def label(self) -> str:
        return f"m={self.margin:g}, h={self.half_life_s:g}s"


def disruptions_per_hour(run: dict[str, Any], hours: float) -> float:
    """Evictions plus kernel OOM kills (batch and production) per simulated hour."""
    events = run["evictions_total"] + run["production_oom_kills"] + run["batch_oom_kills"]
    return events / hours


def summarise(runs: Sequence[tuple[Setting, int, dict[str, Any]]], hours: float) -> list[dict[str, Any]]:
    """Per setting (in first-seen order): the means over its seeds of every kept figure, and the
    safety curve's two axes (``reclaimed_cpu_core_hours``, ``disruptions_per_hour``)."""
    by: dict[Setting, list[dict[str, Any]]] = {}
    for setting, _seed, run in runs:
        by.setdefault(setting, []).append(run)
    out = []
    for setting, rs in by.items():
        row: dict[str, Any] = {"margin": setting.margin, "half_life_s": setting.half_life_s, "seeds": len(rs)}
        for key in KEEP:
            row[key] = float(np.mean([r[key] for r in rs]))
        row["disruptions_per_hour"] = float(np.mean([disruptions_per_hour(r, hours) for r in rs]))
        out.append(row)
    return out


def pareto_front(harm: np.ndarray, gain: np.ndarray) -> np.ndarray:
    """Indices of the points no other point beats on both axes (less harm and more gain, one of
    them strictly), in order of increasing harm."""
    harm, gain = np.asarray(harm, dtype=np.float64), np.asarray(gain, dtype=np.float64)
    no_worse = (harm[None, :] <= harm[:, None]) & (gain[None, :] >= gain[:, None])
    better = (harm[None, :] < harm[:, None]) | (gain[None, :] > gain[:, None])
    dominated = (no_worse & better).any(axis=1)
    front = np.flatnonzero(~dominated)
    return front[np.lexsort((-gain[front], harm[front]))]


def knee(harm: Sequence[float], gain: Sequence[float]) -> int:
    """The index of the safety curve's knee (module docstring)."""
    if len(harm) == 0 or len(harm) != len(gain):
        raise ValueError(
            f"a safety curve needs as many harms as gains, at least one (got {len(harm)}, {len(gain)})"
        )
    h, g = np.asarray(harm, dtype=np.float64), np.asarray(gain, dtype=np.float64)
    front = pareto_front(h, g)
    if len(front) <= 2:
        return int(front[0])
    fh, fg = h[front], g[front]
    x = (fh - fh[0]) / (fh[-1] - fh[0]) if fh[-1] > fh[0] else np.zeros(len(front))
    y = (fg - fg[0]) / (fg[-1] - fg[0]) if fg[-1] > fg[0] else np.zeros(len(front))
    lift = y - x  # above the chord from (0, 0) to (1, 1)
    return int(front[int(np.argmax(lift))])  # argmax: the first (least harmful) of equal lifts


__all__ = [
    "DEFAULT_HALF_LIVES_S",
    "DEFAULT_HOURS",
    "DEFAULT_MARGINS",
    "DEFAULT_SEEDS",
    "KEEP",
    "Setting",
    "disruptions_per_hour",
    "knee",
    "pareto_front",
    "summarise",
]
