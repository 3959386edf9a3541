"""Independent runs of one sweep, in local worker processes or on a Dask cluster.

Every sweep of the CLI (compaction trials, Pareto points, the calibration grid) hands its jobs
here: ``fn(*job)`` for each, with a progress bar, the results in job order. :func:`started` runs a
few jobs beside the caller's own work instead (``--compare``'s other arms). By default they run
in local processes (``--workers``, 0: one per CPU); with ``--scheduler ADDRESS`` on the Dask
cluster whose scheduler listens there (``dask.distributed``, the ``kalena[dask]`` extra), whose
workers must have Kalena installed. Either way each job is the same pure function of its
arguments, so the results are the same.
"""

from __future__ import annotations

import contextlib
import copyreg
import functools
import multiprocessing
import os
import signal
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, as_completed, wait
from types import MappingProxyType
from typing import Annotated, Any

import typer
from rich.progress import Progress

from kalena.cli.screen import bad_input, progress_bar
from kalena.core.cluster import Cluster
from kalena.ir import load_cluster
from kalena.manifests.cluster import ManifestCluster, read_cluster

#: The two options of every sweep command.
WorkersOpt = Annotated[int, typer.Option(help="Worker processes (0: one per CPU).", min=0)]
SchedulerOpt = Annotated[
    str | None,
    typer.Option(help="Run on the Dask cluster whose scheduler is at this ADDRESS.", show_default=False),
]

#: How long to wait for a Dask scheduler to answer before saying so.
CONNECT_TIMEOUT_S = 30


def _unproxy(d: dict[Any, Any]) -> MappingProxyType[Any, Any]:
    return MappingProxyType(d)


def _proxy(m: MappingProxyType[Any, Any]) -> tuple[Any, tuple[dict[Any, Any]]]:
    return _unproxy, (dict(m),)


# Jobs carry the core's frozen specs to other processes (compaction's batch pods), and those keep
# their labels in read-only mappings, which pickle cannot take by itself: rebuilt from a dict.
copyreg.pickle(MappingProxyType, _proxy)  # type: ignore[arg-type]


#: The first of :func:`worker_cluster`'s arguments when the rest are Kubernetes manifests.
MANIFESTS = "--manifests"


@functools.cache
def worker_cluster(*paths: str) -> Cluster:
    """The cluster of these IR files (or of the Kubernetes manifests after :data:`MANIFESTS`),
    read once per worker process (every job of a sweep reads the same files)."""
    if paths and paths[0] == MANIFESTS:
        return worker_manifests(*paths[1:]).cluster
    return load_cluster(*paths)


@functools.cache
def worker_manifests(*paths: str) -> ManifestCluster:
    """The Kubernetes manifests' cluster with what ties it back to them, read once per process."""
    return read_cluster(paths)


class JobFailed(Exception):
    """Job ``index`` raised ``error``; the jobs not yet started were cancelled."""

    def __init__(self, index: int, error: BaseException) -> None:
        super().__init__(f"job {index}: {error!r}")
        self.index, self.error = index, error


def run_all(
    fn: Callable[..., Any],
    jobs: Sequence[tuple[Any, ...]],
    *,
    workers: int = 0,
    scheduler: str | None = None,
    label: str = "runs",
    quiet: bool = False,
    done: Callable[[int, Any], None] | None = None,
) -> list[Any]:
    """``[fn(*job) for job in jobs]``, computed in parallel (module docstring); ``done(i, result)``
    as each job ends (a caller that keeps what finished, should the sweep stop)."""
    results: list[Any] = [None] * len(jobs)
    if not jobs:
        return results
    if scheduler:
        with progress_bar(label, quiet) as bar:
            _on_dask(fn, jobs, scheduler, results, _advancer(bar, label, results, done))
        return results
    # the workers are forked on entering the pool, before the bar's thread starts (``_local_pool``)
    with _local_pool(min(workers_of(workers), len(jobs))) as pool, progress_bar(label, quiet) as bar:
        advance = _advancer(bar, label, results, done)
        futures = {pool.submit(fn, *job): i for i, job in enumerate(jobs)}
        for f in as_completed(futures):
            try:
                results[futures[f]] = f.result()
            except Exception as e:
                raise JobFailed(futures[f], e) from e
            advance(futures[f])
    return results


def _advancer(
    bar: Progress, label: str, results: list[Any], done: Callable[[int, Any], None] | None
) -> Callable[[int], None]:
    """What to do as job ``i`` ends: tell ``done``, then move the bar on."""
    task = bar.add_task(label, total=len(results))

    def advance(i: int) -> None:
        if done is not None:
            done(i, results[i])
        bar.advance(task)

    return advance


def _deaf_to_ctrl_c() -> None:
    """A worker process's start. Ctrl-C reaches the whole process group and the parent stops its
    workers itself: a worker that took it would print a traceback, and could leave its pool hung."""
    if threading.current_thread() is threading.main_thread():  # (a thread pool stands in, in tests)
        signal.signal(signal.SIGINT, signal.SIG_IGN)


