"""Bounded black pebbling as a pod-deployability instance (seed 003 §6), and DAG families.

Encoding of ``(G = (V, E), z, k)``: one node ``n`` with capacity ``k`` of one scalar resource
(:data:`PEBBLE`); per vertex ``v`` a pod type ``p-v`` carrying ``pebble-id=v`` that requests one
unit (or the vertex's weight) and has one required pod-affinity term (hostname topology) per
predecessor ``u``, selecting ``pebble-id=u``. The question is ``(p-z, n)``. Under the paper's
semantics ``p-z`` is deployable iff ``z`` can be pebbled with at most ``k`` pebbles without
sliding (the new pod is admitted while its predecessors still run): the price of a pyramid of
height ``h`` is ``h + 2``. Under kube-scheduler's semantics a vertex with two or more
predecessors is never deployable (no single pod matches all its terms).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from kalena.deployability.model import (
    HOSTNAME,
    PODS,
    Instance,
    LabelSelector,
    Node,
    PodAffinityTerm,
    PodType,
    Query,
    frozen_map,
)

PEBBLE = "kalena.naughtian.io/pebble"
NODE = "n"

Dag = tuple[tuple[str, ...], tuple[tuple[str, str], ...]]


def pyramid(h: int) -> tuple[Dag, str]:
    """Height ``h`` (``h + 1`` levels, ``(h+1)(h+2)/2`` vertices), vertices ``v{level}_{i}``."""
    vs, es = [], []
    for level in range(h + 1):
        for i in range(h + 1 - level):
            vs.append(f"v{level}_{i}")
            if level:
                es += [(f"v{level - 1}_{i}", f"v{level}_{i}"), (f"v{level - 1}_{i + 1}", f"v{level}_{i}")]
    return (tuple(vs), tuple(es)), f"v{h}_0"


def binary_tree(h: int) -> tuple[Dag, str]:
    """Complete binary tree of height ``h`` (``2^h`` leaves), edges towards the root ``v{h}_0``."""
    vs, es = [], []
    for level in range(h + 1):
        for i in range(2 ** (h - level)):
            vs.append(f"v{level}_{i}")
            if level:
                es += [
                    (f"v{level - 1}_{2 * i}", f"v{level}_{i}"),
                    (f"v{level - 1}_{2 * i + 1}", f"v{level}_{i}"),
                ]
    return (tuple(vs), tuple(es)), f"v{h}_0"


def path(n: int) -> tuple[Dag, str]:
    vs = tuple(f"v{i}" for i in range(n))
    return (vs, tuple((f"v{i}", f"v{i + 1}") for i in range(n - 1))), f"v{n - 1}"


def pebbling_instance(
    dag: Dag, sink: str, k: int, weights: Mapping[str, int] | None = None
) -> tuple[Instance, Query]:
    """The §6 instance (unit requests unless ``weights``) and the question ``(p-sink, n)``."""
    vertices, edges = dag
    if sink not in vertices:
        raise ValueError(f"unknown sink {sink!r}")
    if k < 0:
        raise ValueError(f"the pebble bound must be non-negative, got {k}")
    preds: dict[str, list[str]] = {v: [] for v in vertices}
    for u, v in edges:
        preds[v].append(u)
    types = []
    for v in vertices:
        w = (weights or {}).get(v, 1)
        types.append(
            PodType(
                id=f"default/p-{v}",
                labels=frozen_map({"pebble-id": v}),
                requests=frozen_map({PODS: 1, PEBBLE: w}),  # type: ignore[arg-type]
                affinity=tuple(
                    PodAffinityTerm(LabelSelector(frozen_map({"pebble-id": u})), HOSTNAME) for u in preds[v]
                ),
            )
        )
    node = Node(NODE, frozen_map({HOSTNAME: NODE}), (), frozen_map({PEBBLE: k}))  # type: ignore[arg-type]
    return Instance((node,), tuple(types)), Query(f"default/p-{sink}", NODE)


def read_node_list(text: str) -> tuple[Dag, str, dict[str, int]]:
    """app_playground's ``name weight deps...`` lines (first line = root): DAG, root, weights."""
    vertices, edges, weights = [], [], {}
    root = ""
    for i, line in enumerate(text.splitlines()):
        parts = line.split()
        if not parts:
            continue
        if len(parts) < 2:
            raise ValueError(f"line {i + 1}: expected 'name weight deps...', got {line!r}")
        name, weight, deps = parts[0], parts[1], parts[2:]
        try:
            weights[name] = int(weight)
        except ValueError:
            raise ValueError(f"line {i + 1}: weight {weight!r} is not an integer") from None
        vertices.append(name)
        edges += [(d, name) for d in deps]
        root = root or name
    known = set(vertices)
    for u, v in edges:
        if u not in known:
            raise ValueError(f"{v} depends on unknown vertex {u!r}")
    return (tuple(vertices), tuple(edges)), root, weights


def dag_of(vertices: Sequence[str], edges: Sequence[Sequence[str]]) -> Dag:
    return tuple(vertices), tuple((str(u), str(v)) for u, v in edges)
