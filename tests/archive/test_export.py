"""``kalena archive export`` (issue 15 item 2): observed blocks that Kalena's own IR reader reads
back unchanged, with figures checked against NumPy on the recorded samples; the report's drift,
re-plan recommendation, bursts, evictions and limit breaches; the simulator's archive exported
for Irina; bad input named, exit 2, nothing written."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from archive_testlib import WORKLOADS, record
from typer.testing import CliRunner

from kalena.archive import Archive
from kalena.archive.export import export_observed
from kalena.cli.main import app
from kalena.ir.document import WorkloadsDoc
from kalena.ir.load import parse_document, read_document
from kalena.ir.write import dump_workloads


def test_export_writes_observed_blocks_that_read_back_unchanged(tmp_path: Path) -> None:
    where = str(tmp_path / "archive.db")
    api = record(where)
    (tmp_path / "w.yaml").write_text(WORKLOADS)
    out = tmp_path / "plan" / "observed.yaml"
    r = CliRunner().invoke(
        app,
        ["archive", "export", "--archive", where, "--workloads", str(tmp_path / "w.yaml"), "--out", str(out)],
    )
    assert r.exit_code == 0, r.output
    text = out.read_text()
    doc = read_document(out)
    assert isinstance(doc, WorkloadsDoc) and not doc.legacy
    assert dump_workloads(doc) == text  # the closed-schema reader takes it as written
    by = {d.name: d for d in doc.declarations}
    o = by["api"].observed
    assert o is not None
    assert o.window == "1970-01-01T00:00:00Z/1970-01-01T00:59:51Z"
    q = np.quantile(api, [0.5, 0.95, 0.99, 1.0])
    assert o.p50 is not None and o.p95 is not None and o.p99 is not None and o.peak is not None
    got = [o.p50["cpu"], o.p95["cpu"], o.p99["cpu"], o.peak["cpu"]]
    assert got == pytest.approx(q, rel=1e-5)
    assert set(o.p50) == {"cpu", "ram"}  # requested or used, never the dimensions nobody asked for
    assert o.exceeded_request_fraction == 0.0  # 2 cpu is its peak, never above
    db = by["db"].observed
    assert db is not None and db.p95 == {"cpu": 0.5, "ram": 8.0}
    assert by["idle"].observed is None
    report = json.loads((tmp_path / "plan" / "observed.report.json").read_text())
    # drift, per pod: cpu (|2-2| + 2 * |1-2|) / (2 + 1 + 1); ram (|4-4| + 0 + 0) / 20; idle unseen
    assert report["drift"]["cpu"] == pytest.approx(2 / 4)
    assert report["drift"]["ram"] == pytest.approx(0.0)
    assert report["replan_recommended"] is True and "cpu" in report["recommendation"]
    wl = report["workloads"]
    assert wl["shop/db"]["evictions"] == {"memory-pressure": 1}
    assert wl["shop/api"]["exceeded_limit_events"] == 1
    assert wl["shop/db"]["reservation_p95"] == {"cpu": 2.0, "ram": 8.0}
    assert wl["shop/api"]["samples"] == 360
    # n1's slack yield: api (2 - 2, 4 - 4), each db (1 - 2, 8 - 8); reserved above the request: < 0
    assert report["nodes"] == {
        "n1": {
            "evictions": 1,
            "workloads": 3,
            "requests": {"cpu": 4.0, "ram": 20.0},
            "slack_yield": {"cpu": -2.0, "ram": 0.0},
            "slack_yield_fraction": {"cpu": -0.5, "ram": 0.0},
        }
    }
    # a higher threshold: drift reported, no re-plan asked for
    r = CliRunner().invoke(
        app,
        ["archive", "export", "--archive", where, "--workloads", str(tmp_path / "w.yaml"), "--out", str(out),
         "--drift-threshold", "0.6"],
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    report = json.loads((tmp_path / "plan" / "observed.report.json").read_text())
    assert report["replan_recommended"] is False and report["recommendation"] is None


def test_the_report_gives_each_nodes_slack_yield_from_placements_that_outlive_the_samples(
    archive_url: str,
) -> None:
    """api runs on n1, db-0000 on n1 for an hour and then on n2, db-0001 on n2, a pod of another
    document on n1; reservations vary (db-0001's ram unknown for its first half hour). Per node and
    dimension, the yield is the sum over the document's pods that ran there of (request - mean
    reservation over the window), computed here with NumPy from the recorded samples; the same
    figures come back once the raw samples are rolled up and gone."""
    doc = parse_document(WORKLOADS)
    assert isinstance(doc, WorkloadsDoc)
    pods = ["shop/api-0", "shop/db-0000", "shop/db-0001", "other/x-0"]
    requests = {"shop/api-0": (2.0, 4.0), "shop/db-0000": (1.0, 8.0), "shop/db-0001": (1.0, 8.0)}
    rng = np.random.default_rng(11)
    t = np.arange(180) * 60.0  # three hours
    res = rng.uniform([0.5, 2.0], [3.0, 9.0], (len(t), len(pods), 2))
    res[t < 1800.0, 2, 1] = np.nan
    node = np.array([["n1", "n2" if x >= 3600.0 else "n1", "n2", "n1"] for x in t])
    with Archive(archive_url) as a:
        for k, at in enumerate(t):
            use = np.full((len(pods), 8), np.nan)
            use[:, :2] = res[k] / 2
            r = np.full((len(pods), 8), np.nan)
            r[:, :2] = res[k]
            a.record(float(at), node[k].tolist(), pods, use, r)

    def expected(since: float, until: float) -> dict[str, dict[str, dict[str, float]]]:
        inw = (t >= since) & (t < until)
        out: dict[str, dict[str, dict[str, float]]] = {}
        for j, pod in enumerate(pods[:3]):
            mean = np.nanmean(res[inw, j], axis=0)
            for n in sorted(set(node[inw, j].tolist())):
                e = out.setdefault(n, {"requests": {}, "slack_yield": {}})
                for d, dim in enumerate(("cpu", "ram")):
                    e["requests"][dim] = e["requests"].get(dim, 0.0) + requests[pod][d]
                    e["slack_yield"][dim] = e["slack_yield"].get(dim, 0.0) + requests[pod][d] - mean[d]
        return out

    def check(since: float, until: float, workloads: dict[str, int]) -> None:
        with Archive(archive_url) as a:
            nodes = export_observed(a, doc, since, until).report["nodes"]
        want = expected(since, until)
        assert sorted(nodes) == sorted(want)
        for n, e in want.items():
            got = nodes[n]
            assert got["evictions"] == 0 and got["workloads"] == workloads[n]
            assert got["requests"] == pytest.approx(e["requests"])
            assert got["slack_yield"] == pytest.approx(e["slack_yield"], rel=1e-5)
            frac = {d: e["slack_yield"][d] / e["requests"][d] for d in e["requests"]}
            assert got["slack_yield_fraction"] == pytest.approx(frac, rel=1e-5, abs=1e-6)

    check(0.0, 3 * 3600.0, {"n1": 2, "n2": 2})  # db-0000 counts at both, with its whole window's mean
    check(7200.0, 3 * 3600.0, {"n1": 1, "n2": 2})  # db-0000 on n2 only
    with Archive(archive_url) as a:
        a.compact(10 * 3600.0)  # every hour rolled; the raw samples (6 hours) gone
        assert a.db.execute("SELECT count(*) FROM archive_samples")[0][0] == 0
    check(0.0, 3 * 3600.0, {"n1": 2, "n2": 2})
    check(7200.0, 3 * 3600.0, {"n1": 1, "n2": 2})
    check(1800.0, 9000.0, {"n1": 2, "n2": 2})  # an hourly bucket with 5-minute ones around it


def test_the_simulators_archive_exports_for_irina(tmp_path: Path) -> None:
    where = str(tmp_path / "sim.db")
    r = CliRunner().invoke(
        app,
        [
            "simulate",
            "--hours",
            "0.25",
            "--no-plots",
            "--json",
            "--archive",
            where,
            "--out",
            str(tmp_path / "o"),
        ],
    )
    assert r.exit_code == 0, r.output
    with Archive(where) as a:
        assert len(a.workloads()) > 2714  # every production pod and the batch pods that ran
        assert a.window(["ai/llm-inference-0000"], 0.0, 901.0).usage.count[0, 0] == 15  # each minute
        events = a.events()  # the run's evictions, each with its pod, node and cause
        assert events and all(e.workload and e.node and e.cause for e in events)
    from kalena.data import irina_paths

    out = tmp_path / "observed.yaml"
    r = CliRunner().invoke(
        app,
        [
            "archive",
            "export",
            "--archive",
            where,
            "--workloads",
            str(irina_paths().workloads),
            "--out",
            str(out),
        ],
    )
    assert r.exit_code == 0, r.output
    doc = parse_document(out.read_text())
    assert isinstance(doc, WorkloadsDoc) and not doc.legacy  # the legacy document comes back as v1
    observed = [d for d in doc.declarations if d.observed is not None]
    assert len(observed) == len(doc.declarations)
    for d in observed[:50]:
        assert d.observed is not None and d.observed.p50 is not None and d.observed.peak is not None
        assert d.observed.p50["cpu"] <= d.observed.peak["cpu"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--archive", "{tmp}/none.db"], "none.db: no such archive"),
        (["--window", "7x"], "--window: '7x' is not a duration"),
        (["--drift-threshold", "-1"], "--drift-threshold: must be a number > 0"),
        (["--workloads", "{tmp}/bad.yaml"], "bad.yaml"),
        (["--until", "-100000"], "is before the archive's first sample"),
    ],
)
def test_bad_input_is_named_and_nothing_is_written(tmp_path: Path, args: list[str], message: str) -> None:
    where = str(tmp_path / "archive.db")
    record(where, hours=0.1)
    (tmp_path / "w.yaml").write_text(WORKLOADS)
    (tmp_path / "bad.yaml").write_text(WORKLOADS.replace("replicas: 2", "replicas: -2"))
    base = {"--archive": where, "--workloads": str(tmp_path / "w.yaml"), "--out": str(tmp_path / "o.yaml")}
    for k, v in zip(args[::2], args[1::2], strict=True):
        base[k] = v.format(tmp=tmp_path)
    r = CliRunner().invoke(app, ["archive", "export", *[x for kv in base.items() for x in kv]])
    assert r.exit_code == 2, r.output
    assert message in r.output
    assert "Traceback" not in r.output
    assert not (tmp_path / "o.yaml").exists()


def test_compact_from_the_command_line_and_a_bad_archive_for_simulate(tmp_path: Path) -> None:
    where = str(tmp_path / "archive.db")
    record(where, hours=0.5)
    r = CliRunner().invoke(app, ["archive", "compact", "--archive", where])
    assert r.exit_code == 0, r.output
    assert "rolled 18 5-minute and 3 hourly" in r.output  # 3 pods x 6 slots, in one hour
    assert "deleted 0 samples" in r.output  # ages count from the newest sample: 30 min, all kept
    r = CliRunner().invoke(app, ["archive", "compact", "--archive", str(tmp_path / "nothing.db")])
    assert r.exit_code == 2 and "no such archive" in r.output
    (tmp_path / "not.db").write_text("words, not a database " * 100)
    r = CliRunner().invoke(
        app,
        ["simulate", "--hours", "0.1", "--archive", str(tmp_path / "not.db"), "--out", str(tmp_path / "o")],
    )
    assert r.exit_code == 2 and "--archive" in r.output and "not.db" in r.output
    assert "Traceback" not in r.output
