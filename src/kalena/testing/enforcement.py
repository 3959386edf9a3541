"""Builders for node-enforcement tests: residents with observations, and node snapshots.

``node_snapshot(resident("b", tier="batch", ram=4, usage={"ram": 5}), ram=8)`` reads as the
scenario: one batch workload requesting 4 GiB and using 5 on a node with 8 GiB.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kalena.core.enforcement.snapshot import NodeConditions, NodeSnapshot, snapshot_from_workloads
from kalena.core.model import Tier, WorkloadSpec
from kalena.core.resources import Resources
from kalena.testing.builders import workload

INF = math.inf


@dataclass(frozen=True, slots=True)
class Resident:
    """A workload spec plus what the node agent observes about it."""

    spec: WorkloadSpec
    usage: Mapping[str, float] | None = None
    reservation: Resources | None = None
    previous: Resources | None = None
    started_at: float = -INF


def _override(base: Resources, dims: Mapping[str, float] | None) -> Resources | None:
    """``base`` with some dimensions replaced (unspecified ones keep the request)."""
    if dims is None:
        return None
    values = dict(base.to_dict())
    values.update({k.replace("_", "."): v for k, v in dims.items()})
    return Resources.from_mapping(values)


def resident(
    wid: str,
    *,
    tier: Tier | str = Tier.SERVICE,
    priority: int = 0,
    daemonset: bool = False,
    slack_cpu: bool = True,
    limits: Mapping[str, float] | None = None,
    usage: Mapping[str, float] | None = None,
    reservation: Mapping[str, float] | None = None,
    previous: Mapping[str, float] | None = None,
    started_at: float = -INF,
    owner: str = "",
    **requests: Any,
) -> Resident:
    """A resident; keyword dimensions are requests. ``reservation``/``previous`` override the
    request on the dimensions given; ``usage`` dimensions not given are unsampled (NaN)."""
    spec = workload(
        wid,
        tier=tier,
        priority=priority,
        limits=limits,
        owner=owner,
        is_daemonset=daemonset,
        slack_cpu=slack_cpu,
        **requests,
    )
    return Resident(
        spec, usage, _override(spec.requests, reservation), _override(spec.requests, previous), started_at
    )


def batch_resident(wid: str, **kw: Any) -> Resident:
    return resident(wid, tier=Tier.BATCH, **kw)


def node_snapshot(
    *residents: Resident,
    node: str = "n0",
    triggered: Sequence[str] = (),
    acute: Sequence[str] = (),
    psi_some: Mapping[str, float] | None = None,
    psi_full: Mapping[str, float] | None = None,
    memory_events: int = 0,
    with_previous: bool = False,
    epoch: int = 0,
    **capacity: float,
) -> NodeSnapshot:
    """A snapshot; keyword dimensions are the capacity (unspecified ones are unconstrained).

    With ``with_previous`` (or any resident giving ``previous``), previous reservations are
    passed; residents without one count as newcomers.
    """
    specs = [r.spec for r in residents]
    with_previous = with_previous or any(r.previous is not None for r in residents)
    return snapshot_from_workloads(
        node,
        Resources.of(default=INF, **capacity),
        specs,
        usage={r.spec.id: r.usage for r in residents if r.usage is not None},
        reservations={r.spec.id: r.reservation for r in residents if r.reservation is not None},
        previous_reservations=(
            {r.spec.id: r.previous for r in residents if r.previous is not None} if with_previous else None
        ),
        started_at={r.spec.id: r.started_at for r in residents},
        conditions=NodeConditions.of(
            triggered=triggered,
            acute=acute,
            psi_some=psi_some,
            psi_full=psi_full,
            memory_events=memory_events,
        ),
        epoch=epoch,
    )
