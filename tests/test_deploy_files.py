"""The deploy files match the program: the compose file parses and has the flags and mounts the
Docker agent needs, each systemd unit parses and has the settings its comments promise, and every
command line they run is a valid ``kalena`` invocation whose every option exists."""

from __future__ import annotations

import configparser
import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import typer
import yaml
from typer.testing import CliRunner

from kalena.cli.main import app
from kalena.docker.labels import ContainerFacts, workload_of

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"
UNITS = {
    "kalena.service": ["docker", "serve"],
    "kalena-agent.service": ["agent", "run"],
}
STATE_DIR = "/var/lib/kalena"


def _unit(name: str) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]  # systemd keys are case-sensitive
    parser.read_string((DEPLOY / "systemd" / name).read_text(encoding="utf-8"), source=name)
    return parser


def _command(args: list[str]) -> tuple[list[str], Any]:
    """The sub-command path at the start of ``args`` and its click command."""
    cmd: Any = typer.main.get_command(app)
    path: list[str] = []
    for word in args:
        if not hasattr(cmd, "list_commands") or word not in cmd.list_commands(None):
            break
        cmd = cmd.get_command(None, word)  # (the root group builds its sub-commands when asked)
        path.append(word)
    return path, cmd


def _options(args: list[str]) -> list[str]:
    """Every ``--option`` of ``args`` (``--opt=value`` counts as ``--opt``), up to a ``--``."""
    out = []
    for a in args:
        if a == "--":
            break
        if a.startswith("--"):
            out.append(a.split("=", 1)[0])
    return out


def _seconds(text: str) -> float:
    """A systemd or compose duration (``90``, ``90s``, ``1min 30s``, ``1m30s``) in seconds."""
    units = {"": 1.0, "s": 1.0, "sec": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}
    parts = re.findall(r"(\d+(?:\.\d+)?)\s*([a-z]*)", text.strip())
    assert parts and "".join(n + u for n, u in parts) == re.sub(r"\s+", "", text.strip()), text
    return sum(float(n) * units[u] for n, u in parts)


def _default_grace_period() -> float:
    _, cmd = _command(["docker", "serve"])
    (grace,) = [p for p in cmd.params if "--grace-period" in p.opts]
    return float(grace.default)


def assert_valid_invocation(args: list[str], where: str) -> list[str]:
    """``kalena ARGS --help`` (``--help`` before a ``--``) exits 0, and each option of ARGS is in
    that help and is a parameter of the command; returns the command's path."""
    path, cmd = _command(args)
    assert path and not hasattr(cmd, "commands"), f"{where}: {args} names no kalena command"
    cut = args.index("--") if "--" in args else len(args)  # after --: the batch command's words
    r = CliRunner().invoke(app, [*args[:cut], "--help", *args[cut:]], env={"COLUMNS": "200"})
    assert r.exit_code == 0, f"{where}: kalena {shlex.join(args)} --help: {r.output}"
    assert f"Usage: kalena {' '.join(path)}" in r.output, r.output
    known = {o for p in cmd.params for o in p.opts}
    for opt in _options(args):
        assert opt in r.output, f"{where}: {opt} is not in kalena {' '.join(path)} --help"
        assert opt in known, f"{where}: {opt} is no option of kalena {' '.join(path)}"
    return path


def _value(args: list[str], opt: str) -> str | None:
    for i, a in enumerate(args):
        if a == opt:
            return args[i + 1]
        if a.startswith(opt + "="):
            return a.split("=", 1)[1]
    return None


# -- systemd --------------------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "path"), UNITS.items(), ids=list(UNITS))
def test_each_unit_runs_a_valid_kalena_command(name, path):
    unit = _unit(name)
    argv = shlex.split(unit["Service"]["ExecStart"])
    assert Path(argv[0]).name == "kalena" and Path(argv[0]).is_absolute(), argv[0]  # systemd wants a path
    args = argv[1:]
    assert assert_valid_invocation(args, name) == path
    assert _value(args, "--state-dir") == STATE_DIR


