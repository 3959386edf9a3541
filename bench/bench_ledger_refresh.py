"""The ledger's refresh of every reservation, as the simulator commits it each tick: the whole
rows against only the columns the estimator estimates, in one process, alternated.

    python bench/bench_ledger_refresh.py [--hours 1] [--repeat 400] [--json PATH]

The ledger and the estimator's state are Irina's after ``--hours`` of the default run (the rows
in use then, about 11,000). Each repetition scales the estimated columns a little, so that every
live row moves (as the decay estimator moves them every tick), and applies the same values
once as whole rows (``ReservationRefresh(values)``, shape (rows, 8)) and once as the columns
(``ReservationRefresh(columns, dims=...)``), in alternating order. Both include building the
commitment (its copy and its check) and the ledger's compare, write and per-node sums.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from kalena.core.ledger import ReservationRefresh
from kalena.data import irina_paths
from kalena.ir.build import load_cluster
from kalena.sim import SimConfig, Simulation
from machine import print_load, write_json  # bench/ is on sys.path when a script runs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hours", type=float, default=1.0, help="simulated hours before (default 1)")
    ap.add_argument("--repeat", type=int, default=400, help="refreshes of each form (default 400)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", metavar="PATH")
    args = ap.parse_args()
    print_load("before")
    sim = Simulation(load_cluster(*irina_paths()), SimConfig(hours=args.hours, seed=args.seed))
    sim.run()
    led, state = sim.ledger, sim.est_state
    dims = state.dims
    if dims is None:
        raise SystemExit("the estimator estimates every dimension here: nothing to compare")
    h = led.row_arrays().high
    # in the estimator's layout (column-major, as the ledger's rows): np.copy keeps it
    whole, columns = np.copy(state.full[:h]), np.copy(state.reservation[:h])
    rng = np.random.default_rng(args.seed)
    times: dict[str, list[float]] = {"whole rows": [], "columns": []}

    def refresh(form: str, s: float) -> None:
        if form == "whole rows":
            values = np.copy(whole)
            values[:, list(dims)] *= s
            kw: dict[str, tuple[int, ...]] = {}
        else:
            values, kw = columns * s, {"dims": dims}
        t = time.perf_counter()  # the commitment (its copy and check) and the ledger's part
        if not led.apply(ReservationRefresh(values, led.global_epoch, **kw)).accepted:
            raise SystemExit(f"the {form} refresh was refused")
        times[form].append(time.perf_counter() - t)

    for i in range(args.repeat):
        s = 1.0 + 1e-3 * rng.random()
        for form in ("whole rows", "columns") if i % 2 else ("columns", "whole rows"):
            refresh(form, s)
    load = print_load("after")
    results = {
        "rows": h,
        "dims": list(dims),
        **{f"{k} median us": round(statistics.median(v) * 1e6, 1) for k, v in times.items()},
    }
    print(
        f"{h} rows, dims {list(dims)}: whole rows {results['whole rows median us']} us, "
        f"columns {results['columns median us']} us (median of {args.repeat} each)"
    )
    write_json(args.json, "ledger_refresh", vars(args), results, load)


if __name__ == "__main__":
    main()
