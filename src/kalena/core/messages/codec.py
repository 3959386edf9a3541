"""JSON for messages: one registry of kinds, ``encode``/``decode`` to plain JSON values, ``dumps``/``loads``.

A message on the wire is one flat object: the envelope keys ``version`` and ``kind``, then the
kind's own keys, every one required::

    {"version": 1, "kind": "removal", "workload_id": "ml/train-7", "node": "host-3",
     "node_epoch": 12, "cause": "finished"}

:func:`decode` reads ``version`` first (a reader never guesses at a version it does not know),
then ``kind``, then the kind's keys exactly. To add a kind: a frozen dataclass with a ``kind``
constant in :mod:`.records`, a writer and a reader here, and one entry in :data:`KINDS`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, NoReturn

from kalena.core.enforcement.records import EvictionCause
from kalena.core.ledger.commitments import RemovalCause
from kalena.core.messages.records import (
    MESSAGE_VERSION,
    EscalationMsg,
    EvictionMsg,
    Message,
    PlacementMsg,
    RemovalMsg,
    ReservationEntry,
    ReservationReport,
    ThrottleMsg,
    WhyPendingMsg,
)
from kalena.core.messages.specs import (
    binding_in,
    binding_out,
    reason_in,
    reason_out,
    resources_out,
    throttle_decision_in,
    throttle_decision_out,
    usage_in,
    usage_out,
    workload_in,
    workload_out,
)
from kalena.core.messages.wire import (
    MAX_MESSAGE_CHARS,
    MAX_WORKLOADS,
    Json,
    MessageError,
    Obj,
    Path,
    fail,
    integer,
    number,
    number_out,
    optional,
    show,
    text,
)
from kalena.core.resources import DIMS, Resources

ENVELOPE_KEYS = ("version", "kind")


@dataclass(frozen=True, slots=True)
class KindCodec:
    """How one kind goes to and from JSON: its type, its keys (beyond the envelope), writer and reader."""

    type: type[Message]
    keys: tuple[str, ...]
    write: Callable[[Any], dict[str, Json]]
    read: Callable[[Obj], Message]


def _id_in(value: object, path: Path) -> str:
    return text(value, path, nonempty=True)


def _time_in(value: object, path: Path) -> float:
    """A point in time: any finite number (the shell's clock, simulated or real, passes it in)."""
    return number(value, path, negative=True)


# placement ---------------------------------------------------------------------------------------
def _placement_out(m: PlacementMsg) -> dict[str, Json]:
    return {"workload": workload_out(m.workload), "node": m.node, "node_epoch": m.node_epoch}


def _placement_in(o: Obj) -> PlacementMsg:
    return PlacementMsg(
        o.get("workload", workload_in), o.text("node", nonempty=True), o.integer("node_epoch", 0)
    )


# eviction ----------------------------------------------------------------------------------------
def _eviction_out(m: EvictionMsg) -> dict[str, Json]:
    return {
        "workload_id": m.workload_id,
        "node": m.node,
        "node_epoch": m.node_epoch,
        "limit_breach_override": m.limit_breach_override,
        "cause": m.cause.value,
        "grace_period_s": number_out(m.grace_period_s),
        "cooldown_until": None if m.cooldown_until is None else number_out(m.cooldown_until),
        "reasons": [reason_out(r) for r in m.reasons],
    }


def _eviction_in(o: Obj) -> EvictionMsg:
    return EvictionMsg(
        o.text("workload_id", nonempty=True),
        o.text("node", nonempty=True),
        o.integer("node_epoch", 0),
        o.flag("limit_breach_override"),
        o.choice("cause", EvictionCause),
        o.number("grace_period_s"),
        o.get("cooldown_until", optional(_time_in)),
        o.array("reasons", reason_in),
    )


# removal -----------------------------------------------------------------------------------------
def _removal_out(m: RemovalMsg) -> dict[str, Json]:
    return {"workload_id": m.workload_id, "node": m.node, "node_epoch": m.node_epoch, "cause": m.cause.value}


def _removal_in(o: Obj) -> RemovalMsg:
    return RemovalMsg(
        o.text("workload_id", nonempty=True),
        o.text("node", nonempty=True),
        o.integer("node_epoch", 0),
        o.choice("cause", RemovalCause),
    )


# reservation report ------------------------------------------------------------------------------
def _entry_out(e: ReservationEntry) -> dict[str, Json]:
    return {
        "workload_id": e.workload_id,
        "reservation": resources_out(e.reservation),
        "usage": None if e.usage is None else usage_out(e.usage),
    }


def _reservation_in(value: object, path: Path) -> Resources:
    """Finite and non-negative: what a ReservationUpdate accepts."""
    o = Obj(value, path, DIMS)
    return Resources(tuple(o.number(d) for d in DIMS))


def _entry_in(value: object, path: Path) -> ReservationEntry:
    o = Obj(value, path, ("workload_id", "reservation", "usage"))
    return ReservationEntry(
        o.text("workload_id", nonempty=True),
        o.get("reservation", _reservation_in),
        o.get("usage", optional(usage_in)),
    )


def _report_out(m: ReservationReport) -> dict[str, Json]:
    return {
        "node": m.node,
        "node_epoch": m.node_epoch,
        "time": number_out(m.time),
        "entries": [_entry_out(e) for e in m.entries],
    }


def _report_in(o: Obj) -> ReservationReport:
    entries = o.array("entries", _entry_in, MAX_WORKLOADS)
    seen: set[str] = set()
    for i, e in enumerate(entries):
        if e.workload_id in seen:
            fail(("entries", i, "workload_id"), f"names workload {show(e.workload_id)} twice")
        seen.add(e.workload_id)
    return ReservationReport(
        o.text("node", nonempty=True), o.integer("node_epoch", 0), o.get("time", _time_in), entries
    )


# throttle ----------------------------------------------------------------------------------------
def _throttle_out(m: ThrottleMsg) -> dict[str, Json]:
    return {
        "node": m.node,
        "time": number_out(m.time),
        "decisions": [throttle_decision_out(d) for d in m.decisions],
    }


def _throttle_in(o: Obj) -> ThrottleMsg:
    return ThrottleMsg(
        o.text("node", nonempty=True),
        o.get("time", _time_in),
        o.array("decisions", throttle_decision_in, MAX_WORKLOADS),
    )


# escalation --------------------------------------------------------------------------------------
def _escalation_out(m: EscalationMsg) -> dict[str, Json]:
    until = m.slack_ineligible_until
    return {
        "node": m.node,
        "escalate": m.escalate,
        "slack_ineligible_until": None if until is None else number_out(until),
        "drained": list(m.drained),
        "reason": None if m.reason is None else reason_out(m.reason),
    }


def _escalation_in(o: Obj) -> EscalationMsg:
    return EscalationMsg(
        o.text("node", nonempty=True),
        o.flag("escalate"),
        o.get("slack_ineligible_until", optional(_time_in)),
        o.array("drained", _id_in, MAX_WORKLOADS),
        o.get("reason", optional(reason_in)),
    )


# why pending -------------------------------------------------------------------------------------
def _why_out(m: WhyPendingMsg) -> dict[str, Json]:
    binding = None if m.binding is None else binding_out(m.binding)
    return {
        "workload_id": m.workload_id,
        "total_nodes": m.total_nodes,
        "available": m.available,
        "binding": binding,
        "message": m.message,
    }


def _why_in(o: Obj) -> WhyPendingMsg:
    total = o.integer("total_nodes", 0)
    available = o.integer("available", 0)
    if available > total:
        fail(("available",), f"must be at most total_nodes ({total}), got {available}")
    return WhyPendingMsg(
        o.text("workload_id", nonempty=True),
        total,
        available,
        o.get("binding", optional(binding_in)),
        o.text("message"),
    )


#: The one registry of kinds (wire name -> codec), built once at import and read-only.
KINDS: Mapping[str, KindCodec] = MappingProxyType(
    {
        c.type.kind: c
        for c in (
            KindCodec(PlacementMsg, ("workload", "node", "node_epoch"), _placement_out, _placement_in),
            KindCodec(
                EvictionMsg,
                (
                    "workload_id",
                    "node",
                    "node_epoch",
                    "limit_breach_override",
                    "cause",
                    "grace_period_s",
                    "cooldown_until",
                    "reasons",
                ),
                _eviction_out,
                _eviction_in,
            ),
            KindCodec(RemovalMsg, ("workload_id", "node", "node_epoch", "cause"), _removal_out, _removal_in),
            KindCodec(ReservationReport, ("node", "node_epoch", "time", "entries"), _report_out, _report_in),
            KindCodec(ThrottleMsg, ("node", "time", "decisions"), _throttle_out, _throttle_in),
            KindCodec(
                EscalationMsg,
                ("node", "escalate", "slack_ineligible_until", "drained", "reason"),
                _escalation_out,
                _escalation_in,
            ),
            KindCodec(
                WhyPendingMsg,
                ("workload_id", "total_nodes", "available", "binding", "message"),
                _why_out,
                _why_in,
            ),
        )
    }
)
_BY_TYPE: Mapping[type, KindCodec] = MappingProxyType({c.type: c for c in KINDS.values()})


def encode(msg: Message) -> dict[str, Json]:
    """The message as plain JSON values (str, int, float, bool, None, list, dict), envelope first."""
    codec = _BY_TYPE.get(type(msg))
    if codec is None:
        raise TypeError(f"not a message: {type(msg).__name__}")
    return {"version": MESSAGE_VERSION, "kind": codec.type.kind, **codec.write(msg)}


def decode(value: object) -> Message:
    """A message from decoded JSON; anything else raises :class:`MessageError` naming the key path."""
    if not isinstance(value, dict):
        fail((), f"a message must be an object, got {show(value)}")
    if "version" not in value:
        fail(("version",), "missing")
    version = integer(value["version"], ("version",))
    if version != MESSAGE_VERSION:
        fail(("version",), f"unsupported version {version} (this reader knows version {MESSAGE_VERSION})")
    if "kind" not in value:
        fail(("kind",), "missing")
    kind = text(value["kind"], ("kind",))
    codec = KINDS.get(kind)
    if codec is None:
        fail(("kind",), f"unknown kind {show(kind)} (known: {', '.join(KINDS)})")
    return codec.read(Obj(value, (), (*ENVELOPE_KEYS, *codec.keys)))


def dumps(msg: Message) -> str:
    """Standard JSON text (ASCII, no NaN/Infinity tokens: non-finite numbers are already strings)."""
    return json.dumps(encode(msg), allow_nan=False, separators=(",", ":"))


def _refuse_constant(name: str) -> NoReturn:
    raise MessageError("$", f"{name} is not JSON: non-finite numbers are spelled 'nan', 'inf' or '-inf'")


def loads(data: str | bytes) -> Message:
    """Parse and :func:`decode` text from a peer; every failure is a :class:`MessageError`."""
    if not isinstance(data, str | bytes):
        raise MessageError("$", f"a message must be JSON text, got {show(data)}")
    if len(data) > MAX_MESSAGE_CHARS:
        raise MessageError("$", f"message of {len(data)} characters is longer than {MAX_MESSAGE_CHARS}")
    try:
        value = json.loads(data, parse_constant=_refuse_constant)
    except MessageError:
        raise
    except RecursionError:
        raise MessageError("$", "nested too deeply to parse") from None
    except ValueError as e:  # JSONDecodeError, bad UTF-8, an integer of more than 4300 digits
        raise MessageError("$", f"not JSON: {e}") from None
    return decode(value)
