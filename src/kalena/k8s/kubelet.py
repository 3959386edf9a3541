"""Where the kubelet puts a pod's cgroup, for both of its cgroup drivers.

The kubelet makes one cgroup per pod under its QoS class's parent (``status.qosClass``, set by
the apiserver when the pod is made), below its cgroup root (``--cgroup-root``, default ``/``):

* cgroupfs driver: Guaranteed ``/kubepods/pod<uid>``, Burstable ``/kubepods/burstable/pod<uid>``,
  BestEffort ``/kubepods/besteffort/pod<uid>``;
* systemd driver: Guaranteed ``/kubepods.slice/kubepods-pod<uid_>.slice``, Burstable
  ``/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid_>.slice``, BestEffort
  the same with ``besteffort``.

(``uid_``: the UID with its dashes as underscores, since systemd reads a dash in a unit name as
a level of the slice tree.) The containers' cgroups are below the pod's; Kalena reads and
writes the pod's (its processes are counted with its descendants'), which caps every container
of the pod at once. The same names hold on every hierarchy of a v1 or hybrid host and on the
one of a v2 host: :class:`~kalena.agent.layout.CgroupTree` resolves them.

The driver is the kubelet's ``cgroupDriver``; ``auto`` looks for the kubelet's top cgroup
(``kubepods`` or ``kubepods.slice``) on the host and refuses to guess when it finds both or
neither.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from kalena.agent.layout import CgroupLayout

Driver = Literal["cgroupfs", "systemd"]
DRIVERS: tuple[str, ...] = ("auto", "cgroupfs", "systemd")
QOS = ("Guaranteed", "Burstable", "BestEffort")


class LayoutError(ValueError):
    """The kubelet's cgroup layout cannot be told (or a pod's cgroup named)."""


def _root(cgroup_root: str) -> str:
    root = "/" + cgroup_root.strip("/")
    return "" if root == "/" else root


def qos_class(pod: Mapping[str, Any]) -> str:
    """The pod's QoS class as the apiserver recorded it (``Burstable`` when it did not: the
    middle class, whose cgroup parent is the one most pods share)."""
    got = str((pod.get("status") or {}).get("qosClass") or "")
    return got if got in QOS else "Burstable"


def pod_cgroup(uid: str, qos: str, driver: Driver, cgroup_root: str = "/") -> str:
    """The absolute cgroup name of the pod ``uid`` of class ``qos`` (module docstring)."""
    if not uid or "/" in uid or uid in (".", ".."):
        raise LayoutError(f"pod UID {uid!r} cannot name a cgroup")
    if qos not in QOS:
        raise LayoutError(f"QoS class {qos!r} is not one of {', '.join(QOS)}")
    root = _root(cgroup_root)
    if driver == "cgroupfs":
        parent = "/kubepods" if qos == "Guaranteed" else f"/kubepods/{qos.lower()}"
        return f"{root}{parent}/pod{uid}"
    unit = uid.replace("-", "_")
    # systemd: the root is a slice too ("/" -> none), and each level's name repeats its parents'
    top = f"{root}/kubepods.slice"
    if qos == "Guaranteed":
        return f"{top}/kubepods-pod{unit}.slice"
    q = qos.lower()
    return f"{top}/kubepods-{q}.slice/kubepods-{q}-pod{unit}.slice"


def kubepods(driver: Driver, cgroup_root: str = "/") -> str:
    """The kubelet's top cgroup, the parent of every pod's: the node agent's root (its memory and
    I/O pressure is every pod's, and the kernel refuses to remove it while pods are below)."""
    return f"{_root(cgroup_root)}/kubepods" + (".slice" if driver == "systemd" else "")


def detect_driver(layout: CgroupLayout, cgroup_root: str = "/") -> Driver:
    """The kubelet's driver from what it made on this host (module docstring)."""
    root = _root(cgroup_root)
    found: set[Driver] = set()
    for h in layout.hierarchies:
        if h.dir(f"{root}/kubepods").is_dir():
            found.add("cgroupfs")
        if h.dir(f"{root}/kubepods.slice").is_dir():
            found.add("systemd")
    if len(found) == 1:
        return found.pop()
    where = f"under {cgroup_root!r} of " + ", ".join(str(h.mount_point) for h in layout.hierarchies)
    if not found:
        raise LayoutError(
            f"no kubelet cgroup (kubepods or kubepods.slice) {where}: is the kubelet running here, "
            "with this --kubelet-cgroup-root? Name the driver with --cgroup-driver"
        )
    raise LayoutError(f"both kubepods and kubepods.slice {where}: name the driver with --cgroup-driver")
