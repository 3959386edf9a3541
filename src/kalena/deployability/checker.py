"""Independent witness checker: replays deploy/delete steps against Definition 1 (or kube-scheduler).

This module deliberately shares no code with the search: it imports only the model and the
answer types, and carries its own small implementation of every check (selectors, node
affinity, taints, resources, affinity with the bootstrap exception, anti-affinity, topology
spread). A test asserts it imports nothing else from the package. A witness is printed only
after :func:`replay` accepts it, so a bug in the search shows up as a refused witness, never
as a wrong answer.

Replay: start from the instance's initial configuration; a ``delete`` needs a running pod of
that type on that node; a ``deploy`` needs ``Hard(t, n, sigma)``; at the end every target
coordinate must hold at least one pod.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from kalena.deployability.answer import Op, Step
from kalena.deployability.model import Instance, Semantics


@dataclass(frozen=True, slots=True)
class Replay:
    """``ok`` or the first refused step (``step == len(steps)`` means the target does not hold)."""

    ok: bool
    step: int = -1
    message: str = ""


def _expr_ok(e, labels: Mapping[str, str]) -> bool:
    has = e.key in labels
    val = labels.get(e.key)
    match e.operator:
        case "In":
            return has and val in e.values
        case "NotIn":
            return (not has) or val not in e.values
        case "Exists":
            return has
        case "DoesNotExist":
            return not has
        case "Gt" | "Lt":
            if not has:
                return False
            try:
                lhs = int(val)  # type: ignore[arg-type]
            except ValueError:
                return False
            rhs = int(e.values[0])
            return lhs > rhs if e.operator == "Gt" else lhs < rhs
    raise AssertionError(e.operator)


def _selects(sel, labels: Mapping[str, str]) -> bool:
    if sel is None:  # a null selector selects nothing
        return False
    for k, v in sel.match_labels.items():
        if k not in labels or labels[k] != v:
            return False
    return all(_expr_ok(e, labels) for e in sel.match_expressions)


class _World:
    """The instance flattened to dicts, plus the running configuration."""

    def __init__(self, instance: Instance, semantics: Semantics) -> None:
        self.paper = semantics is Semantics.PAPER
        self.pods = {t.id: t for t in instance.types}
        self.nodes = {n.name: n for n in instance.nodes}
        self.inst = instance
        self.on: dict[str, dict[str, int]] = {}  # node -> pod type -> running count
        for (tid, nn), v in instance.initial.items():
            if v > 0:
                self.on.setdefault(nn, {})[tid] = v
        self._groups: dict[str, dict[str, list[str]]] = {}  # topology key -> value -> nodes
        self._anti_keys = sorted({term.topology_key for u in instance.types for term in u.anti_affinity})
        # a fresh number for every configuration change (never reused); a replay that undoes its
        # steps restores the number it started from, since the configuration is that one again
        self.version = 0
        self._fresh = 0
        self._members: dict[tuple[str, int], list] = {}  # spread constraint -> eligible nodes
        self._tallies: dict[tuple[str, int], tuple[int, dict[str, int]]] = {}

    def count(self, tid: str, nn: str) -> int:
        return self.on.get(nn, {}).get(tid, 0)

    def bump(self, tid: str, nn: str, by: int) -> None:
        self._fresh += 1
        self.version = self._fresh
        here = self.on.setdefault(nn, {})
        here[tid] = here.get(tid, 0) + by
        if here[tid] == 0:
            del here[tid]

    def _around(self, key: str, n) -> Iterable[tuple[object, object, int]]:
        """Running pods on nodes whose label ``key`` equals ``n``'s (none when ``n`` lacks it)."""
        if key not in n.labels:
            return
        if key not in self._groups:
            g: dict[str, list[str]] = {}
            for m in self.inst.nodes:
                if key in m.labels:
                    g.setdefault(m.labels[key], []).append(m.name)
            self._groups[key] = g
        for nn in self._groups[key][n.labels[key]]:
            for tid, c in self.on.get(nn, {}).items():
                yield self.pods[tid], self.nodes[nn], c

    # --- static -------------------------------------------------------------------------------
    def _static(self, t, n) -> bool:
        return _node_affinity_only(t, n) and self._tolerated(t, n)

    @staticmethod
    def _tolerated(t, n) -> bool:
        taints = [(x.key, x.value, x.effect) for x in n.taints]
        if n.unschedulable:
            taints.append(("node.kubernetes.io/unschedulable", "", "NoSchedule"))
        for key, value, effect in taints:
            if effect not in ("NoSchedule", "NoExecute"):
                continue
            covered = False
            for tol in t.tolerations:
                if tol.effect not in ("", effect):
                    continue
                if tol.key == "":
                    covered = tol.operator == "Exists"
                elif tol.key == key:
                    covered = tol.operator == "Exists" or tol.value == value
                if covered:
                    break
            if not covered:
                return False
        return True

    # --- inter-pod ----------------------------------------------------------------------------
    def _in_scope(self, term, owner, pod) -> bool:
        if not _selects(term.selector, pod.labels):
            return False
        if self.paper:
            return True
        if not term.namespaces and term.namespace_selector is None:
            return pod.namespace == owner.namespace
        if pod.namespace in term.namespaces:
            return True
        return _selects(term.namespace_selector, self.inst.ns_labels(pod.namespace))

    @staticmethod
    def _near(key: str, a, b) -> bool:
        return key in a.labels and key in b.labels and a.labels[key] == b.labels[key]

    def _live(self) -> Iterable[tuple[object, object, int]]:
        for nn, here in self.on.items():
            for tid, c in here.items():
                yield self.pods[tid], self.nodes[nn], c

    def _affinity_ok(self, t, n) -> bool:
        if self.paper:
            for term in t.affinity:
                if any(self._in_scope(term, t, u) for u, _, _ in self._around(term.topology_key, n)):
                    continue
                anywhere = any(self._in_scope(term, t, u) for u, _, _ in self._live())
                if not (self._in_scope(term, t, t) and not anywhere):
                    return False
            for term in t.anti_affinity:
                if any(self._in_scope(term, t, u) for u, _, _ in self._around(term.topology_key, n)):
                    return False
            return True
        # kube-scheduler
        terms = t.affinity
        if terms:
            if any(term.topology_key not in n.labels for term in terms):
                return False

            def matches_all(u) -> bool:
                return all(self._in_scope(term, t, u) for term in terms)

            satisfied = all(
                any(matches_all(u) for u, _, _ in self._around(term.topology_key, n)) for term in terms
            )
            if not satisfied:
                keys = [term.topology_key for term in terms]
                counted = any(matches_all(u) and any(k in m.labels for k in keys) for u, m, _ in self._live())
                if counted or not matches_all(t):
                    return False
        for term in t.anti_affinity:
            if any(self._in_scope(term, t, u) for u, _, _ in self._around(term.topology_key, n)):
                return False
        for key in self._anti_keys:
            for u, _, _ in self._around(key, n):
                for term in u.anti_affinity:
                    if term.topology_key == key and self._in_scope(term, u, t):
                        return False
        return True

    # --- resources and spread -----------------------------------------------------------------
    def _fits(self, t, n) -> bool:
        for dim, cap in n.allocatable.items():
            want = t.requests.get(dim, 0)
            if want == 0:
                continue
            used = sum(c * self.pods[tid].requests.get(dim, 0) for tid, c in self.on.get(n.name, {}).items())
            if used + want > cap:
                return False
        return True

    def _eligible(self, t, i: int) -> list:
        key = (t.id, i)
        if key not in self._members:
            c, keys = t.spread[i], [x.topology_key for x in t.spread]
            self._members[key] = [
                m
                for m in self.inst.nodes
                if all(k in m.labels for k in keys)
                and not (c.node_affinity_policy == "Honor" and not _node_affinity_only(t, m))
                and not (c.node_taints_policy == "Honor" and not self._tolerated(t, m))
            ]
        return self._members[key]

    def _tally(self, t, i: int) -> dict[str, int]:
        """Matching pods per domain of constraint ``i`` (cached while the configuration is unchanged)."""
        cached = self._tallies.get((t.id, i))
        if cached is not None and cached[0] == self.version:
            return cached[1]
        c = t.spread[i]
        key = c.topology_key
        members = self._eligible(t, i)
        tally = {m.labels[key]: 0 for m in members}
        for m in members:
            for tid, cnt in self.on.get(m.name, {}).items():
                u = self.pods[tid]
                if (self.paper or u.namespace == t.namespace) and _selects(c.selector, u.labels):
                    tally[m.labels[key]] += cnt
        self._tallies[(t.id, i)] = (self.version, tally)
        return tally

    def _spread_ok(self, t, n) -> bool:
        for i, c in enumerate(t.spread):
            key = c.topology_key
            if key not in n.labels:
                return False
            if self.paper and n.name not in {m.name for m in self._eligible(t, i)}:
                return False
            tally = self._tally(t, i)
            floor = min(tally.values()) if len(tally) >= c.min_domains else 0
            mine = tally.get(n.labels[key], 0) + (1 if _selects(c.selector, t.labels) else 0)
            if mine - floor > c.max_skew:
                return False
        return True

    def feasible(self, type_id: str, node: str) -> bool:
        t, n = self.pods[type_id], self.nodes[node]
        return self._fits(t, n) and self._static(t, n) and self._affinity_ok(t, n) and self._spread_ok(t, n)


