"""The HTTP API over real HTTP on loopback (uvicorn in a thread, httpx as the client), a real store.

Covers: submit (one task, a BatchJob document), its refusals (bad input 422 naming the key, a
name in use 409, a missing image 422), jobs and why, cancel, status and metrics; the bearer token
(refused without it, also on a non-loopback bind, which itself is refused without a token); TLS
with a certificate made by openssl; a Unix socket.
"""

from __future__ import annotations

import shutil
import socket
import ssl
import subprocess
from pathlib import Path

import httpx
import pytest

from kalena.api.app import make_app
from kalena.api.queue import QueueRefused
from kalena.api.serve import ApiServer, BindRefused, Listen, check_bind, parse_listen
from kalena.store import Store

TOKEN = "s3cret-token-0123456789"
TASK = {"name": "a", "image": "img:1", "command": ["sleep", "1"], "requests": {"cpu": "500m"}}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def store_path(tmp_path: Path) -> Path:
    path = tmp_path / "kalena.db"
    Store(path).close()  # the agent makes it; here the test does
    return path


@pytest.fixture
def serve(store_path):
    servers: list[ApiServer] = []

    def start(token=None, host="127.0.0.1", check=None, **tls) -> str:
        port = free_port()
        server = ApiServer(make_app(store_path, token, check), Listen(host, port), **tls)
        server.start()
        servers.append(server)
        scheme = "https" if tls else "http"
        return f"{scheme}://127.0.0.1:{port}"

    yield start
    for s in servers:
        s.stop()


def test_submit_jobs_why_cancel_status_and_metrics(serve, store_path):
    url = serve()
    r = httpx.post(f"{url}/v1/jobs", json=TASK)
    assert r.status_code == 201 and r.json()["jobs"][0]["job"] == "a"
    doc = {
        "apiVersion": "kalena.naughtian.io/v1alpha1",
        "kind": "BatchJob",
        "name": "train",
        "image": "img:1",
        "tasks": [{"name": "s0", "command": ["true"]}, {"name": "s1", "command": ["true"]}],
    }
    r = httpx.post(f"{url}/v1/jobs", json=doc)
    assert r.status_code == 201 and [j["job"] for j in r.json()["jobs"]] == ["train.s0", "train.s1"]
    jobs = httpx.get(f"{url}/v1/jobs").json()
    assert {j["job"]: j["state"] for j in jobs} == {
        "a": "submitted",
        "train.s0": "submitted",
        "train.s1": "submitted",
    }
    assert httpx.post(f"{url}/v1/jobs/a/cancel").json() == {"job": "a", "outcome": "withdrawn"}
    why = httpx.get(f"{url}/v1/jobs/a").json()
    assert [(s["state"], s["reason"]) for s in why["steps"]] == [
        ("pending", "submitted"),
        ("cancelled", "cancelled"),
    ]
    assert httpx.post(f"{url}/v1/jobs/a/cancel").status_code == 409  # it ended
    assert httpx.get(f"{url}/v1/jobs/nope").status_code == 404
    status = httpx.get(f"{url}/v1/status").json()
    assert status["queue_depth"] == 2 and status["nodes"] == {}
    text = httpx.get(f"{url}/metrics").text
    assert "kalena_queue_depth 2.0" in text and 'kalena_jobs{state="cancelled"} 1.0' in text


def test_refused_submissions_change_nothing(serve, store_path):
    url = serve()
    httpx.post(f"{url}/v1/jobs", json=TASK)
    cases = [
        ({**TASK, "name": "b", "bogus": 1}, 422, "<request body>: bogus: Extra inputs are not permitted"),
        ({**TASK, "name": "b", "requests": {"ram": "lots"}}, 422, "<request body>: requests.ram:"),
        ({**TASK, "name": "b", "image": None}, 422, "image: task 'b' has none"),
        (TASK, 409, "name: job 'a' is already queued"),
    ]
    for body, code, said in cases:
        r = httpx.post(f"{url}/v1/jobs", json=body)
        assert r.status_code == code, r.text
        assert said in r.json()["problems"][0], r.json()
    r = httpx.post(f"{url}/v1/jobs", content=b"{not json")
    assert r.status_code == 422 and "<request body>" in r.json()["problems"][0]
    with Store(store_path) as db:
        assert [p.job for p in db.untaken()[0]] == ["a"]


def test_a_missing_image_is_refused_by_the_check(serve, store_path):
    def check(subs):
        raise QueueRefused([f"image: not on the engine (value: {subs[0].image!r})"])

    url = serve(check=check)
    r = httpx.post(f"{url}/v1/jobs", json=TASK)
    assert r.status_code == 422 and "not on the engine" in r.json()["problems"][0]
    with Store(store_path) as db:
        assert db.untaken()[0] == []


