"""The console the commands print tables on, their progress bars and their bad-input exit."""

from __future__ import annotations

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

#: The exit code of bad input, in every command (docs/cli.md).
EXIT_BAD_INPUT = 2


def table_console() -> Console:
    """Standard output; 160 columns wide when piped, so each table row stays on one line for
    scripts and tests (a terminal keeps its own width)."""
    con = Console(highlight=False)
    return con if con.is_terminal else Console(highlight=False, width=160)


def progress_bar(label: str, quiet: bool = False) -> Progress:
    """A bar with a count and the time taken, on stderr (none when ``quiet``: a ``--json`` run),
    gone when done."""
    return Progress(
        TextColumn(label),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        transient=True,
        disable=quiet,
        console=Console(stderr=True),
    )


def bad_input(lines: list[str]) -> typer.Exit:
    """Print each problem on its own line on stderr; the exit to raise (code 2)."""
    for line in lines:
        typer.echo(line, err=True)
    return typer.Exit(EXIT_BAD_INPUT)
