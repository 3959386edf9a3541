"""One policy configuration: every core config a shell passes to the core, validated when built.

:class:`PolicyConfig` bundles the estimator choice and its parameters with the enforcement and
placement configs, so that a shell (the simulator, the node agent) holds one object and reads
one file section. Each part keeps its own defaults and the reasons for them (see the part's
docstring); this module adds only the bundle, a plain-mapping form for YAML/JSON and
:func:`make_estimator`.

Plain-mapping form (``to_mapping`` / ``from_mapping``), every key optional::

    {"estimator": "decay", "decay": {"half_life_s": 900.0}, "throttle": {"growth_fraction": 0.1},
     "placement": {"bucket_width": [0.25, 0.25, 1, 1, 10, 10, 10, 10]}, ...}

A bad key or value names its dotted path (``throttle.grwoth_fraction: unknown key``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import Any

from kalena.core.controller.config import RoundConfig
from kalena.core.enforcement import (
    EscalationConfig,
    EvictionConfig,
    PairingConfig,
    StarvationConfig,
    ThrottleConfig,
)
from kalena.core.estimators import (
    DecayEstimator,
    DecayingHistogram,
    DecayParams,
    HistogramParams,
    PeakParams,
    PeakWithMargin,
    ReservationEstimator,
)
from kalena.core.placement import PlacementConfig
from kalena.core.validate import ConfigError, check_choice, check_type

#: Estimator names, the default first: decay is the spec's estimator.
ESTIMATORS: tuple[str, ...] = ("decay", "peak", "histogram")

#: The config class of each section of a :class:`PolicyConfig` (every field but ``estimator``).
SECTIONS: Mapping[str, type] = MappingProxyType(
    {
        "decay": DecayParams,
        "peak": PeakParams,
        "histogram": HistogramParams,
        "eviction": EvictionConfig,
        "throttle": ThrottleConfig,
        "starvation": StarvationConfig,
        "escalation": EscalationConfig,
        "pairing": PairingConfig,
        "placement": PlacementConfig,
        "round": RoundConfig,
    }
)


@dataclass(frozen=True, slots=True)
class PolicyConfig:
    """The estimator to run (by name) and every core config; all three estimators' params are
    kept so that switching ``estimator`` needs no other change."""

    estimator: str = "decay"
    decay: DecayParams = field(default_factory=DecayParams)
    peak: PeakParams = field(default_factory=PeakParams)
    histogram: HistogramParams = field(default_factory=HistogramParams)
    eviction: EvictionConfig = field(default_factory=EvictionConfig)
    throttle: ThrottleConfig = field(default_factory=ThrottleConfig)
    starvation: StarvationConfig = field(default_factory=StarvationConfig)
    escalation: EscalationConfig = field(default_factory=EscalationConfig)
    pairing: PairingConfig = field(default_factory=PairingConfig)
    placement: PlacementConfig = field(default_factory=PlacementConfig)
    round: RoundConfig = field(default_factory=RoundConfig)

    def __post_init__(self) -> None:
        check_choice(self, "estimator", ESTIMATORS)
        for key, cls in SECTIONS.items():
            check_type(self, key, cls)  # a plain dict here is a caller's mistake: use from_mapping

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> PolicyConfig:
        """Build from nested plain data (as read from YAML or JSON); a missing key keeps its default.

        An unknown key or a bad value raises ``ValueError`` naming its dotted path:
        ``throttle.growth_fraction: must be in (0, 1], got 0``.
        """
        kwargs: dict[str, Any] = {}
        for key, value in _mapping(data, "policy").items():
            if key == "estimator":
                kwargs[key] = value
            elif key in SECTIONS:
                kwargs[key] = _section(SECTIONS[key], value, str(key))
            else:
                raise ValueError(f"{key}: unknown key")
        try:
            return cls(**kwargs)
        except ConfigError as e:  # only the estimator name is checked here; sections were built above
            raise ValueError(f"{e.key}: must be {e.rule}, got {e.value!r}") from None

    def to_mapping(self) -> dict[str, Any]:
        """The inverse of :meth:`from_mapping`: plain dicts, lists and scalars (JSON/YAML-ready)."""
        out: dict[str, Any] = {"estimator": self.estimator}
        for key in SECTIONS:
            part = getattr(self, key)
            out[key] = {f.name: _plain(getattr(part, f.name)) for f in fields(part)}
        return out


def make_estimator(config: PolicyConfig) -> ReservationEstimator[Any]:
    """The core estimator ``config.estimator`` names, with its params from ``config``."""
    if config.estimator == "peak":
        return PeakWithMargin(config.peak)
    if config.estimator == "histogram":
        return DecayingHistogram(config.histogram)
    return DecayEstimator(config.decay)  # PolicyConfig admits only the three names


def _mapping(data: object, path: str) -> Mapping[str, Any]:
    if not isinstance(data, Mapping):
        raise ValueError(f"{path}: must be a mapping, got {data!r}")
    return data


def _section(cls: type, data: object, path: str) -> object:
    """``cls(**data)`` with every error re-stated under ``path``."""
    items = _mapping(data, path)
    names = {f.name for f in fields(cls)}
    for key in items:
        if key not in names:
            raise ValueError(f"{path}.{key}: unknown key")
    try:
        return cls(**items)  # a config with tuple fields turns YAML's lists into tuples itself
    except ConfigError as e:
        raise ValueError(f"{path}.{e.key}: must be {e.rule}, got {e.value!r}") from None
    except ValueError as e:  # a rule outside the helper: keep its text, add the path
        raise ValueError(f"{path}: {e}") from None


def _plain(value: object) -> object:
    return list(value) if isinstance(value, tuple) else value
