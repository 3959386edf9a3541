"""A read trace as Kalena's inputs: Kuberina IR documents, a blueprint by the packer, and what the
simulator replays (production's usage samples, the batch arrivals).

* **Infrastructure**: one node per kept machine (``allocatable`` its capacity in cores and GiB).
* **Workloads**: one declaration per production task present at the window's start (one replica,
  its request). Production that arrives inside the window is not replayed: the simulator's
  production is the blueprint's, fixed for the run (a note counts it); production that ends inside
  the window runs on (its last sample holds).
* **Blueprint**: the packer's placement (``kalena.core.packing.pack``, as ``kalena pack``), not the
  trace's own: what a Kuberina plan of this workload would look like. Production the packer
  cannot place is left out, with a note.
* **Production usage**: each task's samples (start, cpu, ram); a task without samples uses its
  request times the trace's aggregate usage over request for production (if the trace has no
  production usage at all: its request; no reclamation then).
* **Batch**: every batch task submitted in the window, at its submit time (0: present at the
  start, a *warm* pod). It runs for its recorded ``duration`` at its measured mean cpu (the
  trace's batch aggregate ratio times its request without samples; at least
  :data:`MIN_DEMAND_CORES`), and uses its measured memory, at most its request. A task whose
  duration is unknown (censored: still running when the data ends, or never started) runs past
  the window's end.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

import numpy as np

from kalena.core.cluster import Cluster
from kalena.core.packing import pack
from kalena.core.resources import CPU, NDIM, RAM
from kalena.ir.build import DocumentSet, build_cluster
from kalena.ir.document import BlueprintDoc, DeclDoc, InfraDoc, MetaDoc, NodeDoc, WorkloadsDoc
from kalena.traces.model import Trace, usage_over_request

#: A batch pod's cpu while running is at least this (a task whose samples say 0 still runs).
MIN_DEMAND_CORES = 1e-3

_UNSAFE = re.compile(r"[^a-z0-9-]+")


def dns_name(text: str) -> str:
    """``text`` as a name IR documents accept (lower case, digits and dashes)."""
    return _UNSAFE.sub("-", text.lower()).strip("-") or "x"


@dataclass(frozen=True, eq=False)
class Replay:
    """Everything a trace replay runs on (module docstring)."""

    infra: InfraDoc
    workloads: WorkloadsDoc
    blueprint: BlueprintDoc
    cluster: Cluster  # placed by the blueprint
    #: pod id -> (t, cpu, ram) of its samples, time-sorted
    production_samples: Mapping[str, tuple[np.ndarray, np.ndarray, np.ndarray]]
    production_ratio: tuple[float, float]  # usage / request of a production pod without samples
    #: keyword arguments of ``kalena.sim.batch.recorded``
    batch: Mapping[str, object]
    notes: tuple[str, ...] = field(default=())


def _ratio(trace: Trace, mask: np.ndarray, dim: str) -> float:
    r = usage_over_request(trace, mask, dim)
    return r if math.isfinite(r) else 1.0


def _per_task_means(trace: Trace) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each task's span-weighted mean cpu and ram over its samples, and whether it has any."""
    us, n = trace.usage, len(trace.tasks)
    w = np.bincount(us.task, weights=us.span, minlength=n)
    has = w > 0
    cpu = np.divide(
        np.bincount(us.task, weights=us.cpu * us.span, minlength=n), w, where=has, out=np.zeros(n)
    )
    ram = np.divide(
        np.bincount(us.task, weights=us.ram * us.span, minlength=n), w, where=has, out=np.zeros(n)
    )
    return cpu, ram, has


