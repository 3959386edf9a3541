"""``kalena replay``: a public cluster trace through the simulator and the real policy core.

Reads a trace folder as released (Google 2011, Google 2019, Alibaba 2017, Alibaba 2018:
``kalena.traces``), turns it into Kuberina IR documents with a blueprint by the packer, and
simulates the window with the trace's own usage and batch arrivals (``kalena.traces.convert``).
Writes to ``--out`` the three IR documents, ``trace.json`` (the reader's figures and every note on
what was normalised or left out), ``report.json`` and the plots, as ``kalena simulate`` does.

Exit codes: 0 done; 1 the run broke the restoration invariant (its figures are invalid); 2 bad
input (a trace file that cannot be read: file, line, column and value), a bad option or an
unwritable output folder.
"""

from __future__ import annotations

import json
import math
import sys
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from kalena.cli.screen import bad_input, command_line, table_console
from kalena.cli.simulate import (
    ARM_LABELS,
    CompareWorkersOpt,
    _check_out,
    _headline,
    _play,
    _simulation,
    _table,
    beside,
    exit_if_invalid,
    other_arms,
    write_outputs,
)
from kalena.ir.write import dump_document
from kalena.traces.model import Scale, Trace, TraceError

TRACE_FILE = "trace.json"


class Format(StrEnum):
    google_2011 = "google-2011"
    google_2019 = "google-2019"
    alibaba_2017 = "alibaba-2017"
    alibaba_2018 = "alibaba-2018"


def read_trace(
    fmt: Format,
    root: Path,
    *,
    machines: int | None,
    hours: float | None,
    cores: float | None,
    gib: float | None,
    cell: str,
) -> Trace:
    """The trace in ``root`` read by its format's reader (its default scale, with what is given)."""
    if fmt is Format.google_2011:
        from kalena.traces import google2011 as reader
    elif fmt is Format.google_2019:
        from kalena.traces import google2019 as reader  # type: ignore[no-redef]
    elif fmt is Format.alibaba_2017:
        from kalena.traces import alibaba2017 as reader  # type: ignore[no-redef]
    else:
        from kalena.traces import alibaba2018 as reader  # type: ignore[no-redef]
    scale = reader.DEFAULT_SCALE
    scale = Scale(cores=scale.cores if cores is None else cores, gib=scale.gib if gib is None else gib)
    if fmt is Format.google_2019:
        return reader.read(root, scale=scale, machines=machines, hours=hours, cell=cell)  # type: ignore[call-arg]
    return reader.read(root, scale=scale, machines=machines, hours=hours)


