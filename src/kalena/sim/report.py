"""``report.json``: every metric of a run as plain data (definitions in metrics.py and README.md).

Keys that scripts may rely on (issue 3): ``reclaimed_work_fraction``, ``reclaimed_cpu_core_hours``,
``batch_cpu_core_hours``, ``batch_tasks_completed``, ``evictions`` (an object by cause),
``production_oom_kills``, ``production_unmet_cpu_core_seconds``, ``restoration_violations``,
``simulated_seconds``, ``wall_seconds``, ``seed``. Everything but ``wall_seconds`` is a function of
the inputs and the seed.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from kalena.core.enforcement import EvictionCause
from kalena.core.lifecycle import TaskState
from kalena.core.placement import SchedulingContext, why_pending
from kalena.core.placement.state import PassState
from kalena.core.resources import CPU, RAM
from kalena.sim.engine import Simulation

WHY_PENDING_EXAMPLES = 3

#: The files of a run's output folder (``kalena simulate --out``), named here, without matplotlib, so
#: that a later run can replace or remove each of them: the report and the plots of ``sim.plots``.
REPORT_FILE = "report.json"
SLACK_CLUSTER_PLOT, SLACK_NODE_PLOT, ACCURACY_PLOT, COMPARE_PLOT = (
    "slack_cluster.png",
    "slack_node.png",
    "reservation_cdf.png",
    "compare.png",  # --compare only: the arms side by side
)
OUTPUT_FILES = (REPORT_FILE, SLACK_CLUSTER_PLOT, SLACK_NODE_PLOT, ACCURACY_PLOT, COMPARE_PLOT)


#: The keys of a report that depend on the wall clock or the command line, at any depth.
UNTIMED_KEYS = ("wall_seconds", "command")


def timeless(report: Any) -> Any:
    """``report`` without :data:`UNTIMED_KEYS`, at any depth: what the same inputs and seed give
    again, wherever and however the run was made."""
    if isinstance(report, dict):
        return {k: timeless(v) for k, v in report.items() if k not in UNTIMED_KEYS}
    return report


def _r(x: float, digits: int = 6) -> float:
    return float(round(float(x), digits)) if math.isfinite(x) else float(x)


def _quantiles(values: np.ndarray, qs: tuple[float, ...] = (0.1, 0.5, 0.9, 0.99)) -> dict[str, float]:
    if len(values) == 0:
        return {"n": 0}
    out: dict[str, float] = {"n": len(values), "mean": _r(values.mean())}
    for q in qs:
        out[f"p{round(q * 100)}"] = _r(np.quantile(values, q))
    return out


def _accuracy(sim: Simulation) -> dict[str, Any]:
    acc = sim.metrics.accuracy_arrays()
    out: dict[str, Any] = {}
    for dim in ("cpu", "ram"):
        r, u = acc[f"{dim}_reservation"], acc[f"{dim}_usage"]
        out[dim] = {
            "reservation_over_request": _quantiles(r, (0.1, 0.5, 0.9)),
            "usage_over_request": _quantiles(u, (0.1, 0.5, 0.9)),
            # the area between the two CDFs: how far reservations sit above usage, in requests
            "overestimation_area": _r(float((r - u).mean())) if len(r) else None,
            "under_reserved_fraction": _r(float((u > r).mean())) if len(r) else None,
        }
    return out


def _pass_state(sim: Simulation) -> PassState:
    """A scheduling pass's view of the run's end, for the core's why-pending answers."""
    shell = sim.shell
    nodes, prod_aa, _ = shell.cache.bind(sim.ledger, shell.config)
    ctx = SchedulingContext(
        now=sim.now, cooldowns=shell.cooldowns, blacklist=shell.blacklist, eligible=shell.eligible(sim.now)
    )
    return PassState(sim.ledger, ctx, shell.config, nodes, prod_aa, None)


def _why_pending(sim: Simulation) -> list[str]:
    """The core's why-pending answer for the first few classes still pending at the end."""
    keys = list(sim.queue.classes)[:WHY_PENDING_EXAMPLES]
    if not keys:
        return []
    state = _pass_state(sim)
    pods = [sim.tasks.specs[sim.queue.classes[key][0]] for key in keys]
    return [f"{pod.id}: {why_pending(pod, state).message}" for pod in pods]


