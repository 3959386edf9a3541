"""A run folder holding every evaluation command's outputs, for the ``kalena report`` tests.

An operator points the commands at one folder (their file names do not collide) and then runs
``kalena report`` on it; here each command runs as briefly as it can: a quarter hour of the
bundled Irina with the three arms, compaction and the Pareto sweep on a small cluster, the
shortest calibration grid. Each command's recorded line is returned with the folder, as the test
expects it (without ``--out``: a record names no folder of the machine that made it).
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

from cli_testlib import run_kalena
from typer.testing import CliRunner

from kalena.cli.main import app

INFRA = "apiVersion: kuberina.io/v1\nkind: Infrastructure\nnodes:\n" + "".join(
    f"  - {{name: n{i}, allocatable: {{cpu: 10, ram: 10}}}}\n" for i in range(8)
)
WORKLOADS = (
    "apiVersion: kuberina.io/v1\nkind: Workloads\nnamespaces:\n  a:\n"
    "    - {name: web, replicas: 9, requests: {cpu: 3, ram: 1}}\n"
)


def make_run_folder(root: Path) -> tuple[Path, dict[str, str]]:
    """``root/run`` with the outputs of simulate, compact, sweep pareto and calibrate; and each
    JSON file's expected ``command``."""
    run = root / "run"
    (root / "infra.yaml").write_text(INFRA)
    (root / "wl.yaml").write_text(WORKLOADS)
    runner = CliRunner()
    commands: dict[str, str] = {}

    # in-process: sys.argv is pytest's, the recorded line must still be this command's
    args = ["simulate", "--hours", "0.25", "--compare", "--out", str(run)]
    r = runner.invoke(app, args)
    assert r.exit_code == 0, r.output
    commands["report.json"] = "kalena simulate --hours 0.25 --compare"

    # a real program, from the folder holding the inputs (relative paths, as an operator types them)
    # where the runs run (--workers, --scheduler) is left out of the record, as --out is
    args = ["compact", "infra.yaml", "wl.yaml", "--batch-hours", "1", "--trials", "3"]
    r = run_kalena([*args, "--workers", "1", "--out", str(run), "--json"], root, timeout=300)
    assert r.returncode == 0, r.stderr
    commands["compaction.json"] = shlex.join(["kalena", *args, "--json"])
    assert json.loads((run / "compaction.json").read_text()) == json.loads(r.stdout)

    infra, wl = str(root / "infra.yaml"), str(root / "wl.yaml")
    args = ["sweep", "pareto", infra, wl, "--points", "80,100", "--hours", "1"]
    r = runner.invoke(app, [*args, "--workers=1", f"--out={run}"])  # the --opt=VALUE spelling too
    assert r.exit_code == 0, r.output
    commands["pareto.json"] = shlex.join(["kalena", *args])

    args = ["calibrate", "--hours", "0.05", "--margins", "1,1.3", "--half-lives", "300", "--seeds", "1"]
    r = runner.invoke(app, [*args, "--workers", "1", "--out", str(run)])
    assert r.exit_code == 0, r.output
    commands["calibration.json"] = shlex.join(["kalena", *args])
    return run, commands
