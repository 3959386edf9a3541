"""``kalena docker serve``: Kalena on a Docker host, in one command: the node agent on the local
engine (``kalena agent run --runtime docker``) and the HTTP API over its store, on loopback by
default (``--listen``). Exit codes are the agent's: 0 stopped cleanly, 2 bad input, 3 the host
(its engine, cgroups or the API's address) cannot be used."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from kalena.api.serve import DEFAULT_LISTEN
from kalena.cli import agent as agent_cli
from kalena.docker.engine import DEFAULT_ENDPOINT

app = typer.Typer(help="Kalena on Docker hosts.", no_args_is_help=True)


@app.command()
def serve(
    state_dir: Annotated[
        Path, typer.Option("--state-dir", help="The agent's folder (its store: kalena.db).")
    ] = Path("/var/lib/kalena"),
    docker_host: Annotated[
        str, typer.Option("--docker-host", envvar="DOCKER_HOST", help="The engine (unix://, tcp://, ssh://).")
    ] = DEFAULT_ENDPOINT,
    declaration: Annotated[
        Path | None,
        typer.Option("--declaration", help="The node's name and capacity (default: the engine's)."),
    ] = None,
    listen: Annotated[
        str, typer.Option("--listen", help="The HTTP API: HOST:PORT or unix:PATH.")
    ] = DEFAULT_LISTEN,
    token_file: Annotated[
        Path | None, typer.Option("--token-file", help="The API's bearer token (needed off loopback).")
    ] = None,
    api_tls_cert: Annotated[Path | None, typer.Option("--api-tls-cert")] = None,
    api_tls_key: Annotated[Path | None, typer.Option("--api-tls-key")] = None,
    grace_period: Annotated[
        float, typer.Option("--grace-period", help="SIGTERM -> SIGKILL, seconds.")
    ] = 30.0,
    min_run_time: Annotated[float, typer.Option("--min-run-time", help="Batch exempt this long.")] = 120.0,
    duration: Annotated[
        float, typer.Option("--duration", help="Stop after this many seconds (0: never).")
    ] = 0.0,
) -> None:
    """Run the agent on the local engine and serve the API (submit, jobs, why, cancel, status, metrics)."""
    agent_cli.run(
        state_dir=state_dir,
        declaration=declaration,
        runtime="docker",
        docker_host=docker_host,
        listen=listen,
        token_file=token_file,
        api_tls_cert=api_tls_cert,
        api_tls_key=api_tls_key,
        grace_period=grace_period,
        min_run_time=min_run_time,
        duration=duration,
    )
