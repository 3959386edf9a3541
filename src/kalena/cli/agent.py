"""``kalena agent``: the Linux node agent (run, submit, validate, detect, status).

``kalena agent run --runtime process --declaration node.yaml --state-dir /var/lib/kalena``
runs the agent until SIGTERM/SIGINT (or ``--duration``). Exit codes: 0 stopped cleanly;
2 bad input (a malformed declaration or submission: one line per problem on stderr,
``FILE: KEY: MESSAGE (value: VALUE)``, and nothing changed); 3 the host cannot run the agent
(no cgroup hierarchy).
"""

from __future__ import annotations

import json
import math
import signal
import ssl
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from kalena.agent.config import AgentConfig
from kalena.agent.declaration import DeclarationError, load_declaration
from kalena.agent.layout import (
    BATCH_PARENT,
    BadCgroupName,
    LayoutError,
    check_name,
    detect,
)
from kalena.agent.loop import StepReport
from kalena.agent.psi import PsiTrigger, PsiUnavailable, TriggerSpec
from kalena.agent.runtime import Submission, SubmissionError, parse_submission, submit
from kalena.agent.state import StateStore
from kalena.core.config import PolicyConfig
from kalena.core.enforcement import EscalationConfig, EvictionConfig
from kalena.core.lifecycle import TERMINAL
from kalena.core.validate import ConfigError
from kalena.docker import DEFAULT_ENDPOINT
from kalena.store import StoreError

if TYPE_CHECKING:
    from kalena.api.serve import Listen
    from kalena.docker.engine import TlsFiles

# The heavy parts (FastAPI, the Docker SDK, the agent's wiring) are imported by the commands that
# use them: every ``kalena`` command loads this module for its shared options, and a short one
# (``kalena k8s scheduler``, ``kalena status``) should not pay for them at its start.

app = typer.Typer(help="The Linux node agent: cgroups, PSI, throttling and eviction.", no_args_is_help=True)

EXIT_BAD_INPUT = 2
EXIT_HOST = 3

# the engine, for every command that talks to one
DockerHost = Annotated[
    str, typer.Option("--docker-host", envvar="DOCKER_HOST", help="The engine (unix://, tcp://, ssh://).")
]
TlsCa = Annotated[Path | None, typer.Option("--tls-ca", help="CA of a tcp:// engine's TLS.")]
TlsCert = Annotated[Path | None, typer.Option("--tls-cert", help="Client certificate.")]
TlsKey = Annotated[Path | None, typer.Option("--tls-key", help="Client key.")]


def _check_duration(value: float) -> float:
    if not (math.isfinite(value) and value >= 0):
        raise fail_with(
            [f"--duration: must be a finite number of seconds >= 0 (value: {value!r})"], EXIT_BAD_INPUT
        )
    return value


# every long-running command's: checked as it is parsed, before anything starts
Duration = Annotated[
    float,
    typer.Option("--duration", help="Stop after this many seconds (0: never).", callback=_check_duration),
]

StateDir = Annotated[
    Path, typer.Option("--state-dir", help="Folder of the state file, action log and inbox.")
]


# the options every node agent's command shares (``agent run``, ``k8s agent``)
SampleInterval = Annotated[float, typer.Option("--sample-interval", help="Seconds per mitigation round.")]
EstimateInterval = Annotated[float, typer.Option("--estimate-interval", help="Seconds per estimate.")]
GracePeriod = Annotated[float, typer.Option("--grace-period", help="SIGTERM -> SIGKILL, seconds.")]
MinRunTime = Annotated[float, typer.Option("--min-run-time", help="Batch exempt this long.")]
EscalationRounds = Annotated[
    int, typer.Option("--escalation-rounds", help="Failed mitigation rounds before batch is drained.")
]
EscalationPersist = Annotated[
    float, typer.Option("--escalation-persist", help="Seconds of pressure through mitigation before a drain.")
]

