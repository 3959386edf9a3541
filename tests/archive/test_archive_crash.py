"""SIGKILL during writes loses no acknowledged record and leaves no half-written one, on SQLite and
on a real PostgreSQL server: a writer process records and compacts in a loop, printing each
record's number after its call returned; it is killed at a random moment, 20 times."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from crash_writer import STEP_S, WORKLOADS, values

from kalena.archive import Archive

WRITER = Path(__file__).with_name("crash_writer.py")

TRIALS = 20


def _run_and_kill(where: str, first: int, delay: float) -> list[int]:
    """Start the writer at record ``first``, SIGKILL it ``delay`` s after its first acknowledgement,
    and return every record number it acknowledged."""
    proc = subprocess.Popen(
        [sys.executable, str(WRITER), where, str(first)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    acked: list[int] = []
    started = threading.Event()

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            acked.append(int(line))
            started.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    if not started.wait(timeout=120):  # wide: a loaded machine starts Python slowly
        proc.kill()
        raise AssertionError(f"the writer acknowledged nothing: {proc.stderr.read() if proc.stderr else ''}")
    time.sleep(delay)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    reader.join(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    return acked


@pytest.mark.slow
def test_sigkill_loses_no_acknowledged_record_and_half_writes_none(archive_url: str) -> None:
    rng = random.Random(7)
    acked: list[int] = []
    first = 0
    for _ in range(TRIALS):
        got = _run_and_kill(archive_url, first, rng.uniform(0.05, 0.6))
        assert got, "each trial acknowledges at least one record"
        acked += got
        first = got[-1] + 2  # the record after the last acknowledged one may or may not be there
    with Archive(archive_url) as a:
        rows = a.db.execute("SELECT at, workload, u_cpu, r_ram, throttled_s FROM archive_samples")
        by_at: dict[float, dict[str, tuple[float, float, float]]] = {}
        for at, w, u, r, thr in rows:
            by_at.setdefault(float(at), {})[str(w)] = (u, r, thr)
        for i in acked:  # every acknowledged record, whole and as written
            got = by_at.get(i * STEP_S)
            assert got is not None, f"acknowledged record {i} is lost"
            want = values(i)
            assert sorted(got) == WORKLOADS
            for j, w in enumerate(WORKLOADS):
                assert got[w] == pytest.approx((want[j, 0], 2 * want[j, 1], 0.25))
        for at, got in by_at.items():  # an unacknowledged last record: all of it or nothing
            assert len(got) == len(WORKLOADS), f"record at {at} is half written ({len(got)} rows)"
        events = {e.at for e in a.events()}
        assert {i * STEP_S for i in acked} <= events
        # every rollup matches the samples of its slot: a compaction is all done or not at all
        done = a._mark("rolled_300")
        assert done is not None
        name, start, _, stats = a._buckets(300.0, "start < ?", (done,))
        counts = {}
        for at, got in by_at.items():
            if at < done:
                for w in got:
                    key = (w, np.floor(at / 300.0) * 300.0)
                    counts[key] = counts.get(key, 0) + 1
        stored = {(w, s): int(c) for w, s, c in zip(name, start, stats[:, 0, 0, 0], strict=True)}
        assert stored == counts
        # and the placements with them: each workload on node-a from its first rolled sample to its
        # last (the records a crash skipped leave gaps of a few steps, far below a placement gap)
        rolled = [at for at in by_at if at < done]
        placed = a.db.execute("SELECT workload, node, first_at, last_at FROM archive_placements")
        want = [(w, "node-a", min(rolled), max(rolled)) for w in WORKLOADS]
        assert sorted((w, n, float(f), float(t)) for w, n, f, t in placed) == want
