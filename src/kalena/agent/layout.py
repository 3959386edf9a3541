"""Which cgroup hierarchies this host has, and where Kalena's cgroups live in each of them.

Three layouts exist in the field (SPEC: Enforcement on the node):

* **v2** (unified): one ``cgroup2`` mount carries every controller, PSI and ``cgroup.kill``;
* **v1**: one mount per controller group (``cpu``, ``cpuacct``, ``memory``, ``blkio``, ...);
  no per-cgroup PSI, no ``cgroup.kill``;
* **hybrid**: v1 controller mounts plus a ``cgroup2`` mount (``/sys/fs/cgroup/unified``) that
  carries no resource controller but gives every cgroup its ``*.pressure`` files,
  ``cgroup.events`` and ``cgroup.kill``.

A controller bound to a v1 hierarchy cannot also be enabled in v2, so each controller has one
*home*: its v1 mount if one exists, else the v2 mount when the v2 root lists it.

Kalena names a cgroup by a path: relative names (``batch/job-1``) live under Kalena's root in
every hierarchy, absolute names (``/system.slice/db.service``) are taken as they are (adopted
workloads). The root itself is relative to the agent's own cgroup in each hierarchy when
given without a leading slash (so a sandboxed agent nests under itself), absolute otherwise.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from kalena.agent.parsers import Mount, parse_mountinfo, parse_proc_cgroup

#: The v1 controllers Kalena reads or writes; a workload is placed in each of these
#: hierarchies that exists (cpu for quota/shares, cpuacct for usage, memory, blkio for I/O
#: accounting, pids so that every process of a workload is listed in one more place).
V1_CONTROLLERS: tuple[str, ...] = ("cpu", "cpuacct", "memory", "blkio", "pids")


class CgroupMode(enum.Enum):
    V1 = "v1"
    V2 = "v2"
    HYBRID = "hybrid"


class LayoutError(RuntimeError):
    """The host has no usable cgroup hierarchy (an infrastructure fault, not bad input)."""


@dataclass(frozen=True, slots=True)
class Hierarchy:
    """One mounted hierarchy and the agent's own cgroup in it."""

    version: int
    mount_point: Path
    root: str
    controllers: frozenset[str]
    own: str = "/"

    def dir(self, cgroup: str) -> Path:
        """The directory of absolute cgroup path ``cgroup`` in this hierarchy."""
        rel = PurePosixPath(cgroup)
        mounted = PurePosixPath(self.root)
        if mounted != PurePosixPath("/") and (rel == mounted or mounted in rel.parents):
            rel = rel.relative_to(mounted)
        else:
            rel = rel.relative_to("/") if rel.is_absolute() else rel
        return self.mount_point / rel

    @property
    def label(self) -> str:
        return "v2" if self.version == 2 else ",".join(sorted(self.controllers))


@dataclass(frozen=True, slots=True)
class CgroupLayout:
    """The detected hierarchies: v1 ones by controller, the v2 one, and what v2 offers."""

    mode: CgroupMode
    v1: Mapping[str, Hierarchy] = field(default_factory=dict)
    v2: Hierarchy | None = None
    v2_controllers: frozenset[str] = frozenset()

    def home(self, controller: str) -> Hierarchy | None:
        """Where ``controller`` lives: its v1 hierarchy, else v2 if the v2 root offers it.

        ``cpuacct`` has no v2 controller: v2's ``cpu.stat`` carries usage in every cgroup, so
        its home on a v2-only host is the v2 hierarchy itself.
        """
        if controller in self.v1:
            return self.v1[controller]
        if self.v2 is not None and (controller in self.v2_controllers or controller == "cpuacct"):
            return self.v2
        return None

    @property
    def hierarchies(self) -> tuple[Hierarchy, ...]:
        """Every hierarchy a Kalena workload is placed in (v1 ones Kalena uses, then v2), once each."""
        seen: dict[Path, Hierarchy] = {}
        for c in V1_CONTROLLERS:
            h = self.v1.get(c)
            if h is not None:
                seen.setdefault(h.mount_point, h)
        if self.v2 is not None:
            seen.setdefault(self.v2.mount_point, self.v2)
        return tuple(seen.values())

    @property
    def has_psi(self) -> bool:
        """Per-cgroup pressure files exist only in a v2 hierarchy (pure or hybrid)."""
        return self.v2 is not None

    @property
    def has_kill(self) -> bool:
        """``cgroup.kill`` (Linux 5.14+) is a v2 core file; its presence is checked at use."""
        return self.v2 is not None

    def describe(self) -> str:
        parts = [f"mode={self.mode.value}"]
        for c in V1_CONTROLLERS:
            if c in self.v1:
                parts.append(f"{c}=v1:{self.v1[c].mount_point}")
        if self.v2 is not None:
            ctrl = ",".join(sorted(self.v2_controllers)) or "none"
            parts.append(f"v2={self.v2.mount_point} (controllers: {ctrl})")
        return " ".join(parts)


