"""Fuzzers: real documents, mutated, through every reader; the answer is a document or problems.

Each reader gets real input (the bundled Irina documents, the node declaration of the agent's
docs, real Kubernetes manifests), cut at line boundaries and mutated by hypothesis: lines
deleted, duplicated or swapped, hostile tokens inserted (anchors, aliases, merge keys, ``null``,
``1e400``, unbalanced brackets, tabs, NUL, bytes of other scripts), characters replaced. Whatever
comes out, the reader must return a result or raise its error type with every problem naming the
file: never another exception, never a traceback.

CI runs ``FUZZ_EXAMPLES`` (200) examples per reader; ``KALENA_FUZZ_EXAMPLES=10000 pytest -m fuzz``
is the long run (``docs/robustness.md`` has its result).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kalena.agent.declaration import DeclarationError, read_declaration
from kalena.data import irina_paths
from kalena.ir import IRError, parse_document
from kalena.manifests import parse_manifests
from kalena.manifests.cluster import to_cluster
from kalena.manifests.load import parse_workloads

pytestmark = pytest.mark.fuzz

EXAMPLES = int(os.environ.get("KALENA_FUZZ_EXAMPLES", "200"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
    database=None,  # each run explores afresh; a failure prints its example
)
FILE = "fuzz.yaml"

TOKENS = [
    "&a ",
    "*a",
    "<<: *a",
    "null",
    "~",
    "1e400",
    "-1",
    ".nan",
    "9" * 30,
    "[",
    "]",
    "{",
    "}",
    ": ",
    "- ",
    "\t",
    "\x00",
    "\u2028",
    "é",
    "'",
    '"',
    "#",
    "---\n",
    "...\n",
    "!!python/object:os.system ",
    "? ",
    "yes",
    "0x1F",
    "2026-12-01",
    "cpu: ",
    "ram: ",
    "replicas: ",
    "name: ",
    "allocatable: ",
]


def _head(path: Path, max_chars: int) -> str:
    """The file's first lines, up to about ``max_chars`` (a real document, small enough to fuzz fast)."""
    text = path.read_text(encoding="utf-8")
    if len(text) <= max_chars:
        return text
    return text[: text.rfind("\n", 0, max_chars) + 1]


@st.composite
def mutated(draw: st.DrawFn, source: str) -> str:
    lines = source.splitlines(keepends=True)
    for _ in range(draw(st.integers(1, 6))):
        if not lines:
            lines = ["\n"]
        i = draw(st.integers(0, len(lines) - 1))
        op = draw(st.sampled_from(["delete", "duplicate", "swap", "insert", "replace", "truncate"]))
        if op == "delete":
            del lines[i]
        elif op == "duplicate":
            lines.insert(i, lines[i])
        elif op == "swap":
            j = draw(st.integers(0, len(lines) - 1))
            lines[i], lines[j] = lines[j], lines[i]
        elif op == "insert":
            at = draw(st.integers(0, len(lines[i])))
            lines[i] = lines[i][:at] + draw(st.sampled_from(TOKENS)) + lines[i][at:]
        elif op == "replace":
            if lines[i]:
                at = draw(st.integers(0, len(lines[i]) - 1))
                lines[i] = lines[i][:at] + draw(st.characters(codec="utf-8")) + lines[i][at + 1 :]
        else:
            lines = lines[: i + 1]
    return "".join(lines)


def _named(problems: object) -> None:
    lines = [p.render() for p in problems]  # type: ignore[attr-defined]
    assert lines and all(line.startswith(f"{FILE}: ") and "\n" not in line for line in lines), lines


INFRA, WORKLOADS, BLUEPRINT = irina_paths()


@FUZZ
@given(
    st.one_of(mutated(_head(INFRA, 6000)), mutated(_head(WORKLOADS, 6000)), mutated(_head(BLUEPRINT, 3000)))
)
def test_the_ir_reader_answers_every_mutation_of_irina(text):
    try:
        parse_document(text, FILE)
    except IRError as e:
        _named(e.problems)


DECLARATION = """apiVersion: kalena.naughtian.io/v1alpha1
kind: NodeDeclaration
node:
  name: node-a
  capacity: {cpu: 2, ram: 448Mi}
  memoryLimit: 512Mi
workloads:
  - id: prod/web
    cgroup: prod/web
    priority: 100
    requests: {cpu: 500m, ram: 128Mi}
    limits: {cpu: 1, ram: 256Mi}
  - id: kube-system/logger
    cgroup: /system.slice/logger.service
    daemonset: true
"""


@FUZZ
@given(mutated(DECLARATION))
def test_the_declaration_reader_answers_every_mutation(text):
    try:
        read_declaration(text, FILE)
    except DeclarationError as e:
        _named(e.problems)


MANIFESTS = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "deployability" / "k8s-manifests"
_REAL = sorted(MANIFESTS.rglob("*.yaml")) if MANIFESTS.is_dir() else []


@pytest.mark.realdata
@pytest.mark.skipif(not _REAL, reason=f"shared data not found at {MANIFESTS}")
@FUZZ
@given(st.sampled_from(_REAL or [Path("/")]).flatmap(lambda p: mutated(_head(p, 8000))))
def test_the_manifest_reader_answers_every_mutation_of_real_manifests(text):
    try:
        parse_manifests([(FILE, text)])
        to_cluster(parse_workloads([(FILE, text)]))  # what kalena pack --manifests reads
    except IRError as e:
        _named(e.problems)
