"""``kalena submit``, ``kalena jobs``, ``kalena job why`` and ``kalena job cancel`` on a real store
file (in process): what is printed, the exit codes, and what is queued (nothing, on any error)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from kalena.cli.main import app
from kalena.docker.engine import DEFAULT_ENDPOINT, Engine, EngineError, connect
from kalena.store import Store
from kalena.testing.docker import NoStaticBusybox, busybox_image

runner = CliRunner()

ENDPOINT = os.environ.get("KALENA_TEST_DOCKER_HOST", DEFAULT_ENDPOINT)

JOB_FILE = {
    "apiVersion": "kalena.naughtian.io/v1alpha1",
    "kind": "BatchJob",
    "name": "train",
    "image": "x",
    "priority": 3,
    "requests": {"cpu": "500m", "ram": "256Mi"},
    "tasks": [
        {"name": "shard-0", "command": ["sleep", "1"]},
        {"name": "shard-1", "command": ["sleep", "2"], "priority": 5, "requests": {"cpu": 1}},
    ],
}


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "k.db"


def kalena(*args: str | Path):
    return runner.invoke(app, [str(a) for a in args])


def submit(db: Path, *args: str | Path):
    return kalena("submit", "--store", db, "--no-image-check", *args)


def queued(db: Path) -> list[tuple[str, dict]]:
    """(job, spec) of every submission not taken yet."""
    with Store(db, create=False) as s:
        return [(p.job, p.spec) for p in s.untaken()[0]]


def rows(db: Path) -> int:
    """Submissions ever made in ``db`` (0 if there is no store)."""
    if not db.exists():
        return 0
    with Store(db, create=False) as s:
        return int(s.db.execute("SELECT count(*) FROM submissions").fetchone()[0])


def write_job_file(tmp_path: Path, doc: dict | str) -> Path:
    p = tmp_path / "job.yaml"
    p.write_text(doc if isinstance(doc, str) else yaml.safe_dump(doc, sort_keys=False))
    return p


def test_submit_one_task_and_list_it(db):
    r = submit(db, "--image", "x", "--name", "a", "--request", "cpu=500m", "--", "sleep", "5")
    assert r.exit_code == 0, r.output
    assert r.stdout == "a\n"
    ((job, spec),) = queued(db)
    assert job == "a" and spec["image"] == "x" and spec["command"] == ["sleep", "5"]
    assert spec["requests"] == {"cpu": 0.5}
    r = kalena("jobs", "--store", db, "--json")
    assert r.exit_code == 0, r.output
    (row,) = json.loads(r.stdout)
    assert (row["job"], row["state"], row["image"], row["command"]) == ("a", "submitted", "x", ["sleep", "5"])
    assert row["requests"] == {"cpu": 0.5}
    r = kalena("jobs", "--store", db)  # the table
    assert r.exit_code == 0, r.output
    assert "a" in r.stdout and "submitted" in r.stdout and "not yet taken by an agent" in r.stdout


def test_submit_json_names_the_submission(db):
    r = submit(db, "--image", "x", "--name", "a", "--json", "--", "true")
    assert r.exit_code == 0, r.output
    ((job, _),) = queued(db)
    assert json.loads(r.stdout) == [{"job": "a", "submission": 1}] and job == "a"


def test_submit_without_a_name_makes_one(db):
    r = submit(db, "--image", "x", "--", "true")
    assert r.exit_code == 0, r.output
    ((job, _),) = queued(db)
    assert r.stdout == f"{job}\n" and job.startswith("job-")


def test_submit_of_a_name_in_use_is_refused(db):
    assert submit(db, "--image", "x", "--name", "a", "--", "sleep", "5").exit_code == 0
    r = submit(db, "--image", "y", "--name", "a", "--", "sleep", "6")
    assert r.exit_code == 2
    assert any(line.startswith("error: name:") and "'a'" in line for line in r.stderr.splitlines())
    assert r.stdout == ""
    ((job, spec),) = queued(db)
    assert (job, spec["image"], spec["command"]) == ("a", "x", ["sleep", "5"])
    assert rows(db) == 1


def test_submit_with_a_bad_quantity_queues_nothing(db):
    r = submit(db, "--image", "x", "--name", "a", "--request", "ram=lots", "--", "sleep", "5")
    assert r.exit_code == 2
    assert "requests.ram" in r.stderr and '"lots"' in r.stderr
    assert rows(db) == 0


def test_submit_with_a_reserved_label_queues_nothing(db):
    Store(db).close()
    label = "kalena.naughtian.io/tier=batch"
    r = submit(db, "--image", "x", "--name", "a", "--label", label, "--", "sleep", "5")
    assert r.exit_code == 2
    assert "labels.kalena.naughtian.io/tier" in r.stderr and "Kalena's own" in r.stderr
    assert rows(db) == 0


def test_submit_without_a_command_is_refused(db):
    r = submit(db, "--image", "x", "--name", "a")
    assert r.exit_code == 2
    assert "error: COMMAND:" in r.stderr
    assert rows(db) == 0


def test_submit_a_job_file_queues_every_task(tmp_path, db):
    path = write_job_file(tmp_path, JOB_FILE)
    r = submit(db, "--file", path)
    assert r.exit_code == 0, r.output
    assert r.stdout.split() == ["train.shard-0", "train.shard-1"]
    got = dict(queued(db))
    assert list(got) == ["train.shard-0", "train.shard-1"]
    assert got["train.shard-0"]["priority"] == 3 and got["train.shard-1"]["priority"] == 5
    assert got["train.shard-0"]["requests"] == {"cpu": 0.5, "ram": 0.25}  # GiB
    assert got["train.shard-1"]["requests"] == {"cpu": 1.0}
    assert got["train.shard-1"]["command"] == ["sleep", "2"] and got["train.shard-1"]["image"] == "x"


def test_a_job_file_with_unknown_keys_queues_nothing(tmp_path, db):
    Store(db).close()
    doc = json.loads(json.dumps(JOB_FILE))
    doc["bogus_top"] = 1
    doc["tasks"][1]["bogus"] = 2
    path = write_job_file(tmp_path, doc)
    r = submit(db, "-f", path)
    assert r.exit_code == 2
    errors = r.stderr.splitlines()
    assert any(line.startswith(f"error: {path}: tasks[1].bogus:") for line in errors), r.stderr
    assert any(line.startswith(f"error: {path}: bogus_top:") for line in errors), r.stderr
    assert rows(db) == 0  # not even the valid task


def test_a_job_file_with_a_bad_task_queues_nothing(tmp_path, db):
    Store(db).close()
    doc = json.loads(json.dumps(JOB_FILE))
    doc["tasks"][1]["requests"] = {"ram": "lots"}
    r = submit(db, "-f", write_job_file(tmp_path, doc))
    assert r.exit_code == 2
    assert "tasks[1].requests.ram" in r.stderr
    assert rows(db) == 0


def test_a_job_file_with_duplicate_task_names_is_refused(tmp_path, db):
    Store(db).close()
    doc = json.loads(json.dumps(JOB_FILE))
    doc["tasks"][1]["name"] = "shard-0"
    path = write_job_file(tmp_path, doc)
    r = submit(db, "-f", path)
    assert r.exit_code == 2
    assert f"{path}: tasks[1].name: also the name of tasks[0]" in r.stderr
    assert rows(db) == 0


def test_a_job_file_that_is_not_yaml_is_refused(tmp_path, db):
    Store(db).close()
    path = write_job_file(tmp_path, "kind: BatchJob\ntasks: [ {name: a\n  command: }}\n")
    r = submit(db, "-f", path)
    assert r.exit_code == 2
    assert f"error: {path}:" in r.stderr
    assert rows(db) == 0


def test_a_missing_job_file_is_refused(tmp_path, db):
    path = tmp_path / "absent.yaml"
    r = submit(db, "-f", path)
    assert r.exit_code == 2
    assert str(path) in r.stderr
    assert rows(db) == 0


def test_a_job_file_and_an_image_are_not_given_together(tmp_path, db):
    path = write_job_file(tmp_path, JOB_FILE)
    r = submit(db, "-f", path, "--image", "x")
    assert r.exit_code == 2
    assert "error: --file:" in r.stderr
    assert rows(db) == 0


def test_jobs_of_a_missing_store_is_unavailable(db):
    r = kalena("jobs", "--store", db)
    assert r.exit_code == 3
    assert "error:" in r.stderr and str(db) in r.stderr
    assert not db.exists()  # reading never makes a store


def test_jobs_of_a_text_file_is_unavailable(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("not a database at all\n" * 30)
    r = kalena("jobs", "--store", path)
    assert r.exit_code == 3
    assert str(path) in r.stderr and "not a Kalena store" in r.stderr


def test_why_and_cancel_of_a_withdrawn_job(db):
    assert submit(db, "--image", "x", "--name", "a", "--", "sleep", "5").exit_code == 0
    r = kalena("job", "why", "a", "--store", db)
    assert r.exit_code == 0, r.output
    assert "job a: submitted" in r.stdout and "not yet taken by an agent" in r.stdout
    r = kalena("job", "cancel", "a", "--store", db)
    assert r.exit_code == 0, r.output
    assert r.stdout == "a: withdrawn\n"
    assert queued(db) == []
    r = kalena("job", "why", "a", "--store", db)
    assert r.exit_code == 0, r.output
    assert "job a: cancelled" in r.stdout
    out = r.stdout
    assert "pending (submitted)" in out and "cancelled (cancelled)" in out
    assert out.index("pending (submitted)") < out.index("cancelled (cancelled)")
    r = kalena("job", "why", "a", "--store", db, "--json")
    assert r.exit_code == 0, r.output
    steps = json.loads(r.stdout)["steps"]
    said = [(s["state"], s["reason"]) for s in steps]
    assert said == [("pending", "submitted"), ("cancelled", "cancelled")]
    r = kalena("job", "cancel", "a", "--store", db)
    assert r.exit_code == 2
    assert "already ended" in r.stderr
    (row,) = json.loads(kalena("jobs", "--store", db, "--json").stdout)
    assert row["state"] == "cancelled"


def test_why_and_cancel_of_an_unknown_job(db):
    Store(db).close()
    r = kalena("job", "why", "nope", "--store", db)
    assert r.exit_code == 2
    assert "'nope'" in r.stderr
    r = kalena("job", "cancel", "nope", "--store", db)
    assert r.exit_code == 2
    assert "no job 'nope'" in r.stderr


def test_an_unreachable_engine_for_the_image_check_queues_nothing(db):
    args = ["--store", db, "--docker-host", "unix:///nonexistent.sock", "--image", "x", "--name", "a"]
    r = kalena("submit", *args, "--", "true")
    assert r.exit_code == 3
    assert "--docker-host" in r.stderr and "unix:///nonexistent.sock" in r.stderr
    assert rows(db) == 0


@pytest.mark.docker
def test_the_image_check_on_a_real_engine(db):
    try:
        engine = Engine(connect(ENDPOINT), ENDPOINT)
    except EngineError as e:
        pytest.skip(f"no Docker engine answers ({e})")
    try:
        image = busybox_image(engine)
    except NoStaticBusybox as e:
        pytest.skip(str(e))
    if engine.has_image("kalena-test/nope:1"):
        pytest.skip("the engine has kalena-test/nope:1, which this test needs absent")
    base = ["submit", "--store", db, "--docker-host", ENDPOINT]
    r = kalena(*base, "--image", "kalena-test/nope:1", "--name", "a", "--", "true")
    assert r.exit_code == 2
    assert "image: not on the engine" in r.stderr and "kalena-test/nope:1" in r.stderr
    assert rows(db) == 0
    r = kalena(*base, "--image", image, "--name", "a", "--", "true")
    assert r.exit_code == 0, r.output
    assert [(j, s["image"]) for j, s in queued(db)] == [("a", image)]
