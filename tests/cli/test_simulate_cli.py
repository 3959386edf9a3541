"""``kalena simulate``: the README's first command on the bundled Irina data, options, outputs, exit codes."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from cli_testlib import interrupt_kalena, run_kalena
from typer.testing import CliRunner

from kalena.cli.main import app
from kalena.core.enforcement import EvictionCause
from kalena.sim.report import timeless

runner = CliRunner()

REQUIRED_KEYS = (
    "reclaimed_work_fraction",
    "reclaimed_cpu_core_hours",
    "batch_cpu_core_hours",
    "batch_tasks_completed",
    "evictions",
    "production_oom_kills",
    "production_unmet_cpu_core_seconds",
    "restoration_violations",
    "simulated_seconds",
    "wall_seconds",
    "seed",
)
PNG = b"\x89PNG\r\n\x1a\n"
V1I = "apiVersion: kuberina.io/v1\nkind: Infrastructure\n"
V1W = "apiVersion: kuberina.io/v1\nkind: Workloads\n"
V1B = "apiVersion: kuberina.io/v1\nkind: Blueprint\n"


def kalena(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return run_kalena(list(args), cwd, timeout=900)


def check_invariants(report: dict) -> None:
    for key in REQUIRED_KEYS:
        assert key in report, key
    assert report["restoration_violations"] == 0
    assert report["production_evictions_without_override"] == 0
    assert set(report["evictions"]) == {c.value for c in EvictionCause}
    assert 0.0 <= report["reclaimed_work_fraction"] <= 1.0


def test_readme_first_command_on_the_bundled_irina_data(tmp_path):
    """``kalena simulate`` with its defaults, shortened to a quarter hour for the unit suite."""
    r = kalena("simulate", "--hours", "0.25", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    check_invariants(report)
    c = report["cluster"]
    assert (c["nodes"], c["production_workloads"], c["active_nodes"]) == (186, 2714, 152)
    assert report["simulated_seconds"] == 900 and report["seed"] == 0 and report["reclaim"] is True
    assert report["batch_cpu_core_hours"] > 0 and report["reclaimed_cpu_core_hours"] > 0
    for png in ("slack_cluster.png", "slack_node.png", "reservation_cdf.png"):
        assert (tmp_path / "out" / png).read_bytes()[:8] == PNG, png
    assert "Work in reclaimed capacity (upper bound)" in r.stdout and "Borg: about 20 %" in r.stdout
    assert f"placed by reclamation did {100 * report['task_reclaimed_work_fraction']:.1f} %" in r.stdout
    assert "Traceback" not in r.stderr


@pytest.mark.slow
def test_readme_first_command_full_default_day(tmp_path):
    """The main job exactly as the README runs it: 24 simulated hours on Irina (speed is not asserted)."""
    r = kalena("simulate", "--no-plots", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    check_invariants(report)
    assert report["simulated_seconds"] == 86400
    assert report["batch_tasks_completed"] > 0 and report["reclaimed_cpu_core_hours"] > 0


def test_json_prints_the_report_and_nothing_else(tmp_path):
    res = runner.invoke(
        app, ["simulate", "--hours", "0.1", "--seed", "3", "--json", "--no-plots", "--out", str(tmp_path)]
    )
    assert res.exit_code == 0, res.output
    report = json.loads(res.stdout)
    check_invariants(report)
    assert report["seed"] == 3
    assert json.loads((tmp_path / "report.json").read_text()) == report


def test_same_seed_same_report_apart_from_wall_seconds(tmp_path):
    out = []
    for i in range(2):
        res = runner.invoke(
            app, ["simulate", "--hours", "0.1", "--json", "--no-plots", "--out", str(tmp_path / str(i))]
        )
        assert res.exit_code == 0, res.output
        report = json.loads(res.stdout)
        report.pop("wall_seconds")
        out.append(report)
    assert out[0] == out[1]


def test_no_reclaim_reclaims_nothing(tmp_path):
    res = runner.invoke(
        app, ["simulate", "--hours", "0.1", "--no-reclaim", "--json", "--no-plots", "--out", str(tmp_path)]
    )
    assert res.exit_code == 0, res.output
    report = json.loads(res.stdout)
    check_invariants(report)
    assert report["reclaim"] is False
    assert report["reclaimed_cpu_core_hours"] == 0 and report["reclaimed_work_fraction"] == 0


def test_no_kalena_at_all_is_the_baseline_arm(tmp_path):
    """The cluster an operator has today: batch by requests into unallocated capacity, nobody
    throttled, capped or evicted; only the kernel's CPU sharing and its OOM killer."""
    res = runner.invoke(
        app, ["simulate", "--hours", "0.25", "--baseline", "--json", "--no-plots", "--out", str(tmp_path)]
    )
    assert res.exit_code == 0, res.output
    report = json.loads(res.stdout)
    check_invariants(report)
    assert (report["arm"], report["reclaim"], report["enforce"]) == ("baseline", False, False)
    assert report["batch_cpu_core_hours"] > 0
    assert report["reclaimed_cpu_core_hours"] == 0 and report["task_reclaimed_work_fraction"] == 0
    assert report["evictions_total"] == 0 and report["escalations"] == 0
    assert report["mitigation"]["starvation_service_caps"] == 0
    assert report["production_capped_cpu_core_seconds"] == 0
    assert report["batch_throttled_seconds"]["total"] == 0


