"""Workload classification from labels and annotations (SPEC: Workload classification).

The same keys serve Kubernetes labels/annotations and Docker/Swarm container or service
labels. A malformed value never makes anything evictable: it is reported as a
:class:`ClassificationProblem` and the workload falls back to ``service`` with defaults.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from kalena.core.model import Tier

PREFIX = "kalena.naughtian.io/"
TIER = PREFIX + "tier"
PRIORITY = PREFIX + "priority"
SLACK_CPU = PREFIX + "slack-cpu"
SLACK_MEMORY = PREFIX + "slack-memory"
RECLAIM = PREFIX + "reclaim"
STARTUP_GRACE = PREFIX + "startup-grace"

DEFAULT_STARTUP_GRACE_S = 300.0  # Borg holds the reservation for 300 s after start
BATCH_OWNER_KINDS = frozenset({"Job", "CronJob"})

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")
_DURATION_UNIT = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}


@dataclass(frozen=True, slots=True)
class ClassificationProblem:
    """A malformed classification value: report it (event or log line) and use defaults."""

    workload: str
    key: str
    value: str
    reason: str

    def __str__(self) -> str:
        return f"{self.workload}: {self.key}={self.value!r} {self.reason}; treated as service with defaults"


@dataclass(frozen=True, slots=True)
class Classification:
    tier: Tier = Tier.SERVICE
    priority: int = 0
    slack_cpu: bool = True
    slack_memory: bool = False
    reclaim_disabled: bool = False
    startup_grace_s: float = DEFAULT_STARTUP_GRACE_S
    problems: tuple[ClassificationProblem, ...] = ()


def parse_duration(text: str) -> float:
    """``"300s"``, ``"5m"``, ``"1.5h"``, ``"250ms"`` or a bare number of seconds."""
    m = _DURATION.match(text)
    if m is None:
        raise ValueError(f"{text!r} is not a duration")
    return float(m.group(1)) * _DURATION_UNIT[m.group(2)]


def _allow_deny(value: str) -> bool:
    v = value.strip().lower()
    if v == "allow":
        return True
    if v == "deny":
        return False
    raise ValueError("must be 'allow' or 'deny'")


def classify(
    workload: str,
    labels: Mapping[str, str],
    annotations: Mapping[str, str] | None = None,
    *,
    owner_kind: str = "",
    infer_batch: bool = False,
) -> Classification:
    """Tier, priority and slack knobs for one workload.

    Keys are looked up in annotations first, then labels, so Docker and Swarm (labels only)
    use the same keys. With ``infer_batch``, pods owned by a Job or CronJob default to batch.
    Any malformed value voids the whole classification: the result is ``service`` with the
    defaults plus the list of problems, because bad input must never make anything evictable.
    """
    merged = dict(labels)
    merged.update(annotations or {})
    problems: list[ClassificationProblem] = []

    def bad(key: str, reason: str) -> None:
        problems.append(ClassificationProblem(workload, key, str(merged[key]), reason))

    tier = Tier.BATCH if infer_batch and owner_kind in BATCH_OWNER_KINDS else Tier.SERVICE
    if TIER in merged:
        raw = str(merged[TIER]).strip().lower()
        if raw in ("service", "batch"):
            tier = Tier(raw)
        else:
            bad(TIER, "must be 'service' or 'batch'")

    priority = 0
    if PRIORITY in merged:
        raw = str(merged[PRIORITY]).strip()
        if raw.isdigit():
            priority = int(raw)
        else:
            bad(PRIORITY, "must be a non-negative integer")

    knobs = {SLACK_CPU: True, SLACK_MEMORY: False}
    for key in knobs:
        if key in merged:
            try:
                knobs[key] = _allow_deny(str(merged[key]))
            except ValueError as e:
                bad(key, str(e))

    reclaim_disabled = False
    if RECLAIM in merged:
        raw = str(merged[RECLAIM]).strip().lower()
        if raw in ("disabled", "enabled"):
            reclaim_disabled = raw == "disabled"
        else:
            bad(RECLAIM, "must be 'disabled' or 'enabled'")

    grace = DEFAULT_STARTUP_GRACE_S
    if STARTUP_GRACE in merged:
        try:
            grace = parse_duration(str(merged[STARTUP_GRACE]))
        except ValueError:
            bad(STARTUP_GRACE, "must be a duration such as '300s' or '5m'")

    if problems:
        return Classification(problems=tuple(problems))
    return Classification(
        tier=tier,
        priority=priority,
        slack_cpu=knobs[SLACK_CPU],
        slack_memory=knobs[SLACK_MEMORY],
        reclaim_disabled=reclaim_disabled,
        startup_grace_s=grace,
    )