def replay(trace: Trace, *, file_stem: str = "trace") -> Replay:
    """The IR documents, the packed cluster and the replay's inputs of ``trace``."""
    tk, ma = trace.tasks, trace.machines
    ns = dns_name(trace.source)
    notes = list(trace.notes)
    node_names = [f"m-{dns_name(n)}" for n in ma.names]
    infra = InfraDoc(
        f"{file_stem}_infra.yaml",
        legacy=False,
        nodes=tuple(
            NodeDoc(name, allocatable={"cpu": float(c), "ram": float(r)})
            for name, c, r in zip(node_names, ma.cpu, ma.ram, strict=True)
        ),
    )
    start = tk.production & (tk.submit <= 0.0)
    late = int((tk.production & ~start).sum())
    if late:
        notes.append(
            f"{late} production tasks submitted inside the window are not replayed (production is fixed)"
        )
    prod_idx = np.flatnonzero(start)
    decls = tuple(
        DeclDoc(ns, f"t-{dns_name(tk.ids[i])}", requests={"cpu": float(tk.cpu[i]), "ram": float(tk.ram[i])})
        for i in prod_idx.tolist()
    )
    pod_of = {int(i): d.pod_ids()[0] for i, d in zip(prod_idx.tolist(), decls, strict=True)}
    workloads = WorkloadsDoc(f"{file_stem}_workloads.yaml", legacy=False, declarations=decls)
    unplaced = build_cluster(DocumentSet(infra, workloads))
    packed = pack(unplaced)
    if packed.pending:
        notes.append(f"{len(packed.pending)} production tasks the packer could not place are not replayed")
        gone = {w for w, _ in packed.pending}
        kept = tuple(d for d in decls if d.pod_ids()[0] not in gone)
        pod_of = {i: p for i, p in pod_of.items() if p not in gone}
        workloads = replace(workloads, declarations=kept)
    solution = tuple((pid, packed.placement[pid]) for pid in pod_of.values())
    blueprint = BlueprintDoc(
        f"{file_stem}_blueprint.yaml",
        legacy=False,
        solution=solution,
        metadata=MetaDoc(feasible=True, pods=len(solution), active_nodes=len(set(packed.placement.values()))),
    )
    cluster = build_cluster(DocumentSet(infra, workloads, blueprint))

    us = trace.usage
    samples: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
    if len(us):
        bounds = np.searchsorted(us.task, np.arange(len(tk) + 1))
        for i, pid in pod_of.items():
            lo, hi = bounds[i], bounds[i + 1]
            if hi > lo:
                samples[pid] = (us.t[lo:hi], us.cpu[lo:hi], us.ram[lo:hi])
    prod_ratio = (_ratio(trace, tk.production, "cpu"), _ratio(trace, tk.production, "ram"))
    if not (len(us) and tk.production[us.task].any()):
        notes.append("the trace has no production usage: production pods use their requests")
    batch = _batch(trace, notes)
    return Replay(infra, workloads, blueprint, cluster, samples, prod_ratio, batch, tuple(notes))


def _batch(trace: Trace, notes: list[str]) -> dict[str, object]:
    tk = trace.tasks
    idx = np.flatnonzero(~tk.production & (tk.submit < trace.horizon_s))
    mean_cpu, mean_ram, has = _per_task_means(trace)
    ratio_cpu, ratio_ram = _ratio(trace, ~tk.production, "cpu"), _ratio(trace, ~tk.production, "ram")
    cpu, ram = tk.cpu[idx], tk.ram[idx]
    demand = np.maximum(np.where(has[idx], mean_cpu[idx], cpu * ratio_cpu), MIN_DEMAND_CORES)
    ram_use = np.minimum(np.where(has[idx], mean_ram[idx], ram * ratio_ram), ram)
    submit = tk.submit[idx]
    duration = tk.duration[idx]
    censored = ~np.isfinite(duration)
    # past the window's end: the replay ends before a censored task would
    nominal = np.where(
        censored, trace.horizon_s - submit + max(trace.horizon_s, 3600.0), np.maximum(duration, 1.0)
    )
    if censored.any():
        notes.append(f"{int(censored.sum())} batch tasks with no recorded end run past the window's end")
    jobs: dict[str, int] = {}
    job = np.array([jobs.setdefault(tk.job[i], len(jobs)) for i in idx.tolist()], dtype=np.int64)
    requests = np.zeros((len(idx), NDIM))
    requests[:, CPU] = cpu
    requests[:, RAM] = ram
    return {
        "ids": tuple(f"t-{dns_name(tk.ids[i])}" for i in idx.tolist()),
        "job": job,
        "submit": submit,
        "requests": requests,
        "priority": tk.priority[idx],
        "nominal": nominal,
        "demand": demand,
        "ram_use": ram_use,
        "warm": submit <= 0.0,
        "namespace": dns_name(trace.source) + "-batch",
    }