def _json_run(out: Path, *args: str) -> dict:
    """``kalena simulate --json --no-plots --out OUT ARGS``: its report (the run must succeed)."""
    res = runner.invoke(app, ["simulate", *args, "--json", "--no-plots", "--out", str(out)])
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


def test_batch_load_scales_what_is_offered(tmp_path):
    submitted = {}
    for load in ("0.25", "1"):
        report = _json_run(tmp_path / load, "--hours", "0.1", "--batch-load", load)
        assert report["batch_load_factor"] == float(load)
        submitted[load] = report["batch_tasks_submitted"]
    assert submitted["0.25"] < 0.5 * submitted["1"]


def test_drop_empty_nodes_leaves_batch_only_what_production_nodes_leave(tmp_path):
    report = _json_run(tmp_path, "--hours", "0.1", "--drop-empty-nodes")
    c = report["cluster"]
    assert c["nodes"] == c["active_nodes"] == 152  # Irina's 34 empty nodes left out
    assert c["production_workloads"] == 2714


def test_compare_shows_the_three_arms_side_by_side(tmp_path):
    res = runner.invoke(
        app, ["simulate", "--hours", "0.1", "--compare", "--no-plots", "--out", str(tmp_path)]
    )
    assert res.exit_code == 0, res.output
    assert "reclaim on" in res.stdout and "reclaim off" in res.stdout and "baseline" in res.stdout
    report = json.loads((tmp_path / "report.json").read_text())
    check_invariants(report)
    check_invariants(report["no_reclaim"])
    check_invariants(report["baseline"])
    assert report["reclaim"] is True and report["no_reclaim"]["reclaim"] is False
    assert report["baseline"]["arm"] == "baseline" and report["no_reclaim"]["arm"] == "kalena-no-reclaim"
    assert report["no_reclaim"]["reclaimed_cpu_core_hours"] == 0
    assert "extra_batch_cpu_core_hours" in report["comparison"]
    # (a): the batch work beyond the baseline's, over all the reclaim arm's work
    total = report["batch_cpu_core_hours"] + report["production_cpu_core_hours"]
    more = report["batch_cpu_core_hours"] - report["baseline"]["batch_cpu_core_hours"]
    enabled = report["comparison"]["work_enabled_by_reclamation_fraction"]
    assert enabled == pytest.approx(more / total, abs=1e-5)
    assert f"Reclamation enabled {100 * enabled:.1f} % of all cpu work" in res.stdout
    # anti-starvation caps are part of the unmet figure and shown on their own line
    assert "of which anti-starvation caps" in res.stdout
    for arm in (report, report["no_reclaim"], report["baseline"]):
        capped, unmet = arm["production_capped_cpu_core_seconds"], arm["production_unmet_cpu_core_seconds"]
        assert 0 <= capped <= unmet + 1e-6


