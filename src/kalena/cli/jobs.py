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
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from kalena.agent.jobfile import load_job_file
from kalena.agent.runtime import SubmissionError
from kalena.api import queue
from kalena.cli import agent as agent_cli
from kalena.docker import DEFAULT_ENDPOINT
from kalena.store import Store, StoreConflict, StoreError
from kalena.store.why import timeline, when

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
    tls_ca: agent_cli.TlsCa = None,
    tls_cert: agent_cli.TlsCert = None,
    tls_key: agent_cli.TlsKey = None,
    no_image_check: Annotated[
        bool, typer.Option("--no-image-check", metavar="", help="Do not ask the engine for the images.")
    ] = False,
    as_json: AsJson = False,
) -> None:
    """Queue batch work: one task (--image ... -- COMMAND) or a job file's tasks (-f), all or none."""
    try:
        if file is not None:
            given = command or image or name or priority or request or limit or label or slack_memory
            if given:
                raise _fail(["--file: give the tasks in the file, not on the command line"], EXIT_BAD_INPUT)
            try:
                subs = load_job_file(file)
            except SubmissionError as e:
                raise _fail([p.render() for p in e.problems], EXIT_BAD_INPUT) from None
        else:
            if not command:
                raise _fail(["COMMAND: give the command after -- (or a job file with -f)"], EXIT_BAD_INPUT)
            data = {
                "name": name,
                "command": command,
                "image": image,
                "priority": priority,
                "requests": _pairs(request, "request", "DIM=QUANTITY"),
                "limits": _pairs(limit, "limit", "DIM=QUANTITY") if limit else None,
                "labels": _pairs(label, "label", "KEY=VALUE"),
                "slack_memory": slack_memory,
            }
            subs = queue.parse(data, "<command line>")
        queue.require_images(subs, str(file or "<command line>"))
        if not no_image_check:
            tls = agent_cli.tls_files(tls_ca, tls_cert, tls_key)
            queue.check_images(
                subs, docker_host, tls, key="--docker-host", hint=" (or pass --no-image-check)"
            )
        db = _open(store, create=True)
        try:
            seqs = queue.enqueue(db, subs, time.time())
        finally:
            db.close()
    except queue.QueueRefused as e:
        raise _fail(e.lines, e.code) from None
    if as_json:
        json.dump([{"job": s.name, "submission": q} for s, q in zip(subs, seqs, strict=True)], sys.stdout)
        typer.echo()
    else:
        for s in subs:
            typer.echo(s.name)


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
            when(r.updated_at), escape(r.why_pending or ""),
        )  # fmt: skip
    Console(width=200).print(table)


@job_app.command("why")
def why(job: Annotated[str, typer.Argument(help="The job id.")], store: StorePath = DEFAULT_STORE,
        as_json: AsJson = False) -> None:  # fmt: skip
    """Every step of the job with its reason: why pending, where placed, why throttled, why evicted."""
    db = _open(store)
    try:
        row = db.job(job)
        if row is None:
            raise _fail([f"JOB: no job of this id in {store} (value: {job!r})"], EXIT_BAD_INPUT)
        lines = timeline(db, row)
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
        console.print(f"{when(t)}  {escape(head)}" + (f": {escape(detail)}" if detail else ""))


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


#: The units of the store's quantities (the IR's: cores, GiB, bytes per second).
UNITS = {"cpu": "cores", "ram": "GiB", "gpu": "devices", "storage": "GiB"}


def _q(v: Any) -> str:
    return "-" if v is None else f"{float(v):.3g}"


def status(store: StorePath = DEFAULT_STORE, as_json: AsJson = False) -> None:
    """Per node, Borg's slack view (capacity, sum of limits, sum of reservations, usage) and its
    batch tasks, as its agent last wrote them; and the queue."""
    db = _open(store)
    try:
        nodes = db.nodes()
        queued = [j for j in db.jobs() if j.state in ("submitted", "pending", "requeued")]
    finally:
        db.close()
    if as_json:
        json.dump({"nodes": nodes, "queue_depth": len(queued)}, sys.stdout, indent=2, sort_keys=True)
        typer.echo()
        return
    console = Console(width=200, highlight=False)
    if not nodes:
        console.print(f"no node has reported to {escape(str(store))} yet (is the agent running?)")
    for name, st in nodes.items():
        age = time.time() - float(st.get("at") or 0)
        console.print(f"node {escape(name)}: {st.get('production', 0)} production, reported {age:.0f} s ago")
        view = Table("RESOURCE", "CAPACITY", "LIMITS", "RESERVATIONS", "USAGE", box=None)
        for dim in st.get("capacity") or {}:
            view.add_row(
                dim,
                *(_q((st.get(k) or {}).get(dim)) for k in ("capacity", "limits", "reservations", "usage")),
            )
        console.print(view)
        tasks = st.get("batch") or []
        if tasks:
            t = Table(
                "BATCH",
                "RUN",
                "STATE",
                "PRIORITY",
                "CPU REQ",
                "CPU RES",
                "CPU USE",
                "RAM REQ",
                "RAM USE",
                box=None,
            )
            for b in tasks:
                req, res, use = b.get("requests") or {}, b.get("reservation") or {}, b.get("usage") or {}
                t.add_row(
                    escape(b["job"]), str(b["run"]), b["state"], str(b["priority"]), _q(req.get("cpu")),
                    _q(res.get("cpu")), _q(use.get("cpu")), _q(req.get("ram")), _q(use.get("ram")),
                )  # fmt: skip
            console.print(t)
    console.print(f"queue: {len(queued)} job(s) waiting")
