"""The usage archive on SQLite and on a real PostgreSQL server: what goes in comes out (exactly
while raw, with the rollups' knots equal to NumPy's quantiles of each slot), compaction rolls
every closed slot once and deletes only what is rolled and past retention, an interrupted
compaction changes nothing, and bad input or a foreign database gets an error naming it."""

from __future__ import annotations

import math
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from kalena.archive import Archive, ArchiveError, ArchiveEvent, Retention
from kalena.core.distribution import KNOT_LEVELS
from kalena.core.validate import ConfigError

W = ["api", "db", "cache"]


def fill(a: Archive, hours: float, step: float = 10.0, seed: int = 0) -> np.ndarray:
    """Record ``hours`` of samples every ``step`` s for W; returns the usage (T, W, 8)."""
    rng = np.random.default_rng(seed)
    out = []
    for k in range(int(hours * 3600 / step)):
        u = rng.lognormal(0.0, 0.4, (len(W), 8))
        u[:, 2] = np.nan  # gpu never measured
        a.record(k * step, "node-1", W, u, u * 1.5, np.full(len(W), 1.0))
        out.append(u)
    return np.array(out)


def test_raw_window_is_exact_and_rollups_are_numpys_quantiles_per_slot(archive_url: str) -> None:
    with Archive(archive_url) as a:
        u = fill(a, 0.5)
        w = a.window(W, 0.0, 1800.0)
        assert w.levels == ("raw",)
        assert w.usage.count[:, 0].tolist() == [180] * 3
        assert w.usage.count[:, 2].tolist() == [0] * 3
        assert w.throttled_s.tolist() == [180.0] * 3
        # all raw: the knots are NumPy's quantiles of the samples, exactly
        want = np.quantile(u[:, :, 0], KNOT_LEVELS, axis=0).T  # (W, K)
        assert w.usage.knots[:, :, 0] == pytest.approx(want)
        assert w.reservation.knots[:, :, 1] == pytest.approx(
            np.quantile(u[:, :, 1] * 1.5, KNOT_LEVELS, axis=0).T
        )
        assert np.isnan(w.quantiles([0.5])[:, 0, 2]).all()

        done = a.compact(1800.0 + 60.0)
        assert done.buckets_5m == 6 * 3 and done.deleted_samples == 0
        name, start, thr, stats = a._buckets(300.0, "start >= ?", (0.0,))
        assert len(name) == 18 and set(thr.tolist()) == {30.0}
        for n, s, st in zip(name, start, stats, strict=True):
            i, k = W.index(n), int(s // 10)
            assert st[0, 2:, 0] == pytest.approx(np.quantile(u[k : k + 30, i, 0], KNOT_LEVELS))
            assert st[0, 0, 0] == 30 and st[0, 0, 2] == 0
        # the same window now read from the rollups: counts and extremes exact
        w2 = a.window(W, 0.0, 1800.0)
        assert w2.levels == ("300s",)
        assert w2.usage.count[:, 0].tolist() == [180] * 3
        assert w2.usage.knots[:, 0, 0] == pytest.approx(u[:, :, 0].min(axis=0))
        assert w2.usage.knots[:, -1, 0] == pytest.approx(u[:, :, 0].max(axis=0))
        assert a.compact(1800.0 + 60.0).buckets_5m == 0  # nothing rolls twice


def test_retention_deletes_only_what_is_rolled_and_old_and_windows_read_every_level(archive_url: str) -> None:
    keep = Retention(raw_s=600.0, five_min_s=2 * 3600.0, hour_s=400 * 86400.0, events_s=3600.0)
    with Archive(archive_url, keep) as a:
        u = fill(a, 4.0, step=30.0)
        a.record_events([ArchiveEvent(10.0, "eviction", "node-1", "api", "memory-pressure", {"epoch": 3}),
                         ArchiveEvent(12000.0, "throttle", "node-1", "db", "cpu-pressure")])  # fmt: skip
        done = a.compact(4 * 3600.0)
        assert done.buckets_5m == 47 * 3  # the slot still open at 4 h minus the grace is not rolled
        assert done.buckets_1h == 3 * 3
        left = a.db.execute("SELECT min(at), count(*) FROM archive_samples")[0]
        assert float(left[0]) == 4 * 3600.0 - 600.0  # raw_s back from now, on a 5-minute boundary
        assert a.db.execute("SELECT min(start) FROM archive_buckets WHERE level = 300")[0][0] == 7200.0
        assert [e.kind for e in a.events()] == ["throttle"]
        assert a.events()[0].cause == "cpu-pressure"
        # hourly + 5-minute + raw in one read, every sample counted once
        w = a.window(W, 0.0, 4 * 3600.0)
        assert w.levels == ("raw", "300s", "3600s")
        assert w.usage.count[:, 0].tolist() == [480] * 3
        assert w.usage.knots[:, -1, 0] == pytest.approx(u[:, :, 0].max(axis=0))
        assert w.throttled_s.tolist() == [480.0] * 3
        q = w.quantiles([0.5, 0.95, 0.99], of="usage")[:, :, 0]
        exact = np.quantile(u[:, :, 0], [0.5, 0.95, 0.99], axis=0).T
        assert np.abs(q / exact - 1).max() < 0.15  # merged from knots: close, not exact
        assert a.workloads() == sorted(W)


def test_an_interrupted_compaction_changes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "a.db"
    with Archive(path) as a:
        fill(a, 0.5)
        before = a.db.execute("SELECT count(*) FROM archive_samples")[0][0]

        def boom(self: Archive) -> int:
            raise RuntimeError("killed between the two rollups")

        monkeypatch.setattr(Archive, "_roll_buckets", boom)
        with pytest.raises(RuntimeError):
            a.compact(7200.0)
        assert a.db.execute("SELECT count(*) FROM archive_buckets")[0][0] == 0
        assert a._mark("rolled_300") is None
        assert a.db.execute("SELECT count(*) FROM archive_samples")[0][0] == before
        monkeypatch.undo()
        assert a.compact(7200.0).buckets_5m == 18


def test_bad_input_and_foreign_databases_are_refused_by_name(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="raw_s"):
        Retention(raw_s=100.0)
    with pytest.raises(ConfigError, match="grace_s"):
        Retention(grace_s=math.nan)
    other = tmp_path / "other.db"
    db = sqlite3.connect(other)
    db.execute("CREATE TABLE archive_samples (x)")
    db.commit()
    db.close()
    with pytest.raises(ArchiveError, match="not a Kalena archive"):
        Archive(other)
    (tmp_path / "text.db").write_text("not a database at all, just some words to fill a page" * 40)
    with pytest.raises(ArchiveError, match=r"text\.db"):
        Archive(tmp_path / "text.db")
    with pytest.raises(ArchiveError, match="is a folder"):
        Archive(tmp_path)
    newer = tmp_path / "newer.db"
    with Archive(newer) as a:
        a.db.execute("UPDATE archive_meta SET value='99' WHERE key='schema'")
    with pytest.raises(ArchiveError, match="schema 99 is newer"):
        Archive(newer)
    with Archive(tmp_path / "ok.db") as a:
        with pytest.raises(ValueError, match="reservation must be"):
            a.record(0.0, "n", W, np.ones((3, 8)), np.ones((2, 8)))
        with pytest.raises(ValueError, match="finite time"):
            a.record(math.nan, "n", W, np.ones((3, 8)))
        with pytest.raises(ValueError, match="must not be empty"):
            a.window(W, 5.0, 5.0)


def test_a_postgresql_url_without_a_server_is_an_error_without_the_password(tmp_path: Path) -> None:
    url = f"postgresql://kalena:s3cret@/nothing?host={tmp_path}"
    with pytest.raises(ArchiveError) as e:
        Archive(url)
    assert "s3cret" not in str(e.value) and "cannot connect" in str(e.value)


def test_a_long_window_reads_whole_hours_hourly_and_many_workloads_in_chunks(tmp_path: Path) -> None:
    many = [f"ns/w{i:03d}" for i in range(300)]  # more than one chunk of 256
    rng = np.random.default_rng(5)
    with Archive(tmp_path / "a.db") as a:
        for k in range(120):  # two hours at 60 s
            u = rng.lognormal(0.0, 0.3, (len(many), 8))
            a.record(k * 60.0, "n", many, u, u)
        a.compact(3 * 3600.0)  # every slot and both hours rolled; the raw samples still kept
        # a window from the middle of the first hour: its second half from 5-minute buckets, the
        # second hour whole from its hourly bucket
        w = a.window(many, 1800.0, 7200.0)
        assert w.levels == ("300s", "3600s")
        assert w.usage.count[:, 0].tolist() == [90] * len(many)
        # the chunks change nothing: any workload reads the same alone (to float rounding: the
        # merge's sums run over all the workloads it is given)
        alone = a.window([many[299], many[3]], 1800.0, 7200.0)
        assert np.allclose(alone.usage.knots[0], w.usage.knots[299], rtol=1e-9, equal_nan=True)
        assert np.allclose(alone.usage.knots[1], w.usage.knots[3], rtol=1e-9, equal_nan=True)


def _where_at(t: float) -> dict[str, str]:
    """Where W runs at ``t``: api on n1; db on n1, on n2 in the second hour; cache on n2, gone
    from 1800 s to 7200 s (longer than a placement gap)."""
    out = {"api": "n1", "db": "n2" if 3600.0 <= t < 7200.0 else "n1"}
    if not 1800.0 <= t < 7200.0:
        out["cache"] = "n2"
    return out


def test_placements_keep_where_each_workload_ran_past_the_raw_samples(archive_url: str) -> None:
    keep = Retention(raw_s=600.0, five_min_s=2 * 3600.0, hour_s=10 * 3600.0)
    rng = np.random.default_rng(3)
    with Archive(archive_url, keep) as a:
        for k in range(240):  # four hours at 60 s, rolled every 5 minutes as an agent does
            placed = _where_at(k * 60.0)
            u = rng.lognormal(0.0, 0.3, (len(placed), 8))
            a.record(k * 60.0, list(placed.values()), list(placed), u, u)
            if k % 5 == 4:
                a.compact(k * 60.0)
        a.compact(4 * 3600.0 + 600.0)  # everything rolled; every raw sample past retention
        assert a.db.execute("SELECT count(*) FROM archive_samples")[0][0] == 0
        rows = a.db.execute("SELECT workload, node, first_at, last_at FROM archive_placements")
        assert sorted((w, n, float(f), float(t)) for w, n, f, t in rows) == [
            ("api", "n1", 0.0, 14340.0),
            ("cache", "n2", 0.0, 1740.0),
            ("cache", "n2", 7200.0, 14340.0),  # a new interval after the gap, on the same node
            ("db", "n1", 0.0, 3540.0),
            ("db", "n1", 7200.0, 14340.0),
            ("db", "n2", 3600.0, 7140.0),
        ]
        assert a.placements(W, 0.0, 4 * 3600.0) == {"api": ("n1",), "db": ("n1", "n2"), "cache": ("n2",)}
        assert a.placements(W, 4000.0, 7000.0) == {"api": ("n1",), "db": ("n2",)}  # cache ran nowhere
        assert a.placements(["db", "nobody"], 3000.0, 3700.0) == {"db": ("n1", "n2")}
        # merged with the raw samples the rollup has not reached: db moves to n3
        a.record(15000.0, "n3", ["db"], np.ones((1, 8)))
        assert a.placements(W, 14000.0, 16000.0) == {"api": ("n1",), "db": ("n1", "n3"), "cache": ("n2",)}
        # kept as long as the hourly buckets: what ended 10 hours before goes
        a.compact(7140.0 + 10 * 3600.0 + 1.0)
        rows = a.db.execute("SELECT workload, node, first_at, last_at FROM archive_placements")
        assert sorted((w, n, float(f), float(t)) for w, n, f, t in rows) == [
            ("api", "n1", 0.0, 14340.0),
            ("cache", "n2", 7200.0, 14340.0),
            ("db", "n1", 7200.0, 14340.0),
            ("db", "n3", 15000.0, 15000.0),
        ]