@pytest.mark.parametrize("name", list(UNITS))
def test_each_unit_stops_with_sigterm_in_time_restarts_on_failure_and_runs_as_root(name):
    svc = _unit(name)["Service"]
    assert svc["KillSignal"] == "SIGTERM"
    assert _seconds(svc["TimeoutStopSec"]) > _default_grace_period()
    assert svc["Restart"] == "on-failure"
    assert "2" in svc.get("RestartPreventExitStatus", "").split()  # bad input would fail again
    assert svc.get("User", "root") == "root"
    assert svc["StateDirectory"] == "kalena" and STATE_DIR.endswith("/" + svc["StateDirectory"])
    assert "ProtectControlGroups" not in svc  # it writes cgroups
    assert _unit(name)["Install"]["WantedBy"] == "multi-user.target"


def test_the_docker_unit_comes_after_and_requires_docker():
    u = _unit("kalena.service")["Unit"]
    assert "docker.service" in u["After"].split()
    assert "docker.service" in u["Requires"].split()
    # the comment says why it runs as root
    text = (DEPLOY / "systemd" / "kalena.service").read_text(encoding="utf-8")
    assert re.search(r"^#.*\bRoot\b.*cgroups", text, flags=re.M | re.I)
    assert re.search(r"^#.*Docker socket", text, flags=re.M)


def test_the_process_agent_unit_runs_the_process_runtime_on_its_declaration():
    unit = _unit("kalena-agent.service")
    args = shlex.split(unit["Service"]["ExecStart"])[1:]
    assert _value(args, "--runtime") == "process"
    assert _value(args, "--declaration") == "/etc/kalena/node.yaml"
    assert "kalena.service" in unit["Unit"]["Conflicts"].split()  # one agent per /var/lib/kalena


# -- compose --------------------------------------------------------------------------------------


def _dockerfile(svc: dict[str, Any]) -> Path:
    return (DEPLOY / "compose" / svc["build"]["context"] / svc["build"]["dockerfile"]).resolve()


def _compose() -> dict[str, Any]:
    doc = yaml.safe_load((DEPLOY / "compose" / "compose.yaml").read_text(encoding="utf-8"))
    assert isinstance(doc, dict) and set(doc["services"]) == {"kalena"}
    return doc


def _mounts(service: dict[str, Any]) -> dict[str, tuple[str, str]]:
    """target -> (source, mode) of each of the service's volumes (short or long syntax)."""
    out = {}
    for v in service.get("volumes", []):
        if isinstance(v, str):
            src, dst, *rest = v.split(":")
            out[dst] = (src, rest[0] if rest else "rw")
        else:
            out[v["target"]] = (v.get("source", ""), "ro" if v.get("read_only") else "rw")
    return out


def test_the_compose_file_has_the_flags_the_docker_agent_needs():
    svc = _compose()["services"]["kalena"]
    assert svc["privileged"] is True
    assert svc["pid"] == "host"
    assert svc["cgroup"] == "host"
    assert svc["network_mode"] == "host"  # 127.0.0.1:8470 stays the host's loopback
    assert "ports" not in svc  # nothing published (host networking has no ports to map anyway)
    assert svc.get("stop_signal", "SIGTERM") == "SIGTERM"
    assert _seconds(svc["stop_grace_period"]) > _default_grace_period()
    assert "deploy" not in svc  # no Swarm settings: a stack file is a later step


def test_the_compose_file_mounts_the_socket_the_cgroups_and_the_state_read_write():
    mounts = _mounts(_compose()["services"]["kalena"])
    assert mounts["/var/run/docker.sock"] == ("/var/run/docker.sock", "rw")
    assert mounts["/sys/fs/cgroup"] == ("/sys/fs/cgroup", "rw")
    src, mode = mounts[STATE_DIR]
    assert src and mode == "rw"


