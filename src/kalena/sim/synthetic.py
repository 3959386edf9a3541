"""A synthetic planned cluster shaped like Irina, at any size (the scaling run: 5,000 nodes, 100,000 pods).

Nodes take Irina's three shapes in Irina's proportions (120 standard 64 cpu / 256 GiB, 36 memory
32 / 512, 30 gpu 48 / 192 / 8 gpu, of 186), with Irina's Phase 0 deduction (2.25 cpu, 2.75 GiB per
node) applied to the allocatable. Production pods draw their (cpu, ram) requests from Irina's
non-gpu request mix, scaled by one factor so that the requests fill ``fill`` of the cluster's cpu
(Irina's blueprint fills 73 %); each pod lands on a random node where it fits (a feasible blueprint,
not an optimised one). Deterministic per seed.
"""

from __future__ import annotations

import numpy as np

from kalena.core.cluster import Cluster
from kalena.core.model import NodeSpec, WorkloadSpec
from kalena.core.resources import Resources

#: (name, cpu, ram GiB, gpu, nodes of 186 in Irina)
SHAPES = (("std", 64.0, 256.0, 0.0, 120), ("mem", 32.0, 512.0, 0.0, 36), ("gpu", 48.0, 192.0, 8.0, 30))
PHASE0 = (2.25, 2.75)  # Irina's four DaemonSets take 2.25 cpu and 2.75 GiB on every node
#: Irina's most common non-gpu (cpu, ram GiB) requests and their pod counts
REQUEST_MIX = (
    ((2.0, 4.0), 610),
    ((1.0, 2.0), 460),
    ((3.0, 6.0), 410),
    ((2.0, 6.0), 180),
    ((4.0, 8.0), 160),
    ((6.0, 12.0), 100),
    ((2.0, 24.0), 100),
    ((3.0, 12.0), 100),
    ((3.0, 10.0), 80),
    ((4.0, 10.0), 80),
    ((1.0, 6.0), 80),
    ((6.0, 96.0), 60),
    ((3.0, 48.0), 60),
    ((2.0, 3.0), 60),
    ((1.5, 3.0), 40),
    ((6.0, 48.0), 30),
)
IRINA_FILL = 0.73


def synthetic_cluster(nodes: int, pods: int, seed: int = 0, fill: float = IRINA_FILL) -> Cluster:
    """``nodes`` nodes and ``pods`` production pods placed so their requests fill ``fill`` of cpu."""
    if nodes < 1 or pods < 0 or not 0 < fill < 1:
        raise ValueError(
            f"synthetic cluster needs nodes >= 1, pods >= 0 and 0 < fill < 1, got {nodes}, {pods}, {fill}"
        )
    rng = np.random.default_rng([seed, 0x5EED])
    counts = np.array([s[4] for s in SHAPES], dtype=float)
    kind = rng.choice(len(SHAPES), size=nodes, p=counts / counts.sum())
    specs, cap = [], np.zeros((nodes, 2))
    for i, k in enumerate(kind):
        name, c, r, g, _ = SHAPES[k]
        specs.append(
            NodeSpec(
                f"{name}-{i:05d}",
                Resources.of(cpu=c - PHASE0[0], ram=r - PHASE0[1], gpu=g),
                labels={"tier": name},
                zone=f"zone-{i % 3}",
            )
        )
        cap[i] = (c - PHASE0[0], r - PHASE0[1])
    mix = np.array([m[0] for m in REQUEST_MIX])
    weights = np.array([m[1] for m in REQUEST_MIX], dtype=float)
    pick = rng.choice(len(mix), size=pods, p=weights / weights.sum())
    mean_cpu = float((mix[:, 0] * weights).sum() / weights.sum())
    scale = fill * cap[:, 0].sum() / max(pods * mean_cpu, 1e-9)
    req = mix[pick] * scale
    used = np.zeros_like(cap)
    placement: dict[str, str] = {}
    workloads = []
    # where each request shape still fits, kept per shape: a placement changes one node's column
    # (the same test, node by node, as over all nodes for every pod)
    shapes = mix * scale
    free = np.all(shapes[:, None, :] <= cap[None, :, :], axis=2)  # (shapes, nodes)
    # one requests object per shape, shared by its pods (as a job's batch pods share theirs):
    # 100,000 built one by one took a second; the values are the same floats either way
    asks = [Resources.of(cpu=float(c), ram=float(r)) for c, r in shapes]
    for j in np.argsort(-req[:, 0], kind="stable"):  # big pods first, so the small ones fill the gaps
        cand = np.flatnonzero(free[pick[j]])
        if not len(cand):
            continue
        n = int(cand[rng.integers(len(cand))])
        used[n] += req[j]
        free[:, n] = np.all(used[n] + shapes <= cap[n], axis=1)
        wid = f"svc/pod-{j:06d}"
        workloads.append(
            WorkloadSpec(
                id=wid,
                requests=asks[pick[j]],
                namespace="svc",
                declaration=f"svc/deploy-{pick[j]:02d}",
                owner=f"svc/deploy-{pick[j]:02d}",
            )
        )
        placement[wid] = specs[n].name
    workloads.sort(key=lambda w: w.id)
    return Cluster.build(specs, (), workloads, placement)


__all__ = ["synthetic_cluster"]
