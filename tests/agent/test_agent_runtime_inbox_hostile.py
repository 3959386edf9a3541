"""The agent's inbox meets hostile job files: each is moved to ``rejected/`` with its problem named,
and the agent goes on (a job file is written by anyone who can write the folder)."""

from __future__ import annotations

import json

import pytest

from kalena.agent.runtime import MAX_JOB_BYTES, read_inbox

GOOD = {"name": "ok", "command": ["true"], "requests": {"cpu": "100m"}}

HOSTILE = {
    "deep-nesting": b'{"name": "x", "command": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
    "nesting-past-the-bound": b'{"name": "x", "command": ["a"], "limits": ' + b"[" * 150 + b"]" * 150 + b"}",
    "bad-utf8": b'{"name": "caf\xe9", "command": ["true"]}',
    "nan": b'{"name": "x", "command": ["true"], "priority": NaN}',
    "infinity-quantity": b'{"name": "x", "command": ["true"], "requests": {"ram": "1e400"}}',
    "duplicate-key": b'{"name": "x", "name": "y", "command": ["true"]}',
    "huge-integer": b'{"name": "x", "command": ["true"], "priority": ' + b"9" * 5000 + b"}",
    "syntax": b'{"name": "x", "command": ["true"]',
    "too-large": b'{"name": "x", "command": ["' + b"a" * (MAX_JOB_BYTES + 10) + b'"]}',
    "not-an-object": b"[1, 2, 3]",
    "empty": b"",
}


@pytest.mark.parametrize("name", list(HOSTILE))
def test_a_hostile_job_file_is_rejected_with_its_problem_and_the_good_one_is_taken(tmp_path, name):
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    (inbox / f"{name}.json").write_bytes(HOSTILE[name])
    (inbox / "ok.json").write_text(json.dumps(GOOD))
    ok, problems = read_inbox(inbox)
    assert [sub.name for _, sub in ok] == ["ok"]
    assert problems and all(p.file == str(inbox / f"{name}.json") for p in problems)
    assert all("\n" not in p.render() for p in problems)
    assert (inbox / "rejected" / f"{name}.json").exists() and not (inbox / f"{name}.json").exists()
