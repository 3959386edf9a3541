"""Random clusters for property tests and the placement benchmark (deterministic per seed).

``synthetic_cluster`` builds nodes of four shapes over three zones, production deployments placed
first-fit-at-random on the request ledger (as a blueprint would), and pending batch pods in
equivalence classes with a mix of nodeSelectors, tolerations, spread, anti-affinity and images.
``estimated_reservations`` then plays the estimator: each production reservation becomes a random
fraction of its request (gpu stays equal), which is where slack comes from.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kalena.core.ledger import Ledger, ReservationUpdate
from kalena.core.model import NodeSpec, Selector, SpreadConstraint, Taint, Tier, Toleration, WorkloadSpec
from kalena.core.placement import PassState, PlacementCache, PlacementConfig, SchedulingContext
from kalena.core.resources import GPU, NDIM, Resources, stack

#: (name, cpu, ram GiB, gpu, storage GiB, disk read/write MB/s, network in/out MB/s, share of nodes)
NODE_SHAPES: tuple[tuple[str, tuple[float, ...], float], ...] = (
    ("small", (16, 64, 0, 500, 500, 500, 10_000, 10_000), 0.30),
    ("medium", (32, 128, 0, 1000, 1000, 1000, 25_000, 25_000), 0.40),
    ("large", (64, 256, 0, 2000, 2000, 2000, 25_000, 25_000), 0.25),
    ("gpu", (64, 512, 8, 4000, 2000, 2000, 50_000, 50_000), 0.05),
)
ZONES = ("az-1", "az-2", "az-3")


@dataclass(frozen=True, eq=False)
class SyntheticCluster:
    nodes: tuple[NodeSpec, ...]
    capacity: np.ndarray  # (N, 8), already post-Phase-0
    production: tuple[WorkloadSpec, ...]
    placement: dict[str, int]
    pending: tuple[WorkloadSpec, ...]  # batch pods, grouped in classes by owner
    images: dict[str, np.ndarray]  # image -> (N,) bool
    volatility: np.ndarray  # (N,)

    def ledger(self) -> Ledger:
        return Ledger.from_blueprint(self.nodes, self.capacity, self.production, self.placement)


def _nodes(n: int, rng: np.random.Generator) -> tuple[tuple[NodeSpec, ...], np.ndarray]:
    shares = np.array([s[2] for s in NODE_SHAPES])
    kinds = rng.choice(len(NODE_SHAPES), size=n, p=shares / shares.sum())
    nodes, caps = [], np.zeros((n, NDIM))
    for i, k in enumerate(kinds):
        name, dims, _ = NODE_SHAPES[k]
        labels = {"node.kubernetes.io/instance-type": name, "pool": "gpu" if name == "gpu" else "general"}
        if name == "large":
            labels["pool"] = "highmem"
        taints = (Taint("nvidia.com/gpu", effect="NoSchedule"),) if name == "gpu" else ()
        nodes.append(
            NodeSpec(
                f"node-{i:05d}",
                Resources(tuple(float(x) for x in dims)),
                labels=labels,
                taints=taints,
                zone=ZONES[i % len(ZONES)],
                rack=f"rack-{i // 40:03d}",
            )
        )
        caps[i] = dims
    return tuple(nodes), caps


def _production(
    n: int, caps: np.ndarray, rng: np.random.Generator
) -> tuple[tuple[WorkloadSpec, ...], dict[str, int]]:
    """Deployments of 1-20 replicas; each replica goes to a random node where its request fits."""
    used = np.zeros_like(caps)
    out: list[WorkloadSpec] = []
    placement: dict[str, int] = {}
    dep = misses = 0
    gpu_nodes = np.flatnonzero(caps[:, GPU] > 0)
    cpu_nodes = np.flatnonzero(caps[:, GPU] == 0)
    while len(out) < n:
        replicas = int(min(n - len(out), rng.integers(1, 21)))
        req = np.zeros(NDIM)
        req[0] = rng.choice([0.25, 0.5, 1, 2, 4])
        req[1] = rng.choice([0.5, 1, 2, 4, 8])
        req[3] = rng.choice([1, 5, 10, 20])
        req[4:6] = rng.choice([0, 5, 20], size=2)
        req[6:8] = rng.choice([0, 10, 100], size=2)
        gpu = dep % 50 == 0  # a few GPU deployments, tolerating the GPU taint
        if gpu:
            req[GPU] = 1
        noisy = dep % 25 == 1  # production that refuses io-heavy neighbours on its node
        ns = f"team-{dep % 10}"
        pool = gpu_nodes if gpu else cpu_nodes
        before = len(out)
        for r in range(replicas) if len(pool) else ():
            node = -1
            for cand in rng.choice(pool, size=8):  # a few random tries, then a full scan
                if np.all(used[cand] + req <= caps[cand]):
                    node = int(cand)
                    break
            if node < 0:
                choices = pool[np.all(used[pool] + req <= caps[pool], axis=1)]
                if not len(choices):
                    break
                node = int(rng.choice(choices))
            used[node] += req
            wid = f"{ns}/svc-{dep:05d}-{r:02d}"
            out.append(
                WorkloadSpec(
                    wid,
                    Resources(tuple(float(x) for x in req)),
                    tier=Tier.SERVICE,
                    namespace=ns,
                    declaration=f"{ns}/svc-{dep:05d}",
                    labels={"app": f"svc-{dep:05d}"},
                    tolerations=(Toleration("nvidia.com/gpu", operator="Exists"),) if gpu else (),
                    anti_affinity=Selector(match_labels={"io": "heavy"}) if noisy else Selector(),
                    owner=f"{ns}/svc-{dep:05d}",
                )
            )
            placement[wid] = node
        dep += 1
        misses = 0 if len(out) > before else misses + 1
        if misses > 100:  # the cluster is full: return fewer production workloads than asked
            break
    return tuple(out), placement


def _pending(n: int, per_class: int, n_images: int, rng: np.random.Generator) -> tuple[WorkloadSpec, ...]:
    out: list[WorkloadSpec] = []
    cls = 0
    while len(out) < n:
        count = min(per_class, n - len(out))
        ns = f"batch-{cls % 5}"
        owner = f"{ns}/job-{cls:04d}"
        req = (float(rng.choice([0.1, 0.25, 0.5, 1, 2])), float(rng.choice([0.25, 0.5, 1, 2, 4])))
        flavour = cls % 10
        kw: dict = {}
        labels = {"job": owner.replace("/", "-")}
        if flavour == 1:
            kw["node_selector"] = {"pool": "highmem"}
        if flavour == 2:
            labels["io"] = "heavy"  # production anti-affinity applies
        if flavour == 3:
            kw["spread"] = (SpreadConstraint(1, "zone", Selector(match_labels=dict(labels))),)
        if flavour == 4:
            kw["anti_affinity"] = Selector(match_labels=dict(labels))  # one per node
        gpu = 1.0 if cls % 50 == 7 else 0.0  # never placed: GPU_REQUESTED
        for i in range(count):
            out.append(
                WorkloadSpec(
                    f"{owner}-{i:04d}",
                    Resources.of(cpu=req[0], ram=req[1], gpu=gpu, storage=1.0),
                    tier=Tier.BATCH,
                    namespace=ns,
                    labels=labels,
                    image=f"registry/img-{cls % n_images:03d}",
                    owner=owner,
                    priority=int(cls % 3),
                    **kw,
                )
            )
        cls += 1
    return tuple(out)


def synthetic_cluster(
    n_nodes: int,
    n_production: int,
    n_pending: int,
    *,
    seed: int = 0,
    per_class: int = 50,
    n_images: int = 200,
    images_per_node: int = 20,
) -> SyntheticCluster:
    rng = np.random.default_rng(seed)
    nodes, caps = _nodes(n_nodes, rng)
    production, placement = _production(n_production, caps, rng)
    pending = _pending(n_pending, per_class, n_images, rng)
    held = rng.integers(0, n_images, size=(n_nodes, images_per_node))
    images = {f"registry/img-{i:03d}": np.any(held == i, axis=1) for i in range(n_images)}
    volatility = rng.gamma(1.0, 0.003, size=n_nodes)
    return SyntheticCluster(nodes, caps, production, placement, pending, images, volatility)


def estimated_reservations(
    ledger: Ledger, rng: np.random.Generator, low: float = 0.3, high: float = 0.9
) -> ReservationUpdate:
    """Every reservation set to ``U(low, high) x request`` (gpu kept equal), as a bulk update."""
    view = ledger.rows()
    frac = rng.uniform(low, high, size=(len(view.rows), 1))
    res = view.requests * frac
    res[:, GPU] = view.requests[:, GPU]
    return ReservationUpdate(view.rows, res, view.global_epoch)


def ledger_of(
    nodes: tuple[NodeSpec, ...] | list[NodeSpec],
    production: tuple[tuple[WorkloadSpec, str], ...] | list[tuple[WorkloadSpec, str]] = (),
) -> Ledger:
    """A ledger whose capacity is each node's allocatable and whose blueprint is ``(workload, node name)``."""
    return Ledger.from_blueprint(
        nodes,
        stack(n.allocatable for n in nodes),
        [w for w, _ in production],
        {w.id: n for w, n in production},
    )


def pass_state(
    ledger: Ledger, ctx: SchedulingContext | None = None, config: PlacementConfig | None = None
) -> PassState:
    """A fresh :class:`PassState` over ``ledger`` (default context and config), for filter tests."""
    config = config or PlacementConfig()
    nodes, prod_aa, scores = PlacementCache().bind(ledger, config)
    return PassState(ledger, ctx or SchedulingContext(), config, nodes, prod_aa, scores)
