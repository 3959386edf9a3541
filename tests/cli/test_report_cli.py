"""``kalena report``: one self-contained HTML page from the outputs of real runs (every figure
embedded, captioned with the command that made it, the records' key figures), text from files
escaped, and bad folders or files exit 2 naming them. The page in a real browser:
``test_report_browser.py``."""

from __future__ import annotations

import base64
import json
import re
import shutil
from html import escape
from pathlib import Path

import pytest
from report_testlib import make_run_folder
from typer.testing import CliRunner

from kalena.cli.main import app

runner = CliRunner()
PNG = b"\x89PNG\r\n\x1a\n"
PLOTS = (
    "slack_cluster.png",
    "slack_node.png",
    "reservation_cdf.png",
    "compare.png",
    "compaction.png",
    "pareto.png",
    "safety.png",
)
SECTIONS = ("slack", "arms", "compaction", "pareto", "safety")


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    return make_run_folder(tmp_path_factory.mktemp("report"))


def report(*args: str) -> tuple[int, str]:
    r = runner.invoke(app, ["report", *args])
    assert "Traceback" not in r.output
    return r.exit_code, r.output


def test_every_command_records_the_line_that_made_it(run):
    folder, commands = run
    for name, command in commands.items():
        assert json.loads((folder / name).read_text())["command"] == command, name


def test_the_page_of_real_runs_has_every_section_figure_command_and_key_figure(run):
    folder, commands = run
    code, out = report(str(folder))
    assert code == 0, out
    assert f"wrote {folder / 'report.html'}" in out.replace("\n", "")
    page = (folder / "report.html").read_text(encoding="utf-8")
    for anchor in SECTIONS:
        assert f'<section id="{anchor}">' in page, anchor
    # every figure embedded, byte for byte, as a PNG data URI
    images = re.findall(r'<img src="data:image/png;base64,([^"]+)" alt="([^":]+):', page)
    assert sorted(alt for _, alt in images) == sorted(PLOTS)
    for data, alt in images:
        png = base64.b64decode(data, validate=True)
        assert png.startswith(PNG) and png == (folder / alt).read_bytes(), alt
    # nothing from elsewhere: no script, every link or source within the page or a data URI
    assert "<script" not in page.lower() and "url(" not in page
    assert all(v.startswith(("data:", "#")) for v in re.findall(r'(?:src|href)="([^"]*)"', page))
    # each figure captioned with its record's command
    for name, command in commands.items():
        assert f"<code>{escape(command)}</code>" in page, name
    assert page.count(f"<code>{escape(commands['report.json'])}</code>") == 4  # 3 slack views + arms
    # the key figures of each record
    compaction = json.loads((folder / "compaction.json").read_text())
    for arm in ("production", "reclaim_on", "reclaim_off"):
        assert f"<td>{compaction[arm]['p90']:g}</td>" in page, arm
    assert "<code>extra_nodes_without_reclamation</code>" in page
    pareto = json.loads((folder / "pareto.json").read_text())
    assert "<code>optimum</code>" in page and (pareto["optimum"] is None or "<td>optimum</td>" in page)
    assert "<code>knee.margin</code>" in page and "<td>knee</td>" in page
    assert "<th>reclaim on</th><th>reclaim off</th><th>baseline</th>" in page
    assert "<code>work_enabled_by_reclamation_fraction</code>" in page


def test_text_from_files_is_escaped_and_a_validation_object_is_shown_as_it_comes(run, tmp_path):
    folder, _ = run
    record = json.loads((folder / "compaction.json").read_text())
    record["command"] = "kalena compact '<script>alert(1)</script>'"
    record["validation"] = {
        "compacted": {"production_unmet_cpu_core_seconds": 12.5, "note": "<b>bold</b> & <script>x</script>"},
        "full": {"production_unmet_cpu_core_seconds": 3.0},
    }
    (tmp_path / "compaction.json").write_text(json.dumps(record))
    shutil.copy(folder / "compaction.png", tmp_path / "compaction.png")
    code, out = report(str(tmp_path), "--out", str(tmp_path / "elsewhere" / "page.html"))
    assert code == 0, out
    assert not (tmp_path / "report.html").exists()
    page = (tmp_path / "elsewhere" / "page.html").read_text(encoding="utf-8")
    assert "<script" not in page and "<b>bold" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page and "&lt;b&gt;bold&lt;/b&gt; &amp;" in page
    validation = page[page.index("<h3>Validation</h3>") :]
    for key in ("compacted", "full", "production_unmet_cpu_core_seconds"):
        assert f"<code>{key}</code>" in validation
    assert "<td>12.5</td>" in validation and "<td>3</td>" in validation
    # only the compaction section: nothing shown for the files that are not there
    assert '<section id="compaction">' in page and '<section id="slack">' not in page


def test_a_record_without_its_command_and_a_figure_without_its_record_say_so(run, tmp_path):
    folder, _ = run
    record = json.loads((folder / "pareto.json").read_text())
    del record["command"]  # written before the commands recorded it
    (tmp_path / "pareto.json").write_text(json.dumps(record))
    shutil.copy(folder / "pareto.png", tmp_path / "pareto.png")
    shutil.copy(folder / "safety.png", tmp_path / "safety.png")  # no calibration.json
    code, out = report(str(tmp_path))
    assert code == 0, out
    page = (tmp_path / "report.html").read_text(encoding="utf-8")
    assert "pareto.json does not record the command that made it" in page
    assert "the folder has no calibration.json: the command is not recorded" in page


def test_bad_folders_and_files_exit_2_naming_them(run, tmp_path):
    folder, _ = run
    empty = tmp_path / "empty"
    empty.mkdir()
    code, out = report(str(empty))
    assert code == 2 and out.count("\n") == 1
    assert f"{empty}: none of the files kalena report reads is there" in out
    assert "report.json" in out and "compaction.json" in out and "safety.png" in out
    assert not (empty / "report.html").exists()

    code, out = report(str(tmp_path / "missing"))
    assert code == 2 and "missing: not a folder" in out

    broken = tmp_path / "broken"
    broken.mkdir()
    shutil.copy(folder / "compaction.png", broken / "compaction.png")
    (broken / "compaction.json").write_text('{"nodes": 8,')
    code, out = report(str(broken))
    assert code == 2 and f"{broken / 'compaction.json'}: not JSON: " in out and "line 1" in out
    (broken / "compaction.json").write_text("[1, 2]")
    code, out = report(str(broken))
    assert code == 2 and "compaction.json: expected a JSON object (value: a list)" in out
    (broken / "compaction.json").write_text("{}")
    (broken / "compaction.png").write_bytes(b"GIF89a not a png")
    code, out = report(str(broken))
    assert code == 2 and f"{broken / 'compaction.png'}: not a PNG image" in out
    assert not (broken / "report.html").exists()

    code, out = report(str(folder), "--out", str(tmp_path))
    assert code == 2 and "--out: a folder; give the HTML file's name" in out


def test_compact_out_refuses_a_file_before_the_trials(tmp_path):
    (tmp_path / "file").write_text("")
    r = runner.invoke(app, ["compact", "--batch-hours", "0", "--out", str(tmp_path / "file")])
    assert r.exit_code == 2 and "--out: cannot make the folder" in r.output