#: The config field behind each option of ``agent run``: a bad value is reported in the option's name.
OPTION_OF = {
    ("AgentConfig", "sample_interval_s"): "--sample-interval",
    ("AgentConfig", "estimate_interval_s"): "--estimate-interval",
    ("EvictionConfig", "grace_period_s"): "--grace-period",
    ("EvictionConfig", "min_run_time_s"): "--min-run-time",
    ("EscalationConfig", "rounds"): "--escalation-rounds",
    ("EscalationConfig", "persist_s"): "--escalation-persist",
}


def _option_problem(e: ValueError) -> str:
    if isinstance(e, ConfigError) and (e.owner, e.key) in OPTION_OF:
        return f"{OPTION_OF[e.owner, e.key]}: must be {e.rule} (value: {e.value!r})"
    return str(e)


def _check_cgroup_root(cgroup_root: str) -> None:
    if cgroup_root != "auto":
        try:
            check_name(cgroup_root)
        except BadCgroupName as e:
            raise fail_with([f"--cgroup-root: {e} (value: {cgroup_root!r})"], EXIT_BAD_INPUT) from None


def tls_files(ca: Path | None, cert: Path | None, key: Path | None) -> TlsFiles | None:
    given = [x is not None for x in (ca, cert, key)]
    if not any(given):
        return None
    if not all(given):
        raise fail_with(["--tls-ca, --tls-cert, --tls-key: give all three or none"], EXIT_BAD_INPUT)
    assert ca is not None and cert is not None and key is not None
    from kalena.docker.engine import TlsFiles

    return TlsFiles(ca, cert, key)


def fail_with(lines: list[str], code: int) -> typer.Exit:
    for line in lines:
        typer.echo(line, err=True)
    return typer.Exit(code)