def test_compare_runs_the_other_arms_in_worker_processes_with_the_same_figures(tmp_path):
    """The two other arms run in spawned worker processes beside the first; their reports are
    those of the same arms run here one after the other, field by field."""
    from kalena.data import irina_paths
    from kalena.ir import load_cluster
    from kalena.sim import SimConfig, compare_reports, simulate
    from kalena.sim.arms import compare_configs

    report = _json_run(tmp_path, "--hours", "0.1", "--compare", "--workers", "2")
    base = SimConfig(hours=0.1)
    cluster = load_cluster(*irina_paths())
    here = [simulate(cluster, cfg)[1] for cfg in (base, *compare_configs(base))]
    assert timeless(report) == timeless(compare_reports(*here))
    # one worker runs both other arms, one after the other: the same again
    assert timeless(_json_run(tmp_path / "one", "--hours", "0.1", "--compare", "--workers", "1")) == timeless(
        report
    )


def test_ctrl_c_during_compare_stops_every_process_without_a_traceback(tmp_path):
    """Ctrl-C reaches the whole foreground process group: the command stops its workers, which
    ignore it themselves, so nothing prints a traceback and no process is left behind."""
    args = ["simulate", "--compare", "--hours", "4", "--no-plots", "--out", str(tmp_path / "o")]
    code, err, _ = interrupt_kalena(args, tmp_path, working=lambda g: sum("spawn_main" in c for c in g) >= 2)
    assert code != 0 and "Traceback" not in err, err
    assert not (tmp_path / "o" / "report.json").exists()


def test_why_tells_a_pods_story_in_the_report_and_on_screen(tmp_path):
    pod = "batch/job-000452-00001"
    report = _json_run(tmp_path / "j", "--hours", "0.1", "--why", pod)
    story = report["why"][pod]
    assert story["history"][0]["state"] == "pending" and story["history"][0]["reason"] == "submitted"
    assert story["state_at_end"] == story["history"][-1]["state"]
    args = ["simulate", "--hours", "0.1", "--no-plots", "--out", str(tmp_path), "--why", pod]
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    assert f"{pod}: {story['state_at_end']}" in res.stdout and "start-requested" in res.stdout


