"""1-safe Petri-net coverability as a pod-deployability instance (seed 003 §5), and PNML input.

Encoding (one node, zero requests, paper semantics; every term uses the hostname topology):

* token pods carry ``place=p``; an *initial* token type ``I_p`` per initially marked place and
  the initial ready type ``R_0`` are affine to ``bottom=true``, which no pod carries, so they
  run initially and can never be redeployed;
* per transition ``a``: ``S_a`` (role=start) needs ready and a token of every place of
  ``Pre(a)`` and is anti-affine to role=start and role=end; ``E_a`` (role=execute) needs
  ``S_a`` and is anti-affine to ready and to every consumed place; ``P_{p,a}`` (a token of a
  produced place ``p``) needs ``E_a`` and is anti-affine to ``place=p``; ``F_a`` (role=end)
  needs ``E_a`` and a token of every place of ``Post(a)`` and is anti-affine to role=start;
  ``R_a`` (role=ready) needs ``F_a`` and is anti-affine to role=start and role=execute;
* the goal type ``G`` needs a token of the goal place; the question is ``(G, n)``.

The one addition to the paper's text is ``F_a``'s anti-affinity to role=start: Definition 1
checks only the incoming pod's own terms, and this term is what makes "start and end never run
together" (the invariant of the paper's Lean proof) hold under that definition; the simulation
of a firing deletes ``S_a`` before deploying ``F_a`` anyway, so no firing is lost.

Goal sets: :func:`with_goal` adds a fresh goal place ``g`` and, per disjunct ``D`` (a set of
places), a transition with preset ``D + {nb}`` and postset ``D + {g}`` (``nb`` is a fresh place,
marked initially), so ``g`` is coverable iff some ``D`` is, and the net stays 1-safe.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from kalena.deployability.model import (
    HOSTNAME,
    Instance,
    LabelSelector,
    Node,
    PodAffinityTerm,
    PodType,
    Query,
    frozen_map,
)


@dataclass(frozen=True)
class PetriNet:
    """``(P, T, Pre, Post, M0)`` with arc weights 1."""

    places: tuple[str, ...]
    transitions: tuple[str, ...]
    pre: dict[str, frozenset[str]]
    post: dict[str, frozenset[str]]
    initial: frozenset[str]
    name: str = "net"

    def enabled(self, marking: frozenset[str], t: str) -> bool:
        return self.pre[t] <= marking

    def fire(self, marking: frozenset[str], t: str) -> frozenset[str]:
        return (marking - self.pre[t]) | self.post[t]


class PNMLError(ValueError):
    """A PNML file that is not a place/transition net with unit arc weights."""


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


def read_pnml(path: str | Path) -> PetriNet:
    """Places (with initial markings 0 or 1), transitions and arcs of a P/T net's pages."""
    try:
        root = ET.parse(path).getroot()
    except ET.ParseError as e:
        raise PNMLError(f"{path}: not well-formed XML ({e})") from None
    net = next((el for el in root.iter() if _local(el.tag) == "net"), None)
    if net is None:
        raise PNMLError(f"{path}: no <net> element")
    places: list[str] = []
    transitions: list[str] = []
    initial: set[str] = set()
    arcs: list[tuple[str, str]] = []
    for el in net.iter():
        tag = _local(el.tag)
        if tag == "place":
            pid = el.get("id")
            if not pid:
                raise PNMLError(f"{path}: a place without id")
            places.append(pid)
            for m in el:
                if _local(m.tag) == "initialMarking":
                    text = "".join(x.text or "" for x in m.iter() if _local(x.tag) == "text").strip()
                    if text not in ("", "0", "1"):
                        raise PNMLError(f"{path}: place {pid}: initial marking {text!r} is not 0 or 1")
                    if text == "1":
                        initial.add(pid)
        elif tag == "transition":
            tid = el.get("id")
            if not tid:
                raise PNMLError(f"{path}: a transition without id")
            transitions.append(tid)
        elif tag == "arc":
            for m in el:
                if _local(m.tag) == "inscription":
                    text = "".join(x.text or "" for x in m.iter() if _local(x.tag) == "text").strip()
                    if text not in ("", "1"):
                        raise PNMLError(f"{path}: arc {el.get('id')}: weight {text!r} is not 1")
            arcs.append((el.get("source", ""), el.get("target", "")))
    pset, tset = set(places), set(transitions)
    pre: dict[str, set[str]] = {t: set() for t in transitions}
    post: dict[str, set[str]] = {t: set() for t in transitions}
    for src, dst in arcs:
        if src in pset and dst in tset:
            pre[dst].add(src)
        elif src in tset and dst in pset:
            post[src].add(dst)
        else:
            raise PNMLError(f"{path}: arc {src} -> {dst} does not join a place and a transition")
    name = net.get("id") or Path(path).stem
    return PetriNet(
        tuple(places),
        tuple(transitions),
        {t: frozenset(v) for t, v in pre.items()},
        {t: frozenset(v) for t, v in post.items()},
        frozenset(initial),
        name,
    )


