"""An engine reached over ``ssh://`` (a real ``sshd`` on loopback, the real ``ssh`` client, the
engine's own ``docker system dial-stdio`` on the far side, as the Docker SDK does it): Kalena
connects, lists and inspects containers, follows their events, and ``kalena submit`` checks its
images there; an ``ssh://`` endpoint that does not answer is a clear message, never a hang.

What is not a real operator's set-up: the client's settings (port, key, known host) come from a
config file this test writes (key and known host for 127.0.0.1) and hands to ``ssh`` with ``-F``
through a wrapper first on PATH, since ``ssh`` reads ``~/.ssh/config`` from the passwd home and
this test must not touch root's.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from docker_testlib import free_port, until
from typer.testing import CliRunner

from kalena.cli.main import app
from kalena.docker.engine import Engine, EngineError, EventWatch, connect
from kalena.store import Store

pytestmark = [pytest.mark.docker, pytest.mark.slow]
SSHD = shutil.which("sshd") or "/usr/sbin/sshd"
SSH = shutil.which("ssh")


def keygen(path: Path) -> str:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)
    return path.with_suffix(".pub").read_text().strip()


@pytest.fixture
def ssh_endpoint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    if SSH is None or not os.path.exists(SSHD):
        pytest.skip("no OpenSSH (scripts/setup-and-test.sh installs openssh-server)")
    d = tmp_path / "ssh"
    d.mkdir(mode=0o700)
    host_pub = keygen(d / "host_key")
    (d / "authorized_keys").write_text(keygen(d / "client_key") + "\n")
    port = free_port()
    (d / "sshd_config").write_text(
        f"ListenAddress 127.0.0.1\nPort {port}\nHostKey {d / 'host_key'}\nPidFile {d / 'sshd.pid'}\n"
        f"AuthorizedKeysFile {d / 'authorized_keys'}\nPermitRootLogin prohibit-password\n"
        "PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\n"
    )
    (d / "known_hosts").write_text(f"[127.0.0.1]:{port} {host_pub}\n")
    (d / "config").write_text(
        f"Host 127.0.0.1\n  IdentityFile {d / 'client_key'}\n"
        f"  IdentitiesOnly yes\n  UserKnownHostsFile {d / 'known_hosts'}\n  StrictHostKeyChecking yes\n"
        "  BatchMode yes\n  ConnectTimeout 10\n"
    )
    bin_dir = d / "bin"
    bin_dir.mkdir()
    wrapper = bin_dir / "ssh"
    wrapper.write_text(f'#!/bin/sh\nexec {SSH} -F {d / "config"} "$@"\n')
    wrapper.chmod(0o755)
    Path("/run/sshd").mkdir(exist_ok=True)  # sshd's privilege-separation folder
    log = (d / "sshd.log").open("w")
    proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(d / "sshd_config")], stdout=log, stderr=log)
    try:
        end = time.monotonic() + 30
        while time.monotonic() < end:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            if proc.poll() is not None:
                pytest.fail(f"sshd exited: {(d / 'sshd.log').read_text()}")
            time.sleep(0.1)
        monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
        yield f"ssh://root@127.0.0.1:{port}"  # the SDK passes the port (22 unless given) to ssh
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()


def test_an_engine_over_ssh(engine, image, tag, containers, ssh_endpoint, tmp_path):
    far = Engine(connect(ssh_endpoint), ssh_endpoint)
    assert far.info()["ID"] == engine.info()["ID"]  # the same engine, through ssh
    name = f"ssh-{tag}"
    containers.append(name)
    watch = EventWatch(far)
    try:
        assert until(lambda: watch.streaming, 60)  # opening a stream over ssh takes a while
        watch.take()  # (the first listing)
        assert not watch.take()
        engine.api.create_container(image, ["sleep", "60"], name=name, labels={"app": "web"})
        engine.start(name)
        assert until(watch.take, 60), "the container's events came through ssh"
        facts = far.inspect(name)
        assert facts is not None and facts.running and facts.labels["app"] == "web"
        assert name in [c.name for c in far.containers()]
    finally:
        watch.close()
    # kalena submit checks its image on the engine over ssh: there, queued; missing, refused
    store = tmp_path / "kalena.db"
    runner = CliRunner()
    ok = runner.invoke(app, ["submit", "--store", str(store), "--docker-host", ssh_endpoint, "--image", image,
                             "--name", f"j-{tag}", "--", "true"])  # fmt: skip
    assert ok.exit_code == 0, ok.output
    bad = runner.invoke(app, ["submit", "--store", str(store), "--docker-host", ssh_endpoint, "--image",
                              "kalena-test/nothing:0", "--", "true"])  # fmt: skip
    assert bad.exit_code == 2, bad.output
    assert f"image: not on the engine at {ssh_endpoint}" in bad.output
    db = Store(store)
    assert [s.job for s in db.untaken()[0]] == [f"j-{tag}"]  # the refused one changed nothing
    db.close()


def test_an_ssh_endpoint_that_does_not_answer_is_said_not_hung(ssh_endpoint):
    gone = "ssh://root@127.0.0.1:1"  # nothing listens on port 1
    start = time.monotonic()
    with pytest.raises(EngineError, match=r"docker engine ssh://root@127\.0\.0\.1:1: not reachable"):
        connect(gone, timeout_s=10)
    assert time.monotonic() - start < 120  # a bound on a hung test, not a speed claim
