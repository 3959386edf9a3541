"""``kalena calibrate``: a short real sweep in worker processes, its outputs, what it ships, exit codes.

The default grid over full days is what ``kalena/sim/params/calibration.json`` records (its test:
``tests/sim/test_sim_calibration.py``); here the same command runs a few minutes of simulated time.
"""

from __future__ import annotations

import json
import runpy
from pathlib import Path

from cli_testlib import run_kalena

from kalena.sim.calibration import knee

PNG = b"\x89PNG\r\n\x1a\n"


def package_root(tmp_path: Path) -> Path:
    """A stand-in for the source tree --write-defaults writes into (the test must not touch the real one)."""
    root = tmp_path / "src"
    (root / "kalena" / "core" / "estimators").mkdir(parents=True)
    (root / "kalena" / "sim" / "params").mkdir(parents=True)
    return root


def test_a_short_sweep_names_its_knee_plots_it_and_ships_it(tmp_path):
    root = package_root(tmp_path)
    args = ["calibrate", "--hours", "0.05", "--margins", "1,1.3", "--half-lives", "300,900", "--seeds", "2"]
    r = run_kalena(
        [*args, "--workers", "2", "--write-defaults", "--defaults-root", str(root)], tmp_path, timeout=600
    )
    assert r.returncode == 0, r.stderr
    record = json.loads((tmp_path / "calibration" / "calibration.json").read_text())
    assert len(record["runs"]) == 8 and len(record["settings"]) == 4
    assert {(s["margin"], s["half_life_s"], s["seeds"]) for s in record["settings"]} == {
        (1.0, 300.0, 2), (1.0, 900.0, 2), (1.3, 300.0, 2), (1.3, 900.0, 2),
    }  # fmt: skip
    # runs were submitted A/B/A/B: every setting on seed 0, then every setting on seed 1
    assert [r["seed"] for r in record["runs"]] == [0, 0, 0, 0, 1, 1, 1, 1]
    rows = record["settings"]
    k = knee([s["disruptions_per_hour"] for s in rows], [s["reclaimed_cpu_core_hours"] for s in rows])
    assert record["knee"] == {"margin": rows[k]["margin"], "half_life_s": rows[k]["half_life_s"]}
    assert f"knee: margin {rows[k]['margin']:g}, half-life {rows[k]['half_life_s']:g} s" in r.stdout
    assert (tmp_path / "calibration" / "safety.png").read_bytes().startswith(PNG)
    # shipped: the generated module holds the knee and names the command; the record goes with it
    module = root / "kalena" / "core" / "estimators" / "calibrated.py"
    consts = runpy.run_path(str(module))
    assert (consts["DEFAULT_MARGIN"], consts["DEFAULT_HALF_LIFE_S"]) == (
        rows[k]["margin"],
        rows[k]["half_life_s"],
    )
    text = module.read_text()
    assert "kalena calibrate --hours 0.05" in text and str(tmp_path) not in text  # no machine paths
    assert (
        record["command"].startswith("kalena calibrate --hours 0.05")
        and str(tmp_path) not in record["command"]
    )
    shipped = json.loads((root / "kalena" / "sim" / "params" / "calibration.json").read_text())
    assert shipped == record


def test_bad_grids_and_an_unwritable_defaults_root_exit_2_and_write_nothing(tmp_path):
    cases = [
        (["--margins", "0.9"], "--margins: each must be >= 1 (value: '0.9')"),
        (["--margins", "1,x"], "--margins: 'x' is not a number"),
        (["--half-lives", "0"], "--half-lives: each must be > 0 (value: '0')"),
        (["--half-lives", "300,300"], "--half-lives: a value is given twice"),
        (["--write-defaults", "--defaults-root", str(tmp_path / "nowhere")], "needs a source checkout"),
    ]
    for extra, message in cases:
        r = run_kalena(["calibrate", "--hours", "0.05", *extra], tmp_path, timeout=120)
        assert r.returncode == 2, (extra, r.stdout, r.stderr)
        assert message in r.stderr, (extra, r.stderr)
        assert "Traceback" not in r.stderr
    assert not (tmp_path / "calibration").exists()


def test_a_run_that_fails_is_named_and_nothing_is_written(tmp_path, monkeypatch):
    # One run made to fail: the patched run function lives in this process, so the worker pool is
    # threads here (a stand-in: worker processes would not see the patch); the rest is the command.
    from concurrent.futures import ThreadPoolExecutor

    from typer.testing import CliRunner

    import kalena.cli.calibrate as cal
    import kalena.cli.fanout as fanout
    from kalena.cli.main import app

    real = cal._one

    def one(hours, seed, margin, half_life_s):
        if margin == 1.3:
            raise RuntimeError("disk on fire")
        return real(hours, seed, margin, half_life_s)

    monkeypatch.setattr(cal, "_one", one)
    monkeypatch.setattr(fanout, "ProcessPoolExecutor", ThreadPoolExecutor)
    out = tmp_path / "cal"
    args = ["calibrate", "--hours", "0.02", "--margins", "1,1.3", "--half-lives", "300", "--seeds", "1"]
    r = CliRunner().invoke(app, [*args, "--workers", "1", "--out", str(out)])
    assert r.exit_code == 2, r.output
    said = "m=1.3, h=300s, seed 0: the run failed (RuntimeError('disk on fire')); nothing was written"
    assert said in r.output
    assert not out.exists() or not any(out.iterdir())
