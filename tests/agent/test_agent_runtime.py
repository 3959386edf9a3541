"""Batch submissions: validation, the spool inbox, and the runtime's process start (fake host)."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

import pytest

from kalena.agent.cgroupfs import FsCgroupReader
from kalena.agent.layout import CgroupTree
from kalena.agent.runtime import (
    ProcessRuntime,
    Submission,
    SubmissionError,
    parse_submission,
    read_inbox,
    submit,
    take,
)
from kalena.agent.state import JobRecord
from kalena.agent.writer import CgroupWriter, ManagedScope
from kalena.core.enforcement import BATCH_OOM_SCORE_ADJ


def test_a_good_submission():
    sub = parse_submission(
        {"name": "etl-1", "command": ["true"], "requests": {"cpu": "250m", "ram": "512Mi"}, "priority": 3},
        "f",
    )
    assert sub.requests == {"cpu": 0.25, "ram": 0.5} and sub.priority == 3 and sub.limits is None
    job = sub.job(5.0)
    assert (job.name, job.run, job.submitted_at) == ("etl-1", 0, 5.0)  # its state: AgentState.submit


@pytest.mark.parametrize(
    ("data", "key"),
    [
        ({"name": "../x", "command": ["true"]}, "name"),
        ({"name": "a", "command": []}, "command"),
        ({"name": "a", "command": ["true"], "requests": {"ram": "x"}}, "requests.ram"),
        ({"name": "a", "command": ["true"], "requests": {"disk": 1}}, "requests.disk"),
        ({"name": "a", "command": ["true"], "requests": {"gpu": 1}}, "requests.gpu"),
        ({"name": "a", "command": ["true"], "requests": {"ram": 2}, "limits": {"ram": 1}}, "limits.ram"),
        ({"name": "a", "command": ["true"], "priority": -2}, "priority"),
        ({"name": "a", "command": ["true"], "surprise": 1}, "surprise"),
    ],
    ids=[
        "path-in-name",
        "empty-command",
        "bad-quantity",
        "unknown-dim",
        "gpu",
        "limit-below-request",
        "priority",
        "extra",
    ],
)
def test_bad_submissions_name_the_key(data, key):
    with pytest.raises(SubmissionError) as e:
        parse_submission(data, "sub.json")
    assert any(p.render().startswith(f"sub.json: {key}: ") for p in e.value.problems), e.value


def test_inbox_round_trip_and_rejects(tmp_path):
    inbox = tmp_path / "inbox"
    submit(inbox, Submission("a", ("true",), {"ram": 0.1}, None, 1))
    (inbox / "bad.json").write_text(
        json.dumps({"name": "b", "command": ["true"], "requests": {"ram": "oops"}})
    )
    (inbox / "torn.json").write_text("{")
    ok, problems = read_inbox(inbox)
    assert [s.name for _, s in ok] == ["a"]
    assert len(problems) == 2 and {p.file.rsplit("/", 1)[-1] for p in problems} == {"bad.json", "torn.json"}
    assert sorted(p.name for p in (inbox / "rejected").iterdir()) == ["bad.json", "torn.json"]
    take(ok[0][0])
    assert read_inbox(inbox) == ([], [])


def test_runtime_starts_the_process_inside_its_cgroup(fake_host, tmp_path):
    tree = CgroupTree(fake_host("hybrid").layout(), "kalena")
    writer = CgroupWriter(tree, ManagedScope())
    rt = ProcessRuntime(writer, FsCgroupReader(tree), tmp_path / "jobs")
    job = JobRecord("j", [sys.executable, "-c", "print('hello')"], {}, None, 0, 0.0)
    job.workload_id = job.cgroup = "batch/j.1"
    pid = rt.start(job, "test")
    # the child wrote its own pid into cgroup.procs of every hierarchy before exec
    for h in tree.layout.hierarchies:
        assert (tree.dir(h, "batch/j.1") / "cgroup.procs").read_text() == str(pid)
    assert rt.release("batch/j.1") == 0
    assert (tmp_path / "jobs" / "batch_j.1.log").read_text() == "hello\n"


def test_a_batch_process_is_the_oom_killers_first_choice(fake_host, tmp_path):
    """Real process, real kernel: the run starts with the highest oom_score_adj, so where memory
    outruns the agent the kernel takes it before any process left at the default 0."""
    tree = CgroupTree(fake_host("hybrid").layout(), "kalena")
    rt = ProcessRuntime(CgroupWriter(tree, ManagedScope()), FsCgroupReader(tree), tmp_path / "jobs")
    job = JobRecord("j", [sys.executable, "-c", "import time; time.sleep(60)"], {}, None, 0, 0.0)
    job.workload_id = job.cgroup = "batch/j.1"
    pid = rt.start(job, "test")
    try:
        assert Path(f"/proc/{pid}/oom_score_adj").read_text().strip() == str(BATCH_OOM_SCORE_ADJ) == "1000"
        assert Path(f"/proc/{os.getpid()}/oom_score_adj").read_text().strip() != "1000"  # not the agent's
    finally:
        os.kill(pid, signal.SIGKILL)
        rt.release("batch/j.1")


def test_a_command_that_cannot_start_raises(fake_host):
    tree = CgroupTree(fake_host("v2").layout(), "kalena")
    writer = CgroupWriter(tree, ManagedScope())
    rt = ProcessRuntime(writer, FsCgroupReader(tree))
    job = JobRecord("j", ["/nonexistent/binary"], {}, None, 0, 0.0)
    job.workload_id = job.cgroup = "batch/j.1"
    with pytest.raises(OSError):
        rt.start(job, "test")
    assert os.path.isdir(tree.dir(tree.layout.v2, "batch/j.1"))
