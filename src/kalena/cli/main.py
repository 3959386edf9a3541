"""The ``kalena`` command: a thin registry of sub-commands, one module per sub-command.

Each sub-command lives in its own module under ``kalena.cli`` and exposes a Typer ``app``;
this file only wires them together (``kalena ir ...`` is :mod:`kalena.cli.ir`).
"""

from __future__ import annotations

from typing import Annotated

import typer

from kalena import __version__
from kalena.cli import agent as agent_cli
from kalena.cli import deployable, docker, ir, jobs, k8s
from kalena.cli import simulate as simulate_cli

app = typer.Typer(
    name="kalena",
    help="Harvest reserved-but-idle cluster capacity without endangering production.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.add_typer(ir.app, name="ir")
app.command("simulate")(simulate_cli.simulate)
app.add_typer(agent_cli.app, name="agent")
app.command("deployable")(deployable.command)
app.command("submit")(jobs.submit)
app.command("jobs")(jobs.jobs)
app.command("status")(jobs.status)
app.add_typer(jobs.job_app, name="job")
app.add_typer(docker.app, name="docker")
app.add_typer(k8s.app, name="k8s")


def _version(value: bool) -> None:
    if value:
        typer.echo(f"kalena {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version", metavar="", callback=_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    """Kalena: reclamation, batch co-scheduling and deployability checks over Kuberina plans."""


def main() -> None:
    """Entry point of the ``kalena`` script (``pyproject.toml``)."""
    app()


if __name__ == "__main__":
    main()
