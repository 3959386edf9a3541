"""The action log: one JSON line per action, each with its "why evicted" / "why throttled" record.

Kinds: ``start``, ``evict`` (the plan's victim order, the trigger, the core's WhyEvicted),
``evicted`` (the cgroup emptied: after SIGTERM or SIGKILL), ``throttle`` (a batch quota that
changed, with the core's ThrottleDecision and the plan's allowance), ``cap``/``uncap`` (an
anti-starvation cap on a service, and its removal), ``escalate``, ``admit``, ``pending``,
``finish``, ``write`` (every cgroup write the writer made), ``declaration`` (a rejected reload).

Eviction lines are fsynced: together with the state file's ``logged`` flag they make each
eviction appear exactly once even across a crash (:meth:`ActionLog.has_eviction`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kalena.core.enforcement import EvictionPlan, ThrottleDecision, ThrottlePlan, Victim
from kalena.core.messages.specs import reason_out
from kalena.core.messages.wire import number_out
from kalena.core.verdict import Reason

if TYPE_CHECKING:
    from kalena.agent.archiving import ArchiveTap


def reason_json(r: Reason) -> dict[str, Any]:
    """The core's message form of a reason (the same JSON a scheduler receives), plus its phrase."""
    return {**reason_out(r), "phrase": r.phrase()}


def why_evicted(v: Victim) -> dict[str, Any]:
    """The core's record for one victim, as JSON (SPEC: every eviction has a "why evicted")."""
    out: dict[str, Any] = {
        "workload": v.workload,
        "tier": v.tier.value,
        "priority": v.priority,
        "dimension": v.dimension,
        "cause": v.cause.value,
        "limit_breach_override": v.limit_breach_override,
        "grace_period_s": v.grace_period_s,
        "releases": {k: number_out(x) for k, x in v.releases.to_dict(skip_zero=True).items()},
        "requeue_until": None if v.requeue is None else v.requeue.cooldown_until,
        "reasons": [reason_json(r) for r in v.reasons],
    }
    w = v.why
    if w is not None:
        c = w.condition
        out["node_condition"] = {
            "dimension": c.dimension,
            "used": c.used,
            "reserved": c.reserved,
            "capacity": number_out(c.capacity),
            "triggered": c.triggered,
            "acute": c.acute,
        }
        r = w.reservation_rose
        out["reservation_rose"] = (
            None
            if r is None
            else {"workload": r.workload, "before": r.before, "after": r.after, "basis": r.basis}
        )
        out["priority_comparison"] = {
            "victim": w.priority.victim_priority,
            "highest_protected": w.priority.highest_protected,
            "protected": w.priority.protected,
        }
        out["usage"] = number_out(w.usage)
        out["limit"] = number_out(w.limit)
    return out


def plan_summary(plan: EvictionPlan) -> dict[str, Any]:
    return {
        "victim_order": [v.workload for v in plan.victims],
        "pressures": [
            {
                "dimension": p.condition.dimension,
                "reserved_after": p.reserved_after,
                "holds": p.holds,
                "skipped_min_run_time": list(p.skipped_min_run_time),
            }
            for p in plan.pressures
        ],
    }


def why_throttled(d: ThrottleDecision, plan: ThrottlePlan | None) -> dict[str, Any]:
    out: dict[str, Any] = {
        "workload": d.workload,
        "dimension": d.dimension,
        "quota_cores": number_out(d.quota),
        "weight": d.weight,
        "cause": d.cause.value,
        "reason": reason_json(d.reason),
    }
    if plan is not None:
        out.update(
            pressured=plan.pressured,
            service_claim=plan.service_claim,
            target=number_out(plan.target),
            allowance=number_out(plan.allowance),
            previous_allowance=None
            if plan.previous_allowance is None
            else number_out(plan.previous_allowance),
        )
    return out


class ActionLog:
    """Append-only JSON lines at ``path`` (``None``: keep in memory only, for tests)."""

    def __init__(self, path: Path | None, tap: ArchiveTap | None = None) -> None:
        self.path = path
        self.tap = tap  # evictions, throttles and caps also go to a usage archive
        self.memory: list[dict[str, Any]] = []
        self._f = None
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            torn = path.exists() and path.stat().st_size > 0 and not path.read_bytes().endswith(b"\n")
            self._f = open(path, "a", encoding="utf-8")  # noqa: SIM115 - held open for the agent's life
            if torn:  # a crash cut the last line: end it so the next record starts clean
                self._f.write("\n")

    def append(
        self, kind: str, time: float, *, sync: bool = False, with_save: bool = False, **fields: Any
    ) -> dict[str, Any]:
        """Append one record. ``with_save``: the record belongs with the state change the caller
        saves next (a run's end): a log that shares the state's store writes it in that save's
        transaction, so a crash keeps both or neither; this file log writes it at once."""
        rec = {"time": time, "kind": kind, **fields}
        self.memory.append(rec)
        if len(self.memory) > 10_000:  # keep memory bounded on a long run; the file has everything
            del self.memory[:5_000]
        if self._f is not None:
            self._f.write(json.dumps(rec, default=str, sort_keys=True) + "\n")
            self._f.flush()
            if sync:
                os.fsync(self._f.fileno())
        if self.tap is not None:
            self.tap.event(rec)
        return rec

    def close(self) -> None:
        if self._f is not None:
            self._f.close()
            self._f = None

    def has_eviction(self, eviction_id: str) -> bool:
        """Whether an ``evict`` line for ``eviction_id`` is already in the file (crash recovery)."""
        return any(r.get("kind") == "evict" and r.get("id") == eviction_id for r in read_log(self.path))


def read_log(path: Path | None) -> Iterator[dict[str, Any]]:
    """Every record of a log file (a torn last line after a crash is skipped)."""
    if path is None or not path.exists():
        return
    with open(path, encoding="utf-8") as f:
        for line in f:
            try:
                yield json.loads(line)
            except json.JSONDecodeError:
                continue
