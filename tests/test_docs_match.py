"""The docs match the program: every option of every command is in docs/cli.md, every key of a
real report is in docs/report.md, every folder of the package is in docs/architecture.md's tree,
and the reference pages' examples run as written."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from kalena.agent.declaration import read_declaration
from kalena.agent.runtime import parse_submission
from kalena.cli.main import app
from kalena.data import irina_paths
from kalena.ir import load_cluster
from kalena.sim import SimConfig, Simulation, build_report

DOCS = Path(__file__).resolve().parent.parent / "docs"
CLI = (DOCS / "cli.md").read_text(encoding="utf-8")


def _commands(cmd: Any, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any]]:
    if hasattr(cmd, "list_commands"):  # a group (typer's click, vendored or not; the root's lazy)
        out = []
        for name in cmd.list_commands(None):  # (no group of ours reads the context)
            out.extend(_commands(cmd.get_command(None, name), (*path, name)))
        return out
    return [(path, cmd)]


COMMANDS = _commands(typer.main.get_command(app))


def _section(title: str) -> str:
    """The text under the heading that names ``title``, up to the next heading."""
    m = re.search(rf"^#+ `{re.escape(title)}\b[^\n]*\n", CLI, flags=re.M)
    assert m is not None, f"no heading for {title!r} in docs/cli.md"
    rest = CLI[m.end() :]
    nxt = re.search(r"^#+ ", rest, flags=re.M)
    return m.group(0) + (rest[: nxt.start()] if nxt else rest)


@pytest.mark.parametrize(("path", "cmd"), COMMANDS, ids=[" ".join(p) for p, _ in COMMANDS])
def test_every_option_of_every_command_is_in_its_section_of_the_cli_reference(path, cmd):
    section = _section(f"kalena {' '.join(path)}")
    for param in cmd.params:
        if getattr(param, "param_type_name", "") == "option" and param.name != "help":
            spelled = [o for o in param.opts if o.startswith("--")]
            assert any(o in section for o in spelled), (path, spelled)


def test_every_command_group_documents_its_exit_codes():
    for heading in (
        "kalena ir validate",
        "kalena ir convert",
        "kalena agent",
        "kalena simulate",
        "kalena deployable",
        "kalena compact",
        "kalena replay",
        "kalena report",
    ):
        section = CLI[CLI.index(f"## `{heading}") :]
        nxt = section.find("\n## ", 3)
        assert "| exit | meaning |" in section[: nxt if nxt > 0 else None], heading


def test_every_key_of_a_real_report_is_in_the_report_reference():
    sim = Simulation(load_cluster(*irina_paths()), SimConfig(hours=0.05))
    sim.run()
    report = build_report(sim)
    doc = (DOCS / "report.md").read_text(encoding="utf-8")
    for key, value in report.items():
        assert f"`{key}`" in doc, key
        if isinstance(value, dict) and key not in (
            "batch_task_states_at_end",
            "evictions",
            "reservation_accuracy",
        ):
            for sub in value:
                if key not in ("completion_time_inflation", "batch_throttled_seconds"):
                    assert f"`{sub}`" in doc, (key, sub)


def _blocks(page: str, lang: str) -> list[str]:
    text = (DOCS / page).read_text(encoding="utf-8")
    return re.findall(rf"```{lang}\n(.*?)```", text, flags=re.S)


def test_the_ir_reference_example_is_a_valid_set(tmp_path):
    files = []
    for block in _blocks("ir-v1.md", "yaml"):
        name = block.splitlines()[0].removeprefix("# ").strip()
        (tmp_path / name).write_text(block)
        files.append(str(tmp_path / name))
    assert len(files) == 3
    r = CliRunner().invoke(app, ["ir", "validate", *files])
    assert r.exit_code == 0, r.output
    assert "valid: blueprint cross-checked against infra and workloads" in r.output


def test_the_declaration_reference_examples_are_valid():
    (decl,) = _blocks("declaration.md", "yaml")
    d = read_declaration(decl, "declaration.md")
    assert d.node.name == "node-a" and [a.spec.id for a in d.production] == ["prod/web"]
    (job,) = _blocks("declaration.md", "json")
    sub = parse_submission(json.loads(job), "declaration.md")
    assert sub.name == "train-1" and sub.requests["cpu"] == 0.5


def test_the_worked_deployability_example_prints_what_the_page_shows(monkeypatch):
    text = (DOCS / "deployability.md").read_text(encoding="utf-8")
    m = re.search(r"```\n\$ kalena (deployable .*?)\n(deployable:.*?)\n\.\.\.\n```", text, flags=re.S)
    assert m is not None
    args = m.group(1).replace("\\\n", " ").split()
    monkeypatch.chdir(DOCS.parent)  # the page says: run from the repository root
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    shown = m.group(2).splitlines()
    assert r.output.splitlines()[: len(shown)] == shown


@pytest.mark.parametrize(("path", "cmd"), COMMANDS, ids=[" ".join(p) for p, _ in COMMANDS])
def test_a_flag_shows_no_value_type_in_help(path, cmd):
    r = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    # typer's own --help flag still shows one; every flag of Kalena's takes no value and says none
    shown = [line for line in r.output.splitlines() if "<bool>" in line and "--help" not in line]
    assert shown == [], shown


def test_every_folder_of_the_package_is_in_the_architecture_tree():
    """Issue 9: every folder of ``src/kalena`` is listed in docs/architecture.md's tree (the page's
    first code block), each as ``name/`` within its parent's entry, two spaces deeper."""
    tree = (DOCS / "architecture.md").read_text(encoding="utf-8").split("\n\n")[1].splitlines()
    root = Path(__file__).resolve().parent.parent / "src" / "kalena"
    folders = sorted(p.relative_to(root) for p in root.rglob("*") if p.is_dir() and p.name != "__pycache__")
    assert folders, root

    def indent(line: str) -> int:
        return len(line) - len(line.lstrip(" "))

    for folder in folders:
        lo, hi = 1, len(tree)  # the lines of the parent's entry (first: the whole tree below src/kalena/)
        for i, part in enumerate(folder.parts):
            want = " " * (6 + 2 * i) + part + "/"
            at = next((j for j in range(lo, hi) if tree[j].startswith(want)), None)
            assert at is not None, f"{folder} is not in docs/architecture.md's tree (no {want.strip()!r})"
            end = next((j for j in range(at + 1, hi) if indent(tree[j]) <= indent(tree[at])), hi)
            lo, hi = at + 1, end
