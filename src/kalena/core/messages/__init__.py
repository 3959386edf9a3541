"""Messages between processes (node agent <-> scheduler), keyed by workload id and node name, as JSON.

See this package's README for the wire format. ``records`` holds the message types, ``codec``
the JSON (one registry of kinds), ``convert`` the bridge to commitments through a ledger.
"""

from kalena.core.messages.codec import KINDS, KindCodec, decode, dumps, encode, loads
from kalena.core.messages.convert import (
    escalation_msg,
    eviction_msg,
    placement_msg,
    removal_msg,
    reservation_reports,
    throttle_msg,
    to_commitment,
    victim_msgs,
    why_pending_msg,
)
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
from kalena.core.messages.wire import (
    MAX_DEPTH,
    MAX_ITEMS,
    MAX_MESSAGE_CHARS,
    MAX_STR_CHARS,
    MAX_WORKLOADS,
    MessageError,
)

__all__ = [
    "KINDS",
    "MAX_DEPTH",
    "MAX_ITEMS",
    "MAX_MESSAGE_CHARS",
    "MAX_STR_CHARS",
    "MAX_WORKLOADS",
    "MESSAGE_VERSION",
    "EscalationMsg",
    "EvictionMsg",
    "KindCodec",
    "Message",
    "MessageError",
    "PlacementMsg",
    "RemovalMsg",
    "ReservationEntry",
    "ReservationReport",
    "ThrottleMsg",
    "WhyPendingMsg",
    "decode",
    "dumps",
    "encode",
    "escalation_msg",
    "eviction_msg",
    "loads",
    "placement_msg",
    "removal_msg",
    "reservation_reports",
    "throttle_msg",
    "to_commitment",
    "victim_msgs",
    "why_pending_msg",
]
