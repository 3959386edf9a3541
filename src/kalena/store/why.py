"""A job's story: its lifecycle steps and the events that explain them, in words (``kalena job
why`` and the HTTP API's ``/v1/jobs/{id}``)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from kalena.store.db import EventRow, JobRow, Store, TransitionRow


def when(t: float | None) -> str:
    """Local time, to the second (``-``: none)."""
    if t is None:
        return "-"
    return datetime.fromtimestamp(t, UTC).astimezone().strftime("%Y-%m-%d %H:%M:%S")


#: The events that explain a job's steps (``job why``), and how each is said.
WHY_KINDS = (
    "submit", "pending", "admit", "throttle", "evict", "evicted", "sigkill", "finish", "oom-killed",
    "cancel", "rejected-submission",
)  # fmt: skip


def _n(x: Any) -> str:
    """A quantity as a person reads it (three significant digits)."""
    return f"{x:.3g}" if isinstance(x, int | float) and not isinstance(x, bool) else str(x)


def _phrases(reasons: Any) -> str:
    return "; ".join(str(r.get("phrase") or r.get("code")) for r in reasons or [] if isinstance(r, dict))


def explain(e: EventRow) -> str:
    """One event in words: the core's reasons as it gave them."""
    d = e.data
    if e.kind == "submit":
        return f"queued with priority {d.get('priority')}, requests {d.get('requests')}"
    if e.kind == "pending":
        return f"pending: {d.get('why')}"
    if e.kind == "admit":
        return f"placed on node {e.node or '?'} and started (pid {d.get('pid')})"
    if e.kind == "throttle":
        w = d.get("why") or {}
        reason = w.get("reason") or {}
        quota, said = w.get("quota_cores"), reason.get("phrase") or reason.get("code")
        return (
            f"CPU quota set to {_n(quota)} cores ({w.get('cause')}): {said}"
            f"; batch allowance {_n(w.get('allowance'))} cores"
        )
    if e.kind == "evict":
        w = d.get("why") or {}
        cond = w.get("node_condition") or {}
        text = f"evicted ({w.get('cause')} on {w.get('dimension')}): {_phrases(w.get('reasons'))}"
        if cond:
            text += (
                f"; node {cond.get('dimension')}: used {_n(cond.get('used'))}, reserved"
                f" {_n(cond.get('reserved'))} of {_n(cond.get('capacity'))}"
            )
        if d.get("deadline") is not None:
            text += f"; SIGKILL at {when(d.get('deadline'))} unless it exits"
        return text
    if e.kind == "evicted":
        return f"its processes are gone, {float(d.get('after_s') or 0):.1f} s after the stop signal"
    if e.kind == "sigkill":
        return "grace period over: SIGKILL"
    if e.kind == "finish":
        return f"finished: {d.get('status')} (exit code {d.get('exit_code')})" + (
            f": {d['error']}" if d.get("error") else ""
        )
    if e.kind == "oom-killed":
        return f"the kernel's OOM killer ended it (exit code {d.get('exit_code')})"
    if e.kind == "cancel":
        return f"cancelled by request (it was {d.get('was')})"
    return json.dumps(d, sort_keys=True)


def timeline(db: Store, row: JobRow) -> list[tuple[float, str, str, str]]:
    """(time, step, reason, detail) rows: the lifecycle's steps and the events about the job."""
    steps: list[TransitionRow] = db.transitions(row.job, row.submission)
    since = steps[0].at if steps else row.submitted_at
    runs = sorted({s.run for s in steps if s.run > 0})
    events = db.events(job=row.job, workloads=[f"batch/{row.job}.{r}" for r in runs], kinds=WHY_KINDS)
    out = [(s.at, s.state, s.reason, f"run {s.run}" if s.run else "") for s in steps]
    out += [(e.at, "", e.kind, explain(e)) for e in events if e.at >= since - 1e-6]
    out.sort(key=lambda x: (x[0], x[1] == ""))  # a step before the event that explains it
    return out
