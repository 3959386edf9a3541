"""``kalena submit``, ``kalena jobs``, ``kalena job why`` and ``kalena job cancel``: the batch queue
in Kalena's store (``--store``, or ``KALENA_STORE``; the Docker agent's is
``<state-dir>/kalena.db``).

``kalena submit`` answers only once the submission is committed: a job it printed is never lost.
Exit codes: 0 done; 2 bad input (an option, a job file's key or value, a name already in use,
an image the engine does not have, an unknown or ended job): one line per problem on stderr and
nothing changed; 3 the store or the engine cannot be used.
"""

from __future__ import annotations

import json
import sys
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from kalena.agent.jobfile import load_job_file
from kalena.agent.runtime import Submission, SubmissionError, parse_submission
from kalena.docker.engine import DEFAULT_ENDPOINT, Engine, EngineError, connect
from kalena.store import EventRow, JobRow, Store, StoreConflict, StoreError, TransitionRow

EXIT_BAD_INPUT = 2
EXIT_UNAVAILABLE = 3
DEFAULT_STORE = Path("/var/lib/kalena/kalena.db")

StorePath = Annotated[
    Path, typer.Option("--store", envvar="KALENA_STORE", help="Kalena's store (the agent's kalena.db).")
]
AsJson = Annotated[bool, typer.Option("--json", metavar="", help="Print JSON instead of a table.")]

job_app = typer.Typer(help="One job: why it is where it is, or cancel it.", no_args_is_help=True)


def _fail(lines: list[str], code: int) -> typer.Exit:
    for line in lines:
        typer.echo(f"error: {line}", err=True)
    return typer.Exit(code)


def _open(path: Path, create: bool = False) -> Store:
    try:
        return Store(path, create=create)
    except StoreError as e:
        raise _fail([str(e)], EXIT_UNAVAILABLE) from None


def _pairs(items: list[str] | None, option: str, what: str) -> dict[str, str]:
    out = {}
    for item in items or []:
        if "=" not in item:
            raise _fail([f"--{option}: expected {what} (value: {item!r})"], EXIT_BAD_INPUT)
        k, v = item.split("=", 1)
        out[k.strip()] = v.strip()
    return out


def _check_images(subs: list[Submission], endpoint: str) -> None:
    """Every image is on the engine (no registry is assumed reachable: a missing one never starts)."""
    images = sorted({s.image for s in subs if s.image})
    if not images:
        return
    try:
        engine = Engine(connect(endpoint, None), endpoint)
        missing = [i for i in images if not engine.has_image(i)]
    except EngineError as e:
        raise _fail([f"--docker-host: cannot check the images: {e} (or pass --no-image-check)"], 3) from None
    if missing:
        raise _fail(
            [
                f"image: not on the engine at {endpoint} (docker pull or load it first) (value: {i!r})"
                for i in missing
            ],
            EXIT_BAD_INPUT,
        )


def submit(
    command: Annotated[list[str] | None, typer.Argument(help="The command, after --.")] = None,
    store: StorePath = DEFAULT_STORE,
    file: Annotated[
        Path | None, typer.Option("--file", "-f", help="A job file (YAML, kind BatchJob) with several tasks.")
    ] = None,
    image: Annotated[str | None, typer.Option("--image", help="The container image.")] = None,
    name: Annotated[
        str | None, typer.Option("--name", help="Job id (letters, digits, . _ -); default: job-<random>.")
    ] = None,
    priority: Annotated[int, typer.Option("--priority", help="Higher runs first and is evicted last.")] = 0,
    request: Annotated[
        list[str] | None, typer.Option("--request", help="DIM=QUANTITY, e.g. ram=256Mi.")
    ] = None,
    limit: Annotated[list[str] | None, typer.Option("--limit", help="DIM=QUANTITY.")] = None,
    label: Annotated[list[str] | None, typer.Option("--label", help="KEY=VALUE on the container.")] = None,
    slack_memory: Annotated[
        bool, typer.Option("--slack-memory", metavar="", help="May grow past its memory request.")
    ] = False,
    docker_host: Annotated[
        str, typer.Option("--docker-host", envvar="DOCKER_HOST", help="Where the images are checked.")
    ] = DEFAULT_ENDPOINT,
    no_image_check: Annotated[
        bool, typer.Option("--no-image-check", metavar="", help="Do not ask the engine for the images.")
    ] = False,
    as_json: AsJson = False,
) -> None:
    """Queue batch work: one task (--image ... -- COMMAND) or a job file's tasks (-f), all or none."""
    if file is not None:
        if command or image or name:
            raise _fail(["--file: give the tasks in the file, not on the command line"], EXIT_BAD_INPUT)
        try:
            subs = load_job_file(file)
        except SubmissionError as e:
            raise _fail([p.render() for p in e.problems], EXIT_BAD_INPUT) from None
    else:
        if not command:
            raise _fail(["COMMAND: give the command after -- (or a job file with -f)"], EXIT_BAD_INPUT)
        data = {
            "name": name or f"job-{uuid.uuid4().hex[:8]}",
            "command": command,
            "image": image,
            "priority": priority,
            "requests": _pairs(request, "request", "DIM=QUANTITY"),
            "limits": _pairs(limit, "limit", "DIM=QUANTITY") if limit else None,
            "labels": _pairs(label, "label", "KEY=VALUE"),
            "slack_memory": slack_memory,
        }
        try:
            subs = [parse_submission(data, "<command line>")]
        except SubmissionError as e:
            raise _fail([p.render() for p in e.problems], EXIT_BAD_INPUT) from None
    missing_image = [s.name for s in subs if not s.image]
    if missing_image:
        raise _fail(
            [f"image: task {n!r} has none (--image, or image: in the file)" for n in missing_image], 2
        )
    if not no_image_check:
        _check_images(subs, docker_host)
    db = _open(store, create=True)
    try:
        seqs = db.submit([(s.name, s.to_json()) for s in subs], time.time())
    except StoreConflict as e:
        raise _fail([f"name: {e}"], EXIT_BAD_INPUT) from None
    finally:
        db.close()
    if as_json:
        json.dump([{"job": s.name, "submission": q} for s, q in zip(subs, seqs, strict=True)], sys.stdout)
        typer.echo()
    else:
        for s in subs:
            typer.echo(s.name)


