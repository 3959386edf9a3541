"""The HTTP API over Kalena's store (FastAPI), served by ``kalena docker serve``.

=======  =========================  ================================================================
method   path                       what
=======  =========================  ================================================================
GET      ``/healthz``               the store answers (no token needed: it says nothing else)
GET      ``/v1/status``             each node's slack view and batch tasks, and the queue depth
GET      ``/v1/jobs``               every job (as ``kalena jobs --json``)
GET      ``/v1/jobs/{id}``          the job and each step with its reason (``kalena job why``)
POST     ``/v1/jobs``               queue one task or a ``BatchJob`` document: all or none (201)
POST     ``/v1/jobs/{id}/cancel``   cancel the job
GET      ``/metrics``               Prometheus text (:mod:`.metrics`)
=======  =========================  ================================================================

Authentication: with a token, every path but ``/healthz`` needs ``Authorization: Bearer TOKEN``
(401 otherwise; compared in constant time). :func:`kalena.api.serve.check_bind` refuses to serve a
non-loopback address without one: the Docker socket behind Kalena is root-equivalent.

Bad input is a 422 whose ``problems`` are the CLI's lines (``FILE: KEY: MESSAGE (value: V)``); a
name in use or a job that ended is a 409; an unknown job a 404. Nothing is changed by a refused
request. Each request opens its own connection to the store (uvicorn runs handlers in threads).
"""

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Annotated, Any

from fastapi import Depends, FastAPI, HTTPException, Request, Response
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from kalena import __version__
from kalena.agent.runtime import Submission
from kalena.api import queue
from kalena.api.metrics import render_metrics
from kalena.api.serve import bearer_check
from kalena.docker.cluster import report_into
from kalena.ir.errors import ProblemLog
from kalena.ir.yamlio import parse_json
from kalena.store import Store, StoreConflict, StoreError
from kalena.store.why import timeline

#: The largest submission body read (a job file of many tasks is far less).
MAX_BODY_BYTES = 8 << 20
#: Checks the images of a submission (raises ``QueueRefused``); ``None``: no check.
ImageCheck = Callable[[list[Submission]], None]


def _open(path: Path) -> Store:
    try:
        return Store(path, create=False)
    except StoreError as e:
        raise HTTPException(503, str(e)) from None


def make_app(store_path: Path, token: str | None = None, check_images: ImageCheck | None = None) -> FastAPI:
    app = FastAPI(title="Kalena", version=__version__, docs_url=None, redoc_url=None, openapi_url=None)

    def store() -> Iterator[Store]:
        db = _open(store_path)
        try:
            yield db
        finally:
            db.close()

    Auth = Depends(bearer_check(token))
    Db = Annotated[Store, Depends(store)]

    @app.get("/healthz")
    def healthz(db: Db) -> dict[str, Any]:
        return {"ok": True}

    @app.get("/v1/status", dependencies=[Auth])
    def status(db: Db) -> dict[str, Any]:
        queued = sum(1 for j in db.jobs() if j.state in ("submitted", "pending", "requeued"))
        return {"nodes": db.nodes(), "queue_depth": queued}

    @app.get("/v1/jobs", dependencies=[Auth])
    def jobs(db: Db) -> list[dict[str, Any]]:
        return [j.to_json() for j in db.jobs()]

    @app.get("/v1/jobs/{job}", dependencies=[Auth])
    def job(job: str, db: Db) -> dict[str, Any]:
        row = db.job(job)
        if row is None:
            raise HTTPException(404, f"no job {job!r}")
        steps = [{"time": t, "state": s, "reason": r, "detail": d} for t, s, r, d in timeline(db, row)]
        return {"job": row.to_json(), "steps": steps}

    def queue_body(body: bytes) -> Any:
        log = ProblemLog("<request body>")
        if len(body) > MAX_BODY_BYTES:
            return JSONResponse({"problems": [f"<request body>: larger than {MAX_BODY_BYTES} bytes"]}, 413)
        ok, data = parse_json(body.decode("utf-8", errors="replace"), log)
        if not ok:
            return JSONResponse({"problems": [p.render() for p in log.problems]}, status_code=422)
        try:
            subs = queue.parse(data, "<request body>")
            if check_images is not None:
                check_images(subs)
            with _open(store_path) as db:
                seqs = queue.enqueue(db, subs, time.time())
        except queue.QueueRefused as e:
            conflict = e.lines[0].startswith("name:")
            code = 503 if e.code == queue.EXIT_UNAVAILABLE else (409 if conflict else 422)
            return JSONResponse({"problems": e.lines}, status_code=code)
        jobs = [{"job": s.name, "submission": q} for s, q in zip(subs, seqs, strict=True)]
        return JSONResponse({"jobs": jobs}, status_code=201)

    @app.post("/v1/jobs", dependencies=[Auth], status_code=201)
    async def submit(request: Request) -> Any:
        body = await request.body()
        return await run_in_threadpool(queue_body, body)  # its own connection, in one thread

    @app.post("/v1/jobs/{job}/cancel", dependencies=[Auth])
    def cancel(job: str, db: Db) -> dict[str, str]:
        try:
            return {"job": job, "outcome": db.cancel(job, time.time())}
        except StoreConflict as e:
            raise HTTPException(404 if "no job" in str(e) else 409, str(e)) from None

    def record_report(node: str, body: bytes) -> Any:
        log = ProblemLog("<report>")
        ok, data = parse_json(body.decode("utf-8", errors="replace"), log)
        if not ok or not isinstance(data, dict):
            return JSONResponse(
                {"problems": [p.render() for p in log.problems] or ["<report>: not an object"]}, 422
            )
        with _open(store_path) as db:
            return {"work": report_into(db, node, data, time.time())}

    @app.post("/v1/nodes/{node}/report", dependencies=[Auth])
    async def report(node: str, request: Request) -> Any:
        """A host's agent reports (a cluster daemon's store); the answer is its work."""
        body = await request.body()
        if len(body) > MAX_BODY_BYTES:
            return JSONResponse({"problems": [f"<report>: larger than {MAX_BODY_BYTES} bytes"]}, 413)
        return await run_in_threadpool(record_report, node, body)

    @app.get("/metrics", dependencies=[Auth])
    def metrics(db: Db) -> Response:
        body, content_type = render_metrics(db)
        return Response(body, media_type=content_type)

    return app
