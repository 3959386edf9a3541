"""How the simulator's time grows with the cluster: Irina's shape at several sizes, a fit per row.

    python bench/bench_sim_size.py [--nodes 46,93,186,372,744] [--hours 2] [--seed 0]
                                   [--json PATH] [--plot PATH.png]

Each size is ``synthetic_cluster(nodes, round(nodes * 2714 / 186))`` (Irina's node shapes and its
production pods per node) with the default batch model, run for ``--hours`` after the 2 h
production pre-warm. The live ledger rows (production plus running batch) are counted every
simulated minute; a least-squares line through (mean live rows, wall ms per tick) gives the
fixed cost of a tick and the cost of each row in it. What a run of R rows for T ticks costs is
then about ``T * (fixed + R * per_row)``: Irina's day is 8,640 ticks of about 12,000 rows.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from kalena.sim import SimConfig, Simulation
from kalena.sim.synthetic import synthetic_cluster
from machine import print_load, write_json  # bench/ is on sys.path when a script runs

#: Irina's production pods per node (2,714 on 186 nodes)
PODS_PER_NODE = 2714 / 186


def one(nodes: int, hours: float, seed: int) -> dict:  # type: ignore[type-arg]
    pods = round(nodes * PODS_PER_NODE)
    sim = Simulation(synthetic_cluster(nodes, pods, seed=seed), SimConfig(hours=hours, seed=seed))
    live: list[int] = []

    def count(_k: int, _total: int) -> None:
        rs = sim.ledger.row_arrays()
        live.append(int(np.count_nonzero(rs.alive[: rs.high])))

    t0 = time.perf_counter()
    sim.run(progress=count, progress_every=sim.cfg.every(60.0))
    wall = time.perf_counter() - t0
    ticks = sim.cfg.ticks
    return {
        "nodes": nodes,
        "production_pods": pods,
        "mean_live_rows": round(float(np.mean(live)), 1),
        "run_wall_s": round(wall, 2),
        "ticks": ticks,
        "ms_per_tick": round(wall / ticks * 1e3, 3),
    }


def fit(rows: list[dict]) -> dict:  # type: ignore[type-arg]
    x = np.array([r["mean_live_rows"] for r in rows])
    y = np.array([r["ms_per_tick"] for r in rows])
    per_row, fixed = np.polyfit(x, y, 1)
    return {"fixed_ms_per_tick": round(float(fixed), 3), "us_per_row_tick": round(float(per_row) * 1e3, 4)}


def plot(rows: list[dict], line: dict, path: str) -> None:  # type: ignore[type-arg]
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x = np.array([r["mean_live_rows"] for r in rows])
    y = np.array([r["ms_per_tick"] for r in rows])
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    ax.plot(x, y, "o", label="measured")
    xs = np.linspace(0, x.max() * 1.05, 50)
    ax.plot(xs, line["fixed_ms_per_tick"] + xs * line["us_per_row_tick"] * 1e-3, "-", label="fit")
    for r in rows:
        ax.annotate(f"{r['nodes']} nodes", (r["mean_live_rows"], r["ms_per_tick"]), fontsize=8)
    ax.set_xlabel("live ledger rows (production + running batch)")
    ax.set_ylabel("wall ms per simulated tick")
    fixed, per_row = line["fixed_ms_per_tick"], line["us_per_row_tick"]
    ax.set_title(f"{fixed:.2f} ms + {per_row:.3f} us per row, per tick", fontsize=10)
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", default="46,93,186,372,744", help="cluster sizes, comma-separated")
    ap.add_argument("--hours", type=float, default=2.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", dest="json_path", default=None)
    ap.add_argument("--plot", dest="plot_path", default=None)
    args = ap.parse_args(argv)
    sizes = [int(s) for s in args.nodes.split(",") if s.strip()]
    if len(sizes) < 2 or min(sizes) < 1:
        ap.error(f"--nodes needs at least two positive sizes, got {args.nodes!r}")
    print_load("before")
    rows = []
    for n in sizes:
        r = one(n, args.hours, args.seed)
        rows.append(r)
        print(
            f"{r['nodes']:>5} nodes, {r['production_pods']:>6} production pods: "
            f"{r['mean_live_rows']:>9.0f} live rows, "
            f"run {r['run_wall_s']:>6.2f} s, {r['ms_per_tick']:.2f} ms/tick",
            flush=True,
        )
    line = fit(rows)
    fixed, per_row = line["fixed_ms_per_tick"], line["us_per_row_tick"]
    print(f"fit: {fixed:.2f} ms per tick + {per_row:.3f} us per row and tick")
    if args.plot_path:
        plot(rows, line, args.plot_path)
        print(f"plot: {args.plot_path}")
    load = print_load("after")
    write_json(args.json_path, "bench_sim_size", vars(args), {"sizes": rows, "fit": line}, load)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