def task_index(sim: Simulation, task_id: str) -> int | None:
    """The batch pod of id ``task_id`` (its index in the population), or ``None``."""
    return next((i for i, spec in enumerate(sim.tasks.specs) if spec.id == task_id), None)


def task_story(sim: Simulation, i: int) -> dict[str, Any]:
    """One batch pod's run (``kalena simulate --why``): every lifecycle step with its reason
    code, where it ran last, its evictions and kernel kills, and, pending at the end, the core's
    why-pending answer."""
    spec, ts = sim.tasks.specs[i], sim.ts
    submitted = i < len(sim.life)
    steps = sim.life.history(i) if submitted else ()
    node = int(ts.node[i])
    out: dict[str, Any] = {
        "task": spec.id,
        "submitted_at": _r(float(sim.tasks.submit[i])),
        "state_at_end": steps[-1].state.value if steps else "not submitted",
        "history": [{"state": t.state.value, "at": _r(t.time), "reason": t.reason.value} for t in steps],
        "node_at_end": sim.ledger.node_names[node] if node >= 0 else None,
        "evictions": int(ts.evictions[i]),
        "kernel_kills": int(ts.kills[i]),
    }
    if steps and steps[-1].state is TaskState.PENDING:
        out["why_pending"] = why_pending(spec, _pass_state(sim)).message
    return out


def build_report(sim: Simulation) -> dict[str, Any]:
    """The report of a finished run."""
    if not sim.measured:
        raise ValueError("the run was not measured (Simulation(measured=False)): it has no report")
    m, ts, tasks, led, cfg = sim.metrics, sim.ts, sim.tasks, sim.ledger, sim.cfg
    s = m.sums
    total_work = s["production_cpu"] + s["batch_cpu"]
    state = sim.task_states()
    done = state == TaskState.SUCCEEDED.code
    fresh = done & ~tasks.warm
    inflation = (ts.finish[fresh] - tasks.submit[fresh]) / tasks.nominal[fresh]
    cap = sim.cap
    finite = np.isfinite(cap)
    evictions = {c.value: int(m.evictions.get(c.value, 0)) for c in EvictionCause}
    throttled = ts.throttled_s.copy()
    running = np.flatnonzero(ts.row >= 0)  # on a node: placed, starting, running or throttled
    throttled[running] += sim.table.total_s(ts.row[running])
    counts = m.counts
    return {
        "seed": cfg.seed,
        "arm": cfg.arm,
        "reclaim": cfg.reclaim,
        "enforce": cfg.enforce,
        "estimator": cfg.policy.estimator,
        "estimator_params": dataclasses.asdict(getattr(cfg.policy, cfg.policy.estimator)),
        "batch_load_factor": cfg.batch_load_factor,
        "simulated_seconds": _r(cfg.ticks * cfg.tick_s),
        "tick_seconds": cfg.tick_s,
        "wall_seconds": _r(sim.wall_seconds, 3),
        "cluster": {
            "nodes": led.n_nodes,
            "active_nodes": int(m.active.sum()),
            "production_workloads": led.production_count,
            "cpu_capacity_cores": _r(cap[:, CPU][finite[:, CPU]].sum()),
            "cpu_requested_cores": _r(led.request_sum[:, CPU].sum()),
            "ram_capacity_gib": _r(cap[:, RAM][finite[:, RAM]].sum()),
            "ram_requested_gib": _r(led.request_sum[:, RAM].sum()),
        },
        "reclaimed_work_fraction": _r(s["reclaimed_work"] / total_work if total_work else 0.0),
        "task_reclaimed_work_fraction": _r(s["batch_cpu_by_reclaim"] / total_work if total_work else 0.0),
        "batch_work_above_unallocated_fraction": _r(
            s["work_above_unallocated"] / total_work if total_work else 0.0
        ),
        "reclaimed_cpu_core_hours": _r(s["reclaimed_cpu"] / 3600.0),
        "reclaimed_ram_gib_hours": _r(s["reclaimed_ram"] / 3600.0),
        "batch_cpu_core_hours": _r(s["batch_cpu"] / 3600.0),
        "production_cpu_core_hours": _r(s["production_cpu"] / 3600.0),
        "batch_share_of_work": _r(s["batch_cpu"] / total_work if total_work else 0.0),
        "batch_tasks_submitted": int(np.count_nonzero(state >= 0)),
        "batch_tasks_warm_start": int(tasks.warm.sum()),
        "batch_tasks_completed": int(done.sum()),
        "batch_tasks_running_at_end": len(running),
        "batch_tasks_pending_at_end": int(np.count_nonzero(state == TaskState.PENDING.code)),
        "batch_task_states_at_end": {st.value: int(np.count_nonzero(state == st.code)) for st in TaskState},
        "batch_task_transitions": len(sim.life.history_columns().task),
        "completion_time_inflation": _quantiles(inflation),
        "batch_throttled_seconds": {
            "total": _r(throttled.sum()),
            "per_task": _quantiles(throttled[state >= 0], (0.5, 0.9, 0.99)),
        },
        "evictions": evictions,
        "evictions_total": sum(evictions.values()),
        "production_evictions": int(counts["production_evictions"]),
        "production_evictions_without_override": int(counts["production_evictions_without_override"]),
        "production_oom_kills": int(counts["production_oom_kills"]),
        "batch_oom_kills": int(counts["batch_oom_kills"]),
        "escalations": int(counts["escalations"]),
        "escalations_draining": int(counts["escalations_draining"]),
        "production_unmet_cpu_core_seconds": _r(s["unmet"]),
        "production_capped_cpu_core_seconds": _r(s["capped"]),
        "production_interference_cpu_core_seconds": _r(s["interference"]),
        "production_above_reservation_fraction": _r(
            s["production_above_reservation"] / pod_s if (pod_s := s["production_pod_seconds"]) else 0.0
        ),
        "reservation_accuracy": _accuracy(sim),
        "pareto_reserve_yield": _r(s["reserve_used"] / s["reserve"] if s["reserve"] else 0.0),
        "restoration_violations": int(counts["restoration_violations"]),
        "restoration_violation_examples": list(m.violations),
        "mitigation": {
            "node_rounds": int(counts["rounds"]),
            "eviction_plans": int(counts["eviction_plans"]),
            "starvation_service_caps": int(counts["starvation_caps"]),
            "stale_evictions": int(counts["stale_evictions"]),
        },
        "placement": dict(sim.shell.stats),
        "why_pending_examples": _why_pending(sim),
    }


