"""Closed pydantic models of the pre-v1 shapes, read only from documents without ``apiVersion``.

What legacy adds to v1 (and nothing else):

* flat resource spellings ``disk_read``, ``disk_write``, ``net_in``, ``net_out`` (and
  ``network_in``/``network_out``) beside the nested blocks; giving one dimension both ways
  is an error;
* the Irina ``pods:`` list: one entry per pod with its ``namespace`` (default ``default``)
  and bare pod names as affinity targets; tolerations may be bare taint keys; the gang may
  be spelled ``group`` (Kuberina's research parser);
* groups whose ``members`` are omitted (membership from the pods' ``gang``) and the
  ``minMembers`` spelling;
* a blueprint without header or metadata whose keys are bare pod names.

The IR v0.2.0 homelab files are v1-shaped without a header, so they read through these same
models (the legacy models are supersets of the v1 ones).
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BeforeValidator, Field, StrictBool, StrictInt, StrictStr, model_validator

from kalena.ir import schema_v1 as v1


class LegacyResourceBlock(v1.ResourceBlock):
    disk_read: v1.DiskRead | None = None
    disk_write: v1.DiskWrite | None = None
    net_in: v1.NetIn | None = None
    net_out: v1.NetOut | None = None
    network_in: v1.NetIn | None = None
    network_out: v1.NetOut | None = None

    @model_validator(mode="after")
    def _one_spelling(self) -> LegacyResourceBlock:
        pairs = (
            ("disk_read", self.disk and self.disk.read),
            ("disk_write", self.disk and self.disk.write),
            ("net_in", self.network and self.network.in_),
            ("net_out", self.network and self.network.out),
            ("network_in", self.network and self.network.in_),
            ("network_out", self.network and self.network.out),
        )
        for flat, nested in pairs:
            if getattr(self, flat) is not None and nested is not None:
                raise ValueError(f"{flat} is given both flat and nested")
        if self.net_in is not None and self.network_in is not None:
            raise ValueError("net_in and network_in name the same dimension")
        if self.net_out is not None and self.network_out is not None:
            raise ValueError("net_out and network_out name the same dimension")
        return self

    def present(self) -> dict[str, float]:
        out = super().present()
        for flat, dim in (
            ("disk_read", "disk.read"),
            ("disk_write", "disk.write"),
            ("net_in", "network.in"),
            ("net_out", "network.out"),
            ("network_in", "network.in"),
            ("network_out", "network.out"),
        ):
            v = getattr(self, flat)
            if v is not None:
                out[dim] = v
        return out


def _toleration(raw: Any) -> Any:
    # A bare taint key (the research parser's spelling) tolerates that key whatever its value.
    return {"key": raw, "operator": "Exists"} if isinstance(raw, str) else raw


LegacyToleration = Annotated[v1.Toleration, BeforeValidator(_toleration)]


class LegacyNode(v1.Node):
    allocatable: LegacyResourceBlock | None = None


class LegacyDaemonSet(v1.DaemonSet):
    resources: LegacyResourceBlock | None = None


class LegacyObserved(v1.Observed):
    p50: LegacyResourceBlock | None = None
    p95: LegacyResourceBlock | None = None
    p99: LegacyResourceBlock | None = None
    peak: LegacyResourceBlock | None = None


class LegacyDeclaration(v1.Declaration):
    requests: LegacyResourceBlock | None = None
    tolerations: list[LegacyToleration] = Field(default_factory=list)
    observed: LegacyObserved | None = None


class LegacyPod(v1.Closed):
    """One entry of the Irina ``pods:`` list: a pod, not a declaration (no replicas)."""

    name: v1.Name
    namespace: v1.Name = "default"
    requests: LegacyResourceBlock | None = None
    node_selector: v1.Labels = Field(default_factory=dict, alias="nodeSelector")
    tolerations: list[LegacyToleration] = Field(default_factory=list)
    affinity: list[StrictStr] = Field(default_factory=list)
    anti_affinity: list[StrictStr] = Field(default_factory=list, alias="antiAffinity")
    gang: v1.Name | None = None
    group: v1.Name | None = None

    @model_validator(mode="after")
    def _one_gang(self) -> LegacyPod:
        if self.gang is not None and self.group is not None and self.gang != self.group:
            raise ValueError("gang and group name different gangs")
        return self

    @property
    def gang_name(self) -> str | None:
        return self.gang or self.group


class LegacyGroup(v1.Group):
    members: list[StrictStr] | None = None  # type: ignore[assignment]
    min_members_camel: StrictInt | None = Field(None, alias="minMembers")

    @model_validator(mode="after")
    def _one_min(self) -> LegacyGroup:
        if self.min_members is not None and self.min_members_camel is not None:
            raise ValueError("min_members and minMembers are both given")
        return self

    @property
    def min_members_value(self) -> int | None:
        return self.min_members if self.min_members is not None else self.min_members_camel


class LegacyWorkloadsTop(v1.WorkloadsTop):
    pods: list[Any] = Field(default_factory=list)


class LegacyBlueprintMeta(v1.BlueprintMeta):
    feasible: StrictBool | None = None  # type: ignore[assignment]