def test_compare_plots_the_arms_and_a_plain_run_removes_that_plot(tmp_path):
    res = runner.invoke(app, ["simulate", "--hours", "0.1", "--compare", "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    png = (tmp_path / "compare.png").read_bytes()
    assert png[:8] == PNG and png != (tmp_path / "slack_cluster.png").read_bytes()
    res = runner.invoke(app, ["simulate", "--hours", "0.1", "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    assert not (tmp_path / "compare.png").exists()  # the folder holds one run's output
    assert (tmp_path / "slack_cluster.png").read_bytes()[:8] == PNG


def _ir(tmp_path: Path, infra: str, workloads: str, blueprint: str) -> list[str]:
    paths = []
    for name, text in (("infra.yaml", infra), ("workloads.yaml", workloads), ("blueprint.yaml", blueprint)):
        (tmp_path / name).write_text(text)
        paths += [f"--{name.split('.')[0]}", str(tmp_path / name)]
    return paths


def _small_ir(tmp_path: Path) -> list[str]:
    return _ir(
        tmp_path,
        V1I + "nodes:\n  - {name: n1, allocatable: {cpu: 16, ram: 64}}\n"
        "  - {name: n2, allocatable: {cpu: 16, ram: 64}}\n",
        V1W + "namespaces:\n  web:\n    - {name: api, replicas: 4, requests: {cpu: 2, ram: 4}}\n",
        V1B + "metadata: {feasible: true, pods: 4, activeNodes: 2}\nsolution:\n"
        "  web/api-0000: n1\n  web/api-0001: n1\n  web/api-0002: n2\n  web/api-0003: n2\n",
    )


def test_any_ir_documents_can_be_simulated(tmp_path):
    args = _small_ir(tmp_path)
    res = runner.invoke(
        app, ["simulate", "--hours", "0.5", "--json", "--no-plots", "--out", str(tmp_path / "o"), *args]
    )
    assert res.exit_code == 0, res.output
    report = json.loads(res.stdout)
    check_invariants(report)
    assert report["cluster"]["nodes"] == 2 and report["cluster"]["production_workloads"] == 4


@pytest.mark.parametrize("estimator", ["decay", "peak", "histogram"])
def test_estimator_option(tmp_path, estimator):
    args = ["--hours", "0.2", "--estimator", estimator, "--json", "--no-plots", "--out", str(tmp_path / "o")]
    res = runner.invoke(app, ["simulate", *args, *_small_ir(tmp_path)])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["estimator"] == estimator


def test_bad_ir_file_exits_2_with_problem_lines_and_no_traceback(tmp_path):
    args = _ir(
        tmp_path,
        V1I + "nodes:\n  - {name: n1, allocatable: {cpu: 12x}, colour: red}\n",
        V1W + "namespaces: {}\n",
        V1B + "solution: {}\n",
    )
    r = kalena("simulate", "--hours", "0.1", *args, cwd=tmp_path)
    assert r.returncode == 2
    assert "infra.yaml" in r.stderr and "colour" in r.stderr
    assert "Traceback" not in r.stderr and r.stdout == ""


@pytest.mark.parametrize(
    ("estimator", "args", "params"),
    [
        ("decay", ["--margin", "1.3", "--half-life", "600"], {"margin": 1.3, "half_life_s": 600.0}),
        ("histogram", ["--half-life", "3600"], {"half_life_s": 3600.0, "margin": 1.15}),
        ("peak", ["--margin", "1.5"], {"margin_service": 1.5, "margin_batch": 1.15}),
    ],
)
def test_margin_and_half_life_set_the_estimators_and_the_report_says_so(tmp_path, estimator, args, params):
    base = ["--hours", "0.2", "--estimator", estimator, "--json", "--no-plots", "--out", str(tmp_path / "o")]
    res = runner.invoke(app, ["simulate", *base, *args, *_small_ir(tmp_path)])
    assert res.exit_code == 0, res.output
    got = json.loads(res.stdout)["estimator_params"]
    assert {k: got[k] for k in params} == params


def test_a_lower_margin_reserves_less(tmp_path):
    """The margin reaches the core: a lower one holds production's reservations lower. (How much
    batch work that buys is the calibration's question: past some point the disruptions cost more.)"""
    held = {}
    for m in ("1.0", "2.0"):
        acc = _json_run(tmp_path / m, "--hours", "0.5", "--margin", m)["reservation_accuracy"]
        held[m] = tuple(acc[dim]["reservation_over_request"]["mean"] for dim in ("cpu", "ram"))
    assert held["1.0"][0] < 0.8 * held["2.0"][0]
    assert held["1.0"][1] < 0.8 * held["2.0"][1]


BAD_OPTIONS = [
    ("compare-and-no-reclaim", ["--compare", "--no-reclaim"], "--compare"),
    ("batch-load-0", ["--batch-load", "0"], "not a finite number > 0"),
    ("why-unknown-pod", ["--why", "batch/nobody"], "--why: no batch pod 'batch/nobody' in this run"),
    ("baseline-and-no-reclaim", ["--no-reclaim", "--baseline"], "--no-reclaim and --baseline: give one"),
    ("one-document-only", ["--infra", "x.yaml"], "all three IR documents"),
    ("margin-below-1", ["--margin", "0.9"], "--margin: must be a finite number >= 1 (value: 0.9)"),
    ("half-life-0", ["--half-life", "0"], "--half-life: must be a finite number > 0 (value: 0.0)"),
    ("peak-half-life", ["--estimator", "peak", "--half-life", "60"], "--half-life: the peak estimator"),
]


@pytest.mark.parametrize(("args", "message"), [c[1:] for c in BAD_OPTIONS], ids=[c[0] for c in BAD_OPTIONS])
def test_bad_options_exit_2(tmp_path, args, message):
    res = runner.invoke(app, ["simulate", "--hours", "0.1", "--out", str(tmp_path), *args])
    assert res.exit_code == 2
    assert message in res.output