@app.command()
def run(
    state_dir: StateDir,
    declaration: Annotated[
        Path | None,
        typer.Option(
            "--declaration",
            help="The node declaration (YAML); with --runtime docker optional: the node's name and capacity.",
        ),
    ] = None,
    runtime: Annotated[
        str, typer.Option("--runtime", help="Workload runtime: process or docker.")
    ] = "process",
    docker_host: DockerHost = DEFAULT_ENDPOINT,
    tls_ca: TlsCa = None,
    tls_cert: TlsCert = None,
    tls_key: TlsKey = None,
    cgroup_root: Annotated[
        str,
        typer.Option(
            "--cgroup-root",
            help="Kalena's root cgroup (relative: under the agent's own); auto: /kalena on v2 and with "
            "--runtime docker, else kalena.",
        ),
    ] = "auto",
    telemetry: Annotated[str, typer.Option("--telemetry", help="cgroupfs or cadvisor.")] = "cgroupfs",
    cadvisor_url: Annotated[str, typer.Option("--cadvisor-url")] = "http://127.0.0.1:4194",
    cadvisor_api: Annotated[str, typer.Option("--cadvisor-api", help="v2.0 or v1.3.")] = "v2.0",
    sample_interval: SampleInterval = 1.0,
    estimate_interval: EstimateInterval = 10.0,
    grace_period: GracePeriod = 30.0,
    min_run_time: MinRunTime = 120.0,
    escalation_rounds: EscalationRounds = 3,
    escalation_persist: EscalationPersist = 30.0,
    duration: Duration = 0.0,
    verbose: Annotated[
        bool, typer.Option("--verbose", metavar="", help="One line per round with actions.")
    ] = False,
    join: Annotated[
        str | None,
        typer.Option("--join", help="A cluster daemon's URL: report to it and run what it places here."),
    ] = None,
    join_token_file: Annotated[
        Path | None, typer.Option("--join-token-file", help="The daemon's bearer token.")
    ] = None,
    join_ca: Annotated[Path | None, typer.Option("--join-ca", help="The CA of the daemon's TLS.")] = None,
    listen: Annotated[
        str | None,
        typer.Option(
            "--listen", help="Serve the HTTP API here too (HOST:PORT or unix:PATH; --runtime docker)."
        ),
    ] = None,
    token_file: Annotated[
        Path | None, typer.Option("--token-file", help="The API's bearer token (needed off loopback).")
    ] = None,
    api_tls_cert: Annotated[
        Path | None, typer.Option("--api-tls-cert", help="The API's TLS certificate.")
    ] = None,
    api_tls_key: Annotated[Path | None, typer.Option("--api-tls-key", help="The API's TLS key.")] = None,
) -> None:
    """Run the agent on this host until SIGTERM or SIGINT."""
    if runtime not in ("process", "docker"):
        raise fail_with([f"--runtime: must be process or docker (value: {runtime!r})"], EXIT_BAD_INPUT)
    if declaration is None and runtime == "process":
        raise fail_with(["--declaration: the process runtime needs the node declaration"], EXIT_BAD_INPUT)
    from kalena.agent.build import build_agent
    from kalena.api.app import make_app
    from kalena.api.queue import check_images
    from kalena.api.serve import ApiServer, is_loopback
    from kalena.docker.agent import DOCKER_ROOT, STORE_FILE, build_docker_agent
    from kalena.docker.cgroups import DriverError
    from kalena.docker.engine import EngineError

    tls = tls_files(tls_ca, tls_cert, tls_key)
    if telemetry not in ("cgroupfs", "cadvisor"):
        raise fail_with([f"--telemetry: must be cgroupfs or cadvisor (value: {telemetry!r})"], EXIT_BAD_INPUT)
    api = api_options(listen, token_file, api_tls_cert, api_tls_key, runtime)
    join_token = _join_options(join, join_token_file, join_ca, runtime)
    _check_cgroup_root(cgroup_root)
    if state_dir.exists() and not state_dir.is_dir():
        raise fail_with([f"--state-dir: must be a folder, and {state_dir} is a file"], EXIT_BAD_INPUT)
    try:
        decl = None if declaration is None else load_declaration(declaration)
    except DeclarationError as e:
        raise fail_with([p.render() for p in e.problems], EXIT_BAD_INPUT) from None
    config = agent_config(
        sample_interval, estimate_interval, grace_period, min_run_time, escalation_rounds, escalation_persist
    )
    try:
        if runtime == "docker":
            if telemetry != "cgroupfs":
                raise fail_with(["--telemetry: the docker runtime reads cgroupfs"], EXIT_BAD_INPUT)
            agent = build_docker_agent(
                state_dir,
                endpoint=docker_host,
                tls=tls,
                base=decl,
                config=config,
                cgroup_root=DOCKER_ROOT if cgroup_root == "auto" else cgroup_root,
                join=join,
                join_token=join_token,
                join_verify=ssl.create_default_context(cafile=str(join_ca)) if join_ca else True,
            )
        else:
            assert decl is not None
            agent = build_agent(
                decl,
                state_dir,
                config=config,
                cgroup_root=cgroup_root,
                cadvisor_url=cadvisor_url if telemetry == "cadvisor" else None,
                cadvisor_api=cadvisor_api,
                declaration_path=declaration,
            )
    except DeclarationError as e:
        raise fail_with([p.render() for p in e.problems], EXIT_BAD_INPUT) from None
    except (EngineError, DriverError, StoreError) as e:
        raise fail_with([f"cannot run the agent on this host: {e}"], EXIT_HOST) from None
    except (LayoutError, OSError) as e:
        raise fail_with([f"cannot run the agent on this host: {e}"], EXIT_HOST) from None
    should_stop = stop_on_signals(duration)
    try:
        agent.start()
    except ValueError as e:  # a corrupt state file: never guessed at, never overwritten
        raise fail_with(
            [f"{state_dir / 'state.json'}: unreadable state file: {e}; move it away to start afresh"],
            EXIT_BAD_INPUT,
        ) from None
    typer.echo(f"kalena agent: node {agent.declaration.node.name}, {agent.tree.layout.describe()}", err=True)
    for line in agent.sources.report()["psi"]:
        warn = "warning: " if "fallback" in line else ""
        typer.echo(f"  {warn}psi {line}", err=True)

    def on_step(rep: StepReport) -> None:
        acts = [f"evict {w}" for w in rep.evicted] + [f"admit {w}" for w in rep.admitted]
        if verbose and (acts or rep.events):
            typer.echo(f"{rep.time:.3f} events={len(rep.events)} {' '.join(acts)}", err=True)

    server = None
    if api is not None:
        where, token, cert, key = api
        store_path = state_dir / STORE_FILE

        def images(subs: list[Submission]) -> None:
            check_images(subs, docker_host, tls)

        server = ApiServer(make_app(store_path, token, images), where, cert, key)
        try:
            server.start()
        except OSError as e:
            agent.shutdown()
            raise fail_with([f"--listen: {where.describe()}: {e}"], EXIT_HOST) from None
        scheme = "https" if cert else "http"
        shown = where.describe() if where.socket else f"{scheme}://{where.describe()}"
        typer.echo(f"  api {shown}{' (token required)' if token else ''}", err=True)
        if token and not cert and where.socket is None and not is_loopback(where.host or ""):
            typer.echo(
                "  warning: the token travels in clear text: give --api-tls-cert/--api-tls-key", err=True
            )
    try:
        agent.run(should_stop=should_stop, on_step=on_step)
    finally:
        if server is not None:
            server.stop()
        agent.shutdown()
        agent.log.close()


