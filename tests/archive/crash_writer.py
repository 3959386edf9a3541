"""The writer the crash test kills: records batches (and events) as fast as it can, compacting now
and then, and prints each record's number only after the call that wrote it returned (an
acknowledgement). Usage: python crash_writer.py WHERE FIRST."""

from __future__ import annotations

import math
import sys

import numpy as np

from kalena.archive import Archive, ArchiveEvent, Retention

WORKLOADS = [f"w{j:02d}" for j in range(20)]
STEP_S = 37.0  # simulated seconds per record: 5-minute slots close every few records


def values(i: int) -> np.ndarray:
    """Record i's usage: row j is i + j / 100 in every dimension (checkable after the crash)."""
    return np.repeat((i + np.arange(len(WORKLOADS)) / 100.0)[:, None], 8, axis=1)


def main() -> None:
    where, first = sys.argv[1], int(sys.argv[2])
    archive = Archive(where, Retention(raw_s=math.inf))  # raw kept: the check reads every sample
    i = first
    while True:
        at = i * STEP_S
        archive.record(at, "node-a", WORKLOADS, values(i), values(i) * 2, np.full(len(WORKLOADS), 0.25))
        archive.record_events([ArchiveEvent(at, "eviction", "node-a", WORKLOADS[i % 20], "memory-pressure")])
        print(i, flush=True)
        if i % 4 == 0:
            archive.compact(at)
        i += 1


if __name__ == "__main__":
    main()
