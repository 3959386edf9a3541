"""Closed pydantic models of Kuberina IR v1 entries (ir-v1 §1-§4).

Every model forbids unknown keys. Quantities go through :func:`kalena.core.quantity.parse_quantity`
(a number in IR units or a Kubernetes quantity string), with the dimension taken from the key.
The readers validate one list entry at a time (a node, a declaration, a group) so that every
problem of a file is reported and the valid entries still take part in cross-checks.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    StrictStr,
    ValidationError,
    field_validator,
)

from kalena.core.quantity import parse_quantity
from kalena.ir.errors import MISSING, Problem, key_path

API_VERSION = "kuberina.io/v1"

#: The most replicas one declaration may ask for, and the most pods one Workloads document may
#: unroll to: bounds checked before any pod is built (a typo such as ``replicas: 100000000000``
#: would otherwise take all memory).
MAX_REPLICAS = 100_000
MAX_PODS = 1_000_000
KINDS = ("Infrastructure", "Workloads", "Blueprint")


def _quantity(dim: str) -> Callable[[Any], float]:
    def parse(raw: Any) -> float:
        return parse_quantity(raw, dim)

    return parse


def _name(value: str) -> str:
    if not value or "/" in value or any(c.isspace() for c in value):
        raise ValueError("a name must be non-empty, without '/' or whitespace")
    return value


def _number(value: Any) -> Any:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError("expected a number")
    return value


def _fraction(value: float) -> float:
    if not 0.0 <= value <= 1.0:
        raise ValueError("must lie in [0, 1]")
    return value


Name = Annotated[StrictStr, AfterValidator(_name)]
Labels = dict[StrictStr, StrictStr]
Cpu = Annotated[float, BeforeValidator(_quantity("cpu"))]
Ram = Annotated[float, BeforeValidator(_quantity("ram"))]
Gpu = Annotated[float, BeforeValidator(_quantity("gpu"))]
Storage = Annotated[float, BeforeValidator(_quantity("storage"))]
DiskRead = Annotated[float, BeforeValidator(_quantity("disk.read"))]
DiskWrite = Annotated[float, BeforeValidator(_quantity("disk.write"))]
NetIn = Annotated[float, BeforeValidator(_quantity("network.in"))]
NetOut = Annotated[float, BeforeValidator(_quantity("network.out"))]
Fraction = Annotated[float, BeforeValidator(_number), AfterValidator(_fraction)]


class Closed(BaseModel):
    """Base of every IR model: unknown keys are errors; YAML spellings are the field aliases."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=False)


#: What a reader says of ``null`` where a quantity belongs (IR documents, the node declaration).
NULL_QUANTITY = "null is not a quantity: write a number or leave the key out"


class Quantities(Closed):
    """A block of quantities: a key may be left out, but a key written as ``null`` is an error
    (else it would read as "not written": an unbounded node, a zero request)."""

    @field_validator("*", mode="before")
    @classmethod
    def _no_null(cls, value: Any) -> Any:
        if value is None:
            raise ValueError(NULL_QUANTITY)
        return value


class DiskBlock(Quantities):
    read: DiskRead | None = None
    write: DiskWrite | None = None


class NetworkBlock(Quantities):
    in_: NetIn | None = Field(None, alias="in")
    out: NetOut | None = None


class ResourceBlock(Quantities):
    """The one resource shape (ir-v1 §1): cpu, ram, gpu, storage, disk{read,write}, network{in,out}."""

    cpu: Cpu | None = None
    ram: Ram | None = None
    gpu: Gpu | None = None
    storage: Storage | None = None
    disk: DiskBlock | None = None
    network: NetworkBlock | None = None

    def present(self) -> dict[str, float]:
        """The dimensions that were written, by core dimension name, in DIMS order."""
        return dict(_present(self))


def _present(block: Any) -> Iterator[tuple[str, float]]:
    for dim in ("cpu", "ram", "gpu", "storage"):
        v = getattr(block, dim)
        if v is not None:
            yield dim, v
    disk, net = block.disk, block.network
    for dim, v in (
        ("disk.read", disk.read if disk else None),
        ("disk.write", disk.write if disk else None),
        ("network.in", net.in_ if net else None),
        ("network.out", net.out if net else None),
    ):
        if v is not None:
            yield dim, v


class Taint(Closed):
    key: Annotated[StrictStr, Field(min_length=1)]
    value: StrictStr = ""
    effect: StrictStr = ""


class Node(Closed):
    name: Name
    zone: StrictStr = ""
    rack: StrictStr = ""
    labels: Labels = Field(default_factory=dict)
    taints: list[Taint] = Field(default_factory=list)
    allocatable: ResourceBlock | None = None


class DaemonSet(Closed):
    name: Name
    resources: ResourceBlock | None = None
    node_selector: Labels = Field(default_factory=dict, alias="nodeSelector")
    tolerations: list[StrictStr] = Field(default_factory=list)