def with_goal(net: PetriNet, disjuncts: Iterable[Iterable[str]], goal: str = "goal__") -> PetriNet:
    """``net`` plus a place ``goal`` that becomes coverable iff some disjunct's places are."""
    nb = goal + "nb"
    places = (*net.places, goal, nb)
    transitions = list(net.transitions)
    pre, post = dict(net.pre), dict(net.post)
    for i, d in enumerate(disjuncts):
        ps = frozenset(d)
        unknown = ps - set(net.places)
        if unknown:
            raise ValueError(f"unknown places {sorted(unknown)}")
        t = f"{goal}t{i}"
        transitions.append(t)
        pre[t] = ps | {nb}
        post[t] = ps | {goal}
    return PetriNet(places, tuple(transitions), pre, post, net.initial | {nb}, net.name)


def fireability_goal(net: PetriNet, dnf: Sequence[Sequence[str]]) -> PetriNet:
    """MCC "some transition set of the DNF is fireable": its presets' union covered (1-safe)."""
    return with_goal(net, [set().union(*(net.pre[t] for t in conj)) for conj in dnf])


# --- the encoding -----------------------------------------------------------------------------
NODE = "n"


def _safe(name: str) -> str:
    """A label value / name fragment: Kubernetes label values allow [A-Za-z0-9_.-]."""
    out = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in name)
    return out[:63] or "_"


def _term(**labels: str) -> PodAffinityTerm:
    return PodAffinityTerm(LabelSelector(frozen_map(labels)), HOSTNAME)


def _pod(
    name: str, labels: dict[str, str], aff: list[PodAffinityTerm], anti: list[PodAffinityTerm]
) -> PodType:
    return PodType(
        id=f"default/{name}",
        labels=frozen_map(labels),
        affinity=tuple(aff),
        anti_affinity=tuple(anti),
    )