def agent_config(
    sample_s: float, estimate_s: float, grace_s: float, min_run_s: float, rounds: int, persist_s: float
) -> AgentConfig:
    """The agent's config from its options (every node agent's command); exit 2 naming a bad one."""
    try:
        policy = PolicyConfig(
            eviction=EvictionConfig(
                min_run_time_s=min_run_s, grace_period_s=grace_s, acute_grace_period_s=0.0
            ),
            escalation=EscalationConfig(rounds=rounds, persist_s=persist_s),
        )
        return AgentConfig(sample_interval_s=sample_s, estimate_interval_s=estimate_s, policy=policy)
    except ValueError as e:
        raise fail_with([_option_problem(e)], EXIT_BAD_INPUT) from None


def stop_on_signals(duration: float) -> Callable[[], bool]:
    """Whether to stop: SIGTERM or SIGINT came, or ``duration`` seconds (> 0) have passed."""
    stop = {"now": False}

    def on_signal(signum: int, _frame: object) -> None:
        stop["now"] = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    end = time.monotonic() + duration if duration > 0 else None
    return lambda: stop["now"] or (end is not None and time.monotonic() >= end)


def read_token(path: Path, option: str) -> str:
    """A bearer token from ``path`` (at least 16 characters): exit 2 naming the option otherwise."""
    try:
        token = path.read_text().strip()
    except OSError as e:
        raise fail_with([f"{option}: {path}: {e.strerror or e}"], EXIT_BAD_INPUT) from None
    if len(token) < 16:
        raise fail_with([f"{option}: {path}: the token must have at least 16 characters"], EXIT_BAD_INPUT)
    return token


def _join_options(join: str | None, token_file: Path | None, ca: Path | None, runtime: str) -> str | None:
    """The cluster daemon's token, the options checked (``None``: no token, or not joining)."""
    if join is None:
        if token_file or ca:
            raise fail_with(["--join-token-file/--join-ca: only with --join"], EXIT_BAD_INPUT)
        return None
    if runtime != "docker":
        raise fail_with(["--join: a cluster daemon places containers: --runtime docker"], EXIT_BAD_INPUT)
    if not join.startswith(("http://", "https://")):
        raise fail_with(
            [f"--join: expected http://HOST:PORT or https://... (value: {join!r})"], EXIT_BAD_INPUT
        )
    if ca is not None and not ca.is_file():
        raise fail_with([f"--join-ca: no such file (value: {str(ca)!r})"], EXIT_BAD_INPUT)
    return read_token(token_file, "--join-token-file") if token_file is not None else None


def _not_a_store(state_dir: Path) -> None:
    """A Docker agent's folder keeps its queue in its store, not in an inbox: say where to go."""
    from kalena.docker.agent import STORE_FILE

    if (state_dir / STORE_FILE).exists():
        db = state_dir / STORE_FILE
        raise fail_with(
            [f"--state-dir: this agent keeps its jobs in its store {db}: use kalena submit, kalena jobs "
             f"or kalena status with --store {db}"],
            EXIT_BAD_INPUT,
        )  # fmt: skip


