"""Classification from labels and annotations: defaults, knobs, malformed values."""

import pytest

from kalena.core.classify import (
    PRIORITY,
    RECLAIM,
    SLACK_CPU,
    SLACK_MEMORY,
    STARTUP_GRACE,
    TIER,
    classify,
    parse_duration,
)
from kalena.core.model import Tier


def test_defaults_are_safe():
    c = classify("ns/w", {})
    assert (c.tier, c.priority, c.slack_cpu, c.slack_memory, c.reclaim_disabled, c.startup_grace_s) == (
        Tier.SERVICE,
        0,
        True,
        False,
        False,
        300.0,
    )
    assert c.problems == ()


def test_the_seed_example():
    c = classify("ns/w", {TIER: "batch"}, {PRIORITY: "20", SLACK_MEMORY: "allow", SLACK_CPU: "allow"})
    assert c.tier is Tier.BATCH and c.priority == 20 and c.slack_memory and c.slack_cpu


def test_docker_labels_only():
    c = classify("ctr", {TIER: "batch", PRIORITY: "3", RECLAIM: "disabled", STARTUP_GRACE: "2m"})
    assert c.tier is Tier.BATCH and c.priority == 3 and c.reclaim_disabled and c.startup_grace_s == 120.0


@pytest.mark.parametrize(
    ("owner_kind", "infer", "tier"),
    [
        ("Job", True, Tier.BATCH),
        ("CronJob", True, Tier.BATCH),
        ("Job", False, Tier.SERVICE),
        ("ReplicaSet", True, Tier.SERVICE),
    ],
    ids=["job-inferred", "cronjob-inferred", "inference-off", "replicaset-stays-service"],
)
def test_job_inference(owner_kind, infer, tier):
    assert classify("ns/p", {}, owner_kind=owner_kind, infer_batch=infer).tier is tier


def test_explicit_service_label_beats_inference():
    assert classify("ns/p", {TIER: "service"}, owner_kind="Job", infer_batch=True).tier is Tier.SERVICE


MALFORMED = [
    ("tier", {TIER: "opportunistic"}, TIER),
    ("priority-negative", {TIER: "batch", PRIORITY: "-1"}, PRIORITY),
    ("priority-word", {TIER: "batch", PRIORITY: "high"}, PRIORITY),
    ("slack-cpu", {TIER: "batch", SLACK_CPU: "yes"}, SLACK_CPU),
    ("slack-memory", {TIER: "batch", SLACK_MEMORY: "1"}, SLACK_MEMORY),
    ("reclaim", {RECLAIM: "off"}, RECLAIM),
    ("grace", {TIER: "batch", STARTUP_GRACE: "soon"}, STARTUP_GRACE),
]


@pytest.mark.parametrize(("labels", "key"), [m[1:] for m in MALFORMED], ids=[m[0] for m in MALFORMED])
def test_malformed_value_means_service_with_defaults(labels, key):
    c = classify("ns/bad", labels)
    assert c.tier is Tier.SERVICE and c.priority == 0 and not c.slack_memory
    assert len(c.problems) == 1
    p = c.problems[0]
    assert p.workload == "ns/bad" and p.key == key and p.value == labels[key]
    assert "ns/bad" in str(p) and key in str(p) and labels[key] in str(p)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("300s", 300), ("5m", 300), ("1.5h", 5400), ("250ms", 0.25), ("45", 45)],
    ids=["s", "m", "h", "ms", "bare"],
)
def test_durations(text, seconds):
    assert parse_duration(text) == seconds
