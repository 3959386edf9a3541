"""``kalena recommend`` (issue 15 item 3): the Stationkeeper's proposals from the archive, by hand
numbers on a small plan: p99 x the service margin 1.30, only moves of 10 % or more, the replica
loop's dead band with --replicas, the evidence in --json; bad input exits 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from archive_testlib import WORKLOADS, record
from typer.testing import CliRunner

from kalena.archive import Archive
from kalena.cli.main import app
from kalena.cli.recommend import recommendations
from kalena.core.stationkeeper import Knob, Outcome


def run(tmp_path: Path, *extra: str) -> tuple[int, str]:
    where = str(tmp_path / "archive.db")
    if not (tmp_path / "archive.db").exists():
        record(where)
    (tmp_path / "w.yaml").write_text(WORKLOADS)
    r = CliRunner().invoke(
        app, ["recommend", "--archive", where, "--workloads", str(tmp_path / "w.yaml"), *extra]
    )
    return r.exit_code, r.output


def test_proposals_by_hand(tmp_path: Path) -> None:
    code, out = run(tmp_path, "--json")
    assert code == 0, out
    got = json.loads(out)
    by = {(a["workload"], a["knob"]): a for a in got["adjustments"]}
    api_p99 = float(np.quantile(2.0 * (np.arange(360) % 101) / 100.0, 0.99))
    # api: cpu p99 ~1.98 x 1.3 against 2 requested (+29 %); ram 1 x 1.3 against 4 (-67 %)
    assert by[("shop/api", "cpu")]["proposed"] == pytest.approx(1.3 * api_p99, rel=1e-3)
    assert by[("shop/api", "memory")]["proposed"] == pytest.approx(1.3)
    # db: cpu 0.5 x 1.3 = 0.65 against 1; ram 8 x 1.3 = 10.4 against 8
    assert by[("shop/db", "cpu")]["proposed"] == pytest.approx(0.65)
    assert by[("shop/db", "memory")]["proposed"] == pytest.approx(10.4)
    assert ("shop/idle", "cpu") not in by  # never seen: nothing proposed
    assert not any(k == "replicas" for _, k in by)  # not asked for
    ev = by[("shop/db", "cpu")]["evidence"]
    assert ev["samples"] == 720 and ev["quantile"] == 0.99 and ev["margin"] == 1.3
    assert ev["window"] == {"since": 0.0, "until": 3591.0}
    # the epochs as they would be applied, per workload: cpu first
    assert [by[("shop/api", k)]["epoch"] for k in ("cpu", "memory")] == [0, 1]


def test_the_replica_loop_and_the_table(tmp_path: Path) -> None:
    code, out = run(tmp_path, "--json", "--replicas")
    assert code == 0, out
    by = {(a["workload"], a["knob"]): a for a in json.loads(out)["adjustments"]}
    # api at ~99 % of its one replica's request: above 80 %, aimed at 60 % -> 2 replicas
    assert by[("shop/api", "replicas")]["proposed"] == 2
    # db at 50 %: inside the 40/80 % band, left alone
    assert ("shop/db", "replicas") not in by
    code, out = run(tmp_path)
    assert code == 0
    assert "Stationkeeper proposals (4)" in out and "shop/db" in out and "+30%" in out


def test_bad_input_exits_2(tmp_path: Path) -> None:
    code, out = run(tmp_path, "--window", "soon")
    assert code == 2 and "--window" in out
    r = CliRunner().invoke(
        app, ["recommend", "--archive", str(tmp_path / "no.db"), "--workloads", str(tmp_path / "w.yaml")]
    )
    assert r.exit_code == 2 and "no such archive" in r.output and "Traceback" not in r.output
    code, out = run(tmp_path, "--apply")
    assert code == 2 and "--apply: only with --kubernetes or --docker" in out
    code, out = run(tmp_path, "--docker")  # the engine is the plan: not both
    assert code == 2 and "--workloads: not with --docker" in out
    code, out = run(tmp_path, "--kubernetes", "--docker")
    assert code == 2 and "one cluster at a time" in out


def test_an_engine_that_does_not_answer_exits_3(tmp_path: Path) -> None:
    record(str(tmp_path / "archive.db"))
    sock = f"unix://{tmp_path}/none.sock"
    r = CliRunner().invoke(
        app, ["recommend", "--archive", str(tmp_path / "archive.db"), "--docker", "--docker-host", sock]
    )
    assert r.exit_code == 3 and "not reachable" in r.output and "Traceback" not in r.output, r.output


def test_accepted_proposals_are_the_next_runs_settings_and_nothing_moves_twice(tmp_path: Path) -> None:
    code, out = run(tmp_path, "--json", "--accept")
    assert code == 0, out
    first = json.loads(out)["adjustments"]
    assert first and {a["outcome"] for a in first} == {"accepted"}
    # the next run starts from what was accepted: p99 x 1.30 is where each knob already is
    code, out = run(tmp_path, "--json", "--accept")
    assert code == 0, out
    assert json.loads(out)["adjustments"] == []
    with Archive(str(tmp_path / "archive.db")) as a:
        book = a.book(["shop/api", "shop/db", "shop/idle"])
    assert book.epochs == {"shop/api": 2, "shop/db": 2, "shop/idle": 0}
    assert book.settings[("shop/db", Knob.CPU)] == pytest.approx(0.65)


def test_a_stale_proposal_is_refused_and_racing_processes_accept_each_knob_once(tmp_path: Path) -> None:
    where = str(tmp_path / "archive.db")
    record(where)
    (tmp_path / "w.yaml").write_text(WORKLOADS)
    # two loops computed against the same epochs: the first accepted, the second stale
    one = recommendations(where, tmp_path / "w.yaml", "7d", None, False).adjustments
    two = recommendations(where, tmp_path / "w.yaml", "7d", None, False).adjustments
    assert one == two
    with Archive(where) as a:
        assert set(a.accept(one, 1.0)) == {Outcome.ACCEPTED}
        assert set(a.accept(two, 2.0)) == {Outcome.STALE_EPOCH}
        a.db.execute("DELETE FROM archive_adjustments")
    # two real processes at once: whichever way they interleave, each (workload, epoch) once
    cmd = [sys.executable, "-m", "kalena.cli.main", "recommend", "--archive", where,
           "--workloads", str(tmp_path / "w.yaml"), "--accept", "--json"]  # fmt: skip
    procs = [
        subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)
    ]
    results = [json.loads(p.communicate(timeout=300)[0]) for p in procs]
    assert all(p.returncode == 0 for p in procs)
    accepted = [a for r in results for a in r["adjustments"] if a["outcome"] == "accepted"]
    assert sorted((a["workload"], a["knob"]) for a in accepted) == sorted(
        (a.workload, a.knob.value) for a in one
    )
    with Archive(where) as a:
        rows = a.db.execute("SELECT workload, epoch FROM archive_adjustments ORDER BY workload, epoch")
    assert rows == [("shop/api", 0), ("shop/api", 1), ("shop/db", 0), ("shop/db", 1)]
