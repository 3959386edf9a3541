"""The console the commands print tables on, their progress bars, their bad-input exit and the
command line their records name."""

from __future__ import annotations

import math
import shlex
from typing import Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

#: The exit code of bad input, in every command (docs/cli.md).
EXIT_BAD_INPUT = 2

#: Options that say where the files go or where the runs run, not what is computed: left out of
#: the command a record names, so that a record names no folder of the machine that made it, and
#: two runs into two folders, or on local workers and on a Dask cluster, record the same command
#: (their figures are the same).
WHERE_OPTIONS = ("--out", "--workers", "--scheduler")


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


def number_list(
    option: str,
    text: str,
    *,
    whole: bool = False,
    lo: float = -math.inf,
    hi: float = math.inf,
    lo_open: bool = False,
) -> tuple[float, ...]:
    """A comma-separated list of finite numbers (``whole``: integers) within ``lo`` (excluded with
    ``lo_open``) and ``hi``, none twice, in the order given; else exit 2 naming the option, the
    rule and the value (every list option of the sweeps)."""
    values: list[float] = []
    for part in text.split(","):
        try:
            v: float = int(part) if whole else float(part)
        except ValueError:
            what = "a whole number" if whole else "a number"
            raise bad_input([f"{option}: {part.strip()!r} is not {what} (value: {text!r})"]) from None
        if not (math.isfinite(v) and (v > lo if lo_open else v >= lo) and v <= hi):
            rule = f"in {lo:g}..{hi:g}" if math.isfinite(hi) else f"{'>' if lo_open else '>='} {lo:g}"
            raise bad_input([f"{option}: each must be {rule} (value: {part.strip()!r})"])
        values.append(v)
    if len(set(values)) != len(values):
        raise bad_input([f"{option}: a value is given twice (value: {text!r})"])
    return tuple(values)


def bad_input(lines: list[str]) -> typer.Exit:
    """Print each problem on its own line on stderr; the exit to raise (code 2)."""
    for line in lines:
        typer.echo(line, err=True)
    return typer.Exit(EXIT_BAD_INPUT)


def command_line(leave_out: tuple[str, ...] = WHERE_OPTIONS) -> str:
    """The running command as a shell line, ``kalena SUBCOMMAND ARGS`` (each argument quoted as a
    shell needs), without the options of ``leave_out`` and their values: what a JSON record's
    ``"command"`` says made it.

    The arguments are those the root command parsed (``kalena.cli.main`` keeps them in the
    context), so the line is the same whether ``kalena`` ran as a program or in-process, where
    ``sys.argv`` is the test runner's. A command invoked without that root is rebuilt from the
    parameters given on its command line (options by their first name, then the arguments).
    """
    from kalena.cli.main import ARGV_META

    ctx = _current_context()
    argv = ctx.meta.get(ARGV_META)
    if argv is None:
        argv = [*(ctx.command_path.split()[1:] or [ctx.command.name or ""]), *_given(ctx)]
    kept: list[str] = []
    skip = False
    for i, a in enumerate(argv):
        if skip:
            skip = False
        elif a == "--":  # the rest are arguments, never options
            kept.extend(argv[i:])
            break
        elif a in leave_out:
            skip = True  # and its value
        elif not a.startswith(tuple(f"{o}=" for o in leave_out)):
            kept.append(a)
    return shlex.join(["kalena", *kept])


def _current_context() -> Any:
    """The running command's context, from the click Typer runs on (its own copy in newer
    releases, the click package in older ones)."""
    try:
        from typer._click.globals import get_current_context
    except ImportError:
        from click import get_current_context
    return get_current_context()


def _given(ctx: Any) -> list[str]:
    """The options and arguments given on the command line, rebuilt from the parsed values."""
    options: list[str] = []
    arguments: list[str] = []
    for param in ctx.command.params:
        name = param.name or ""
        source = ctx.get_parameter_source(name)
        if source is None or source.name != "COMMANDLINE":
            continue
        value = ctx.params.get(name)
        values = list(value) if isinstance(value, list | tuple) else [value]
        if param.param_type_name == "argument":
            arguments.extend(str(v) for v in values)
        elif param.is_flag:
            flag = param.opts[0] if value or not param.secondary_opts else param.secondary_opts[0]
            options.append(flag)
        else:
            for v in values:
                options.extend([param.opts[0], str(getattr(v, "value", v))])
    return [*options, *(["--"] if any(a.startswith("-") for a in arguments) else []), *arguments]
