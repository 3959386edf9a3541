"""The node declaration: this node's capacity and the existing cgroups the agent adopts.

A small YAML file (``kalena agent run --declaration node.yaml``)::

    apiVersion: kalena.naughtian.io/v1alpha1
    kind: NodeDeclaration
    node:
      name: node-a
      capacity: {cpu: 2, ram: 448Mi}   # allocatable before Phase 0 (DaemonSets are deducted)
      memoryLimit: 512Mi                # optional: hard limit on Kalena's root cgroup
    workloads:
      - id: prod/web                    # production (service tier), never evicted except by
        cgroup: prod/web                #   the limit-breach override
        priority: 100
        requests: {cpu: 500m, ram: 128Mi}
        limits: {cpu: 1, ram: 256Mi}
      - id: kube-system/logger
        cgroup: /system.slice/logger.service
        daemonset: true                 # outside the ledger, never touched

Quantities follow Kuberina IR (``kalena.core.quantity``): a bare number is in IR units
(cores, GiB, MB/s), a Kubernetes suffix converts. A relative ``cgroup`` lives under Kalena's
root; an absolute one is taken as it is. Every problem is reported with file, key and value
(``FILE: KEY: MESSAGE (value: VALUE)``, the IR readers' :class:`~kalena.ir.errors.Problem`) and
nothing is applied: :func:`load_declaration`
either returns a whole :class:`Declaration` or raises :class:`DeclarationError`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    ValidationError,
)

from kalena.agent.layout import BATCH_PARENT, BadCgroupName, check_name
from kalena.core.model import DaemonSetSpec, NodeSpec, Tier, WorkloadSpec, node_capacity
from kalena.core.quantity import QuantityError, parse_quantity
from kalena.core.resources import DIMS, Resources
from kalena.core.tolerance import REL_TOL
from kalena.ir.errors import DOCUMENT, Problem, ProblemLog, key_path
from kalena.ir.schema_v1 import NULL_QUANTITY, problems_from
from kalena.ir.yamlio import parse_yaml, read_text

API_VERSION = "kalena.naughtian.io/v1alpha1"
KIND = "NodeDeclaration"
GIB = 2**30


def _quantity_input(value: Any) -> Any:
    """A number or a quantity string; anything else is refused here with one message, not three
    (one per member of the union)."""
    if value is None:
        raise ValueError(NULL_QUANTITY)
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError("expected a number or a quantity string")
    return value


Quantity = Annotated[StrictInt | StrictFloat | StrictStr, BeforeValidator(_quantity_input)]


class _Doc(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _Node(_Doc):
    name: StrictStr = Field(min_length=1)
    capacity: dict[StrictStr, Quantity]
    memoryLimit: Quantity | None = None


class _Workload(_Doc):
    id: StrictStr = Field(min_length=1)
    cgroup: StrictStr = Field(min_length=1)
    tier: Literal["service"] = "service"
    daemonset: StrictBool = False
    priority: StrictInt = Field(default=0, ge=0)
    requests: dict[StrictStr, Quantity] = Field(default_factory=dict)
    limits: dict[StrictStr, Quantity] | None = None


class _Declaration(_Doc):
    apiVersion: Literal["kalena.naughtian.io/v1alpha1"]
    kind: Literal["NodeDeclaration"]
    node: _Node
    workloads: list[_Workload] = Field(default_factory=list)


class DeclarationError(Exception):
    """Every problem of one declaration file; nothing of it was applied."""

    def __init__(self, problems: Sequence[Problem]) -> None:
        self.problems = tuple(problems)
        super().__init__("\n".join(p.render() for p in self.problems))


@dataclass(frozen=True, slots=True)
class Adopted:
    """An adopted cgroup and the workload it runs."""

    spec: WorkloadSpec
    cgroup: str
    started_at: float | None = None  # when its runtime started it (epoch s), if the runtime says


@dataclass(frozen=True, slots=True)
class Declaration:
    node: NodeSpec
    memory_limit: float | None  # bytes on Kalena's root cgroup, None = leave as is
    workloads: tuple[Adopted, ...]
    source: str = ""

    @property
    def production(self) -> tuple[Adopted, ...]:
        return tuple(a for a in self.workloads if not a.spec.is_daemonset)

    @property
    def daemonsets(self) -> tuple[Adopted, ...]:
        return tuple(a for a in self.workloads if a.spec.is_daemonset)

    def capacity(self) -> Resources:
        """``C`` after Phase 0: allocatable less every DaemonSet's requests (clipped at 0)."""
        ds = [DaemonSetSpec(a.spec.id, a.spec.requests) for a in self.daemonsets]
        return node_capacity(self.node, ds)


def over_capacity(decl: Declaration, source: str, key: str, what: str) -> list[Problem]:
    """A problem for each dimension where production's requests exceed the node's capacity after
    DaemonSets (a declaration a shell builds from its runtime is applied whole or not at all)."""
    cap = decl.capacity().array()
    total = sum((a.spec.requests.array() for a in decl.production), start=Resources.zero().array())
    return [
        Problem(source, key, f"{what} {total[d]:g} exceed the {name} capacity {cap[d]:g}", float(total[d]))
        for d, name in enumerate(DIMS)
        if total[d] > cap[d] * (1 + REL_TOL)
    ]


