"""Builders, a brute-force explorer and a random instance generator for pod-deployability tests.

The brute-force explorer is the property tests' oracle: plain breadth-first search over explicit
configurations (instance counts per (type, node)), every deploy checked by the independent
checker's ``feasible``, no reductions at all (no relevance, no saturation, no symmetry, no
deletion pruning). It needs every node to bound its pods (``pods`` allocatable) to terminate.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence

import numpy as np

from kalena.deployability.checker import feasible
from kalena.deployability.model import (
    HOSTNAME,
    PODS,
    Instance,
    LabelSelector,
    Node,
    PodAffinityTerm,
    PodType,
    Semantics,
    SpreadConstraint,
    Taint,
    Toleration,
    frozen_map,
)


def sel(**labels: str) -> LabelSelector:
    """A matchLabels selector: ``sel(app="web")``."""
    return LabelSelector(frozen_map(labels))


def term(key: str = HOSTNAME, *, namespaces: tuple[str, ...] = (), **labels: str) -> PodAffinityTerm:
    """A required (anti-)affinity term selecting ``labels`` in the ``key`` domain."""
    return PodAffinityTerm(sel(**labels), key, namespaces=namespaces)


def spread(key: str, max_skew: int = 1, min_domains: int = 1, **labels: str) -> SpreadConstraint:
    return SpreadConstraint(max_skew, key, sel(**labels), min_domains)


def ptype(
    name: str,
    *,
    ns: str = "default",
    labels: Mapping[str, str] | None = None,
    requests: Mapping[str, int] | None = None,
    node_selector: Mapping[str, str] | None = None,
    tolerations: Sequence[Toleration] = (),
    affinity: Sequence[PodAffinityTerm] = (),
    anti: Sequence[PodAffinityTerm] = (),
    spreads: Sequence[SpreadConstraint] = (),
) -> PodType:
    """A pod type; every pod also requests one ``pods`` slot."""
    req = {PODS: 1, **(requests or {})}
    return PodType(
        id=f"{ns}/{name}",
        namespace=ns,
        labels=frozen_map(labels),
        requests=frozen_map(req),  # type: ignore[arg-type]
        node_selector=frozen_map(node_selector),
        tolerations=tuple(tolerations),
        affinity=tuple(affinity),
        anti_affinity=tuple(anti),
        spread=tuple(spreads),
    )


def knode(
    name: str,
    *,
    labels: Mapping[str, str] | None = None,
    alloc: Mapping[str, int] | None = None,
    taints: Sequence[Taint] = (),
) -> Node:
    """A node carrying ``kubernetes.io/hostname`` (as kubelet sets it) plus ``labels``."""
    return Node(name, frozen_map({HOSTNAME: name, **(labels or {})}), tuple(taints), frozen_map(alloc))  # type: ignore[arg-type]


def instance(
    nodes: Sequence[Node], types: Sequence[PodType], initial: Mapping[tuple[str, str], int] | None = None
) -> Instance:
    """An instance; ``initial`` keys may use bare type names (namespace ``default``)."""
    init = {(t if "/" in t else f"default/{t}", n): c for (t, n), c in (initial or {}).items()}
    return Instance(tuple(nodes), tuple(types), frozen_map(init))  # type: ignore[arg-type]


def brute_force(
    inst: Instance, semantics: Semantics, targets: Sequence[tuple[str, str]], max_states: int = 200_000
) -> bool:
    """Is some configuration holding every target reachable? Raises if the space exceeds ``max_states``."""
    start = frozenset((k, v) for k, v in inst.initial.items() if v > 0)

    def holds(state: frozenset) -> bool:
        d = dict(state)
        return all(d.get(k, 0) > 0 for k in targets)

    if holds(start):
        return True
    seen = {start}
    queue = deque([start])
    pairs = [(t.id, n.name) for t in inst.types for n in inst.nodes]
    while queue:
        state = queue.popleft()
        d = dict(state)
        nxt = []
        for key, c in d.items():
            e = dict(d)
            if c == 1:
                del e[key]
            else:
                e[key] = c - 1
            nxt.append(e)
        for key in pairs:
            if feasible(inst, semantics, d, key[0], key[1]):
                e = dict(d)
                e[key] = e.get(key, 0) + 1
                nxt.append(e)
        for e in nxt:
            s = frozenset(e.items())
            if s in seen:
                continue
            if holds(s):
                return True
            seen.add(s)
            if len(seen) > max_states:
                raise RuntimeError("brute force state space too large")
            queue.append(s)
    return False


def random_instance(
    rng: np.random.Generator,
    *,
    n_nodes: int = 2,
    n_types: int = 3,
    pods_cap: int = 2,
    spread_p: float = 0.25,
) -> Instance:
    """A small random instance over a tiny label vocabulary (so that selectors often match).

    Nodes carry a zone (``a``/``b``) and a ``pods`` capacity; types get a role label, an optional
    ``cpu`` request, and random affinity, anti-affinity and spread terms on hostname or zone.
    Namespaces vary so that the two semantics disagree on some instances. ``spread_p`` is the
    chance that a type has a spread constraint (0: every slot is a plain bit).
    """
    roles = ["x", "y", "z"]
    keys = [HOSTNAME, "zone"]
    nodes = []
    for i in range(n_nodes):
        alloc = {PODS: int(rng.integers(1, pods_cap + 1))}
        if rng.random() < 0.4:
            alloc["cpu"] = int(rng.integers(1, 4))
        nodes.append(knode(f"n{i}", labels={"zone": "ab"[int(rng.integers(0, 2))]}, alloc=alloc))

    def rterm() -> PodAffinityTerm:
        return term(keys[int(rng.integers(0, 2))], role=roles[int(rng.integers(0, 3))])

    types = []
    for i in range(n_types):
        aff = [rterm() for _ in range(int(rng.choice([0, 0, 1, 1, 2])))]
        anti = [rterm() for _ in range(int(rng.choice([0, 0, 1])))]
        spreads = []
        if rng.random() < spread_p:
            spreads.append(
                spread(
                    keys[int(rng.integers(0, 2))],
                    int(rng.integers(1, 3)),
                    role=roles[int(rng.integers(0, 3))],
                )
            )
        req = {"cpu": int(rng.integers(1, 3))} if rng.random() < 0.4 else {}
        types.append(
            ptype(
                f"t{i}",
                ns="default" if rng.random() < 0.8 else "other",
                labels={"role": roles[int(rng.integers(0, 3))]},
                requests=req,
                affinity=aff,
                anti=anti,
                spreads=spreads,
            )
        )
    initial: dict[tuple[str, str], int] = {}
    for t in types:
        for nd in nodes:
            if rng.random() < 0.15:
                initial[(t.id, nd.name)] = 1
    return Instance(tuple(nodes), tuple(types), frozen_map(initial))  # type: ignore[arg-type]