def test_the_compose_command_is_a_valid_kalena_invocation():
    svc = _compose()["services"]["kalena"]
    dockerfile = _dockerfile(svc).read_text(encoding="utf-8")
    (entry,) = re.findall(r"^ENTRYPOINT\s+(\[.*\])\s*$", dockerfile, flags=re.M)
    assert yaml.safe_load(entry) == ["kalena"]
    args = svc["command"]
    assert isinstance(args, list) and all(isinstance(a, str) for a in args)
    assert assert_valid_invocation(args, "compose.yaml") == ["docker", "serve"]
    assert _value(args, "--state-dir") == STATE_DIR
    (cmd,) = re.findall(r"^CMD\s+(\[.*\])\s*$", dockerfile, flags=re.M)  # the image's own default
    assert assert_valid_invocation(yaml.safe_load(cmd), "Dockerfile") == ["docker", "serve"]


def test_the_compose_labels_are_kalena_requests_the_agent_reads():
    labels = _compose()["services"]["kalena"]["labels"]
    facts = ContainerFacts(id="x", name="kalena-kalena-1", image="kalena:local", labels=labels)
    spec, problems = workload_of(facts)  # Kalena's own container is production: it asks for its share
    assert problems == ()
    assert spec.requests.to_dict(skip_zero=True).keys() == {"cpu", "ram"}


def test_the_image_is_built_from_this_repository_with_pip_on_python_311_slim():
    svc = _compose()["services"]["kalena"]
    context = (DEPLOY / "compose" / svc["build"]["context"]).resolve()
    assert context == ROOT
    dockerfile = _dockerfile(svc)
    text = dockerfile.read_text(encoding="utf-8")
    assert re.findall(r"^FROM\s+(\S+)", text, flags=re.M | re.I) == ["python:3.11-slim"]
    assert re.search(r"^RUN\s+pip install \.", text, flags=re.M)
    # no registry named anywhere but through the base image, and no other index for pip
    assert not re.search(r"--(extra-)?index-url|--find-links|https?://", text)
    assert not re.search(r"^#\s*syntax=", text, flags=re.M)  # a frontend image from a registry
    for line in re.findall(r"^COPY\s+(.+)$", text, flags=re.M):
        *sources, _dest = line.split()
        for s in sources:
            assert (context / s).exists(), s
    ignore = (dockerfile.parent / (dockerfile.name + ".dockerignore")).read_text(encoding="utf-8")
    kept = {line[1:] for line in ignore.splitlines() if line.startswith("!")}
    assert {"pyproject.toml", "README.md", "LICENSE", "src"} <= kept


def test_there_is_no_swarm_stack_file_yet():
    for f in DEPLOY.rglob("*"):
        if f.suffix in (".yml", ".yaml") and f.name != "compose.yaml":
            raise AssertionError(f"unexpected {f.relative_to(ROOT)}: a Swarm stack is a later step")
    readme = (DEPLOY / "README.md").read_text(encoding="utf-8")
    assert "Swarm" in readme
    for name in ("systemd/kalena.service", "systemd/kalena-agent.service", "compose/compose.yaml",
                 "compose/Dockerfile"):  # fmt: skip
        assert f"`{name}`" in readme, name


# -- Kubernetes (kalena k8s render) ------------------------------------------------------------------


def test_every_rendered_workload_runs_a_valid_kalena_command():
    """The Deployments and the DaemonSet ``kalena k8s render`` makes run ``kalena`` commands whose
    every option exists, and the agent's state is where its hostPath keeps it."""
    from kalena.k8s.render import objects

    made = {}
    for d in objects(components=("scheduler", "agent", "extender")):
        if d["kind"] in ("Deployment", "DaemonSet"):
            (c,) = d["spec"]["template"]["spec"]["containers"]
            made[d["metadata"]["name"]] = assert_valid_invocation(c["args"], f"render: {d['kind']}")
            if d["kind"] == "DaemonSet":
                assert _value(c["args"], "--state-dir") == STATE_DIR
                paths = {v["hostPath"]["path"] for v in d["spec"]["template"]["spec"]["volumes"]}
                assert {STATE_DIR, "/sys/fs/cgroup"} <= paths
    assert made == {
        "kalena-scheduler": ["k8s", "scheduler"],
        "kalena-agent": ["k8s", "agent"],
        "kalena-extender": ["k8s", "extender"],
    }
