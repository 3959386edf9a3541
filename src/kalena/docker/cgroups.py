"""Where a container's cgroup is, and where Kalena's batch containers go.

A running container's cgroup is read from ``/proc/<pid>/cgroup`` of its first process, which is
right for either cgroup driver on v1, v2 and hybrid hosts: ``cgroupfs`` puts containers in
``/docker/<id>``, ``systemd`` in ``/system.slice/docker-<id>.scope``, and a container started
with ``--cgroup-parent`` under that parent. Kalena takes the path of the hierarchy it reads
memory from (v2 on a v2 host).

Batch containers are started with ``--cgroup-parent`` set to their run's Kalena cgroup
(``/kalena/batch/<job>.<run>``): Kalena writes its throttle (CPU quota, weight) and memory
envelope on that parent, never on the container's own cgroup, so ``docker inspect`` shows the
container's own settings and where Kalena's knobs are (``HostConfig.CgroupParent``) and never a
value Kalena overwrote behind Docker's back. Docker (runc) creates the parent in every hierarchy
it uses, including ones Kalena does not (``freezer``, ``devices``, ``cpuset``, ``name=systemd``);
:func:`remove_leftovers` removes those once the run is over.
"""

from __future__ import annotations

import contextlib
from pathlib import Path, PurePosixPath

from kalena.agent.layout import CgroupLayout, CgroupMode, CgroupTree
from kalena.agent.parsers import ParseError, parse_proc_cgroup

PROC = Path("/proc")


class DriverError(ValueError):
    """The engine's cgroup setup cannot hold Kalena's batch containers (the message says why)."""


def container_cgroup(pid: int, layout: CgroupLayout, proc: Path = PROC) -> str | None:
    """The absolute cgroup of process ``pid`` (a container's first process); ``None`` if it is gone."""
    if pid <= 0:
        return None
    try:
        paths = parse_proc_cgroup((proc / str(pid) / "cgroup").read_text())
    except (OSError, ParseError):
        return None
    if layout.mode is CgroupMode.V2:
        return paths.get("")
    for ctrl in ("memory", "cpu", "cpuacct"):
        if ctrl in paths:
            return paths[ctrl]
    return paths.get("")


def check_driver(driver: str, tree: CgroupTree) -> None:
    """Batch containers need the ``cgroupfs`` driver and an absolute Kalena root (one path in
    every hierarchy, since ``--cgroup-parent`` is one path). Raises :class:`DriverError`."""
    if driver != "cgroupfs":
        raise DriverError(
            f"the engine's cgroup driver is {driver!r}: Kalena's Docker runtime starts batch containers "
            "under its own cgroups with the cgroupfs driver only in this release (dockerd "
            "--exec-opt native.cgroupdriver=cgroupfs); production containers are read either way"
        )
    if not tree.root.startswith("/"):
        raise DriverError(
            f"--cgroup-root {tree.root!r} is relative: batch containers need an absolute root "
            "(the same path in every hierarchy), such as /kalena"
        )


def batch_parent(tree: CgroupTree, run_cgroup: str) -> str:
    """The ``--cgroup-parent`` of a run whose Kalena cgroup is ``run_cgroup`` (absolute root)."""
    return str(PurePosixPath(tree.root) / run_cgroup)


def cgroup_mounts(mountinfo: str) -> list[tuple[Path, str]]:
    """Every cgroup mount (mount point, mounted root), ``name=systemd`` and unused controllers too."""
    out = []
    for raw in mountinfo.splitlines():
        if " - " not in raw:
            continue
        left, right = raw.split(" - ", 1)
        lf, rf = left.split(), right.split()
        if len(lf) >= 5 and rf and rf[0] in ("cgroup", "cgroup2"):
            out.append((Path(lf[4]), lf[3]))
    return out


def remove_leftovers(tree: CgroupTree, run_cgroup: str, proc: Path = PROC) -> list[Path]:
    """Remove the empty directories of a finished run's parent in every mounted hierarchy (what
    runc made where Kalena's writer does not go); returns those removed. Only below Kalena's
    root: the path is checked before anything is touched."""
    parent = PurePosixPath(batch_parent(tree, run_cgroup))
    root = PurePosixPath(tree.root)
    if root not in parent.parents:
        raise ValueError(f"{parent} is not below Kalena's root {root}")
    try:
        mounts = cgroup_mounts((proc / "self" / "mountinfo").read_text())
    except OSError:
        return []
    removed = []
    for point, mounted in mounts:
        rel = parent
        if mounted not in ("", "/"):
            if PurePosixPath(mounted) not in parent.parents:
                continue
            rel = parent.relative_to(mounted)
        top = point / rel.relative_to("/") if rel.is_absolute() else point / rel
        if top.is_dir():
            removed.extend(remove_empty_tree(top))
    return removed


def remove_empty_tree(top: Path) -> list[Path]:
    """Remove ``top`` and the directories below it, deepest first, as far as they are empty (a
    cgroup with processes stays); returns those removed."""
    removed = []
    for d in [*sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)), top]:
        with contextlib.suppress(OSError):
            d.rmdir()
            removed.append(d)
    return removed
