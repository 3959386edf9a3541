"""``kalena docker serve``: Kalena on a Docker host, in one command: the node agent on the local
engine (``kalena agent run --runtime docker``) and the HTTP API over its store, on loopback by
default (``--listen``); with ``--join URL`` the agent also reports to a cluster daemon and runs
what it places there. ``kalena docker daemon``: that cluster daemon (:mod:`kalena.docker.cluster`).
Exit codes are the agent's: 0 stopped cleanly, 2 bad input, 3 the host (its engine, cgroups, the
store or the API's address) cannot be used."""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Annotated

import typer

from kalena.api.app import make_app
from kalena.api.serve import DEFAULT_LISTEN, ApiServer
from kalena.cli import agent as agent_cli
from kalena.core.lifecycle import LostRequeueConfig
from kalena.docker import DEFAULT_ENDPOINT
from kalena.docker.cluster import Cluster
from kalena.store import Store, StoreError

app = typer.Typer(help="Kalena on Docker hosts.", no_args_is_help=True)

# the API's options, the same on a host (serve) and on the daemon
TokenFile = Annotated[
    Path | None, typer.Option("--token-file", help="The API's bearer token (needed off loopback).")
]
ApiCert = Annotated[Path | None, typer.Option("--api-tls-cert", help="The API's TLS certificate.")]
ApiKey = Annotated[Path | None, typer.Option("--api-tls-key", help="The API's TLS key.")]
Duration = agent_cli.Duration


@app.command()
def serve(
    state_dir: Annotated[
        Path, typer.Option("--state-dir", help="The agent's folder (its store: kalena.db).")
    ] = Path("/var/lib/kalena"),
    docker_host: agent_cli.DockerHost = DEFAULT_ENDPOINT,
    tls_ca: agent_cli.TlsCa = None,
    tls_cert: agent_cli.TlsCert = None,
    tls_key: agent_cli.TlsKey = None,
    declaration: Annotated[
        Path | None,
        typer.Option("--declaration", help="The node's name and capacity (default: the engine's)."),
    ] = None,
    listen: Annotated[
        str, typer.Option("--listen", help="The HTTP API: HOST:PORT or unix:PATH.")
    ] = DEFAULT_LISTEN,
    token_file: TokenFile = None,
    api_tls_cert: ApiCert = None,
    api_tls_key: ApiKey = None,
    join: Annotated[
        str | None, typer.Option("--join", help="A cluster daemon's URL (kalena docker daemon).")
    ] = None,
    join_token_file: Annotated[Path | None, typer.Option("--join-token-file")] = None,
    join_ca: Annotated[Path | None, typer.Option("--join-ca")] = None,
    grace_period: Annotated[
        float, typer.Option("--grace-period", help="SIGTERM -> SIGKILL, seconds.")
    ] = 30.0,
    min_run_time: Annotated[float, typer.Option("--min-run-time", help="Batch exempt this long.")] = 120.0,
    duration: Duration = 0.0,
) -> None:
    """Run the agent on the local engine and serve the API (submit, jobs, why, cancel, status, metrics)."""
    agent_cli.run(
        state_dir=state_dir,
        declaration=declaration,
        runtime="docker",
        docker_host=docker_host,
        tls_ca=tls_ca,
        tls_cert=tls_cert,
        tls_key=tls_key,
        join=join,
        join_token_file=join_token_file,
        join_ca=join_ca,
        listen=listen,
        token_file=token_file,
        api_tls_cert=api_tls_cert,
        api_tls_key=api_tls_key,
        grace_period=grace_period,
        min_run_time=min_run_time,
        duration=duration,
    )


@app.command()
def daemon(
    store: Annotated[
        Path, typer.Option("--store", envvar="KALENA_STORE", help="The cluster's store (made if missing).")
    ] = Path("/var/lib/kalena/cluster.db"),
    listen: Annotated[
        str, typer.Option("--listen", help="The HTTP API (agents report here): HOST:PORT or unix:PATH.")
    ] = DEFAULT_LISTEN,
    token_file: TokenFile = None,
    api_tls_cert: ApiCert = None,
    api_tls_key: ApiKey = None,
    lost_after: Annotated[
        float, typer.Option("--lost-after", help="Seconds without a report before a host is gone.")
    ] = 30.0,
    requeue_burst: Annotated[
        int, typer.Option("--requeue-burst", help="Runs of lost hosts requeued at once.")
    ] = 20,
    requeue_rate: Annotated[
        float, typer.Option("--requeue-rate", help="Then this many a second (inf: no limit).")
    ] = 2.0,
    duration: Duration = 0.0,
) -> None:
    """The cluster daemon: one queue over several Docker hosts, whose agents join it (serve --join)."""
    problems = []
    if not (math.isfinite(lost_after) and lost_after > 0):
        problems.append(f"--lost-after: must be a finite number of seconds > 0 (value: {lost_after!r})")
    try:
        rate = LostRequeueConfig(rate_per_s=requeue_rate, burst=requeue_burst)
    except ValueError as e:
        problems.append(f"--requeue-rate, --requeue-burst: {e}")
    if problems:
        raise agent_cli.fail_with(problems, agent_cli.EXIT_BAD_INPUT)
    api = agent_cli.api_options(listen, token_file, api_tls_cert, api_tls_key, "docker")
    assert api is not None
    where, token, cert, key = api
    try:
        db = Store(store)
        cluster = Cluster(db, lost_after_s=lost_after, lost_requeue=rate)
    except StoreError as e:
        raise agent_cli.fail_with([f"--store: {e}"], agent_cli.EXIT_HOST) from None
    server = ApiServer(make_app(store, token), where, cert, key)
    try:
        server.start()
    except OSError as e:
        raise agent_cli.fail_with([f"--listen: {where.describe()}: {e}"], agent_cli.EXIT_HOST) from None
    typer.echo(f"kalena docker daemon: store {store}, api {where.describe()}", err=True)
    should_stop = agent_cli.stop_on_signals(duration)
    try:
        while not should_stop():
            cluster.tick()
            time.sleep(1.0)
    finally:
        server.stop()
        db.close()