@contextlib.contextmanager
def _local_pool(workers: int, *, spawn: bool = False) -> Iterator[ProcessPoolExecutor]:
    """``workers`` local processes, deaf to Ctrl-C (forked on entry, or ``spawn``: fresh interpreters,
    started by the submissions). Leaving the block early (a job's error, Ctrl-C) stops them rather
    than waiting for their jobs; at its end, jobs still outstanding are cancelled."""
    # (the platform's default context unless spawning, and then only named: a test's thread pool
    # stands in for the forked one)
    spawned = {"mp_context": multiprocessing.get_context("spawn")} if spawn else {}
    pool = ProcessPoolExecutor(max_workers=workers, initializer=_deaf_to_ctrl_c, **spawned)
    try:
        if not spawn:
            # A forked pool forks every worker at its first job: that job is given now, on entry,
            # while the caller has no other thread. A fork beside a running thread (a progress
            # bar's, writing to stderr) copies the locks that thread holds, held for good: the
            # worker would hang at its first warning.
            pool.submit(int)
        yield pool
    except BaseException:
        # (Python 3.14 has terminate_workers(); before it, the pool's own table of its processes)
        processes = list((getattr(pool, "_processes", None) or {}).values())
        for p in processes:
            p.terminate()
        # The pool's manager thread sees them gone: it fails the jobs left, reaps the workers and
        # closes its pipes. Waited for, not raced: reaping a worker beside it could leave the worker
        # listed as running, and its pipes closing beside Python 3.11's exit hook printed a traceback.
        pool.shutdown(wait=True, cancel_futures=True)
        for p in processes:
            p.join()  # (reaped already: at once)
        raise
    pool.shutdown(wait=True, cancel_futures=True)


@contextlib.contextmanager
def started(
    fn: Callable[..., Any], jobs: Sequence[tuple[Any, ...]], workers: int
) -> Iterator[list[Future[Any]]]:
    """``fn(*job)`` for each job, started at once in at most ``workers`` processes (0: one per
    CPU) while the caller goes on with its own work; :func:`finished` collects them. Leaving the
    block early (an error, Ctrl-C) stops the workers rather than waiting for their jobs."""
    # spawned, not forked: a fresh interpreter shares none of the caller's threads or open files.
    with _local_pool(max(1, min(workers_of(workers), len(jobs))), spawn=True) as pool:
        # A spawned pool starts a worker inside each submission: Ctrl-C is held until they are
        # all made (a worker half made could not be stopped), then raised here, which stops them.
        held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            pending = [pool.submit(fn, *job) for job in jobs]
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, held)
        yield pending


def finished(pending: Sequence[Future[Any]], label: str, quiet: bool = False) -> list[Any]:
    """The results of :func:`started`'s jobs in job order, waited for with a progress bar; the
    first job to fail raises its exception here, without waiting for the others."""
    with progress_bar(label, quiet) as bar:
        task = bar.add_task(label, total=len(pending))
        while True:
            done = [f for f in pending if f.done()]
            for f in done:
                if f.exception() is not None:
                    f.result()  # raises the job's exception
            bar.update(task, completed=len(done))
            if len(done) == len(pending):
                return [f.result() for f in pending]
            wait([f for f in pending if not f.done()], timeout=0.25, return_when=FIRST_COMPLETED)


def workers_of(workers: int) -> int:
    """``--workers``: 0 is one per CPU."""
    return workers or os.cpu_count() or 1


@contextlib.contextmanager
def submitter(workers: int, scheduler: str | None) -> Iterator[Callable[..., Any]]:
    """``submit(fn, *args)``, returning a future (``done``, ``result``, ``cancel``), for a sweep
    whose jobs depend on earlier results: in ``workers`` local processes, or on the Dask cluster
    whose scheduler is at ``scheduler``. Jobs still outstanding at the end are cancelled."""
    if scheduler:
        with _dask_client(scheduler) as client:
            yield functools.partial(client.submit, pure=False)
        return
    with _local_pool(workers_of(workers)) as pool:
        yield pool.submit


def _dask_client(scheduler: str) -> Any:
    try:
        from distributed import Client
    except ImportError:
        need = "needs Dask's distributed package: pip install 'kalena[dask]'"
        raise bad_input([f"--scheduler: {need} (value: {scheduler!r})"]) from None
    try:
        return Client(scheduler, timeout=CONNECT_TIMEOUT_S)
    except (OSError, TimeoutError, ValueError) as e:
        raise bad_input(
            [f"--scheduler: cannot reach a Dask scheduler there: {e} (value: {scheduler!r})"]
        ) from None


def _on_dask(
    fn: Callable[..., Any],
    jobs: Sequence[tuple[Any, ...]],
    scheduler: str,
    results: list[Any],
    advance: Callable[[int], None],
) -> None:
    client = _dask_client(scheduler)  # (distributed is importable once it answers)
    from distributed import as_completed as completed

    with client:
        futures = [client.submit(fn, *job, pure=False) for job in jobs]
        index = {f.key: i for i, f in enumerate(futures)}
        for f in completed(futures):
            try:
                results[index[f.key]] = f.result()
            except Exception as e:
                client.cancel(futures)
                raise JobFailed(index[f.key], e) from e
            advance(index[f.key])
