"""Fit the simulator's cpu pressure model to the measured points (issue 13, item 3).

    python scripts/fit_pressure.py [FILE ...]   (default: the pinned measurements the sim ships)

Replays every trial of the measurements (``scripts/measure_contention.py``) through
:func:`kalena.sim.cpu.pressure_some`: the node's CPUs, one task per cgroup (each burner is one
process, so it wants at most one core), and the trial's total want. The model's one free
parameter, how sharply utilisation bends under 1 near saturation, is chosen on a grid by least
squares over all points; the script prints it, the shipped value, and each trial's measured and
modelled ``some``. The shipped value is held to this fit by ``tests/sim/test_sim_contention_measured.py``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from kalena.sim import cpu

DATA = Path(__file__).resolve().parents[1] / "src" / "kalena" / "sim" / "params" / "contention"
GRID = np.arange(4.0, 30.01, 0.5)


def points(paths: list[Path]) -> list[dict]:
    """One point per trial: its file, mix, load, capacity, tasks, total want and measured ``some``."""
    out = []
    for path in paths:
        for t in json.loads(path.read_text())["trials"]:
            wants = [min(1.0, r["want_cores"]) for r in t["cgroups"]]
            out.append({
                "file": path.stem, "mix": t["mix"], "load": t["load"], "capacity": t["capacity_cores"],
                "tasks": float(len(wants)), "want": float(sum(wants)), "some": t["node_some"],
            })  # fmt: skip
    return out


def modelled(pts: list[dict], sharpness: float = cpu.SATURATION_SHARPNESS) -> np.ndarray:
    """The model's ``some`` for each point."""
    col = {k: np.array([p[k] for p in pts]) for k in ("capacity", "tasks", "want")}
    return cpu.pressure_some(col["capacity"], col["tasks"], col["want"], sharpness)


def fit(pts: list[dict]) -> float:
    """The grid's sharpness with the least squared error over ``pts``."""
    measured = np.array([p["some"] for p in pts])
    errors = [float(((modelled(pts, k) - measured) ** 2).sum()) for k in GRID]
    return float(GRID[int(np.argmin(errors))])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="*", type=Path, help="measurements (default: the shipped pinned ones)")
    args = ap.parse_args(argv)
    paths = args.files or sorted(DATA.glob("cpu-pinned-*.json"))
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        print(f"no such measurement file: {', '.join(missing)}", file=sys.stderr)
        return 2
    try:
        pts = points(paths)
    except (ValueError, KeyError, TypeError) as e:  # not JSON, or not the measurement script's
        print(
            f"not a measurement file of scripts/measure_contention.py ({e!r}): {', '.join(map(str, paths))}",
            file=sys.stderr,
        )
        return 2
    best = fit(pts)
    model = modelled(pts, best)
    for p, m in zip(pts, model, strict=True):
        where = f"{p['file']:14s} {p['mix']:22s} load {p['load']:4.2f}"
        print(f"{where}: measured {p['some']:.3f}, model {m:.3f}")
    rms = float(np.sqrt(np.mean((model - np.array([p["some"] for p in pts])) ** 2)))
    shipped = cpu.SATURATION_SHARPNESS
    print(f"sharpness: fitted {best:g} (rms {rms:.3f} over {len(pts)} points), shipped {shipped:g}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