def petri_instance(net: PetriNet, goal: str) -> tuple[Instance, Query]:
    """The §5 instance and the question ``(G, n)``; ``goal`` is a place of ``net``."""
    if goal not in net.places:
        raise ValueError(f"unknown goal place {goal!r}")
    place = {p: _safe(p) for p in net.places}
    if len(set(place.values())) != len(place):
        raise ValueError("two place names collide after sanitising")
    trans = {t: f"t{i}" for i, t in enumerate(net.transitions)}
    types: list[PodType] = []
    initial: dict[tuple[str, str], int] = {}
    bottom = _term(bottom="true")
    r0 = _pod("ready-0", {"role": "ready"}, [bottom], [])
    types.append(r0)
    initial[(r0.id, NODE)] = 1
    for p in sorted(net.initial):
        ip = _pod(f"init-{place[p]}", {"place": place[p], "role": "token"}, [bottom], [])
        types.append(ip)
        initial[(ip.id, NODE)] = 1
    for t in net.transitions:
        a = trans[t]
        pre, post = net.pre[t], net.post[t]
        consumed, produced = pre - post, post - pre
        types.append(
            _pod(
                f"start-{a}",
                {"role": "start", "trans": a},
                [_term(role="ready")] + [_term(place=place[p]) for p in sorted(pre)],
                [_term(role="start"), _term(role="end")],
            )
        )
        types.append(
            _pod(
                f"exec-{a}",
                {"role": "execute", "trans": a},
                [_term(role="start", trans=a)],
                [_term(role="ready")] + [_term(place=place[p]) for p in sorted(consumed)],
            )
        )
        for p in sorted(produced):
            types.append(
                _pod(
                    f"tok-{a}-{place[p]}",
                    {"place": place[p], "role": "token"},
                    [_term(role="execute", trans=a)],
                    [_term(place=place[p])],
                )
            )
        types.append(
            _pod(
                f"end-{a}",
                {"role": "end", "trans": a},
                [_term(role="execute", trans=a)] + [_term(place=place[p]) for p in sorted(post)],
                [_term(role="start")],
            )
        )
        types.append(
            _pod(
                f"ready-{a}",
                {"role": "ready"},
                [_term(role="end", trans=a)],
                [_term(role="start"), _term(role="execute")],
            )
        )
    g = _pod("goal", {"role": "goal"}, [_term(place=place[goal])], [])
    types.append(g)
    node = Node(NODE, frozen_map({HOSTNAME: NODE}))
    inst = Instance((node,), tuple(types), frozen_map(initial))  # type: ignore[arg-type]
    return inst, Query(g.id, NODE)


# --- parametric families for benchmarks --------------------------------------------------------------
def counter_net(bits: int) -> tuple[PetriNet, str]:
    """An n-bit binary counter: 2^n reachable markings; the goal "all ones" needs 2^n - 1 firings.

    Places ``b{i}_0`` / ``b{i}_1``; transition ``inc{i}`` sets bit i and clears bits below it
    (pre: bit i is 0 and every lower bit is 1). The goal place is ``done``, produced when every
    bit is 1.
    """
    places = [f"b{i}_{v}" for i in range(bits) for v in (0, 1)]
    transitions, pre, post = [], {}, {}
    for i in range(bits):
        t = f"inc{i}"
        transitions.append(t)
        pre[t] = frozenset({f"b{i}_0"} | {f"b{j}_1" for j in range(i)})
        post[t] = frozenset({f"b{i}_1"} | {f"b{j}_0" for j in range(i)})
    net = PetriNet(
        tuple(places),
        tuple(transitions),
        pre,
        post,
        frozenset(f"b{i}_0" for i in range(bits)),
        f"counter{bits}",
    )
    return with_goal(net, [[f"b{i}_1" for i in range(bits)]], "done"), "done"


def mutex_net(procs: int) -> tuple[PetriNet, str]:
    """``procs`` processes (idle -> critical -> idle) sharing one lock; goal: two in the section.

    Not coverable: every reachable configuration of the encoding must be explored (3 * procs
    places in the goal check, procs + 1 reachable markings... times the protocol's states).
    """
    places = ["lock"] + [f"{s}{i}" for i in range(procs) for s in ("idle", "cs")]
    transitions, pre, post = [], {}, {}
    for i in range(procs):
        transitions += [f"enter{i}", f"leave{i}"]
        pre[f"enter{i}"] = frozenset({f"idle{i}", "lock"})
        post[f"enter{i}"] = frozenset({f"cs{i}"})
        pre[f"leave{i}"] = frozenset({f"cs{i}"})
        post[f"leave{i}"] = frozenset({f"idle{i}", "lock"})
    net = PetriNet(
        tuple(places),
        tuple(transitions),
        pre,
        post,
        frozenset({"lock"} | {f"idle{i}" for i in range(procs)}),
        f"mutex{procs}",
    )
    pairs = [[f"cs{i}", f"cs{j}"] for i in range(procs) for j in range(i + 1, procs)]
    return with_goal(net, pairs, "bad"), "bad"
