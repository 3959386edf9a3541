"""Every reader meets the hostile-input corpus (``tests/fixtures/hostile``) through the real CLI.

Each file runs in a subprocess under a 1 GiB address-space limit and a timeout, from an empty
working folder: the command must exit 2 with every line of its answer naming the file, print no
traceback, and write nothing. ``yaml/`` holds what every YAML reader must survive (alias bombs,
cycles, deep nesting, bytes that are not UTF-8, NUL, binary, empty files, a folder, an integer of
5,000 digits); ``ir/``, ``agent/`` and ``manifests/`` hold what only that reader reads (numbers
beyond any bound, ``null`` quantities, replica counts, misspelled fields, wrong types). The
manifests are read twice: by ``kalena deployable`` and by ``kalena pack --manifests``.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from cli_testlib import run_kalena

CORPUS = Path(__file__).resolve().parent.parent / "fixtures" / "hostile"
#: A hang shows as a timeout; a healthy answer takes about 1.5 s here (most of it imports).
TIMEOUT_S = 60
MEMORY_BYTES = 1 << 30

COMMANDS = {
    "ir": ["ir", "validate"],
    "agent": ["agent", "validate"],
    "manifests": ["deployable", "--pod", "web", "--node", "n1", "--cluster"],
    "pack-manifests": ["pack", "--manifests"],
}
#: the corpus folder of a command that reads another command's files
FOLDER = {"pack-manifests": "manifests"}


def run_cli(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return run_kalena(args, cwd, timeout=TIMEOUT_S, memory_bytes=MEMORY_BYTES)


def _cases() -> list[tuple[str, Path]]:
    out = []
    for reader in COMMANDS:
        for folder in ("yaml", FOLDER.get(reader, reader)):
            out.extend((reader, p) for p in sorted((CORPUS / folder).iterdir()))
    return out


def test_the_corpus_has_every_kind_of_hostile_file():
    names = {p.name for p in (CORPUS / "yaml").iterdir()}
    for expected in (
        "alias-bomb.yaml",
        "alias-cycle.yaml",
        "deep-flow.yaml",
        "bad-utf8.yaml",
        "nul-byte.yaml",
        "binary.yaml",
        "empty.yaml",
        "a-directory.yaml",
        "huge-integer.yaml",
    ):
        assert expected in names
    assert len(_cases()) >= 60


@pytest.mark.parametrize(("reader", "path"), _cases(), ids=lambda x: x if isinstance(x, str) else x.name)
def test_a_hostile_file_is_one_clear_error(reader, path, tmp_path):
    r = run_cli([*COMMANDS[reader], str(path)], tmp_path)
    assert r.returncode == 2, (r.returncode, r.stdout[-500:], r.stderr[-2000:])
    assert "Traceback" not in r.stderr and "Error:" not in r.stderr.split(":", 1)[0]
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert lines, "no message"
    assert all(line.startswith(str(path)) for line in lines), lines
    assert list(tmp_path.iterdir()) == []  # nothing written


@pytest.mark.parametrize("reader", list(COMMANDS))
def test_an_endless_device_is_refused_by_size(tmp_path, reader):
    r = run_cli([*COMMANDS[reader], "/dev/zero"], tmp_path)
    assert r.returncode == 2, r.stderr
    assert (
        r.stderr.strip() == "/dev/zero: <document>: file is larger than 64 MiB, the limit for one input file"
    )
