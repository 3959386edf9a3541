"""Wire codecs for the core's value types a message carries: each ``x_out`` has its reader ``x_in``.

Every field is written, and a reader requires every key (no defaults on the wire: a key a peer
forgot is an error, not a silent default). Resources and usage are objects keyed by the eight
dimension names of :data:`~kalena.core.resources.DIMS`; enums are their stable string values;
frozensets are sorted arrays so that equal values encode to equal text.
"""

from __future__ import annotations

from kalena.core.enforcement.throttle import ThrottleCause, ThrottleDecision
from kalena.core.messages.wire import (
    Json,
    Obj,
    Path,
    array,
    fail,
    integer,
    number,
    number_out,
    optional,
    show,
    text,
)
from kalena.core.model import PodTerm, Selector, SpreadConstraint, Tier, Toleration, WorkloadSpec
from kalena.core.placement.why import BindingDimension
from kalena.core.resources import DIM_INDEX, DIMS, Resources
from kalena.core.verdict import Reason, ReasonCode


def dimension_in(value: object, path: Path) -> str:
    d = text(value, path)
    if d not in DIM_INDEX:
        fail(path, f"must be one of {', '.join(DIMS)}, got {show(d)}")
    return d


def resources_out(r: Resources) -> dict[str, Json]:
    return {d: number_out(v) for d, v in zip(DIMS, r.values, strict=True)}


def resources_in(value: object, path: Path) -> Resources:
    """Non-negative, infinity allowed (an unconstrained dimension), NaN not: Resources' own rule."""
    o = Obj(value, path, DIMS)
    return Resources(tuple(o.number(d, inf=True) for d in DIMS))


def usage_out(u: tuple[float, ...]) -> dict[str, Json]:
    return {d: number_out(v) for d, v in zip(DIMS, u, strict=True)}


def usage_in(value: object, path: Path) -> tuple[float, ...]:
    """Sampled usage: non-negative and finite, or NaN where the sample is missing."""
    o = Obj(value, path, DIMS)
    return tuple(o.number(d, nan=True) for d in DIMS)


REASON_KEYS = ("code", "dimension", "requested", "used", "capacity", "detail", "seconds", "limit_s")


def reason_out(r: Reason) -> dict[str, Json]:
    return {
        "code": r.code.value,
        "dimension": r.dimension,
        "requested": number_out(r.requested),
        "used": number_out(r.used),
        "capacity": number_out(r.capacity),
        "detail": r.detail,
        "seconds": number_out(r.seconds),
        "limit_s": number_out(r.limit_s),
    }


def reason_in(value: object, path: Path) -> Reason:
    """Numbers may be anything a policy writes: NaN usage when unsampled, inf for no limit."""
    o = Obj(value, path, REASON_KEYS)
    keys = ("requested", "used", "capacity", "seconds", "limit_s")
    nums = {k: o.number(k, nan=True, inf=True, negative=True) for k in keys}
    return Reason(o.choice("code", ReasonCode), o.text("dimension"), detail=o.text("detail"), **nums)


def toleration_out(t: Toleration) -> dict[str, Json]:
    return {"key": t.key, "operator": t.operator, "value": t.value, "effect": t.effect, "exact": t.exact}


def toleration_in(value: object, path: Path) -> Toleration:
    o = Obj(value, path, ("key", "operator", "value", "effect", "exact"))
    return Toleration(o.text("key"), o.text("operator"), o.text("value"), o.text("effect"), o.flag("exact"))


def selector_out(s: Selector) -> dict[str, Json]:
    return {"names": sorted(s.names), "match_labels": dict(s.match_labels)}


def selector_in(value: object, path: Path) -> Selector:
    o = Obj(value, path, ("names", "match_labels"))
    return Selector(frozenset(o.array("names", text)), o.labels("match_labels"))


def spread_out(c: SpreadConstraint) -> dict[str, Json]:
    return {
        "max_skew": c.max_skew,
        "topology_key": c.topology_key,
        "selector": selector_out(c.selector),
        "min_domains": c.min_domains,
        "node_affinity_policy": c.node_affinity_policy,
        "node_taints_policy": c.node_taints_policy,
    }


def spread_in(value: object, path: Path) -> SpreadConstraint:
    o = Obj(
        value,
        path,
        ("max_skew", "topology_key", "selector", "min_domains", "node_affinity_policy", "node_taints_policy"),
    )
    return SpreadConstraint(
        o.integer("max_skew", 0),
        o.text("topology_key"),
        o.get("selector", selector_in),
        o.integer("min_domains", 0),
        o.text("node_affinity_policy"),
        o.text("node_taints_policy"),
    )


def term_out(t: PodTerm) -> dict[str, Json]:
    return {"selector": selector_out(t.selector), "topology_key": t.topology_key}


