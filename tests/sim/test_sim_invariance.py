"""The simulator's random streams are keyed by position, never by name (issue 13): the same
cluster under other names (every node, pod, namespace, declaration and owner renamed, each
reference renamed with it, the order kept) gives the same report, number for number.

(Another order is another draw: converting the legacy Irina files to IR v1 folds replicas
together and moves 2,270 of the 2,714 pods, so their production usage is drawn differently.)
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from kalena.core.cluster import Cluster
from kalena.core.model import Selector, WorkloadSpec
from kalena.data import irina_paths
from kalena.ir import load_cluster
from kalena.sim import SimConfig, Simulation, build_report


def other(name: str) -> str:
    """Another name for every spelling of one: each path component gets a prefix."""
    return "/".join(f"q{part}" for part in name.split("/")) if name else name


def renamed(c: Cluster) -> Cluster:
    def sel(s: Selector) -> Selector:
        return dataclasses.replace(s, names=frozenset(other(n) for n in s.names))

    def wl(w: WorkloadSpec) -> WorkloadSpec:
        return dataclasses.replace(
            w, id=other(w.id), namespace=other(w.namespace), declaration=other(w.declaration),
            owner=other(w.owner), affinity=sel(w.affinity), anti_affinity=sel(w.anti_affinity),
        )  # fmt: skip

    return Cluster(
        nodes=tuple(dataclasses.replace(n, name=other(n.name)) for n in c.nodes),
        daemonsets=c.daemonsets,
        capacity={other(k): v for k, v in c.capacity.items()},
        workloads=tuple(wl(w) for w in c.workloads),
        placement={other(k): other(v) for k, v in c.placement.items()},
        groups=tuple(dataclasses.replace(g, members=tuple(other(m) for m in g.members)) for g in c.groups),
        observed={other(k): v for k, v in c.observed.items()},
    )


def numbers(d: Any, path: str = "") -> dict[str, float]:
    """Every number of a report by its key path (names, which differ by construction, left out)."""
    if isinstance(d, dict):
        return {k: v for key, sub in d.items() for k, v in numbers(sub, f"{path}.{key}").items()}
    if isinstance(d, list):
        return {k: v for i, sub in enumerate(d) for k, v in numbers(sub, f"{path}[{i}]").items()}
    if isinstance(d, int | float) and not isinstance(d, bool):
        return {path: float(d)}
    return {}


def test_the_same_cluster_under_other_names_gives_the_same_report():
    cluster = load_cluster(*irina_paths())
    other_cluster = renamed(cluster)
    assert {n.name for n in other_cluster.nodes}.isdisjoint({n.name for n in cluster.nodes})
    reports = []
    for c in (cluster, other_cluster):
        sim = Simulation(c, SimConfig(hours=0.5, seed=3))
        sim.run()
        reports.append(numbers(build_report(sim)))
    a, b = reports
    assert a.keys() == b.keys()
    timing = {k for k in a if "wall" in k}  # how long the run took: the only number allowed to differ
    differ = {
        k: (a[k], b[k])
        for k in a.keys() - timing
        if not (a[k] == b[k] or (math.isnan(a[k]) and math.isnan(b[k])))
    }
    assert differ == {}
    # and the run was not trivial: batch ran and production was measured
    assert any(v > 0 for k, v in a.items() if "batch" in k)
