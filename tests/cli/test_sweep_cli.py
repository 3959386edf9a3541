"""``kalena sweep pareto``: points packed at a capacity cap, simulated, the optimum within the SLO
(a real subprocess, short simulated runs)."""

from __future__ import annotations

import json
from pathlib import Path

from cli_testlib import interrupt_kalena, run_kalena


def test_the_sweep_packs_each_cap_simulates_it_and_names_the_optimum(tmp_path: Path):
    out = tmp_path / "run"
    r = run_kalena(
        ["sweep", "pareto", "--points", "70,85,100", "--hours", "1", "--out", str(out), "--json"],
        tmp_path,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr
    record = json.loads(r.stdout)
    assert json.loads((out / "pareto.json").read_text()) == record
    assert (out / "pareto.png").stat().st_size > 10_000
    by_x = {p["x"]: p for p in record["points"]}
    # 70 %: Irina's production asks 73 % of the cpu, so it cannot pack and is not run
    assert by_x[70]["active_nodes"] is None and by_x[70]["pending"] > 0 and by_x[70]["meets_slo"] is False
    # a lower cap spreads production over more nodes
    assert by_x[85]["active_nodes"] > by_x[100]["active_nodes"]
    assert all(by_x[x]["restoration_violations"] == 0 for x in (85, 100))
    ok = [p for p in record["points"] if p["meets_slo"]]
    assert record["optimum"] == max(ok, key=lambda p: (p["useful_cpu_core_hours"], -p["x"]))["x"]
    for p in ok:
        assert p["production_oom_kills"] == 0 and p["production_evictions"] == 0
        assert p["unmet_share"] <= record["max_unmet"]


def test_a_strict_slo_leaves_no_optimum_and_bad_points_are_exit_2(tmp_path: Path):
    r = run_kalena(
        [
            "sweep",
            "pareto",
            "--points",
            "100",
            "--hours",
            "1",
            "--max-unmet",
            "0",
            "--out",
            str(tmp_path / "o"),
        ],
        tmp_path,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    assert "no point meets the SLO" in r.stdout or "optimum: X = 100" in r.stdout
    for bad, says in (
        ("0,100", "each must be in 1..100"),
        ("90,90", "given twice"),
        ("ninety", "not a whole"),
    ):
        r = run_kalena(
            ["sweep", "pareto", "--points", bad, "--out", str(tmp_path / "o")], tmp_path, timeout=60
        )
        assert r.returncode == 2 and says in r.stderr and "Traceback" not in r.stderr


def test_the_seeds_sweep_runs_every_arm_at_every_seed_and_bounds_the_means(tmp_path: Path):
    out = tmp_path / "run"
    r = run_kalena(
        ["sweep", "seeds", "--seeds", "3", "--hours", "0.25", "--loads", "1", "--out", str(out), "--json"],
        tmp_path,
        timeout=900,
    )
    assert r.returncode == 0, r.stderr
    record = json.loads(r.stdout)
    assert json.loads((out / "seeds.json").read_text()) == record
    assert record["command"] == "kalena sweep seeds --seeds 3 --hours 0.25 --loads 1 --json"
    runs = {(x["seed"], x["arm"]): x for x in record["runs"]}
    assert set(runs) == {(s, a) for s in range(3) for a in ("kalena", "kalena-no-reclaim", "baseline")}
    assert all(x["restoration_violations"] == 0 for x in runs.values())
    s = record["summary"]["1"]
    assert s["seeds"] == [0, 1, 2]
    # (a), recomputed from the runs: batch work beyond the baseline's, over all work
    a = []
    for seed in range(3):
        on, base = runs[(seed, "kalena")], runs[(seed, "baseline")]
        total = on["batch_cpu_core_hours"] + on["production_cpu_core_hours"]
        a.append((on["batch_cpu_core_hours"] - base["batch_cpu_core_hours"]) / total)
    enabled = s["work_enabled_by_reclamation"]
    assert abs(enabled["mean"] - sum(a) / 3) < 1e-12 and enabled["n"] == 3
    assert min(a) - 1e-12 <= enabled["lo"] <= enabled["mean"] <= enabled["hi"] <= max(a) + 1e-12
    assert s["production_oom_kills"]["kalena"] == sum(
        runs[(i, "kalena")]["production_oom_kills"] for i in range(3)
    )
    table = run_kalena(
        ["sweep", "seeds", "--seeds", "1", "--hours", "0.1", "--out", str(out)], tmp_path, timeout=600
    )
    assert table.returncode == 0, table.stderr
    assert "(a) enabled vs baseline" in table.stdout and "x1" in table.stdout
    for bad, says in (
        ("0", "each must be > 0"),
        ("1,1", "given twice"),
        ("one", "not a number"),
        ("inf", "> 0"),
    ):
        r = run_kalena(["sweep", "seeds", "--loads", bad, "--out", str(out)], tmp_path, timeout=60)
        assert r.returncode == 2 and says in r.stderr and "Traceback" not in r.stderr


def test_ctrl_c_during_a_sweep_stops_it_at_once_without_a_traceback(tmp_path: Path):
    """Ctrl-C reaches the sweep's worker processes too: they ignore it, and the command stops
    them instead of waiting for their runs. Twelve 3-hour runs on two workers are about 45 s of
    work; before, the command ran them all after Ctrl-C (or hung, its pool broken)."""
    args = ["sweep", "seeds", "--seeds", "4", "--hours", "3", "--workers", "2", "--out", str(tmp_path / "o")]
    code, err, took = interrupt_kalena(args, tmp_path, working=lambda g: len(g) >= 3)  # it and 2 workers
    assert code != 0 and "Traceback" not in err, err
    assert took < 25.0  # (wide: it stops in a few seconds; the runs left take twice this at least)
