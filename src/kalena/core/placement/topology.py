"""Topology rules that bind batch: production anti-affinity and the batch pod's own spread.

Production anti-affinity (seed 000 §4.1, "binding on Kalena"): a resident production workload
``p`` on node ``m`` whose anti-affinity selector matches batch pod ``b`` blocks every node in
``m``'s domain of ``p``'s topology key (key ``""``: ``m`` itself); so does each of ``p``'s required
anti-affinity terms (Kubernetes', a shell's names for the pods it selects). Production never moves, so the
blocked-node masks are built once per ledger, grouped by (selector, key); per pod only the
groups whose selector matches it are OR-ed (label groups memoised by the pod's label set, name
groups found through a name -> groups dict).

Topology spread (``DoNotSchedule``), kube-scheduler semantics restricted to this model: for a
constraint with key ``k``, selector ``s`` and ``maxSkew``, the eligible domains are those of nodes
that satisfy the pod's nodeSelector and have a value for ``k``; ``count[d]`` is the number of
residents matching ``s`` on eligible nodes of domain ``d``; ``min`` is the smallest count over
eligible domains, or 0 when there are fewer than ``minDomains`` of them. Node ``n`` in domain
``d`` passes iff ``count[d] + [s matches the pod] - min <= maxSkew``; a node without ``k`` fails.
Batch pods count toward a batch pod's spread, but a *production* workload's skew is computed
with ``include_batch=False`` (see :func:`domain_counts`): Kalena never spends the blueprint's
constraint budget.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from kalena.core.ledger import Ledger
from kalena.core.model import Selector, SpreadConstraint, WorkloadSpec, selector_matches
from kalena.core.placement.nodeindex import NodeIndex

#: Entries of :meth:`ProductionAntiAffinity.names_pod`'s memo before it starts afresh.
_NAMED_MEMO_MAX = 1 << 17


class ProductionAntiAffinity:
    """Per batch pod, the ``(N,)`` mask of nodes some production anti-affinity term blocks."""

    def __init__(self, ledger: Ledger, nodes: NodeIndex) -> None:
        groups: dict[tuple, tuple[Selector, str, list[int]]] = {}
        rows = ledger.row_arrays()
        for row in range(ledger.production_count):
            spec = rows.specs[row]
            if spec is None:
                continue
            terms = [(t.selector, t.topology_key) for t in spec.required_anti_affinity]
            if not spec.anti_affinity.is_empty():
                terms.append((spec.anti_affinity, spec.anti_affinity_topology_key))
            for sel, topo in terms:
                entry = groups.setdefault((*sel.key(), topo), (sel, topo, []))
                entry[2].append(int(rows.node[row]))
        self._masks: list[np.ndarray] = []
        self._by_name: dict[str, list[int]] = {}
        self._by_labels: list[tuple[Mapping[str, str], int]] = []
        for sel, topo, members in groups.values():
            gid = len(self._masks)
            self._masks.append(nodes.same_domain(topo, np.asarray(members, dtype=np.int64)))
            for name in sel.names:
                self._by_name.setdefault(name, []).append(gid)
            if sel.match_labels:
                self._by_labels.append((sel.match_labels, gid))
        self._label_memo: dict[frozenset[tuple[str, str]], np.ndarray | None] = {}
        # names_pod per (id, declaration), the fields a pod's spellings come from: a backlog's pods
        # are asked every pass. Cleared when large, so a long-lived cache stays bounded.
        self._named_memo: dict[tuple[str, str], bool] = {}

    def __len__(self) -> int:
        return len(self._masks)

    def _or(self, gids: list[int]) -> np.ndarray | None:
        if not gids:
            return None
        out = self._masks[gids[0]].copy()
        for g in gids[1:]:
            out |= self._masks[g]
        return out

    def blocked(self, pod: WorkloadSpec) -> np.ndarray | None:
        """Nodes blocked for ``pod``; ``None`` when no production term matches it."""
        if not self._masks:
            return None
        key = frozenset(pod.labels.items())
        if key not in self._label_memo:
            self._label_memo[key] = self._or(
                [g for labels, g in self._by_labels if selector_matches(labels, pod.labels)]
            )
        by_labels = self._label_memo[key]
        if not self._by_name:
            return by_labels
        named = [g for ident in pod.identities() for g in self._by_name.get(ident, ())]
        if not named:
            return by_labels
        by_name = self._or(named)
        assert by_name is not None
        return by_name if by_labels is None else by_name | by_labels

    def names_pod(self, pod: WorkloadSpec) -> bool:
        """True when some production term names this very pod (so its answer is not its class's)."""
        if not self._by_name:
            return False
        key = (pod.id, pod.declaration)
        named = self._named_memo.get(key)
        if named is None:
            if len(self._named_memo) >= _NAMED_MEMO_MAX:
                self._named_memo.clear()
            named = self._named_memo[key] = pod.named_in(self._by_name)
        return named


def domain_counts(
    ledger: Ledger,
    nodes: NodeIndex,
    constraint: SpreadConstraint,
    *,
    include_batch: bool,
    eligible: np.ndarray | None = None,
) -> np.ndarray:
    """Residents matching ``constraint.selector`` per domain of its key, shape ``(domains,)``.

    ``include_batch=False`` counts production only: the skew a production workload's constraint
    sees, which batch placements therefore can never change.
    """
    ids, count = nodes.domains(constraint.topology_key)
    rows = ledger.row_arrays()
    r = ledger.matching_rows(constraint.selector)
    if not include_batch:
        r = r[~rows.is_batch[r]]
    where = rows.node[r]
    if eligible is not None:
        where = where[eligible[where]]
    d = ids[where]
    return np.bincount(d[d >= 0], minlength=count)


def spread_ok(
    constraint: SpreadConstraint,
    ids: np.ndarray,
    n_domains: int,
    eligible: np.ndarray,
    match_nodes: np.ndarray,
    self_match: bool,
) -> tuple[np.ndarray, np.ndarray, int]:
    """``(ok (N,), count (domains,), min)`` for one constraint (formula in the module docstring).

    ``ids``: node domain ids for the key; ``eligible``: nodes honouring the pod's nodeSelector;
    ``match_nodes``: node of every resident matching the selector (with repeats).
    """
    has_key = ids >= 0
    eligible = eligible & has_key
    m = match_nodes[eligible[match_nodes]]
    count = np.bincount(ids[m], minlength=n_domains)
    present = np.zeros(n_domains, dtype=bool)
    present[ids[eligible]] = True
    n_present = int(present.sum())
    gmin = 0 if n_present < constraint.min_domains or n_present == 0 else int(count[present].min())
    ok = np.zeros(len(ids), dtype=bool)
    ok[has_key] = count[ids[has_key]] + int(self_match) - gmin <= constraint.max_skew
    return ok, count, gmin


def required_affinity_ok(
    nodes: NodeIndex, keys: Sequence[str], witnesses: np.ndarray, self_match: bool
) -> np.ndarray:
    """``(N,)`` bool: where a pod whose required pod affinity terms have topology ``keys`` may
    go, given the nodes (with repeats) of the placed pods that all its terms select, as
    kube-scheduler's InterPodAffinity decides: the node carries every key and each key's domain
    there holds such a pod; else, when none is on a node carrying one of the keys and the pod is
    selected by all its terms itself, any node carrying every key (the first of a series)."""
    ids = [nodes.domains(k)[0] for k in keys]
    has_keys = np.logical_and.reduce([i >= 0 for i in ids])
    ok = has_keys & np.logical_and.reduce([nodes.same_domain(k, witnesses) for k in keys])
    if not ok.any() and self_match and not np.logical_or.reduce([i >= 0 for i in ids])[witnesses].any():
        return has_keys
    return ok
