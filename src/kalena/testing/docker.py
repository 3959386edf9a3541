"""A container image for tests and benchmarks, built here: no registry is needed.

``busybox_image`` makes ``kalena-test/busybox:1`` from this machine's statically linked busybox
(Debian's ``busybox-static``), a root file system of one binary and its applet links, imported
with ``docker import``. Its applets cover what the tests run: a shell, ``sleep``, ``dd`` into a
tmpfs to grow memory, and a busy loop for CPU.
"""

from __future__ import annotations

import io
import shutil
import signal
import subprocess
import tarfile
import time
from pathlib import Path

from kalena.docker.engine import Engine, connect

IMAGE = "kalena-test/busybox:1"
APPLETS = ("sh", "sleep", "dd", "cat", "rm", "mkdir", "ls", "echo", "true", "kill", "head", "yes")
CANDIDATES = ("/bin/busybox", "/usr/bin/busybox")


class NoStaticBusybox(RuntimeError):
    pass


def static_busybox() -> Path:
    """This machine's busybox if it is statically linked (an image holds nothing else)."""
    for c in (*CANDIDATES, shutil.which("busybox") or ""):
        p = Path(c)
        if c and p.is_file():
            out = subprocess.run(["ldd", str(p)], capture_output=True, text=True)
            if out.returncode != 0 or "not a dynamic" in out.stdout + out.stderr:
                return p
    raise NoStaticBusybox("no statically linked busybox here (apt-get install busybox-static)")


def rootfs_tar(busybox: Path) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for d in ("bin", "tmp", "dev", "proc", "sys", "etc"):
            info = tarfile.TarInfo(d)
            info.type, info.mode = tarfile.DIRTYPE, 0o1777 if d == "tmp" else 0o755
            tar.addfile(info)
        tar.add(str(busybox), arcname="bin/busybox")
        for a in APPLETS:
            info = tarfile.TarInfo(f"bin/{a}")
            info.type, info.linkname = tarfile.SYMTYPE, "busybox"
            tar.addfile(info)
    return buf.getvalue()


def busybox_image(engine: Engine, name: str = IMAGE) -> str:
    """``name`` on ``engine``, imported from this machine's static busybox unless already there."""
    if engine.has_image(name):
        return name
    repo, _, tag = name.partition(":")
    engine.api.import_image_from_data(rootfs_tar(static_busybox()), repository=repo, tag=tag or "latest")
    return name


class SecondEngine:
    """Another ``dockerd`` on this machine, with its own data root, exec root, pid file and socket
    (the flags of ``scripts/start-dockerd.sh``): a second Docker host for the tests. ``stop()``
    ends it and removes its folders."""

    def __init__(self, base: Path, name: str = "second", extra: list[str] | None = None) -> None:
        """``extra``: more flags for ``dockerd`` (another ``-H`` with its TLS flags, say)."""
        self.base = base
        self.sock = base / "docker.sock"
        self.endpoint = f"unix://{self.sock}"
        base.mkdir(parents=True, exist_ok=True)
        dockerd = shutil.which("dockerd")
        if dockerd is None:
            raise RuntimeError("no dockerd on this machine (apt-get install docker.io)")
        self.log = open(base / "dockerd.log", "ab")  # noqa: SIM115 - the engine's, for a failure's story
        self.proc = subprocess.Popen(
            [dockerd, "--iptables=false", "--ip6tables=false", "--bridge=none", "--storage-driver=vfs",
             "--data-root", str(base / "data"), "--exec-root", str(base / "exec"),
             "--pidfile", str(base / "docker.pid"), "-H", self.endpoint, *(extra or [])],
            stdout=self.log, stderr=self.log, start_new_session=True,
        )  # fmt: skip
        self.name = name

    def wait(self, bound_s: float = 60.0) -> Engine:
        end = time.monotonic() + bound_s
        last: Exception | None = None
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                break
            try:
                return Engine(connect(self.endpoint), self.endpoint)
            except Exception as e:
                last = e
                time.sleep(0.5)
        tail = (self.base / "dockerd.log").read_text(errors="replace")[-2000:]
        raise RuntimeError(f"the second dockerd did not answer ({last}); its log ends:\n{tail}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except Exception:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        shutil.rmtree(self.base, ignore_errors=True)
