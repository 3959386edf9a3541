"""A container image for tests and benchmarks, built here: no registry is needed.

``busybox_image`` makes ``kalena-test/busybox:1`` from this machine's statically linked busybox
(Debian's ``busybox-static``), a root file system of one binary and its applet links, imported
with ``docker import``. Its applets cover what the tests run: a shell, ``sleep``, ``dd`` into a
tmpfs to grow memory, and a busy loop for CPU.
"""

from __future__ import annotations

import io
import shutil
import subprocess
import tarfile
from pathlib import Path

from kalena.docker.engine import Engine

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
