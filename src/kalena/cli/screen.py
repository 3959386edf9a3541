"""The console the commands print tables on."""

from __future__ import annotations

from rich.console import Console


def table_console() -> Console:
    """Standard output; 160 columns wide when piped, so each table row stays on one line for
    scripts and tests (a terminal keeps its own width)."""
    con = Console(highlight=False)
    return con if con.is_terminal else Console(highlight=False, width=160)
