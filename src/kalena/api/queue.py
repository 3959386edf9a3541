"""Queueing batch work, one way for the CLI (``kalena submit``) and the HTTP API (``POST /v1/jobs``):
parse (one task, or a ``BatchJob`` document with several), check the images on the engine, and
queue all of them in one transaction or none."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

from kalena.agent.jobfile import KIND, parse_job_file
from kalena.agent.runtime import Submission, SubmissionError, parse_submission
from kalena.docker.engine import Engine, EngineError, TlsFiles, connect
from kalena.ir.errors import Problem
from kalena.store import Store, StoreConflict

EXIT_BAD_INPUT = 2
EXIT_UNAVAILABLE = 3


class QueueRefused(Exception):
    """Nothing was queued: ``lines`` say why (one problem each); ``code`` is the CLI's exit code
    (2: bad input or a conflict, 3: the engine or the store cannot be used)."""

    def __init__(self, lines: list[str], code: int = EXIT_BAD_INPUT) -> None:
        self.lines, self.code = lines, code
        super().__init__("\n".join(lines))


def parse(data: Any, where: str) -> list[Submission]:
    """The submissions of ``data``: a ``BatchJob`` document (``kind: BatchJob``) or one task's keys
    (``name`` defaults to ``job-<random>``). Every task needs an image."""
    try:
        if isinstance(data, Mapping) and data.get("kind") == KIND:
            subs = parse_job_file(data, where)
        else:
            one = dict(data) if isinstance(data, Mapping) else data
            if isinstance(one, dict) and not one.get("name"):
                one["name"] = f"job-{uuid.uuid4().hex[:8]}"
            subs = [parse_submission(one, where)]
    except SubmissionError as e:
        raise QueueRefused([p.render() for p in e.problems]) from None
    require_images(subs, where)
    return subs


def require_images(subs: list[Submission], where: str) -> None:
    """Every task names its image (the Docker runtime runs images, not commands)."""
    missing = [Problem(where, "image", f"task {s.name!r} has none") for s in subs if not s.image]
    if missing:
        raise QueueRefused([p.render() for p in missing])


def check_images(
    subs: list[Submission], endpoint: str, tls: TlsFiles | None = None, key: str = "engine", hint: str = ""
) -> None:
    """Every image is on the engine at ``endpoint`` (no registry is assumed reachable: a task whose
    image is missing would never start). ``key`` names the engine in a message, ``hint`` ends it."""
    images = sorted({s.image for s in subs if s.image})
    if not images:
        return
    try:
        engine = Engine(connect(endpoint, tls), endpoint)
        missing = [i for i in images if not engine.has_image(i)]
    except EngineError as e:
        raise QueueRefused([f"{key}: cannot check the images: {e}{hint}"], EXIT_UNAVAILABLE) from None
    if missing:
        why = f"not on the engine at {endpoint} (docker pull or load it first)"
        raise QueueRefused([f"image: {why} (value: {i!r})" for i in missing])


def enqueue(store: Store, subs: list[Submission], now: float) -> list[int]:
    """Queue ``subs`` in one transaction (all or none); their submission numbers."""
    try:
        return store.submit([(s.name, s.to_json()) for s in subs], now)
    except StoreConflict as e:
        raise QueueRefused([f"name: {e}"]) from None
