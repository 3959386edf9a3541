"""Checks across documents: a blueprint against its workloads and its infrastructure.

* Every blueprint key names a pod of the workloads (a full ``namespace/pod`` id, or in a
  legacy blueprint a bare pod name that must be unique across namespaces), once.
* Every pod of the workloads appears in the blueprint.
* Every node the blueprint names exists in the infrastructure.
* With all three documents: every placement respects the pod's nodeSelector and tolerates
  the node's taints (by key, as IR v1 says), every gang keeps its hard rules (``colocate: true``:
  one node; a group ``nodeSelector``), and the request ledger holds: on every node and
  dimension, the summed requests of its pods stay within C_n (allocatable minus Phase 0).
* ``affinity`` and ``antiAffinity`` are soft in IR v1: a placement that breaks them is valid,
  and :func:`soft_notes` lists each such pod for the operator to see.

Problems are reported against the blueprint file, with key paths ``solution.<key>``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from kalena.core.cluster import Cluster, Group, LedgerBreach
from kalena.core.model import NodeSpec, WorkloadSpec, selector_matches, tolerates_all
from kalena.ir.document import BlueprintDoc, DeclDoc, InfraDoc, WorkloadsDoc
from kalena.ir.errors import Problem, ProblemLog, key_path


def pod_name_index(workloads: WorkloadsDoc) -> dict[str, list[str]]:
    """Bare pod name -> pod ids (more than one when namespaces reuse a name)."""
    index: dict[str, list[str]] = {}
    for pid, _ in workloads.pods():
        index.setdefault(pid.split("/", 1)[1], []).append(pid)
    return index


def resolve_solution(
    blueprint: BlueprintDoc, workloads: WorkloadsDoc, log: ProblemLog
) -> tuple[dict[str, str], dict[str, str]]:
    """``(placement, key_of)``: pod id -> node, and pod id -> the blueprint key that placed it."""
    known: dict[str, DeclDoc] = dict(workloads.pods())
    bare = pod_name_index(workloads) if blueprint.legacy else {}
    placement: dict[str, str] = {}
    key_of: dict[str, str] = {}
    for key, node in blueprint.solution:
        if key in known:
            pid = key
        elif "/" not in key and len(bare.get(key, ())) == 1:
            pid = bare[key][0]
        elif "/" not in key and len(bare.get(key, ())) > 1:
            log.add(("solution", key), f"ambiguous bare pod name: {', '.join(bare[key])}", key)
            continue
        else:
            log.add(("solution", key), "blueprint names unknown pod", key)
            continue
        if pid in placement:
            log.add(("solution", key), f"pod {pid} is placed twice (also as {key_of[pid]!r})", key)
            continue
        placement[pid] = node
        key_of[pid] = key
    for pid in known:
        if pid not in placement:
            log.add("solution", "pod of the workloads is missing from the blueprint", pid)
    return placement, key_of


def check_nodes(blueprint: BlueprintDoc, infra: InfraDoc, log: ProblemLog) -> None:
    names = {n.name for n in infra.nodes}
    for key, node in blueprint.solution:
        if node not in names:
            log.add(("solution", key), "blueprint places the pod on an unknown node", node)


def check_fit(
    placement: Mapping[str, str],
    key_of: Mapping[str, str],
    nodes: Mapping[str, NodeSpec],
    workloads: Mapping[str, WorkloadSpec],
    log: ProblemLog,
) -> None:
    """nodeSelector and taints per placement (the request ledger is checked on the Cluster)."""
    for pid, node_name in placement.items():
        node = nodes.get(node_name)
        if node is None:
            continue  # reported by check_nodes
        w = workloads[pid]
        if not selector_matches(w.node_selector, node.labels):
            log.add(
                ("solution", key_of[pid]),
                f"node {node_name} does not match the pod's nodeSelector",
                node_name,
            )
        if not tolerates_all(w.tolerations, node.taints):
            log.add(
                ("solution", key_of[pid]), f"the pod does not tolerate the taints of {node_name}", node_name
            )


def check_groups(
    placement: Mapping[str, str],
    key_of: Mapping[str, str],
    nodes: Mapping[str, NodeSpec],
    groups: Iterable[Group],
    log: ProblemLog,
) -> None:
    """A gang's hard rules (IR v1 §3.2): ``colocate: true`` puts every member on one node, and a
    group ``nodeSelector`` binds every member."""
    for g in groups:
        placed = [(m, placement[m]) for m in g.members if m in placement]
        if g.colocate and len({n for _, n in placed}) > 1:
            first_pod, first_node = placed[0]
            for pid, node_name in placed[1:]:
                if node_name != first_node:
                    log.add(
                        ("solution", key_of[pid]),
                        f"group {g.name} is colocate: true, but this member is on {node_name} "
                        f"and {first_pod} on {first_node}",
                        node_name,
                    )
        if g.node_selector:
            for pid, node_name in placed:
                node = nodes.get(node_name)
                if node is not None and not selector_matches(g.node_selector, node.labels):
                    log.add(
                        ("solution", key_of[pid]),
                        f"node {node_name} does not match the nodeSelector of group {g.name}",
                        node_name,
                    )


def unconstrained_notes(infra: InfraDoc) -> list[str]:
    """Nodes whose allocatable omits cpu or ram: valid IR v1 (unconstrained there), but rarely
    meant, and the simulator refuses them; one line per node naming what is missing."""
    out = []
    for n in infra.nodes:
        missing = [d for d in ("cpu", "ram") if d not in n.allocatable]
        if missing:
            out.append(
                f"{key_path(n.loc)} ({n.name}) gives no {' and no '.join(missing)} in its allocatable: "
                "unconstrained there (IR v1)"
            )
    return out


def soft_notes(cluster: Cluster) -> list[str]:
    """Where a placed cluster breaks the soft rules of IR v1 (``affinity``, ``antiAffinity``):
    one line per pod, naming the pod, its node and the rule. Soft rules never make a blueprint
    invalid (Kuberina's solver trades them against capacity), but an operator should see them.
    """
    where = cluster.placement
    out: list[str] = []
    for w in cluster.workloads:
        node = where.get(w.id)
        if node is None:
            continue
        if not w.anti_affinity.is_empty():
            near = sorted(
                t for t in cluster.targets_of(w.anti_affinity) if t != w.id and where.get(t) == node
            )
            if near:
                more = f" and {len(near) - 1} more" if len(near) > 1 else ""
                out.append(
                    f"{w.id} on {node}: its antiAffinity names {near[0]}{more}, on the same node (soft)"
                )
        if not w.affinity.is_empty():
            targets = cluster.targets_of(w.affinity) - {w.id}
            if targets and not any(where.get(t) == node for t in targets):
                if len(targets) == 1:
                    (t,) = targets
                    out.append(f"{w.id} on {node}: its affinity names {t}, which is on {where.get(t)} (soft)")
                else:
                    n = len(targets)
                    out.append(f"{w.id} on {node}: none of the {n} pods its affinity names is there (soft)")
    return out


def ledger_problems(file: str, breaches: Iterable[LedgerBreach]) -> list[Problem]:
    out = []
    for b in breaches:
        out.append(
            Problem(
                file,
                "solution",
                f"request ledger breached on node {b.node}: {b.dimension} requests "
                f"{b.load:g} exceed capacity {b.capacity:g} after Phase 0",
                b.node,
            )
        )
    return out