def term_in(value: object, path: Path) -> PodTerm:
    o = Obj(value, path, ("selector", "topology_key"))
    return PodTerm(o.get("selector", selector_in), o.text("topology_key"))


def names_in(value: object, path: Path) -> frozenset[str] | None:
    return None if value is None else frozenset(array(value, path, text))


def workload_out(w: WorkloadSpec) -> dict[str, Json]:
    """Every field of :class:`WorkloadSpec` (a test checks the key set against the dataclass)."""
    return {
        "id": w.id,
        "requests": resources_out(w.requests),
        "limits": None if w.limits is None else resources_out(w.limits),
        "tier": w.tier.value,
        "priority": w.priority,
        "namespace": w.namespace,
        "declaration": w.declaration,
        "labels": dict(w.labels),
        "node_selector": dict(w.node_selector),
        "tolerations": [toleration_out(t) for t in w.tolerations],
        "affinity": selector_out(w.affinity),
        "anti_affinity": selector_out(w.anti_affinity),
        "anti_affinity_topology_key": w.anti_affinity_topology_key,
        "spread": [spread_out(c) for c in w.spread],
        "required_affinity": [term_out(t) for t in w.required_affinity],
        "required_anti_affinity": [term_out(t) for t in w.required_anti_affinity],
        "node_names": None if w.node_names is None else sorted(w.node_names),
        "image": w.image,
        "owner": w.owner,
        "slack_cpu": w.slack_cpu,
        "slack_memory": w.slack_memory,
        "reclaim_disabled": w.reclaim_disabled,
        "startup_grace_s": number_out(w.startup_grace_s),
        "is_daemonset": w.is_daemonset,
    }


WORKLOAD_KEYS = tuple(WorkloadSpec.__dataclass_fields__)


def workload_in(value: object, path: Path) -> WorkloadSpec:
    o = Obj(value, path, WORKLOAD_KEYS)
    return WorkloadSpec(
        id=o.text("id", nonempty=True),
        requests=o.get("requests", resources_in),
        limits=o.get("limits", optional(resources_in)),
        tier=o.choice("tier", Tier),
        priority=o.integer("priority"),
        namespace=o.text("namespace"),
        declaration=o.text("declaration"),
        labels=o.labels("labels"),
        node_selector=o.labels("node_selector"),
        tolerations=o.array("tolerations", toleration_in),
        affinity=o.get("affinity", selector_in),
        anti_affinity=o.get("anti_affinity", selector_in),
        anti_affinity_topology_key=o.text("anti_affinity_topology_key"),
        spread=o.array("spread", spread_in),
        required_affinity=o.array("required_affinity", term_in),
        required_anti_affinity=o.array("required_anti_affinity", term_in),
        node_names=o.get("node_names", names_in),
        image=o.text("image"),
        owner=o.text("owner"),
        slack_cpu=o.flag("slack_cpu"),
        slack_memory=o.flag("slack_memory"),
        reclaim_disabled=o.flag("reclaim_disabled"),
        startup_grace_s=o.number("startup_grace_s", inf=True),
        is_daemonset=o.flag("is_daemonset"),
    )


def throttle_decision_out(t: ThrottleDecision) -> dict[str, Json]:
    return {
        "workload": t.workload,
        "dimension": t.dimension,
        "quota": number_out(t.quota),
        "weight": t.weight,
        "cause": t.cause.value,
        "reason": reason_out(t.reason),
    }


def throttle_decision_in(value: object, path: Path) -> ThrottleDecision:
    """``quota`` may be inf (no ceiling); ``weight`` is a cgroup v2 ``cpu.weight`` (1..10000) or null."""
    o = Obj(value, path, ("workload", "dimension", "quota", "weight", "cause", "reason"))
    return ThrottleDecision(
        o.text("workload", nonempty=True),
        o.get("dimension", dimension_in),
        o.number("quota", inf=True),
        o.get("weight", optional(_weight_in)),
        o.choice("cause", ThrottleCause),
        o.get("reason", reason_in),
    )


def _weight_in(value: object, path: Path) -> int:
    return integer(value, path, 1, 10000)


def binding_out(b: BindingDimension) -> dict[str, Json]:
    fits = None if b.fits_request is None else number_out(b.fits_request)
    return {"dimension": b.dimension, "nodes": b.nodes, "margin": number_out(b.margin), "fits_request": fits}


def binding_in(value: object, path: Path) -> BindingDimension:
    o = Obj(value, path, ("dimension", "nodes", "margin", "fits_request"))
    return BindingDimension(
        o.get("dimension", dimension_in),
        o.integer("nodes", 0),
        o.number("margin", negative=True),
        o.get("fits_request", optional(_fits_in)),
    )


def _fits_in(value: object, path: Path) -> float:
    return number(value, path, inf=True)