def _when(t: float | None) -> str:
    if t is None:
        return "-"
    return datetime.fromtimestamp(t, UTC).astimezone().strftime("%Y-%m-%d %H:%M:%S")


def jobs(store: StorePath = DEFAULT_STORE, as_json: AsJson = False) -> None:
    """Every job in the store: its state, run, priority, image, node and why it waits."""
    db = _open(store)
    try:
        rows = db.jobs()
    finally:
        db.close()
    if as_json:
        json.dump([r.to_json() for r in rows], sys.stdout, indent=2, sort_keys=True)
        typer.echo()
        return
    table = Table("JOB", "STATE", "RUN", "PRIORITY", "IMAGE", "NODE", "SINCE", "WHY PENDING", box=None)
    for r in rows:
        where = escape(r.node or "-")
        table.add_row(
            escape(r.job), r.state, str(r.run), str(r.priority), escape(r.image or "-"), where,
            _when(r.updated_at), escape(r.why_pending or ""),
        )  # fmt: skip
    Console(width=200).print(table)


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
            text += f"; SIGKILL at {_when(d.get('deadline'))} unless it exits"
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


def _timeline(db: Store, row: JobRow) -> list[tuple[float, str, str, str]]:
    """(time, step, reason, detail) rows: the lifecycle's steps and the events about the job."""
    steps: list[TransitionRow] = db.transitions(row.job, row.submission)
    since = steps[0].at if steps else row.submitted_at
    runs = sorted({s.run for s in steps if s.run > 0})
    events = db.events(job=row.job, workloads=[f"batch/{row.job}.{r}" for r in runs], kinds=WHY_KINDS)
    out = [(s.at, s.state, s.reason, f"run {s.run}" if s.run else "") for s in steps]
    out += [(e.at, "", e.kind, explain(e)) for e in events if e.at >= since - 1e-6]
    out.sort(key=lambda x: (x[0], x[1] == ""))  # a step before the event that explains it
    return out


@job_app.command("why")
def why(job: Annotated[str, typer.Argument(help="The job id.")], store: StorePath = DEFAULT_STORE,
        as_json: AsJson = False) -> None:  # fmt: skip
    """Every step of the job with its reason: why pending, where placed, why throttled, why evicted."""
    db = _open(store)
    try:
        row = db.job(job)
        if row is None:
            raise _fail([f"JOB: no job of this id in {store} (value: {job!r})"], EXIT_BAD_INPUT)
        lines = _timeline(db, row)
    finally:
        db.close()
    if as_json:
        out = {
            "job": row.to_json(),
            "steps": [{"time": t, "state": s, "reason": r, "detail": d} for t, s, r, d in lines],
        }
        json.dump(out, sys.stdout, indent=2, sort_keys=True)
        typer.echo()
        return
    console = Console(width=200, highlight=False)
    console.print(f"job {escape(row.job)}: {row.state}, run {row.run}, priority {row.priority}")
    if row.why_pending and row.state in ("pending", "submitted"):
        console.print(f"  waiting because: {escape(row.why_pending)}")
    for t, state, reason, detail in lines:
        head = f"{state} ({reason})" if state else f"  {reason}"
        console.print(f"{_when(t)}  {escape(head)}" + (f": {escape(detail)}" if detail else ""))


@job_app.command("cancel")
def cancel(job: Annotated[str, typer.Argument(help="The job id.")], store: StorePath = DEFAULT_STORE) -> None:
    """Cancel a job: withdrawn if no agent took it yet, else its agent stops its run (SIGKILL)."""
    db = _open(store)
    try:
        outcome = db.cancel(job, time.time())
    except StoreConflict as e:
        raise _fail([f"JOB: {e} (value: {job!r})"], EXIT_BAD_INPUT) from None
    finally:
        db.close()
    typer.echo(f"{job}: {'withdrawn' if outcome == 'withdrawn' else 'cancel requested'}")