def detect_layout(mountinfo: str, self_cgroup: str) -> CgroupLayout:
    """The layout from ``/proc/self/mountinfo`` and ``/proc/self/cgroup`` texts.

    v2 controllers are read from ``cgroup.controllers`` at the v2 mount point (a file, so a
    test can point the mount at a temporary folder). Raises :class:`LayoutError` when no
    cgroup hierarchy is mounted.
    """
    own = parse_proc_cgroup(self_cgroup)
    mounts: tuple[Mount, ...] = parse_mountinfo(mountinfo)
    v1: dict[str, Hierarchy] = {}
    v2: Hierarchy | None = None
    for m in mounts:
        if m.version == 2:
            if v2 is None:
                v2 = Hierarchy(2, Path(m.mount_point), m.root, frozenset(), own.get("", "/"))
            continue
        ctrl = sorted(m.controllers)
        h = Hierarchy(1, Path(m.mount_point), m.root, m.controllers, own.get(ctrl[0], "/"))
        for c in m.controllers:
            v1.setdefault(c, h)
    if v2 is None and not v1:
        raise LayoutError("no cgroup or cgroup2 mount in /proc/self/mountinfo")
    v2_ctrl: frozenset[str] = frozenset()
    if v2 is not None:
        try:
            v2_ctrl = frozenset((v2.mount_point / "cgroup.controllers").read_text().split())
        except OSError:
            v2_ctrl = frozenset()
        # a controller bound to v1 is not available in v2 even if listed
        v2_ctrl = v2_ctrl - frozenset(v1)
    used_v1 = any(c in v1 for c in ("cpu", "memory"))
    if v2 is not None and not used_v1:
        mode = CgroupMode.V2
    elif v2 is not None:
        mode = CgroupMode.HYBRID
    else:
        mode = CgroupMode.V1
    return CgroupLayout(mode, v1, v2, v2_ctrl)


def detect(proc: Path = Path("/proc/self")) -> CgroupLayout:
    """The running host's layout."""
    return detect_layout((proc / "mountinfo").read_text(), (proc / "cgroup").read_text())


def default_root(layout: CgroupLayout) -> str:
    """Kalena's root when none is given: ``/kalena`` on a v2-only host, ``kalena`` otherwise.

    On v2 the agent's own cgroup holds processes, so by the no-internal-process rule it cannot
    hand controllers to children: the root goes under the hierarchy root, whose controllers the
    host (systemd) delegates. On v1 and hybrid hosts each controller hierarchy is independent,
    and nesting under the agent's own cgroups keeps Kalena inside whatever confines the agent.
    """
    return "/kalena" if layout.mode is CgroupMode.V2 else "kalena"


class BadCgroupName(ValueError):
    """A cgroup name that could escape its parent (``..``, empty parts, control characters)."""


#: Every run's workload id, which is also its cgroup under Kalena's root, is ``batch/<job>.<run>``:
#: all runs live under this one parent, which nothing else uses.
BATCH_PARENT = "batch"


def check_name(name: str) -> str:
    """Return ``name`` if it is a safe cgroup name: no ``.``/``..``/empty parts, no control characters."""
    body = name[1:] if name.startswith("/") else name
    parts = body.split("/") if body else []
    if name.startswith("/") and not parts:
        return name  # "/" itself
    if not parts or any(p in ("", ".", "..") for p in parts) or any(ord(ch) < 32 for ch in name):
        raise BadCgroupName(f"cgroup name {name!r} must be a path of non-empty parts other than '.' and '..'")
    return name


@dataclass(frozen=True, slots=True)
class CgroupTree:
    """Kalena's root in every hierarchy, and name -> directory resolution.

    ``root`` relative (``kalena``): under the agent's own cgroup in each hierarchy; absolute
    (``/kalena``): from each hierarchy's root.
    """

    layout: CgroupLayout
    root: str = "kalena"
    # name -> directory, per hierarchy: resolved once (the round asks for the same few each time)
    _dirs: dict[tuple[Path, str], Path] = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        check_name(self.root)

    def root_path(self, h: Hierarchy) -> str:
        if self.root.startswith("/"):
            return self.root
        return str(PurePosixPath(h.own) / self.root)

    def path(self, h: Hierarchy, name: str) -> str:
        """Absolute cgroup path of ``name`` in ``h`` (``""`` is Kalena's root)."""
        if name == "":
            return self.root_path(h)
        check_name(name)
        if name.startswith("/"):
            return name
        return str(PurePosixPath(self.root_path(h)) / name)

    def dir(self, h: Hierarchy, name: str) -> Path:
        key = (h.mount_point, name)
        d = self._dirs.get(key)
        if d is None:  # a bad name raises every time: it is never cached
            if len(self._dirs) >= 4096:  # runs come and go: bounded, rebuilt as needed
                self._dirs.clear()
            d = self._dirs[key] = h.dir(self.path(h, name))
        return d
