"""Each stored trace sample replayed through the simulator by ``kalena replay`` (a real process)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from kalena.ir import load_cluster
from kalena.sim import SimConfig, Simulation
from kalena.sim.batch import recorded
from kalena.sim.recorded import Samples
from kalena.traces import google2011
from kalena.traces.convert import replay

TRACES = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "traces"
needs_samples = pytest.mark.skipif(not TRACES.is_dir(), reason=f"trace samples not found at {TRACES}")
pytestmark = [pytest.mark.realdata, needs_samples]


def run_kalena(args: list[str], cwd: Path, timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kalena.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
    )


#: format, folder, options: a sample of machines and hours that keeps each run under a minute
SAMPLES = [
    ("google-2011", "google-clusterdata-2011-2", ["--machines", "80", "--hours", "0.5"]),
    ("google-2019", "google-clusterdata-2019", ["--machines", "60", "--hours", "0.5"]),
    ("alibaba-2017", "alibaba-cluster-trace-v2017", ["--machines", "50", "--hours", "2"]),
    ("alibaba-2018", "alibaba-cluster-trace-v2018", ["--machines", "60", "--hours", "26"]),
]


@pytest.mark.parametrize(("fmt", "folder", "options"), SAMPLES, ids=[s[0] for s in SAMPLES])
def test_each_sample_replays_with_no_restoration_violation(fmt, folder, options, tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = run_kalena(
        ["replay", fmt, str(TRACES / folder), *options, "--out", str(out), "--json"], tmp_path, timeout=600
    )
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["restoration_violations"] == 0
    assert report["command"].startswith(f"kalena replay {fmt} ")
    figures = json.loads((out / "trace.json").read_text(), parse_constant=pytest.fail)  # strict JSON
    replayed = figures["replayed"]
    assert replayed["nodes"] > 0 and replayed["production_pods"] + replayed["batch_pods"] > 0
    # the IR documents written load back as the cluster that was simulated
    cluster = load_cluster(*(out / f"{fmt}_{kind}.yaml" for kind in ("infra", "workloads", "blueprint")))
    assert len(cluster.nodes) == replayed["nodes"] == report["cluster"]["nodes"]
    assert len(cluster.workloads) == replayed["production_pods"]
    assert set(cluster.placement) == {w.id for w in cluster.workloads}
    assert report["simulated_seconds"] == pytest.approx(figures["horizon_s"], abs=10.0)


def test_production_runs_on_the_trace_s_samples_and_batch_arrives_as_recorded() -> None:
    trace = google2011.read(TRACES / "google-clusterdata-2011-2", machines=60, hours=0.5)
    inputs = replay(trace)
    sim = Simulation(
        inputs.cluster,
        SimConfig(hours=0.1, seed=0, interference=0.0),  # usage as recorded, not raised by batch
        tasks=recorded(**inputs.batch),
        production=Samples(inputs.production_samples, inputs.production_ratio),
    )
    sim.run()
    with_samples = list(inputs.production_samples.items())
    assert with_samples, "the sample should give some kept production task its usage"
    for pid, (_t, cpu, ram) in with_samples:
        row = sim.ledger.row_of(pid)
        # one 300 s window: its mean cpu and memory, whatever the synthetic model would draw
        assert sim.table.usage[row, 0] == pytest.approx(float(cpu[-1]))
        assert sim.table.usage[row, 1] == pytest.approx(float(ram[-1]))
    others = [w.id for w in inputs.cluster.workloads if w.id not in inputs.production_samples]
    w = inputs.cluster.workload(others[0])
    assert sim.table.usage[sim.ledger.row_of(others[0]), 0] == pytest.approx(
        w.requests.array()[0] * inputs.production_ratio[0]
    )
    # every batch pod is one of the trace's, at its submit time
    ids = {tid for tid in inputs.batch["ids"]}  # type: ignore[attr-defined]
    assert {s.id.split("/", 1)[1] for s in sim.tasks.specs} == ids
    assert np.all(np.diff(sim.tasks.submit) >= 0)


def test_an_unreadable_trace_is_bad_input_and_writes_nothing(tmp_path: Path) -> None:
    root = tmp_path / "trace"
    (root / "machine_events").mkdir(parents=True)
    (root / "task_events").mkdir()
    (root / "machine_events/part-0.csv").write_text("0,1,0,p,0.5,0.5\n")
    (root / "task_events/part-0.csv").write_text(
        "0,,7,0,1,0,u,0,9,0.1,0.1,0,0\n0,,7,1,1,0,u,0,x,0.1,0.1,0,0\n"
    )
    proc = run_kalena(
        ["replay", "google-2011", str(root), "--out", str(tmp_path / "out")], tmp_path, timeout=120
    )
    assert proc.returncode == 2
    assert "task_events/part-0.csv:2: priority: not a number (value: 'x')" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "out").exists()


def test_the_report_of_a_replay_folder_shows_the_trace_and_the_seeds(tmp_path: Path) -> None:
    out = tmp_path / "run"
    root = TRACES / "google-clusterdata-2011-2"
    steps = [
        ["replay", "google-2011", str(root), "--machines", "30", "--hours", "0.25", "--out", str(out)],
        ["sweep", "seeds", "--seeds", "2", "--hours", "0.1", "--out", str(out)],
        ["report", str(out)],
    ]
    for args in steps:
        proc = run_kalena(args, tmp_path, timeout=600)
        assert proc.returncode == 0, proc.stderr
    page = (out / "report.html").read_text()
    for title in ("The trace replayed", "The arms over seeds", "The slack views"):
        assert f"<h2>{title}</h2>" in page
    figures = json.loads((out / "trace.json").read_text())
    assert figures["notes"] and all(n.replace("'", "&#x27;") in page for n in figures["notes"])
    assert "(a) work enabled vs the baseline" in page and "kalena sweep seeds --seeds 2 --hours 0.1" in page


def test_compare_replays_the_other_arms_in_worker_processes_on_the_recorded_inputs(tmp_path: Path) -> None:
    """``kalena replay --compare``: the recorded batch and usage reach the two worker processes,
    whose arms equal the same arms replayed here (a real ``kalena`` process, spawning its workers)."""
    from kalena.sim import build_report, compare_reports
    from kalena.sim.arms import compare_configs
    from kalena.sim.report import timeless

    root = TRACES / "google-clusterdata-2011-2"
    args = ["replay", "google-2011", str(root), "--machines", "30", "--hours", "0.25", "--compare"]
    proc = run_kalena([*args, "--json", "--no-plots", "--out", str(tmp_path / "o")], tmp_path, timeout=600)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert (report["no_reclaim"]["arm"], report["baseline"]["arm"]) == ("kalena-no-reclaim", "baseline")

    trace = google2011.read(root, machines=30, hours=0.25)
    inputs = replay(trace, file_stem="google-2011")
    base = SimConfig(hours=trace.horizon_s / 3600.0, seed=0)  # as the command makes it
    production = Samples(inputs.production_samples, inputs.production_ratio)
    here = []
    for cfg in (base, *compare_configs(base)):
        sim = Simulation(inputs.cluster, cfg, tasks=recorded(**inputs.batch), production=production)  # type: ignore[arg-type]
        sim.run()
        here.append(build_report(sim))

    assert timeless(report) == timeless(json.loads(json.dumps(compare_reports(*here))))
