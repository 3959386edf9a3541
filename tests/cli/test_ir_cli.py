"""``kalena ir validate`` and ``kalena ir convert``: exit codes, messages, outputs.

Exit codes and messages are checked through a real subprocess (``python -m kalena.cli.main``)
for the headline cases and through Typer's CliRunner for the table of malformed documents.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kalena.cli.main import app
from kalena.data import irina_paths
from kalena.ir import read_document

runner = CliRunner()

V1I = "apiVersion: kuberina.io/v1\nkind: Infrastructure\n"
V1W = "apiVersion: kuberina.io/v1\nkind: Workloads\n"
V1B = "apiVersion: kuberina.io/v1\nkind: Blueprint\n"
NODES = V1I + "nodes:\n  - {name: n1, allocatable: {cpu: 4}, labels: {disk: ssd}}\n"
WEB = V1W + "namespaces:\n  ai:\n    - {name: web, replicas: 2, requests: {cpu: 1}}\n"


def kalena(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "200"}
    return subprocess.run(
        [sys.executable, "-m", "kalena.cli.main", *args], capture_output=True, text=True, env=env, timeout=60
    )


def write(tmp_path: Path, files: dict[str, str]) -> list[str]:
    for name, text in files.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    return [str(tmp_path / name) for name in files]


# --- subprocess: the headline behaviour -----------------------------------------------------
def test_validate_bundled_irina_by_default():
    r = kalena("ir", "validate")
    assert r.returncode == 0, r.stderr
    out = r.stdout
    for fragment in (
        "186 nodes, 4 DaemonSets",
        "2,714 pods",
        "2,714 placements on 152 nodes",
        "2.25 cpu, 2.75 GiB ram on each of 186 nodes",
        "152 / 186",
        "88.73 %",
    ):
        assert fragment in out, fragment
    assert r.stderr == ""


def test_validate_bad_file_exits_2_with_one_line_per_problem_on_stderr(tmp_path):
    (bad,) = write(
        tmp_path, {"bad.yaml": V1I + "nodes:\n  - {name: a, allocatable: {cpu: 12x}, colour: red}\n"}
    )
    r = kalena("ir", "validate", bad)
    assert r.returncode == 2
    assert r.stdout == ""
    assert r.stderr.splitlines() == [
        f"{bad}: nodes[0].allocatable.cpu: '12x' is not a valid quantity for cpu (value: \"12x\")",
        f"{bad}: nodes[0].colour: unknown key 'colour' (value: \"red\")",
    ]
    assert "Traceback" not in r.stderr


def test_validate_missing_file_and_yaml_error_without_traceback(tmp_path):
    (broken,) = write(tmp_path, {"broken.yaml": "nodes:\n  - name: a\n   bad: indent\n"})
    r = kalena("ir", "validate", broken, str(tmp_path / "absent.yaml"))
    assert r.returncode == 2
    assert f"{broken}: <document>: YAML syntax error at line 3" in r.stderr
    assert f"{tmp_path / 'absent.yaml'}: <document>: file does not exist" in r.stderr
    assert "Traceback" not in r.stderr


def test_convert_irina_writes_v1_and_reconverting_is_byte_identical(tmp_path):
    out1, out2 = tmp_path / "v1", tmp_path / "again"
    r = kalena("ir", "convert", "--to", "v1", *map(str, irina_paths()), "--out", str(out1))
    assert r.returncode == 0, r.stderr
    names = sorted(p.name for p in out1.iterdir())
    assert names == ["irina_blueprint.yaml", "irina_infra.yaml", "irina_workloads.yaml"]
    r2 = kalena("ir", "convert", "--to", "v1", *(str(out1 / n) for n in names), "--out", str(out2))
    assert r2.returncode == 0, r2.stderr
    for n in names:
        assert (out1 / n).read_bytes() == (out2 / n).read_bytes()
    assert "0 pods renamed" in r2.stdout
    assert read_document(out1 / "irina_blueprint.yaml").metadata.active_nodes == 152


# --- CliRunner: the table of malformed documents ---------------------------------------------
# (id, files, file that the problem names, key path, value as rendered or None, message fragment)
BAD = [
    ("unknown-key", {"i.yaml": NODES + "extra: 1\n"}, "i.yaml", "extra", "1", "unknown key 'extra'"),
    (
        "bad-quantity",
        {
            "w.yaml": V1W
            + "namespaces:\n  ai:\n    - {name: x}\n    - {name: y}\n    - {name: z, requests: {ram: 4Gx}}\n"
        },
        "w.yaml",
        "namespaces.ai[2].requests.ram",
        '"4Gx"',
        "not a valid quantity for ram",
    ),
    (
        "missing-name",
        {"i.yaml": V1I + "nodes:\n  - {zone: a}\n"},
        "i.yaml",
        "nodes[0].name",
        None,
        "required key 'name'",
    ),
    (
        "duplicate-node",
        {"i.yaml": V1I + "nodes:\n  - {name: a}\n  - {name: b}\n  - {name: a}\n"},
        "i.yaml",
        "nodes[2].name",
        '"a"',
        "duplicate node name (first at nodes[0])",
    ),
    (
        "duplicate-pod-identity",
        {
            "w.yaml": "pods:\n"
            + "".join(f"  - {{name: p{i}, namespace: x}}\n" for i in range(17))
            + "  - {name: p3, namespace: x}\n"
        },
        "w.yaml",
        "pods[17].name",
        '"p3"',
        "duplicate pod identity x/p3",
    ),
    (
        "blueprint-unknown-pod",
        {
            "w.yaml": WEB,
            "b.yaml": V1B
            + "metadata: {feasible: true}\nsolution: {ai/web-0000: n1, ai/web-0001: n1, ai/foo-0: n1}\n",
        },
        "b.yaml",
        "solution.ai/foo-0",
        '"ai/foo-0"',
        "blueprint names unknown pod",
    ),
    (
        "blueprint-unknown-node",
        {"i.yaml": NODES, "b.yaml": V1B + "metadata: {feasible: true}\nsolution: {ai/web-0000: n9}\n"},
        "b.yaml",
        "solution.ai/web-0000",
        '"n9"',
        "unknown node",
    ),
    (
        "pod-missing-from-blueprint",
        {"w.yaml": WEB, "b.yaml": V1B + "metadata: {feasible: true}\nsolution: {ai/web-0000: n1}\n"},
        "b.yaml",
        "solution",
        '"ai/web-0001"',
        "missing from the blueprint",
    ),
    (
        "feasible-false",
        {"b.yaml": V1B + "metadata: {feasible: false}\nsolution: {}\n"},
        "b.yaml",
        "metadata.feasible",
        "false",
        "must not be applied",
    ),
    (
        "metadata-pods-mismatch",
        {"b.yaml": V1B + "metadata: {feasible: true, pods: 5}\nsolution: {a/b-0: n1}\n"},
        "b.yaml",
        "metadata.pods",
        "5",
        "solution has 1 entries",
    ),
    (
        "metadata-active-nodes-mismatch",
        {"b.yaml": V1B + "metadata: {feasible: true, activeNodes: 2}\nsolution: {a/b-0: n1}\n"},
        "b.yaml",
        "metadata.activeNodes",
        "2",
        "solution uses 1",
    ),
    (
        "yaml-syntax",
        {"y.yaml": "nodes:\n  - name: a\n   bad: indent\n"},
        "y.yaml",
        "<document>",
        '"bad: indent"',
        "YAML syntax error at line 3, column 4",
    ),
    ("yaml-syntax-at-end", {"y.yaml": "nodes: [a, b\n"}, "y.yaml", "<document>", None, "at line 2"),
    (
        "top-level-not-mapping",
        {"l.yaml": "- a\n- b\n"},
        "l.yaml",
        "<document>",
        '["a", "b"]',
        "must be a mapping",
    ),
    ("empty-file", {"e.yaml": ""}, "e.yaml", "<document>", "null", "not empty"),
    (
        "unknown-apiversion",
        {"v.yaml": "apiVersion: kuberina.io/v2\nnodes: []\n"},
        "v.yaml",
        "apiVersion",
        '"kuberina.io/v2"',
        "unknown apiVersion",
    ),
    ("unknown-kind", {"k.yaml": "kind: Cluster\nnodes: []\n"}, "k.yaml", "kind", '"Cluster"', "unknown kind"),
    (
        "wrong-kind",
        {"k.yaml": "kind: Blueprint\nnodes: []\n"},
        "k.yaml",
        "kind",
        '"Blueprint"',
        "Infrastructure keys",
    ),
    (
        "group-member-unknown",
        {"w.yaml": WEB + "groups:\n  - {name: g, members: [ai/web, ai/nope]}\n"},
        "w.yaml",
        "groups[0].members[1]",
        '"ai/nope"',
        "names no declaration",
    ),
    (
        "min-members-out-of-range",
        {"w.yaml": WEB + "groups:\n  - {name: g, members: [ai/web], min_members: 3}\n"},
        "w.yaml",
        "groups[0].min_members",
        "3",
        "must lie in 1..=2",
    ),
    (
        "pod-in-two-groups",
        {"w.yaml": WEB + "groups:\n  - {name: g, members: [ai/web]}\n  - {name: h, members: [ai/web]}\n"},
        "w.yaml",
        "groups[1].members[0]",
        '"ai/web"',
        "already in group 'g'",
    ),
    (
        "inline-gang-and-group-conflict",
        {
            "w.yaml": V1W
            + "namespaces:\n  ai:\n    - {name: web, gang: g}\ngroups:\n  - {name: h, members: [ai/web]}\n"
        },
        "w.yaml",
        "namespaces.ai[0].gang",
        '"g"',
        "but group 'h' also claims it",
    ),
    (
        "exceeded-request-fraction",
        {
            "w.yaml": V1W
            + "namespaces:\n  ai:\n    - {name: web, observed: {exceeded_request_fraction: 1.5}}\n"
        },
        "w.yaml",
        "namespaces.ai[0].observed.exceeded_request_fraction",
        "1.5",
        "[0, 1]",
    ),
    (
        "flat-spelling-in-v1",
        {"i.yaml": V1I + "nodes:\n  - {name: a, allocatable: {net_in: 5}}\n"},
        "i.yaml",
        "nodes[0].allocatable.net_in",
        "5",
        "unknown key 'net_in'",
    ),
    (
        "v1-blueprint-bare-key",
        {"b.yaml": V1B + "metadata: {feasible: true}\nsolution: {web-0: n1}\n"},
        "b.yaml",
        "solution.web-0",
        '"web-0"',
        "namespace/podname",
    ),
    (
        "duplicate-yaml-key",
        {"b.yaml": "solution:\n  a/x-0: n1\n  a/x-0: n2\n"},
        "b.yaml",
        "<document>",
        '"a/x-0"',
        "duplicate key at line 3",
    ),
    (
        "node-selector-violated",
        {
            "i.yaml": NODES,
            "w.yaml": V1W + "namespaces:\n  ai:\n    - {name: w, nodeSelector: {disk: nvme}}\n",
            "b.yaml": V1B + "metadata: {feasible: true}\nsolution: {ai/w-0: n1}\n",
        },
        "b.yaml",
        "solution.ai/w-0",
        '"n1"',
        "does not match the pod's nodeSelector",
    ),
    (
        "request-ledger-breached",
        {
            "i.yaml": NODES,
            "w.yaml": V1W + "namespaces:\n  ai:\n    - {name: w, replicas: 5, requests: {cpu: 1}}\n",
            "b.yaml": V1B
            + "metadata: {feasible: true}\nsolution: {"
            + ", ".join(f"ai/w-000{i}: n1" for i in range(5))
            + "}\n",
        },
        "b.yaml",
        "solution",
        '"n1"',
        "cpu requests 5 exceed capacity 4",
    ),
]


@pytest.mark.parametrize(
    ("files", "culprit", "path", "value", "message"), [c[1:] for c in BAD], ids=[c[0] for c in BAD]
)
def test_validate_malformed_document(tmp_path, files, culprit, path, value, message):
    paths = write(tmp_path, files)
    r = runner.invoke(app, ["ir", "validate", *paths])
    assert r.exit_code == 2, r.output
    assert r.stdout == ""
    prefix = f"{tmp_path / culprit}: {path}: "
    lines = [line for line in r.stderr.splitlines() if line.startswith(prefix) and message in line]
    assert lines, f"no line starting {prefix!r} with {message!r} in:\n{r.stderr}"
    if value is None:
        assert "(value:" not in lines[0]
    else:
        assert lines[0].endswith(f"(value: {value})"), lines[0]


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root reads any file")
def test_validate_unreadable_file(tmp_path):
    (p,) = write(tmp_path, {"locked.yaml": NODES})
    os.chmod(p, 0)
    r = runner.invoke(app, ["ir", "validate", p])
    assert r.exit_code == 2 and "not readable" in r.stderr


def test_validate_directory_is_reported(tmp_path):
    r = runner.invoke(app, ["ir", "validate", str(tmp_path)])
    assert r.exit_code == 2 and f"{tmp_path}: <document>: is a directory" in r.stderr


def test_validate_partial_set_cross_checks_what_it_can(tmp_path):
    paths = write(
        tmp_path,
        {
            "w.yaml": WEB,
            "b.yaml": V1B + "metadata: {feasible: true}\nsolution: {ai/web-0000: x, ai/web-0001: y}\n",
        },
    )
    r = runner.invoke(app, ["ir", "validate", *paths])
    assert r.exit_code == 0, r.stderr
    assert "blueprint cross-checked against workloads" in r.stdout
    assert "2 placements on 2 nodes" in r.stdout


def test_two_documents_of_one_kind_are_refused(tmp_path):
    paths = write(tmp_path, {"a.yaml": NODES, "b.yaml": NODES})
    r = runner.invoke(app, ["ir", "validate", *paths])
    assert r.exit_code == 2 and "a second Infrastructure document" in r.stderr


# --- convert ------------------------------------------------------------------------------------
def test_convert_legacy_set_writes_v1_and_rename_map(tmp_path):
    paths = write(
        tmp_path,
        {
            "i.yaml": "nodes: [{name: n1, allocatable: {cpu: 8, disk_read: 100}}]\n",
            "w.yaml": "pods:\n"
            "  - {name: a-0000, namespace: x, antiAffinity: [b]}\n"
            "  - {name: a-0001, namespace: x, antiAffinity: [b]}\n"
            "  - {name: b, namespace: x}\n",
            "b.yaml": "solution: {a-0000: n1, a-0001: n1, b: n1}\n",
        },
    )
    out = tmp_path / "out" / "deeper"
    r = runner.invoke(
        app,
        [
            "ir",
            "convert",
            "--to",
            "v1",
            *paths,
            "--out",
            str(out),
            "--rename-map",
            str(tmp_path / "ren.yaml"),
        ],
    )
    assert r.exit_code == 0, r.stderr
    assert "1 pods renamed" in r.stdout
    assert (tmp_path / "ren.yaml").read_text() == "x/b: x/b-0\n"
    wl = (out / "w.yaml").read_text()
    assert "    - name: a\n      replicas: 2\n" in wl and "        - x/b-0\n" in wl
    assert "allocatable: {cpu: 8, disk: {read: 100}}" in (out / "i.yaml").read_text()
    assert "  x/b-0: n1\n" in (out / "b.yaml").read_text()
    r = runner.invoke(app, ["ir", "validate", *(str(out / n) for n in ("i.yaml", "w.yaml", "b.yaml"))])
    assert r.exit_code == 0, r.stderr


CONVERT_BAD = [
    (
        "bad-input",
        ["--to", "v1"],
        {"i.yaml": V1I + "nodes: [{name: a, size: 3}]\n"},
        "i.yaml: nodes[0].size: unknown key",
    ),
    (
        "bad-target",
        ["--to", "v2"],
        {"i.yaml": NODES},
        'kalena ir convert: --to: only v1 is a conversion target (value: "v2")',
    ),
    (
        "bare-blueprint-alone",
        ["--to", "v1"],
        {"b.yaml": "solution: {web-0: n1}\n"},
        "b.yaml: solution.web-0: cannot convert a bare key",
    ),
]


@pytest.mark.parametrize(
    ("opts", "files", "message"), [c[1:] for c in CONVERT_BAD], ids=[c[0] for c in CONVERT_BAD]
)
def test_convert_bad_input_exits_2_and_writes_nothing(tmp_path, opts, files, message):
    paths = write(tmp_path, files)
    out = tmp_path / "out"
    r = runner.invoke(app, ["ir", "convert", *opts, *paths, "--out", str(out)])
    assert r.exit_code == 2
    assert message in r.stderr
    assert not out.exists()


def test_convert_refuses_to_overwrite_its_input(tmp_path):
    paths = write(tmp_path, {"i.yaml": NODES})
    r = runner.invoke(app, ["ir", "convert", "--to", "v1", *paths, "--out", str(tmp_path)])
    assert r.exit_code == 2 and "would overwrite this input" in r.stderr
    assert (tmp_path / "i.yaml").read_text() == NODES


def test_convert_unwritable_output_is_reported(tmp_path):
    paths = write(tmp_path, {"i.yaml": NODES, "blocker": "a file where a folder should be"})
    r = runner.invoke(
        app, ["ir", "convert", "--to", "v1", paths[0], "--out", str(tmp_path / "blocker" / "out")]
    )
    assert r.exit_code == 2 and "cannot write" in r.stderr and "Traceback" not in r.output


def test_version_and_help():
    assert runner.invoke(app, ["--version"]).stdout.startswith("kalena ")
    r = runner.invoke(app, ["ir", "--help"])
    assert r.exit_code == 0 and "validate" in r.stdout and "convert" in r.stdout