def api_options(
    listen: str | None, token_file: Path | None, cert: Path | None, key: Path | None, runtime: str
) -> tuple[Listen, str | None, Path | None, Path | None] | None:
    """The API's address, token and TLS files, checked before anything starts (``None``: no API)."""
    if listen is None:
        if token_file or cert or key:
            raise fail_with(["--token-file/--api-tls-*: only with --listen"], EXIT_BAD_INPUT)
        return None
    if runtime != "docker":
        raise fail_with(["--listen: the HTTP API serves the store of --runtime docker"], EXIT_BAD_INPUT)
    token = read_token(token_file, "--token-file") if token_file is not None else None
    if (cert is None) != (key is None):
        raise fail_with(["--api-tls-cert and --api-tls-key: give both or neither"], EXIT_BAD_INPUT)
    for f, opt in ((cert, "--api-tls-cert"), (key, "--api-tls-key")):
        if f is not None and not f.is_file():
            raise fail_with([f"{opt}: no such file (value: {str(f)!r})"], EXIT_BAD_INPUT)
    from kalena.api.serve import BindRefused, check_bind, parse_listen

    try:
        where = parse_listen(listen)
        check_bind(where, token)
    except BindRefused as e:
        raise fail_with([str(e)], EXIT_BAD_INPUT) from None
    return where, token, cert, key


@app.command("submit")
def submit_cmd(
    state_dir: StateDir,
    name: Annotated[str, typer.Option("--name", help="Job name (letters, digits, . _ -).")],
    command: Annotated[list[str], typer.Argument(help="The command, after --.")],
    priority: Annotated[int, typer.Option("--priority")] = 0,
    request: Annotated[
        list[str] | None, typer.Option("--request", help="DIM=QUANTITY, e.g. ram=256Mi.")
    ] = None,
    limit: Annotated[list[str] | None, typer.Option("--limit", help="DIM=QUANTITY.")] = None,
    slack_memory: Annotated[
        bool, typer.Option("--slack-memory", metavar="", help="May grow past its memory request.")
    ] = False,
    image: Annotated[
        str | None, typer.Option("--image", help="Run the command in this image (--runtime docker).")
    ] = None,
) -> None:
    """Queue a batch command on this node's agent (it runs in its own cgroup when it fits)."""

    def pairs(items: list[str] | None, key: str) -> dict[str, str]:
        out = {}
        for item in items or []:
            if "=" not in item:
                raise fail_with([f"--{key}: expected DIM=QUANTITY (value: {item!r})"], EXIT_BAD_INPUT)
            k, v = item.split("=", 1)
            out[k.strip()] = v.strip()
        return out

    data = {
        "name": name,
        "command": command,
        "priority": priority,
        "requests": pairs(request, "request"),
        "limits": pairs(limit, "limit") if limit else None,
        "slack_memory": slack_memory,
        "image": image,
    }
    if not state_dir.is_dir():
        raise fail_with(
            [f"--state-dir: {state_dir} is not a folder (the agent's --state-dir, made by agent run)"],
            EXIT_BAD_INPUT,
        )
    _not_a_store(state_dir)
    try:
        sub = parse_submission(data, "<command line>")
    except SubmissionError as e:
        raise fail_with([p.render() for p in e.problems], EXIT_BAD_INPUT) from None
    try:
        known = StateStore(state_dir / "state.json").load()
    except (OSError, ValueError):
        known = None  # an unreadable state file is the agent's to report; the inbox still decides
    if known is not None and sub.name in known.jobs and known.task(sub.name) not in TERMINAL:
        raise fail_with(
            [f"--name: a job of this name is already {known.status(sub.name)} here (value: {sub.name!r})"],
            EXIT_BAD_INPUT,
        )
    try:
        path = submit(state_dir / "inbox", sub)
    except FileExistsError:
        raise fail_with(
            [f"--name: a job of this name is already queued in {state_dir / 'inbox'} (value: {sub.name!r})"],
            EXIT_BAD_INPUT,
        ) from None
    except OSError as e:
        raise fail_with(
            [f"{state_dir / 'inbox'}: cannot queue the job: {e.strerror or e}"], EXIT_BAD_INPUT
        ) from None
    typer.echo(str(path))