class Toleration(Closed):
    key: StrictStr
    operator: StrictStr | None = None
    value: StrictStr | None = None
    effect: StrictStr | None = None


class TopologySpread(Closed):
    max_skew: Annotated[StrictInt, Field(ge=1)] = Field(alias="maxSkew")
    topology_key: Annotated[StrictStr, Field(min_length=1)] = Field(alias="topologyKey")


class Observed(Closed):
    window: StrictStr = ""
    p50: ResourceBlock | None = None
    p95: ResourceBlock | None = None
    p99: ResourceBlock | None = None
    peak: ResourceBlock | None = None
    exceeded_request_fraction: Fraction = 0.0


class Declaration(Closed):
    name: Name
    replicas: Annotated[StrictInt, Field(ge=1, le=MAX_REPLICAS)] = 1
    requests: ResourceBlock | None = None
    node_selector: Labels = Field(default_factory=dict, alias="nodeSelector")
    tolerations: list[Toleration] = Field(default_factory=list)
    affinity: list[StrictStr] = Field(default_factory=list)
    anti_affinity: list[StrictStr] = Field(default_factory=list, alias="antiAffinity")
    topology_spread: TopologySpread | None = Field(None, alias="topologySpread")
    gang: Name | None = None
    observed: Observed | None = None


class Group(Closed):
    name: Name
    members: list[StrictStr]
    min_members: StrictInt | None = None
    colocate: StrictBool | None = None
    node_selector: Labels | None = Field(None, alias="nodeSelector")


class BlueprintMeta(Closed):
    feasible: StrictBool
    pods: Annotated[StrictInt, Field(ge=0)] | None = None
    active_nodes: Annotated[StrictInt, Field(ge=0)] | None = Field(None, alias="activeNodes")


# Top levels: lists stay raw here and are validated entry by entry by the reader.
class InfraTop(Closed):
    api_version: StrictStr | None = Field(None, alias="apiVersion")
    kind: StrictStr | None = None
    nodes: list[Any] = Field(default_factory=list)
    daemonsets: list[Any] = Field(default_factory=list)


class WorkloadsTop(Closed):
    api_version: StrictStr | None = Field(None, alias="apiVersion")
    kind: StrictStr | None = None
    namespaces: dict[StrictStr, list[Any]] = Field(default_factory=dict)
    groups: list[Any] = Field(default_factory=list)


class BlueprintTop(Closed):
    api_version: StrictStr | None = Field(None, alias="apiVersion")
    kind: StrictStr | None = None
    metadata: Any = None
    solution: dict[StrictStr, StrictStr]


# ---------------------------------------------------------------------------------------------
# pydantic errors -> Problems

#: Hints for keys that a strict v1 document rejects but a legacy (headerless) one accepts.
_LEGACY_HINT = {
    "pods": "the legacy pods: list is read only from documents without apiVersion",
    "disk_read": "flat spellings are legacy; IR v1 nests them as disk: {read, write}",
    "disk_write": "flat spellings are legacy; IR v1 nests them as disk: {read, write}",
    "net_in": "flat spellings are legacy; IR v1 nests them as network: {in, out}",
    "net_out": "flat spellings are legacy; IR v1 nests them as network: {in, out}",
    "network_in": "flat spellings are legacy; IR v1 nests them as network: {in, out}",
    "network_out": "flat spellings are legacy; IR v1 nests them as network: {in, out}",
}

_TYPE_MESSAGES = {
    "string_type": "expected a string",
    "int_type": "expected an integer",
    "bool_type": "expected true or false",
    "float_type": "expected a number",
    "dict_type": "expected a mapping",
    "model_type": "expected a mapping",
    "model_attributes_type": "expected a mapping",
    "list_type": "expected a list",
}


def problems_from(err: ValidationError, file: str, prefix: tuple[str | int, ...] = ()) -> list[Problem]:
    """One :class:`Problem` per pydantic error, with key paths in IR spelling."""
    out = []
    for e in err.errors(include_url=False):
        loc = prefix + tuple(e["loc"])
        kind = e["type"]
        value = e.get("input", MISSING)
        if kind == "extra_forbidden":
            key = loc[-1]
            hint = _LEGACY_HINT.get(str(key))
            message = f"unknown key {key!r}" + (f" ({hint})" if hint else "")
        elif kind == "missing":
            message = f"required key {loc[-1]!r} is missing"
            value = MISSING
        elif kind in _TYPE_MESSAGES:
            message = _TYPE_MESSAGES[kind]
        elif kind == "value_error":
            message = str(e["ctx"]["error"]) if "ctx" in e else e["msg"]
        elif kind == "literal_error":
            message = f"must be {e['ctx']['expected']}"
        elif kind == "greater_than_equal":
            message = f"must be at least {e['ctx']['ge']}"
        elif kind == "less_than_equal":
            message = f"must be at most {e['ctx']['le']:,}"
        elif kind == "string_too_short":
            message = "must not be empty"
        else:
            message = e["msg"]
        out.append(Problem(file, key_path(loc), message, value))
    return out
