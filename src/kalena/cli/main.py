"""The ``kalena`` command: a thin registry of sub-commands, one module per sub-command.

Each sub-command lives in its own module under ``kalena.cli`` and exposes a Typer ``app`` (or one
command function); this file only names them (``kalena ir ...`` is :mod:`kalena.cli.ir`). A
sub-command's module is imported only when it runs (or a help page lists it): ``kalena status``
does not load the simulator, nor ``kalena k8s scheduler`` FastAPI.
"""

from __future__ import annotations

import importlib
from typing import Annotated, Any

import typer
from typer.core import TyperGroup

from kalena import __version__

#: name -> (module, attribute): a Typer app (a group of commands) or a command function
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "ir": ("kalena.cli.ir", "app"),
    "simulate": ("kalena.cli.simulate", "simulate"),
    "pack": ("kalena.cli.pack", "command"),
    "compact": ("kalena.cli.compact", "command"),
    "sweep": ("kalena.cli.sweep", "app"),
    "calibrate": ("kalena.cli.calibrate", "calibrate"),
    "agent": ("kalena.cli.agent", "app"),
    "deployable": ("kalena.cli.deployable", "command"),
    "submit": ("kalena.cli.jobs", "submit"),
    "jobs": ("kalena.cli.jobs", "jobs"),
    "status": ("kalena.cli.jobs", "status"),
    "job": ("kalena.cli.jobs", "job_app"),
    "docker": ("kalena.cli.docker", "app"),
    "k8s": ("kalena.cli.k8s", "app"),
    "archive": ("kalena.cli.archive", "app"),
    "recommend": ("kalena.cli.recommend", "recommend"),
    "report": ("kalena.cli.report", "report"),
    "replay": ("kalena.cli.replay", "replay_command"),
}

#: The key of the root context's ``meta`` (shared by every nested context) holding the arguments
#: the root parsed: the command line a record names (``kalena.cli.screen.command_line``), right
#: also in-process, where ``sys.argv`` is the test runner's.
ARGV_META = "kalena.argv"


class _LazyGroup(TyperGroup):
    """The root group: each sub-command built from its module the first time it is asked for."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._built: dict[str, Any] = {}

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        ctx.meta[ARGV_META] = list(args)
        return super().parse_args(ctx, args)

    def list_commands(self, ctx: Any) -> list[str]:
        return [*super().list_commands(ctx), *SUBCOMMANDS]

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        if cmd_name not in SUBCOMMANDS:
            return super().get_command(ctx, cmd_name)
        if cmd_name not in self._built:
            module, attr = SUBCOMMANDS[cmd_name]
            obj = getattr(importlib.import_module(module), attr)
            if isinstance(obj, typer.Typer):
                cmd = typer.main.get_group(obj)
            else:  # one function: a Typer of its own, so its options are read as Typer reads them
                one = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
                one.command(cmd_name)(obj)
                cmd = typer.main.get_command(one)
            cmd.name = cmd_name
            self._built[cmd_name] = cmd
        return self._built[cmd_name]


app = typer.Typer(
    name="kalena",
    help="Harvest reserved-but-idle cluster capacity without endangering production.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    cls=_LazyGroup,
)


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
