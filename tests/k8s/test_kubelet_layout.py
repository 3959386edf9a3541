"""Where the kubelet puts pod cgroups (``kalena.k8s.kubelet``): both drivers, every QoS class,
a ``--cgroup-root``, and telling the driver from what the kubelet made (fake trees in a folder)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kalena.agent.layout import CgroupLayout, CgroupMode, Hierarchy
from kalena.k8s.kubelet import LayoutError, detect_driver, kubepods, pod_cgroup, qos_class

UID = "0d9c4b1e-6f1a-4c59-9a43-2f7f6a1c0b11"
UNIT = UID.replace("-", "_")


@pytest.mark.parametrize(
    ("qos", "driver", "root", "want"),
    [
        ("Guaranteed", "cgroupfs", "/", f"/kubepods/pod{UID}"),
        ("Burstable", "cgroupfs", "/", f"/kubepods/burstable/pod{UID}"),
        ("BestEffort", "cgroupfs", "/", f"/kubepods/besteffort/pod{UID}"),
        ("Burstable", "cgroupfs", "/k8s/", f"/k8s/kubepods/burstable/pod{UID}"),
        ("Guaranteed", "systemd", "/", f"/kubepods.slice/kubepods-pod{UNIT}.slice"),
        (
            "Burstable",
            "systemd",
            "/",
            f"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UNIT}.slice",
        ),
        (
            "BestEffort",
            "systemd",
            "/",
            f"/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{UNIT}.slice",
        ),
    ],
)
def test_pod_cgroup_names_follow_the_kubelet(qos: str, driver: str, root: str, want: str) -> None:
    assert pod_cgroup(UID, qos, driver, root) == want  # type: ignore[arg-type]


def test_bad_uids_and_classes_are_refused() -> None:
    for uid in ("", "..", "a/b"):
        with pytest.raises(LayoutError, match="UID"):
            pod_cgroup(uid, "Burstable", "cgroupfs")
    with pytest.raises(LayoutError, match="QoS"):
        pod_cgroup(UID, "Platinum", "cgroupfs")


def test_qos_class_is_the_apiservers_and_burstable_when_it_is_missing() -> None:
    assert qos_class({"status": {"qosClass": "BestEffort"}}) == "BestEffort"
    assert qos_class({"status": {}}) == "Burstable"
    assert qos_class({"status": {"qosClass": "bogus"}}) == "Burstable"


def _layout(tmp_path: Path, v2: bool) -> CgroupLayout:
    if v2:
        h = Hierarchy(2, tmp_path / "unified", "/", frozenset())
        h.mount_point.mkdir()
        return CgroupLayout(CgroupMode.V2, v2=h, v2_controllers=frozenset({"cpu", "memory"}))
    hs = {c: Hierarchy(1, tmp_path / c, "/", frozenset({c})) for c in ("cpu", "memory")}
    for h in hs.values():
        h.mount_point.mkdir()
    return CgroupLayout(CgroupMode.V1, v1=hs)


@pytest.mark.parametrize("v2", [False, True])
def test_the_driver_is_told_from_what_the_kubelet_made(tmp_path: Path, v2: bool) -> None:
    layout = _layout(tmp_path, v2)
    with pytest.raises(LayoutError, match="no kubelet cgroup"):
        detect_driver(layout)
    mount = layout.hierarchies[0].mount_point
    (mount / "kubepods.slice").mkdir()
    assert detect_driver(layout) == "systemd"
    assert kubepods("systemd") == "/kubepods.slice"
    (mount / "kubepods").mkdir()
    with pytest.raises(LayoutError, match="both"):
        detect_driver(layout)
    (mount / "kubepods.slice").rmdir()
    assert detect_driver(layout) == "cgroupfs"
    (mount / "node" / "kubepods").mkdir(parents=True)
    (mount / "kubepods").rmdir()
    assert detect_driver(layout, "/node") == "cgroupfs"  # the kubelet's --cgroup-root
    assert kubepods("cgroupfs", "/node") == "/node/kubepods"