def _node_affinity_only(t, n) -> bool:
    for k, v in t.node_selector.items():
        if n.labels.get(k) != v:
            return False
    if t.node_affinity is None:
        return True
    for term in t.node_affinity:
        if not term.match_expressions and not term.match_fields:
            continue
        if all(_expr_ok(e, n.labels) for e in term.match_expressions) and all(
            _expr_ok(f, {"metadata.name": n.name}) for f in term.match_fields
        ):
            return True
    return False


def feasible(
    instance: Instance, semantics: Semantics, config: Mapping[tuple[str, str], int], type_id: str, node: str
) -> bool:
    """Hard(t, n, config), computed by the checker's own code (used by the tests' brute force)."""
    w = _World(instance, semantics)
    w.on = {}
    for (tid, nn), v in config.items():
        if v > 0:
            w.bump(tid, nn, v)
    return w.feasible(type_id, node)


class Checker:
    """Replays many witnesses over one instance (flattened once; each replay is undone after)."""

    def __init__(self, instance: Instance, semantics: Semantics) -> None:
        self._world = _World(instance, semantics)

    def replay(self, steps: Sequence[Step], targets: Sequence[tuple[str, str]]) -> Replay:
        """Replay ``steps`` from the initial configuration; every target must hold at the end."""
        w = self._world
        done: list[tuple[str, str, int]] = []
        version = w.version
        try:
            return _replay(w, steps, targets, done)
        finally:
            for tid, nn, by in reversed(done):
                w.bump(tid, nn, -by)
            w.version = version  # the same configuration again: cached tallies stay valid


