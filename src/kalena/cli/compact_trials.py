"""The compaction trials of ``kalena compact``, scheduled so that they overlap the checkpoint run.

Each arm's first trial bisects; once it is done, the rest of the arm run guided by it
(:class:`~kalena.core.compaction.Guide`). The production arm needs nothing from the simulated
run, so it starts before it. The batch arms follow the worst checkpoint so far: a checkpoint
that becomes the worst (re)starts them, and the trials of one that stops being the worst are
dropped. While the run goes on, at most ``workers - 1`` trials are outstanding, so the run keeps a
CPU; after it, ``workers``. Every trial is the same pure function of its arguments as a trial run
after the day, so the results are those of running the arms one after the other.

A dropped trial that a local worker is already running is told to stop, so that it frees its
worker before its next pack rather than at its end: its arm's stop file (one per start of an
arm, in a folder the command removes) is made, and the trial asks whether it exists before each
pack. On Dask the cluster drops such a trial itself.
"""

from __future__ import annotations

import functools
import os
import pickle
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kalena.cli.fanout import worker_cluster
from kalena.core.compaction import BatchLoad, Compaction, Guide, Trial, trial

#: How often the runner looks at its outstanding trials while it waits for them.
POLL_S = 0.02


def one(
    source: tuple[str, ...],
    seed: int,
    fraction: float,
    load: bytes | None,
    reclaim: bool,
    guide: Guide | None,
    stop: str | None = None,
) -> Trial:
    """One trial in a worker process (the cluster read once per process, the batch load taken
    from its pickle once per process); it stops (``TrialStopped``) once the file ``stop`` exists."""
    batch = _unpickled(load) if load is not None else None
    proceed = None if stop is None else functools.partial(_not_there, stop)
    rng = np.random.default_rng(seed)
    return trial(worker_cluster(*source), rng, fraction, batch, reclaim, guide, proceed)


def _not_there(path: str) -> bool:
    return not os.path.exists(path)


@functools.lru_cache(maxsize=2)
def _unpickled(blob: bytes) -> BatchLoad:
    # The load (some 10,000 batch pods) goes to every job as the bytes it was pickled to once:
    # a job costs a copy, not a pickling in the parent and an unpickling in the worker (0.3 s).
    load: BatchLoad = pickle.loads(blob)  # our own pickle, made by the parent process
    return load


class TrialFailed(Exception):
    """Trial ``seed`` of arm ``arm`` raised ``error``."""

    def __init__(self, arm: str, seed: int, error: BaseException) -> None:
        super().__init__(f"trial {seed} of {arm}: {error!r}")
        self.arm, self.seed, self.error = arm, seed, error


@dataclass
class _Arm:
    load: bytes | None
    reclaim: bool
    stop: str | None  # made when the arm is restarted: its running trials stop
    running: dict[int, Any] = field(default_factory=dict)  # seed -> future
    done: dict[int, Trial] = field(default_factory=dict)
    queued: list[tuple[int, Guide | None]] = field(default_factory=lambda: [(0, None)])


class TrialRunner:
    """Every arm's trials through ``submit`` (:func:`kalena.cli.fanout.submitter`), at most
    ``limit`` outstanding (module docstring)."""

    def __init__(
        self,
        submit: Callable[..., Any],
        source: tuple[str, ...],
        trials: int,
        fraction: float,
        limit: int,
        stop_dir: str | None = None,
    ) -> None:
        """``stop_dir``: a folder the workers see, for the stop files (None: none are made)."""
        self.submit, self.source, self.trials, self.fraction = submit, source, trials, fraction
        self.limit = max(1, limit)
        self.stop_dir = stop_dir
        self.starts = 0
        self.arms: dict[str, _Arm] = {}
        self.dropped: list[Any] = []  # futures of arms restarted since: they still hold a worker

    def start(self, name: str, load: bytes | None, reclaim: bool) -> None:
        """(Re)start arm ``name`` on ``load``, a pickled :class:`BatchLoad` (None: production alone)."""
        old = self.arms.pop(name, None)
        if old is not None:
            running = [f for f in old.running.values() if f.cancel() is False]
            # (a local trial already running: Dask answers None, and drops it)
            self.dropped += running
            if running and old.stop is not None:
                with open(old.stop, "x"):  # told to stop before its next pack
                    pass
        self.starts += 1
        stop = None if self.stop_dir is None else os.path.join(self.stop_dir, f"{name}-{self.starts}")
        self.arms[name] = _Arm(load, reclaim, stop)
        self.pump()

    def pump(self) -> None:
        """Collect the trials done, queue an arm's guided trials once its first is done, and
        submit queued trials (firsts before guided ones) while fewer than ``limit`` are out."""
        self.dropped = [f for f in self.dropped if not f.done()]
        for name, arm in self.arms.items():
            for seed, f in list(arm.running.items()):
                if not f.done():
                    continue
                del arm.running[seed]
                try:
                    arm.done[seed] = f.result()
                except Exception as e:
                    raise TrialFailed(name, seed, e) from e
                if seed == 0:
                    guide = Guide.of(arm.done[0])
                    arm.queued += [(s, guide) for s in range(1, self.trials)]
        out = len(self.dropped) + sum(len(a.running) for a in self.arms.values())
        for first in (True, False):
            for arm in self.arms.values():
                while arm.queued and out < self.limit and (arm.queued[0][1] is None) == first:
                    seed, guide = arm.queued.pop(0)
                    job = (self.source, seed, self.fraction, arm.load, arm.reclaim, guide, arm.stop)
                    arm.running[seed] = self.submit(one, *job)
                    out += 1

    @property
    def finished(self) -> int:
        return sum(len(a.done) for a in self.arms.values())

    def finish(self, limit: int, progress: Callable[[int, int], None] | None = None) -> dict[str, Compaction]:
        """Wait for every trial of every arm (at most ``limit`` outstanding from now on);
        ``progress(done, total)`` as they end."""
        self.limit = max(1, limit)
        total = self.trials * len(self.arms)
        while True:
            self.pump()
            if progress is not None:
                progress(self.finished, total)
            if self.finished == total:
                break
            time.sleep(POLL_S)
        return {
            name: Compaction(tuple(arm.done[s] for s in range(self.trials)))
            for name, arm in self.arms.items()
        }