def _json_safe(value: Any) -> Any:
    """``value`` with every NaN or infinite float as null (a tier without usage has no ratio):
    ``json.dumps`` would write ``NaN``, which is not JSON."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    return value


def _positive(value: float | None) -> float | None:
    if value is not None and not (math.isfinite(value) and value > 0):
        raise typer.BadParameter(f"{value} is not a finite number > 0")
    return value


def replay_command(
    fmt: Annotated[Format, typer.Argument(metavar="FORMAT", help="The trace's format.", show_default=False)],
    root: Annotated[
        Path,
        typer.Argument(
            metavar="TRACE_DIR", help="The trace folder, as released (its tables' files).", show_default=False
        ),
    ],
    machines: Annotated[
        int | None,
        typer.Option(help="Replay at most this many machines (a stable sample). Default: all.", min=1),
    ] = None,
    hours: Annotated[
        float | None,
        typer.Option(
            help="Replay this many hours from the trace's start. Default: all the data.", callback=_positive
        ),
    ] = None,
    cores_per_unit: Annotated[
        float | None,
        typer.Option(
            help="Cores of the trace's normalised unit (its largest machine). Default: the reader's.",
            callback=_positive,
        ),
    ] = None,
    gib_per_unit: Annotated[
        float | None,
        typer.Option(
            help="GiB of the trace's normalised memory unit. Default: the reader's.", callback=_positive
        ),
    ] = None,
    cell: Annotated[str, typer.Option(help="The cell of a Google 2019 trace (a-h).")] = "a",
    seed: Annotated[int, typer.Option(help="Seed of the run's random draws.", min=0)] = 0,
    no_reclaim: Annotated[
        bool, typer.Option("--no-reclaim", metavar="", help="Kalena's policy without reclamation.")
    ] = False,
    baseline: Annotated[
        bool,
        typer.Option("--baseline", metavar="", help="No Kalena: batch by requests, the kernel's sharing."),
    ] = False,
    compare: Annotated[
        bool, typer.Option("--compare", metavar="", help="Run all three arms side by side.")
    ] = False,
    workers: CompareWorkersOpt = 0,
    out: Annotated[
        Path, typer.Option(help="Folder for the IR documents, trace.json, report.json, plots.")
    ] = Path("out"),
    as_json: Annotated[
        bool, typer.Option("--json", metavar="", help="Print report.json to stdout and nothing else.")
    ] = False,
    plots: Annotated[bool, typer.Option(metavar="", help="Write the PNG plots.")] = True,
) -> None:
    """Replay a public cluster trace (Google 2011/2019, Alibaba 2017/2018) through the policy core."""
    from kalena.sim import SimConfig, build_report
    from kalena.sim.batch import recorded
    from kalena.sim.recorded import Samples
    from kalena.traces.convert import replay

    given = [
        o for o, on in (("--compare", compare), ("--no-reclaim", no_reclaim), ("--baseline", baseline)) if on
    ]
    if len(given) > 1:
        raise bad_input([f"{' and '.join(given)}: give one of them (--compare runs every arm)"])
    bad_out = _check_out(out)
    if bad_out is not None:
        raise bad_input([bad_out])
    status = Console(stderr=True).status(f"reading {root}", spinner="dots") if not as_json else None
    try:
        if status is not None:
            status.start()
        trace = read_trace(
            fmt, root, machines=machines, hours=hours, cores=cores_per_unit, gib=gib_per_unit, cell=cell
        )
        if not len(trace.machines):
            raise TraceError(f"{root}: no machine to replay ({'; '.join(trace.notes)})")
        if trace.horizon_s <= 0:  # derived data whose every time is before the window, say
            raise TraceError(f"{root}: the data spans no time after the window's start; give --hours")
        inputs = replay(trace, file_stem=fmt.value)
    except TraceError as e:
        raise bad_input([str(e)]) from None
    finally:
        if status is not None:
            status.stop()
    base = SimConfig(
        hours=trace.horizon_s / 3600.0, seed=seed, reclaim=not (no_reclaim or baseline), enforce=not baseline
    )
    production = Samples(inputs.production_samples, inputs.production_ratio)
    show = not as_json

    sim = _simulation(inputs.cluster, base, tasks=recorded(**inputs.batch), production=production)  # type: ignore[arg-type]
    with beside(compare, workers, inputs.cluster, base, inputs.batch, production) as ahead:
        _play(sim, ARM_LABELS[base.arm], show)
        report, arms, runs = other_arms(base, sim, build_report(sim), ahead, as_json)
    command = command_line()
    report["command"] = command
    figures: dict[str, Any] = {
        **trace.figures(),
        "notes": list(trace.notes),
        "replay_notes": list(inputs.notes),
    }
    figures["replayed"] = {
        "nodes": len(inputs.cluster.nodes),
        "production_pods": len(inputs.cluster.workloads),
        "batch_pods": len(inputs.batch["ids"]),  # type: ignore[arg-type]
        "production_pods_with_usage": len(inputs.production_samples),
    }
    figures["command"] = command
    extra: dict[str, str | bytes] = {TRACE_FILE: json.dumps(_json_safe(figures), indent=2) + "\n"}
    for doc in (inputs.infra, inputs.workloads, inputs.blueprint):
        extra[doc.file] = dump_document(doc)
    try:
        files = write_outputs(out, report, sim if plots else None, runs, extra)
    except OSError as e:
        raise bad_input([f"{out}: cannot write: {e.strerror or e}; nothing was written"]) from None
    if as_json:
        sys.stdout.write(json.dumps(report, indent=2) + "\n")
    else:
        console = table_console()
        console.print(_table(arms))
        for note in inputs.notes:
            console.print(f"note: {note}")
        console.print("wrote " + ", ".join(str(p) for p in files))
        console.print(_headline(report))
    exit_if_invalid(report)
