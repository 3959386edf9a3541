"""Parsers for the kernel's cgroup, PSI and mount files: text in, plain values out, no I/O.

Every function takes the file's text (as read) and returns numbers in the kernel's own units
(bytes, nanoseconds, microseconds); conversion to IR units happens in :mod:`.telemetry`.
A malformed file raises :class:`ParseError` naming the file kind and the offending line, so
a caller can treat it as missing data rather than as a crash.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

#: cgroup v1 prints "no limit" as the largest page-aligned signed 64-bit value
#: (9223372036854771712 on 4 KiB pages); anything at or above 2**62 is treated as unlimited,
#: since no machine has 4 EiB of memory and the exact value depends on the page size.
V1_UNLIMITED_BYTES = 2**62


class ParseError(ValueError):
    """A kernel file whose text does not have the expected format."""


@dataclass(frozen=True, slots=True)
class PsiLine:
    """One line of a pressure file: ``avg10``/``avg60``/``avg300`` in percent, ``total`` in us."""

    avg10: float
    avg60: float
    avg300: float
    total_us: int


@dataclass(frozen=True, slots=True)
class Pressure:
    """A whole pressure file. ``full`` is ``None`` where the kernel prints no full line (old cpu)."""

    some: PsiLine | None
    full: PsiLine | None


def parse_psi(text: str) -> Pressure:
    """``some avg10=0.61 avg60=1.20 avg300=1.52 total=51402904`` (and ``full ...``) lines.

    ``/proc/pressure/irq`` has only a ``full`` line, old kernels' cpu only ``some``.
    """
    lines: dict[str, PsiLine] = {}
    for raw in text.splitlines():
        if not raw.strip():
            continue
        kind, *fields = raw.split()
        if kind not in ("some", "full"):
            raise ParseError(f"pressure: unknown line kind {kind!r} in {raw!r}")
        try:
            kv = dict(f.split("=", 1) for f in fields)
            lines[kind] = PsiLine(
                float(kv["avg10"]), float(kv["avg60"]), float(kv["avg300"]), int(kv["total"])
            )
        except (KeyError, ValueError) as e:
            raise ParseError(f"pressure: malformed line {raw!r}") from e
    if not lines:
        raise ParseError("pressure: empty file")
    return Pressure(lines.get("some"), lines.get("full"))


def parse_flat_keyed(text: str, what: str = "flat-keyed file") -> dict[str, int]:
    """``key value`` per line (cpu.stat, memory.stat, memory.events, oom_control)."""
    out: dict[str, int] = {}
    for raw in text.splitlines():
        if not raw.strip():
            continue
        parts = raw.split()
        if len(parts) != 2:
            raise ParseError(f"{what}: expected 'key value', got {raw!r}")
        try:
            out[parts[0]] = int(parts[1])
        except ValueError as e:
            raise ParseError(f"{what}: value of {parts[0]!r} is not an integer: {parts[1]!r}") from e
    return out


def parse_single_int(text: str, what: str = "single-value file") -> int:
    """One integer (``memory.current``, ``cpuacct.usage``, ``cpu.cfs_quota_us``)."""
    try:
        return int(text.strip())
    except ValueError as e:
        raise ParseError(f"{what}: not an integer: {text.strip()!r}") from e


def parse_limit_bytes(text: str, what: str = "memory limit") -> float:
    """``max`` (v2) or a v1 byte count; unlimited -> ``inf`` (v1 reads back its huge sentinel and
    accepts ``-1`` as input for it)."""
    t = text.strip()
    if t == "max":
        return math.inf
    value = parse_single_int(t, what)
    return math.inf if value >= V1_UNLIMITED_BYTES or value < 0 else float(value)


def parse_cpu_max(text: str) -> tuple[float, int]:
    """v2 ``cpu.max``: ``"250000 100000"`` -> (250000.0, 100000); ``"max 100000"`` -> (inf, 100000)."""
    parts = text.split()
    if len(parts) != 2:
        raise ParseError(f"cpu.max: expected 'QUOTA PERIOD', got {text.strip()!r}")
    try:
        period = int(parts[1])
        quota = math.inf if parts[0] == "max" else float(int(parts[0]))
    except ValueError as e:
        raise ParseError(f"cpu.max: malformed {text.strip()!r}") from e
    return quota, period


@dataclass(frozen=True, slots=True)
class IoBytes:
    """Cumulative bytes read and written, summed over devices."""

    read: int
    write: int


def parse_v2_io_stat(text: str) -> IoBytes:
    """v2 ``io.stat``: ``8:32 rbytes=40824832 wbytes=824999936 rios=2703 ...`` per device."""
    read = write = 0
    for raw in text.splitlines():
        if not raw.strip():
            continue
        _dev, *fields = raw.split()
        try:
            kv = dict(f.split("=", 1) for f in fields)
            read += int(kv.get("rbytes", 0))
            write += int(kv.get("wbytes", 0))
        except ValueError as e:
            raise ParseError(f"io.stat: malformed line {raw!r}") from e
    return IoBytes(read, write)


def parse_v1_blkio_bytes(text: str) -> IoBytes:
    """v1 ``blkio.throttle.io_service_bytes_recursive``: ``8:0 Read 123`` lines and a ``Total`` line."""
    read = write = 0
    for raw in text.splitlines():
        parts = raw.split()
        if len(parts) != 3:
            continue  # the trailing "Total N" line, or blank
        try:
            if parts[1] == "Read":
                read += int(parts[2])
            elif parts[1] == "Write":
                write += int(parts[2])
        except ValueError as e:
            raise ParseError(f"blkio: malformed line {raw!r}") from e
    return IoBytes(read, write)


@dataclass(frozen=True, slots=True)
class Mount:
    """One cgroup mount from ``/proc/self/mountinfo``.

    ``root`` is the cgroup path mounted at ``mount_point`` (``/`` unless a cgroup namespace
    or a bind mount shows only a subtree); ``controllers`` are the v1 controllers bound to
    the hierarchy (empty for cgroup2, whose controllers are in ``cgroup.controllers``).
    """

    mount_point: str
    root: str
    version: int
    controllers: frozenset[str]


_V1_NON_CONTROLLER_OPTS = frozenset(
    {"rw", "ro", "relatime", "noatime", "nosuid", "nodev", "noexec", "clone_children", "noprefix", "xattr"}
)


def _unescape(path: str) -> str:
    """mountinfo escapes space, tab, newline and backslash as octal (``\\040``)."""
    out, i = [], 0
    while i < len(path):
        if path[i] == "\\" and i + 3 < len(path) and path[i + 1 : i + 4].isdigit():
            out.append(chr(int(path[i + 1 : i + 4], 8)))
            i += 4
        else:
            out.append(path[i])
            i += 1
    return "".join(out)


def parse_mountinfo(text: str) -> tuple[Mount, ...]:
    """The cgroup (v1) and cgroup2 mounts in ``/proc/self/mountinfo`` text, in file order.

    Line format (proc(5)): ``id parent major:minor root mount-point options [optional...] -
    fstype source super-options``. v1 controllers are the super-options that are not mount
    flags (``name=systemd`` hierarchies carry no controller and are skipped).
    """
    mounts = []
    for raw in text.splitlines():
        if " - " not in raw:
            continue
        left, right = raw.split(" - ", 1)
        lf, rf = left.split(), right.split()
        if len(lf) < 5 or len(rf) < 3:
            continue
        fstype = rf[0]
        if fstype not in ("cgroup", "cgroup2"):
            continue
        root, point = _unescape(lf[3]), _unescape(lf[4])
        if fstype == "cgroup2":
            mounts.append(Mount(point, root, 2, frozenset()))
            continue
        opts = {o for o in rf[2].split(",") if o not in _V1_NON_CONTROLLER_OPTS and "=" not in o}
        if opts:
            mounts.append(Mount(point, root, 1, frozenset(opts)))
    return tuple(mounts)


def parse_proc_cgroup(text: str) -> dict[str, str]:
    """``/proc/<pid>/cgroup`` -> controller (or ``""`` for cgroup2) -> cgroup path.

    ``4:memory:/process_api/1a32`` gives ``{"memory": "/process_api/1a32"}``; ``2:cpu,cpuacct:/``
    gives both names; ``0::/`` gives ``{"": "/"}``; ``name=systemd`` entries are kept by name.
    """
    out: dict[str, str] = {}
    for raw in text.splitlines():
        if not raw.strip():
            continue
        parts = raw.split(":", 2)
        if len(parts) != 3:
            raise ParseError(f"/proc/self/cgroup: malformed line {raw!r}")
        _, ctrls, path = parts
        if ctrls == "":
            out[""] = path
        else:
            for c in ctrls.split(","):
                out[c] = path
    return out
