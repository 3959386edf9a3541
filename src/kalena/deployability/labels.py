"""Label, node and taint matching used by the semantics and the search (not by the checker).

Formulas (Kubernetes API conventions):

* selector ``s`` matches labels ``L``: every ``matchLabels`` pair is in ``L`` and every
  expression holds: ``In`` (key present, value listed), ``NotIn`` (key absent or value not
  listed), ``Exists``, ``DoesNotExist``; node selectors add ``Gt``/``Lt`` (integer compare).
  A null selector (``None``) matches nothing; an empty one matches everything.
* StaticOK(t, n): nodeSelector pairs in the node labels, some required nodeAffinity term holds
  (a term with no requirement matches no node), every ``NoSchedule``/``NoExecute`` taint is
  tolerated, and an unschedulable node is tolerated (taint ``node.kubernetes.io/unschedulable``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from kalena.deployability.model import (
    LabelSelector,
    Node,
    NodeSelectorTerm,
    PodAffinityTerm,
    PodType,
    Requirement,
    Semantics,
    Taint,
    Toleration,
)

UNSCHEDULABLE_TAINT = Taint("node.kubernetes.io/unschedulable", "", "NoSchedule")


def requirement_holds(req: Requirement, labels: Mapping[str, str]) -> bool:
    present = req.key in labels
    op = req.operator
    if op == "In":
        return present and labels[req.key] in req.values
    if op == "NotIn":
        return not present or labels[req.key] not in req.values
    if op == "Exists":
        return present
    if op == "DoesNotExist":
        return not present
    if not present:  # Gt / Lt
        return False
    try:
        have = int(labels[req.key])
    except ValueError:
        return False
    want = int(req.values[0])
    return have > want if op == "Gt" else have < want


def selector_matches(sel: LabelSelector | None, labels: Mapping[str, str]) -> bool:
    if sel is None:
        return False
    if any(labels.get(k) != v for k, v in sel.match_labels.items()):
        return False
    return all(requirement_holds(r, labels) for r in sel.match_expressions)


def node_term_matches(term: NodeSelectorTerm, node: Node) -> bool:
    if not term.match_expressions and not term.match_fields:
        return False
    fields = {"metadata.name": node.name}
    return all(requirement_holds(r, node.labels) for r in term.match_expressions) and all(
        requirement_holds(r, fields) for r in term.match_fields
    )


def node_affinity_matches(t: PodType, node: Node) -> bool:
    """nodeSelector and required nodeAffinity (the ``NodeAffinity`` filter)."""
    if any(node.labels.get(k) != v for k, v in t.node_selector.items()):
        return False
    return t.node_affinity is None or any(node_term_matches(term, node) for term in t.node_affinity)


def tolerates(tol: Toleration, taint: Taint) -> bool:
    if tol.effect and tol.effect != taint.effect:
        return False
    if not tol.key:
        return tol.operator == "Exists"
    if tol.key != taint.key:
        return False
    return tol.operator == "Exists" or tol.value == taint.value


def untolerated_taint(t: PodType, node: Node) -> Taint | None:
    """The first repelling taint (NoSchedule / NoExecute) that no toleration covers, if any."""
    taints = (*node.taints, UNSCHEDULABLE_TAINT) if node.unschedulable else node.taints
    for taint in taints:
        if taint.effect == "PreferNoSchedule":
            continue
        if not any(tolerates(tol, taint) for tol in t.tolerations):
            return taint
    return None


def static_ok(t: PodType, node: Node) -> bool:
    """StaticOK(t, n)."""
    return node_affinity_matches(t, node) and untolerated_taint(t, node) is None


def term_namespaces_match(
    term: PodAffinityTerm, owner_ns: str, pod_ns: str, ns_labels: Callable[[str], Mapping[str, str]]
) -> bool:
    """Is a pod in ``pod_ns`` inside the scope of ``term`` owned by a pod in ``owner_ns``?"""
    if not term.namespaces and term.namespace_selector is None:
        return pod_ns == owner_ns
    if pod_ns in term.namespaces:
        return True
    return selector_matches(term.namespace_selector, ns_labels(pod_ns))


def term_matches(
    term: PodAffinityTerm,
    owner: PodType,
    pod: PodType,
    semantics: Semantics,
    ns_labels: Callable[[str], Mapping[str, str]],
) -> bool:
    """``pod in [[s]]`` for a term of ``owner``; the paper's model has no namespaces."""
    if not selector_matches(term.selector, pod.labels):
        return False
    if semantics is Semantics.PAPER:
        return True
    return term_namespaces_match(term, owner.namespace, pod.namespace, ns_labels)


def spread_selects(
    owner: PodType, selector: LabelSelector | None, pod: PodType, semantics: Semantics
) -> bool:
    """PodTopologySpread counts pods of the owner's namespace only (the paper: every namespace)."""
    if semantics is Semantics.KUBERNETES and pod.namespace != owner.namespace:
        return False
    return selector_matches(selector, pod.labels)


def spread_eligible(owner: PodType, node: Node) -> bool:
    """Does ``node`` count as a domain member for ``owner``'s constraints (the set E)?

    It must carry every topology key of the owner's constraints, and pass the node-inclusion
    policies: nodeAffinityPolicy Honor -> the owner's nodeSelector/nodeAffinity; nodeTaintsPolicy
    Honor -> the owner tolerates the node's taints. Policies are per constraint in Kubernetes;
    :func:`constraint_eligible` applies them per constraint.
    """
    return all(c.topology_key in node.labels for c in owner.spread)


def constraint_eligible(owner: PodType, index: int, node: Node) -> bool:
    c = owner.spread[index]
    if not spread_eligible(owner, node):
        return False
    if c.node_affinity_policy == "Honor" and not node_affinity_matches(owner, node):
        return False
    return not (c.node_taints_policy == "Honor" and untolerated_taint(owner, node) is not None)