def compare(
    reclaim: dict[str, Any], no_reclaim: dict[str, Any], baseline: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The reclaim arm's report with the others nested (``no_reclaim``: Kalena's policy without
    reclamation; ``baseline``: no Kalena) and the differences. Against the baseline, the headline:
    ``work_enabled_by_reclamation_fraction``, the batch cpu work the reclaim arm did beyond the
    baseline's, over all the reclaim arm's cpu work (may be negative)."""
    out = dict(reclaim)
    out["no_reclaim"] = no_reclaim
    gain = reclaim["batch_cpu_core_hours"] - no_reclaim["batch_cpu_core_hours"]
    out["comparison"] = {
        "extra_batch_cpu_core_hours": _r(gain),
        "extra_batch_tasks_completed": reclaim["batch_tasks_completed"] - no_reclaim["batch_tasks_completed"],
        "extra_production_unmet_cpu_core_seconds": _r(
            reclaim["production_unmet_cpu_core_seconds"] - no_reclaim["production_unmet_cpu_core_seconds"]
        ),
    }
    if baseline is not None:
        out["baseline"] = baseline
        total = reclaim["batch_cpu_core_hours"] + reclaim["production_cpu_core_hours"]
        more = reclaim["batch_cpu_core_hours"] - baseline["batch_cpu_core_hours"]
        unmet, slow = "production_unmet_cpu_core_seconds", "production_interference_cpu_core_seconds"
        out["comparison"].update(
            {
                "work_enabled_by_reclamation_fraction": _r(more / total if total else 0.0),
                "extra_batch_cpu_core_hours_over_baseline": _r(more),
                "extra_batch_tasks_completed_over_baseline": reclaim["batch_tasks_completed"]
                - baseline["batch_tasks_completed"],
                "extra_production_unmet_cpu_core_seconds_over_baseline": _r(reclaim[unmet] - baseline[unmet]),
                "extra_production_interference_cpu_core_seconds_over_baseline": _r(
                    reclaim[slow] - baseline[slow]
                ),
            }
        )
    return out