def _quantities(
    raw: Mapping[str, Any], loc: list[str | int], problems: list[Problem], file: str, default: float
) -> Resources:
    values: dict[str, float] = {}
    for dim, v in raw.items():
        if dim not in DIMS:
            problems.append(
                Problem(file, key_path([*loc, dim]), f"unknown dimension; use one of {', '.join(DIMS)}", dim)
            )
            continue
        try:
            values[dim] = parse_quantity(v, dim)
        except QuantityError as e:
            problems.append(Problem(file, key_path([*loc, dim]), str(e), v))
    return Resources.from_mapping(values, default=default)


def parse_declaration(data: Any, file: str) -> Declaration:
    """Validate a loaded YAML document; raise :class:`DeclarationError` with every problem."""
    try:
        doc = _Declaration.model_validate(data)
    except ValidationError as e:
        raise DeclarationError(problems_from(e, file)) from None
    problems: list[Problem] = []
    cap = _quantities(doc.node.capacity, ["node", "capacity"], problems, file, default=float("inf"))
    mem_limit = None
    if doc.node.memoryLimit is not None:
        try:
            mem_limit = parse_quantity(doc.node.memoryLimit, "ram") * GIB
        except QuantityError as e:
            problems.append(Problem(file, "node.memoryLimit", str(e), doc.node.memoryLimit))
    node = NodeSpec(doc.node.name, allocatable=cap)
    adopted: list[Adopted] = []
    seen_id: dict[str, int] = {}
    seen_cg: dict[str, int] = {}
    for i, w in enumerate(doc.workloads):
        loc: list[str | int] = ["workloads", i]
        for what, value, seen in (("id", w.id, seen_id), ("cgroup", w.cgroup, seen_cg)):
            if value in seen:
                problems.append(
                    Problem(file, key_path([*loc, what]), f"repeats workloads[{seen[value]}].{what}", value)
                )
            seen.setdefault(value, i)
        try:
            check_name(w.cgroup)
        except BadCgroupName as e:
            problems.append(Problem(file, key_path([*loc, "cgroup"]), str(e), w.cgroup))
        if w.cgroup == "/":
            problems.append(
                Problem(file, key_path([*loc, "cgroup"]), "the hierarchy root cannot be adopted", w.cgroup)
            )
        if w.cgroup == BATCH_PARENT or w.cgroup.startswith(BATCH_PARENT + "/"):
            problems.append(
                Problem(
                    file,
                    key_path([*loc, "cgroup"]),
                    f"'{BATCH_PARENT}' under Kalena's root holds its own batch runs; choose another cgroup",
                    w.cgroup,
                )
            )
        req = _quantities(w.requests, [*loc, "requests"], problems, file, default=0.0)
        lim = (
            None if w.limits is None else _quantities(w.limits, [*loc, "limits"], problems, file, default=0.0)
        )
        if lim is not None:
            for d in DIMS:
                if lim[d] > 0 and lim[d] < req[d]:
                    problems.append(
                        Problem(
                            file, key_path([*loc, "limits", d]), f"is below the request {req[d]:g}", lim[d]
                        )
                    )
        ns = w.id.rsplit("/", 1)[0] if "/" in w.id else ""
        spec = WorkloadSpec(
            id=w.id,
            requests=req,
            limits=lim,
            tier=Tier.SERVICE,
            priority=w.priority,
            namespace=ns,
            is_daemonset=w.daemonset,
        )
        adopted.append(Adopted(spec, w.cgroup))
    decl = Declaration(node, mem_limit, tuple(adopted), file)
    if not problems:
        c = decl.capacity().array()
        total = sum((a.spec.requests.array() for a in decl.production), start=Resources.zero().array())
        for d, name in enumerate(DIMS):
            if total[d] > c[d] * (1 + REL_TOL):
                problems.append(
                    Problem(
                        file,
                        "workloads",
                        f"production requests {total[d]:g} exceed the {name} capacity after DaemonSets",
                        float(c[d]),
                    )
                )
    if problems:
        raise DeclarationError(problems)
    return decl


def load_declaration(path: Path) -> Declaration:
    """Read and validate ``path``; every problem names the file, the key and the value."""
    log = ProblemLog(str(path))
    text = read_text(path, log)
    if text is None:
        raise DeclarationError(log.problems)
    return read_declaration(text, str(path))


def read_declaration(text: str, file: str) -> Declaration:
    """Validate a declaration given as YAML text (``file`` names it in problems)."""
    log = ProblemLog(file)
    ok, data = parse_yaml(text, log)
    if not ok or log:  # not YAML, over a bound, or a duplicate key
        raise DeclarationError(log.problems)
    if not isinstance(data, dict):
        raise DeclarationError(
            [Problem(file, DOCUMENT, "must be a mapping with apiVersion, kind, node", data)]
        )
    return parse_declaration(data, file)
