"""Builders for test objects, in one place, so tests read as the scenario they describe.

Used by Kalena's own tests and available to anyone writing a policy plug-in.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kalena.core.model import (
    DaemonSetSpec,
    NodeSpec,
    Selector,
    SpreadConstraint,
    Taint,
    Tier,
    Toleration,
    WorkloadSpec,
)
from kalena.core.resources import Resources


def res(**dims: float | str) -> Resources:
    """``res(cpu=2, ram="4Gi", disk_read=10)``; omitted dimensions are 0."""
    return Resources.of(**dims)


def node(
    name: str = "n0",
    *,
    labels: Mapping[str, str] | None = None,
    taints: tuple[str, ...] = (),
    zone: str = "",
    rack: str = "",
    **alloc: float | str,
) -> NodeSpec:
    """A node; allocatable dimensions not given are unconstrained (as IR v1 says)."""
    allocatable = Resources.of(default=float("inf"), **alloc) if alloc else Resources.unconstrained()
    return NodeSpec(
        name=name,
        allocatable=allocatable,
        labels=dict(labels or {}),
        taints=tuple(Taint(k, effect="NoSchedule") for k in taints),
        zone=zone,
        rack=rack,
    )


def daemonset(
    name: str = "ds",
    *,
    selector: Mapping[str, str] | None = None,
    tolerations: tuple[str, ...] = (),
    **dims: float | str,
) -> DaemonSetSpec:
    return DaemonSetSpec(
        name=name, resources=Resources.of(**dims), node_selector=dict(selector or {}), tolerations=tolerations
    )


def workload(
    wid: str = "default/w-0",
    *,
    tier: Tier | str = Tier.SERVICE,
    priority: int = 0,
    limits: Mapping[str, float | str] | None = None,
    labels: Mapping[str, str] | None = None,
    node_selector: Mapping[str, str] | None = None,
    tolerations: tuple[str, ...] = (),
    anti_affinity: tuple[str, ...] = (),
    anti_affinity_labels: Mapping[str, str] | None = None,
    affinity: tuple[str, ...] = (),
    spread: tuple[SpreadConstraint, ...] = (),
    owner: str = "",
    image: str = "",
    **requests: Any,
) -> WorkloadSpec:
    """A workload; keyword dimensions are its requests (``cpu=1, ram="2Gi"``)."""
    namespace = wid.split("/", 1)[0] if "/" in wid else "default"
    extra = {k: requests.pop(k) for k in list(requests) if k in WorkloadSpec.__dataclass_fields__}
    return WorkloadSpec(
        id=wid if "/" in wid else f"default/{wid}",
        requests=Resources.of(**requests),
        limits=Resources.of(**limits) if limits is not None else None,
        tier=Tier(tier) if isinstance(tier, str) else tier,
        priority=priority,
        namespace=namespace,
        labels=dict(labels or {}),
        node_selector=dict(node_selector or {}),
        tolerations=tuple(Toleration(k, operator="Exists") for k in tolerations),
        anti_affinity=Selector(frozenset(anti_affinity), dict(anti_affinity_labels or {})),
        affinity=Selector(frozenset(affinity)),
        spread=spread,
        owner=owner,
        image=image,
        **extra,
    )


def batch(wid: str = "default/b-0", **kw: Any) -> WorkloadSpec:
    """A batch-tier workload."""
    return workload(wid, tier=Tier.BATCH, **kw)