def replay(
    instance: Instance, semantics: Semantics, steps: Sequence[Step], targets: Sequence[tuple[str, str]]
) -> Replay:
    """Replay ``steps`` from the initial configuration and check that every target holds at the end."""
    return _replay(_World(instance, semantics), steps, targets, [])


def _replay(
    w: _World, steps: Sequence[Step], targets: Sequence[tuple[str, str]], done: list[tuple[str, str, int]]
) -> Replay:
    for i, s in enumerate(steps):
        if s.pod_type not in w.pods or s.node not in w.nodes:
            return Replay(False, i, f"step {i + 1} names an unknown pod type or node")
        if s.op is Op.DELETE:
            if w.count(s.pod_type, s.node) < 1:
                return Replay(False, i, f"step {i + 1}: no {s.pod_type} runs on {s.node}")
            w.bump(s.pod_type, s.node, -1)
            done.append((s.pod_type, s.node, -1))
        else:
            if not w.feasible(s.pod_type, s.node):
                return Replay(False, i, f"step {i + 1}: {s.pod_type} may not be deployed on {s.node}")
            w.bump(s.pod_type, s.node, 1)
            done.append((s.pod_type, s.node, 1))
    for tid, node in targets:
        if w.count(tid, node) < 1:
            return Replay(False, len(steps), f"after the last step no {tid} runs on {node}")
    return Replay(True)