@app.command()
def purge(
    declaration: Annotated[Path, typer.Option("--declaration", help="The node declaration (YAML).")],
    cgroup_root: Annotated[
        str, typer.Option("--cgroup-root", help="Kalena's root cgroup, as given to agent run.")
    ] = "auto",
) -> None:
    """Undo agent run on this host: SIGKILL every batch run and remove the cgroups Kalena made.

    Stop the agent first. Production and DaemonSet cgroups are never touched: the root stays
    wherever production cgroups live under it (named in the output).
    """
    try:
        decl = load_declaration(declaration)
    except DeclarationError as e:
        raise fail_with([p.render() for p in e.problems], EXIT_BAD_INPUT) from None
    _check_cgroup_root(cgroup_root)
    from kalena.agent.build import purge_host

    try:
        tree, done = purge_host(decl, cgroup_root)
    except (LayoutError, OSError) as e:
        raise fail_with([f"cannot purge on this host: {e}"], EXIT_HOST) from None
    if not done:
        raise fail_with([f"{tree.root}/{BATCH_PARENT}: batch processes still running after 10 s"], EXIT_HOST)
    left = [str(tree.dir(h, "")) for h in tree.layout.hierarchies if tree.dir(h, "").is_dir()]
    typer.echo(f"batch runs stopped and removed under {tree.root}/{BATCH_PARENT}")
    for d in left:
        kept = sorted(p.name for p in Path(d).iterdir() if p.is_dir())
        typer.echo(f"kept {d}: it holds production cgroups ({', '.join(kept) or 'processes'})")


@app.command()
def validate(declaration: Annotated[Path, typer.Argument(help="The node declaration (YAML).")]) -> None:
    """Check a node declaration; print every problem with file, key and value."""
    try:
        decl = load_declaration(declaration)
    except DeclarationError as e:
        raise fail_with([p.render() for p in e.problems], EXIT_BAD_INPUT) from None
    cap = decl.capacity()
    typer.echo(
        f"{declaration}: node {decl.node.name}: {len(decl.production)} production, "
        f"{len(decl.daemonsets)} DaemonSet-class workloads; capacity after DaemonSets: {cap}"
    )


@app.command("detect")
def detect_cmd() -> None:
    """Show the cgroup layout and which PSI trigger window this process gets."""
    try:
        layout = detect()
    except (LayoutError, OSError) as e:
        raise fail_with([f"no cgroup hierarchy: {e}"], EXIT_HOST) from None
    typer.echo(layout.describe())
    spec = TriggerSpec(Path("/proc/pressure/memory"), "some", 0.1, "ram", False, "system:memory:some")
    try:
        t = PsiTrigger.open(spec)
        typer.echo(f"psi: {t.describe()}")
        t.close()
    except PsiUnavailable as e:
        typer.echo(f"psi: no trigger ({e}); the agent would poll avg10 (fallback)")


@app.command()
def status(state_dir: StateDir) -> None:
    """Print the agent's state file (jobs, evictions in flight) as JSON."""
    _not_a_store(state_dir)
    try:
        state = StateStore(state_dir / "state.json").load()
    except (OSError, ValueError) as e:
        raise fail_with([f"{state_dir / 'state.json'}: unreadable state file: {e}"], EXIT_BAD_INPUT) from None
    if state is None:
        raise fail_with(
            [f"{state_dir / 'state.json'}: no state file (has the agent run here?)"], EXIT_BAD_INPUT
        )
    out = {
        "node": state.node,
        "jobs": {
            n: {"status": state.status(n), "run": j.run, "why_pending": j.why_pending}
            for n, j in state.jobs.items()
        },
        "evictions_in_flight": [e.id for e in state.in_flight()],
        "evictions": len(state.evictions),
        "slack_ineligible_until": state.slack_deadline(),
    }
    json.dump(out, sys.stdout, indent=2, sort_keys=True)
    typer.echo()


if __name__ == "__main__":  # ``python -m kalena.cli.agent``: the agent without the other sub-commands
    app()