def test_the_token_is_required_even_on_a_non_loopback_bind(serve):
    url = serve(token=TOKEN, host="0.0.0.0")  # every address of the machine: reached here by loopback
    assert httpx.get(f"{url}/healthz").status_code == 200  # says nothing but "up"
    for path in ("/v1/jobs", "/v1/status", "/metrics"):
        assert httpx.get(f"{url}{path}").status_code == 401
        assert httpx.get(f"{url}{path}", headers={"Authorization": "Bearer wrong"}).status_code == 401
        assert httpx.get(f"{url}{path}", headers={"Authorization": TOKEN}).status_code == 401  # no scheme
        assert httpx.get(f"{url}{path}", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200
    r = httpx.post(f"{url}/v1/jobs", json=TASK)
    assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"


def test_a_non_loopback_bind_without_a_token_is_refused():
    for addr in ("0.0.0.0:8470", "[::]:8470", "192.0.2.1:8470"):
        with pytest.raises(BindRefused, match="not loopback"):
            check_bind(parse_listen(addr), None)
        check_bind(parse_listen(addr), TOKEN)  # with a token it may
    for addr in ("127.0.0.1:8470", "[::1]:8470", "localhost:8470", "unix:/run/kalena.sock"):
        check_bind(parse_listen(addr), None)
    for bad in ("8470", "host:", "host:99999", "unix:"):
        with pytest.raises(BindRefused, match="--listen"):
            parse_listen(bad)


@pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl makes the test certificate")
def test_tls(serve, tmp_path):
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    url = serve(token=TOKEN, tls_cert=cert, tls_key=key)
    auth = {"Authorization": f"Bearer {TOKEN}"}
    trusted = ssl.create_default_context(cafile=str(cert))
    assert httpx.get(f"{url}/v1/jobs", headers=auth, verify=trusted).status_code == 200
    with pytest.raises(httpx.HTTPError):  # a client that does not trust it
        httpx.get(f"{url}/v1/jobs", headers=auth)
    with pytest.raises(httpx.HTTPError):  # plain HTTP to a TLS port
        httpx.get(url.replace("https", "http") + "/v1/jobs", headers=auth)


def test_a_unix_socket(store_path, tmp_path):
    sock = tmp_path / "api.sock"
    server = ApiServer(make_app(store_path), Listen(socket=sock))
    server.start()
    try:
        assert sock.stat().st_mode & 0o777 == 0o600  # root's only: the API reaches the Docker socket
        client = httpx.Client(transport=httpx.HTTPTransport(uds=str(sock)))
        assert client.get("http://kalena/healthz").json()["ok"] is True
        assert client.post("http://kalena/v1/jobs", json=TASK).status_code == 201
    finally:
        server.stop()


def test_serve_refuses_a_wide_bind_without_a_token_before_starting_anything(tmp_path):
    from typer.testing import CliRunner

    from kalena.cli.main import app

    state = tmp_path / "state"
    for args in (
        ["docker", "serve", "--state-dir", str(state), "--listen", "0.0.0.0:8470"],
        ["agent", "run", "--runtime", "docker", "--state-dir", str(state), "--listen", "0.0.0.0:8470"],
    ):
        r = CliRunner().invoke(app, args)
        assert r.exit_code == 2, r.output
        assert "not loopback" in r.stderr and "--token-file" in r.stderr
    short = tmp_path / "token"
    short.write_text("abc\n")
    r = CliRunner().invoke(app, ["docker", "serve", "--state-dir", str(state), "--token-file", str(short)])
    assert r.exit_code == 2 and "at least 16 characters" in r.stderr
    assert not state.exists()  # nothing was made


def test_the_agent_commands_of_the_inbox_point_a_docker_agent_to_its_store(tmp_path):
    from typer.testing import CliRunner

    from kalena.cli.main import app

    state = tmp_path / "state"
    state.mkdir()
    Store(state / "kalena.db").close()
    r = CliRunner().invoke(app, ["agent", "submit", "--state-dir", str(state), "--name", "a", "--", "true"])
    assert r.exit_code == 2 and "kalena submit" in r.stderr and "kalena.db" in r.stderr
    assert not (state / "inbox").exists()
    r = CliRunner().invoke(app, ["agent", "status", "--state-dir", str(state)])
    assert r.exit_code == 2 and "kalena status" in r.stderr


def test_a_corrupt_store_stops_the_docker_agent_with_exit_3(tmp_path):
    from typer.testing import CliRunner

    from kalena.cli.main import app

    state = tmp_path / "state"
    state.mkdir()
    (state / "kalena.db").write_text("not a database at all, just text " * 100)
    r = CliRunner().invoke(app, ["agent", "run", "--runtime", "docker", "--state-dir", str(state)])
    assert r.exit_code == 3, r.output  # the engine or the store: either cannot be used
    assert "cannot run the agent on this host" in r.stderr and "Traceback" not in r.output
