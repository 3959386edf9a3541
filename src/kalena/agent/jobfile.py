"""A batch job file: several tasks in one YAML document, each queued as one job (``kalena submit -f``).

::

    apiVersion: kalena.naughtian.io/v1alpha1
    kind: BatchJob
    name: train                   # task ids are <name>.<task name>
    priority: 3                   # the defaults of every task below (each may override)
    image: registry.example/ml:4
    requests: {cpu: 500m, ram: 256Mi}
    limits: {ram: 512Mi}
    labels: {team: ml}
    slackMemory: false
    tasks:
      - name: shard-0
        command: [python, train.py, --shard, "0"]
      - name: shard-1
        command: [python, train.py, --shard, "1"]
        priority: 5

The schema is closed (an unknown key is an error naming it). A task's labels are the job's
merged with its own; requests and limits are the task's if it gives them, else the job's.
Every problem of every task is reported (file, key, value) and nothing is queued.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    ValidationError,
)

from kalena.agent.runtime import Submission, SubmissionError, parse_submission
from kalena.ir.errors import MISSING, Problem, ProblemLog, key_path
from kalena.ir.yamlio import parse_yaml, read_text

API_VERSION = "kalena.naughtian.io/v1alpha1"
KIND = "BatchJob"
MAX_TASKS = 10_000
MAX_JOB_FILE_BYTES = 8 << 20

_Q = StrictInt | StrictFloat | StrictStr
_NAME = r"^[A-Za-z0-9][A-Za-z0-9_-]*$"  # no "." in a part: the id <job>.<task> splits one way


class _Task(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    name: StrictStr = Field(min_length=1, max_length=63, pattern=_NAME)
    command: list[StrictStr] = Field(min_length=1)
    image: StrictStr | None = None
    priority: StrictInt | None = None
    requests: dict[StrictStr, _Q] | None = None
    limits: dict[StrictStr, _Q] | None = None
    labels: dict[StrictStr, StrictStr] = Field(default_factory=dict)
    slack_memory: StrictBool | None = Field(default=None, alias="slackMemory")


class _JobFile(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    api_version: Literal["kalena.naughtian.io/v1alpha1"] = Field(alias="apiVersion")
    kind: Literal["BatchJob"]
    name: StrictStr = Field(min_length=1, max_length=36, pattern=_NAME)
    image: StrictStr | None = None
    priority: StrictInt = 0
    requests: dict[StrictStr, _Q] = Field(default_factory=dict)
    limits: dict[StrictStr, _Q] | None = None
    labels: dict[StrictStr, StrictStr] = Field(default_factory=dict)
    slack_memory: StrictBool = Field(default=False, alias="slackMemory")
    tasks: list[_Task] = Field(min_length=1, max_length=MAX_TASKS)


def parse_job_file(data: Any, file: str) -> list[Submission]:
    """The tasks of a job file's document as submissions (ids ``<name>.<task>``); raises
    :class:`~kalena.agent.runtime.SubmissionError` with every problem."""
    try:
        doc = _JobFile.model_validate(data)
    except ValidationError as e:
        probs = [
            Problem(file, key_path(err["loc"]), err["msg"], err.get("input", MISSING)) for err in e.errors()
        ]
        raise SubmissionError(probs) from None
    problems: list[Problem] = []
    out: list[Submission] = []
    seen: dict[str, int] = {}
    for i, t in enumerate(doc.tasks):
        if t.name in seen:
            problems.append(
                Problem(file, f"tasks[{i}].name", f"also the name of tasks[{seen[t.name]}]", t.name)
            )
            continue
        seen[t.name] = i
        raw = {
            "name": f"{doc.name}.{t.name}",
            "command": t.command,
            "image": t.image if t.image is not None else doc.image,
            "priority": t.priority if t.priority is not None else doc.priority,
            "requests": t.requests if t.requests is not None else doc.requests,
            "limits": t.limits if t.limits is not None else doc.limits,
            "labels": {**doc.labels, **t.labels},
            "slack_memory": t.slack_memory if t.slack_memory is not None else doc.slack_memory,
        }
        try:
            out.append(parse_submission(raw, file))
        except SubmissionError as e:  # the task's problems, at the task's keys
            problems.extend(Problem(p.file, f"tasks[{i}].{p.path}", p.message, p.value) for p in e.problems)
    if problems:
        raise SubmissionError(problems)
    return out


def load_job_file(path: Path) -> list[Submission]:
    """Read and parse a job file; raises :class:`SubmissionError` (unreadable, not YAML, schema)."""
    log = ProblemLog(str(path))
    text = read_text(path, log, max_bytes=MAX_JOB_FILE_BYTES)
    ok, data = parse_yaml(text, log) if text is not None else (False, None)
    if not ok:
        raise SubmissionError(list(log.problems))
    return parse_job_file(data, str(path))
