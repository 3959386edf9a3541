"""An engine on ``tcp://`` with TLS (a ``dockerd`` with ``--tlsverify``, its certificates made by
openssl): the agent connects with ``--tls-ca/--tls-cert/--tls-key`` and reads the engine; without
the client certificate the engine refuses it, and the agent says so (exit 3), changing nothing;
``kalena submit`` checks its image there with the same options."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from docker_testlib import free_port
from typer.testing import CliRunner

from kalena.cli.main import app
from kalena.docker.engine import EngineError, TlsFiles, connect
from kalena.testing.docker import SecondEngine, busybox_image

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def certificates(d: Path) -> dict[str, Path]:
    """A CA, a server certificate for 127.0.0.1 and a client certificate, all signed by the CA."""
    f = {k: d / f"{k}.pem" for k in ("ca", "ca-key", "server", "server-key", "client", "client-key")}
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=kalena-test-ca",
            "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign",
            "-keyout", str(f["ca-key"]), "-out", str(f["ca"]))  # fmt: skip
    for who, ext in (("server", "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth"),
                     ("client", "extendedKeyUsage=clientAuth")):  # fmt: skip
        csr, extfile = d / f"{who}.csr", d / f"{who}.ext"
        extfile.write_text(ext + "\n")
        key = str(f[f"{who}-key"])
        openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={who}", "-keyout", key,
                "-out", str(csr))  # fmt: skip
        openssl("x509", "-req", "-in", str(csr), "-CA", str(f["ca"]), "-CAkey", str(f["ca-key"]),
                "-CAcreateserial", "-days", "1", "-extfile", str(extfile), "-out", str(f[who]))  # fmt: skip
    return f


@pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl makes the certificates")
def test_an_engine_on_tcp_with_tls(engine, tmp_path):
    certs = certificates(tmp_path)
    port = free_port()
    tcp = f"tcp://127.0.0.1:{port}"
    extra = ["-H", tcp, "--tlsverify", "--tlscacert", str(certs["ca"]), "--tlscert", str(certs["server"]),
             "--tlskey", str(certs["server-key"])]  # fmt: skip
    second = SecondEngine(Path(tempfile.mkdtemp(prefix="kdt-", dir="/tmp")), "tls", extra)
    try:
        try:
            second.wait()
        except RuntimeError as e:
            pytest.skip(f"no second Docker engine: {e}")
        tls = TlsFiles(certs["ca"], certs["client"], certs["client-key"])
        client = connect(tcp, tls)
        assert client.ping()
        with pytest.raises(EngineError, match="not reachable"):
            connect(tcp, None)  # no client certificate: the engine refuses
        state = tmp_path / "state"
        r = CliRunner().invoke(app, ["agent", "run", "--runtime", "docker", "--state-dir", str(state),
                                     "--docker-host", tcp, "--duration", "0.5"])  # fmt: skip
        assert r.exit_code == 3 and "not reachable" in r.stderr
        assert not (state / "kalena.db").exists()  # nothing was made
        files = ["--tls-ca", str(certs["ca"]), "--tls-cert", str(certs["client"]),
                 "--tls-key", str(certs["client-key"])]  # fmt: skip
        r = CliRunner().invoke(app, [
            "agent", "run", "--runtime", "docker", "--state-dir", str(state), "--docker-host", tcp, *files,
            "--cgroup-root", f"/kalena-test-tls{port}", "--duration", "1",
        ])  # fmt: skip
        assert r.exit_code == 0, r.output
        assert "kalena agent: node" in r.stderr
        # kalena submit asks that engine for the image, with the same TLS options; without them it
        # cannot ask (exit 3), and with two of the three it is told to give all three (exit 2)
        second_engine = second.wait()
        image = busybox_image(second_engine)
        store = str(tmp_path / "queue.db")
        job = ["submit", "--store", store, "--docker-host", tcp, "--image", image, "--name", "j1"]
        r = CliRunner().invoke(app, [*job, "--", "true"])
        assert r.exit_code == 3 and "--docker-host: cannot check the images" in r.stderr, r.output
        r = CliRunner().invoke(app, [*job, *files[:4], "--", "true"])
        assert r.exit_code == 2 and "give all three or none" in r.stderr, r.output
        r = CliRunner().invoke(app, [*job, *files, "--", "true"])
        assert r.exit_code == 0 and r.stdout.strip() == "j1", r.output
    finally:
        second.stop()
        for top in Path("/sys/fs/cgroup").glob(f"*/kalena-test-tls{port}"):
            subprocess.run(["find", str(top), "-depth", "-type", "d", "-delete"], check=False)
