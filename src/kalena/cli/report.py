"""``kalena report RUN_DIR``: one self-contained HTML page of a run folder's figures.

Reads whatever the folder holds of the files the evaluation commands write there (``kalena
simulate --out``: ``report.json`` and its plots; ``kalena compact --out``; ``kalena sweep pareto
--out``; ``kalena calibrate --out``; they share a folder without their names colliding) and writes
``RUN_DIR/report.html`` (or ``--out FILE``): a section per kind of figure present (the slack
views, the arms side by side, the compaction figure in the style of Borg's Fig. 10, the Pareto
curve, the safety curve), each figure captioned with the command its JSON records, and each JSON's
key figures as small tables. The page is one file that renders offline: inline CSS, every PNG a
base64 ``data:`` URI, no script and no other resource. Every text taken from a file is escaped.

Exit codes: 0 written; 2 bad input (a folder with none of those files, a JSON that does not parse
or is not an object, a PNG that is not one, an unwritable ``--out``), one line naming the file.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from html import escape
from pathlib import Path
from typing import Annotated, Any

import typer

from kalena import __version__
from kalena.cli import calibrate, compact, replay, sweep
from kalena.cli.screen import bad_input, table_console
from kalena.ir.write import write_text_atomic
from kalena.sim.report import ACCURACY_PLOT, COMPARE_PLOT, REPORT_FILE, SLACK_CLUSTER_PLOT, SLACK_NODE_PLOT

REPORT_HTML = "report.html"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
#: How deep a generic key/value table nests objects before it shows the rest as JSON text.
MAX_DEPTH = 3


@dataclass(frozen=True, slots=True)
class Kind:
    """One section of the page: its figures (file, what it shows) and the JSON that records them."""

    anchor: str
    title: str
    record: str
    plots: tuple[tuple[str, str], ...]
    intro: str
    tables: Callable[[dict[str, Any]], str]


# Formatting: every value from a file goes through _cell (escaped); no arithmetic on file values,
# so an odd record makes an odd cell, never a traceback.


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if value.is_integer() and abs(value) < 1e15:  # a count JSON wrote as a float (a p90 of 143)
            return f"{int(value):,}"
        return f"{value:.4g}" if abs(value) < 10 else f"{value:,.1f}"
    if isinstance(value, str):
        return value
    try:
        text = json.dumps(value, separators=(", ", ": "))
    except RecursionError:
        return "(nested too deeply to show)"
    return text if len(text) <= 300 else text[:297] + "..."


def _cell(value: Any) -> str:
    return escape(_fmt(value))


def _get(record: Any, path: str) -> Any:
    """``record[a][b]`` for ``path`` ``"a.b"``; None where a step is missing or not an object."""
    for part in path.split("."):
        record = record.get(part) if isinstance(record, dict) else None
    return record


def _table(header: list[str], rows: list[list[str]]) -> str:
    """A table of already escaped cells."""
    head = "".join(f"<th>{h}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _key_values(record: Mapping[str, Any], keys: list[str] | None = None, depth: int = 0) -> str:
    """A key/value table of ``keys`` (default: all of them, nested objects as nested tables)."""
    rows = []
    for key in record if keys is None else keys:
        value = _get(record, key) if keys is not None else record[key]
        if keys is not None and value is None:
            continue  # a headline key this record does not have (an older or another arm's)
        if isinstance(value, dict) and value and depth < MAX_DEPTH:
            shown = _key_values(value, depth=depth + 1)
        else:
            shown = _cell(value)
        rows.append([f"<code>{escape(key)}</code>", shown])
    return _table(["key", "value"], rows) if rows else ""


# The key figures of each record.

#: report.json's headline keys (docs/report.md defines each).
HEADLINE = [
    "arm",
    "seed",
    "estimator",
    "simulated_seconds",
    "cluster.nodes",
    "cluster.active_nodes",
    "cluster.production_workloads",
    "comparison.work_enabled_by_reclamation_fraction",
    "task_reclaimed_work_fraction",
    "reclaimed_work_fraction",
    "reclaimed_cpu_core_hours",
    "batch_cpu_core_hours",
    "production_cpu_core_hours",
    "batch_tasks_completed",
    "evictions_total",
    "production_oom_kills",
    "production_evictions",
    "production_unmet_cpu_core_seconds",
    "production_interference_cpu_core_seconds",
    "production_above_reservation_fraction",
    "restoration_violations",
]
#: The rows of the arms side by side: the work and the SLO proxy (issue 13).
ARM_ROWS = [
    "batch_cpu_core_hours",
    "reclaimed_cpu_core_hours",
    "batch_tasks_completed",
    "evictions_total",
    "production_oom_kills",
    "production_evictions",
    "production_unmet_cpu_core_seconds",
    "production_interference_cpu_core_seconds",
    "production_above_reservation_fraction",
    "restoration_violations",
]
#: report.json's arms under ``--compare``: (label, where in the record; "" is the record itself).
ARMS = (("reclaim on", ""), ("reclaim off", "no_reclaim"), ("baseline", "baseline"))


def _slack_tables(record: dict[str, Any]) -> str:
    return _key_values(record, HEADLINE)


def _arms_tables(record: dict[str, Any]) -> str:
    arms = [(label, record if not key else record.get(key)) for label, key in ARMS]
    arms = [(label, r) for label, r in arms if isinstance(r, dict)]
    if len(arms) < 2:
        return ""
    rows = [[f"<code>{escape(k)}</code>", *(_cell(_get(r, k)) for _, r in arms)] for k in ARM_ROWS]
    out = _table(["key", *(escape(label) for label, _ in arms)], rows)
    comparison = record.get("comparison")
    if isinstance(comparison, dict):
        out += _key_values(comparison)
    return out


def _compaction_tables(record: dict[str, Any]) -> str:
    rows = []
    for name, label in compact.ARM_LABELS.items():
        arm = record.get(name)
        if isinstance(arm, dict):
            trials = arm.get("trials")
            rows.append(
                [
                    escape(label),
                    _cell(arm.get("p90")),
                    _cell(arm.get("min")),
                    _cell(arm.get("max")),
                    _cell(len(trials) if isinstance(trials, list) else None),
                ]
            )
    out = _table(["arm", "nodes needed, p90", "min", "max", "trials"], rows) if rows else ""
    out += _key_values(
        record,
        [
            "extra_nodes_without_reclamation",
            "nodes",
            "workloads",
            "blueprint_active_nodes",
            "kuberina_paper.full_packing",
            "kuberina_paper.pareto",
            "pending_fraction",
            "checkpoint.time_h",
            "checkpoint.batch_pods",
            "checkpoint.reserved_share",
        ],
    )
    validation = record.get("validation")
    if validation is not None:  # the day simulated on the compacted cluster: shown as it comes
        shown = _key_values(validation) if isinstance(validation, dict) and validation else _cell(validation)
        out += f"<h3>Validation</h3>{shown}"
    return out


def _pareto_tables(record: dict[str, Any]) -> str:
    out = _key_values(record, ["optimum", "max_unmet", "hours", "seed"])
    points, best = record.get("points"), record.get("optimum")
    if isinstance(points, list):
        cols = ["x", "active_nodes", "pending", "useful_cpu_core_hours", "unmet_share", "meets_slo"]
        rows = [
            [_cell(_get(p, c)) for c in cols]
            + ["optimum" if best is not None and _get(p, "x") == best else ""]
            for p in points
        ]
        out += _table([*cols, ""], rows)
    return out


def _safety_tables(record: dict[str, Any]) -> str:
    out = _key_values(record, ["knee.margin", "knee.half_life_s", "hours", "seeds", "date"])
    settings = record.get("settings")
    knee = record.get("knee")
    if isinstance(settings, list):
        cols = ["margin", "half_life_s", "reclaimed_cpu_core_hours", "disruptions_per_hour",
                "batch_cpu_core_hours", "production_unmet_cpu_core_seconds"]  # fmt: skip
        rows = []
        for s in settings:
            is_knee = isinstance(knee, dict) and all(
                _get(s, k) == knee.get(k) for k in ("margin", "half_life_s")
            )
            rows.append([_cell(_get(s, c)) for c in cols] + ["knee" if is_knee else ""])
        out += _table([*cols, ""], rows)
    return out


def _trace_tables(record: dict[str, Any]) -> str:
    out = _key_values(
        record,
        [
            "source",
            "horizon_s",
            "machines",
            "machine_cores",
            "tasks",
            "production_tasks",
            "batch_tasks",
            "jobs",
            "usage_samples",
            "production_cpu_usage_over_request",
            "production_ram_usage_over_request",
            "batch_cpu_usage_over_request",
            "batch_ram_usage_over_request",
            "replayed.nodes",
            "replayed.production_pods",
            "replayed.batch_pods",
        ],
    )
    for key, title in (("notes", "What the reader normalised or left out"), ("replay_notes", "The replay")):
        notes = record.get(key)
        if isinstance(notes, list) and notes:
            out += f"<h3>{escape(title)}</h3><ul>" + "".join(f"<li>{_cell(n)}</li>" for n in notes) + "</ul>"
    return out


def _seeds_tables(record: dict[str, Any]) -> str:
    out = _key_values(record, ["hours", "seeds", "drop_empty_nodes"])
    summary = record.get("summary")
    if not isinstance(summary, dict):
        return out
    rows = []
    for load, s in summary.items():
        for key, label in (
            ("work_enabled_by_reclamation", "(a) work enabled vs the baseline"),
            ("task_level", "(b) task-level"),
            ("per_node_upper_bound", "(c) per-node upper bound"),
        ):
            x = _get(s, key)
            cells = (
                [_cell(_get(x, k)) for k in ("mean", "lo", "hi", "n")] if isinstance(x, dict) else [""] * 4
            )
            rows.append([_cell(f"x{load}"), escape(label), *cells])
    out += _table(["batch load", "figure", "mean", "95 % low", "95 % high", "seeds"], rows)
    return out


KINDS = (
    Kind(
        "trace",
        "The trace replayed",
        replay.TRACE_FILE,
        (),
        "A public cluster trace read into Kalena's units and replayed (kalena replay): the reader's "
        "figures, and every normalisation it applied and every row it left out.",
        _trace_tables,
    ),
    Kind(
        "slack",
        "The slack views",
        REPORT_FILE,
        (
            (SLACK_CLUSTER_PLOT, "the cluster's cpu over the run: capacity, requests, reservations, usage"),
            (SLACK_NODE_PLOT, "the same on the representative node"),
            (ACCURACY_PLOT, "reservation accuracy: CDFs of reservation and usage over request"),
        ),
        "Borg's Fig. 12 view: the gap between the sum of requests and the sum of reservations is what "
        "reclamation gives batch.",
        _slack_tables,
    ),
    Kind(
        "arms",
        "The arms side by side",
        REPORT_FILE,
        ((COMPARE_PLOT, "batch cpu in use and batch work done, per arm"),),
        "The same inputs and seed with reclamation on, off (Kalena's policy, reservations at requests) "
        "and the baseline (no Kalena).",
        _arms_tables,
    ),
    Kind(
        "seeds",
        "The arms over seeds",
        sweep.SEEDS_FILE,
        (),
        "The three arms at every seed and batch load (kalena sweep seeds): the mean and a 95 % "
        "bootstrap interval over the seeds of what reclamation makes possible.",
        _seeds_tables,
    ),
    Kind(
        "compaction",
        "Compaction, in the style of Borg's Fig. 10",
        compact.RECORD_FILE,
        ((compact.PLOT_FILE, "nodes needed per arm: p90 of the trials, min-max bars"),),
        "How few nodes the workload still fits on: production alone, and with a simulated day's batch "
        "with reclamation on and off; the difference is the nodes reclamation saves.",
        _compaction_tables,
    ),
    Kind(
        "pareto",
        "The Pareto curve",
        sweep.RECORD_FILE,
        ((sweep.PLOT_FILE, "useful work against the planner's capacity cap"),),
        "How full the planner should pack: the cap with the most useful work within the SLO.",
        _pareto_tables,
    ),
    Kind(
        "safety",
        "The safety curve",
        calibrate.RECORD_FILE,
        ((calibrate.PLOT_FILE, "reclaimed capacity against disruptions, per estimator setting"),),
        "The calibration protocol: each setting's reclaimed cpu against its evictions and kernel kills; "
        "its knee is the setting --write-defaults ships.",
        _safety_tables,
    ),
)
#: Every file the page reads, in the order the bad-input line names them.
KNOWN_FILES = tuple(dict.fromkeys(f for k in KINDS for f in (k.record, *(p for p, _ in k.plots))))


# Reading the folder.


def _read_record(path: Path, present: set[str]) -> dict[str, Any] | None:
    """The JSON object in ``path``, None if the folder has none; exit 2 naming a bad one."""
    if path.name not in present:
        return None
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise bad_input([f"{path}: cannot read: {e.strerror or e}"]) from None
    except UnicodeDecodeError as e:
        raise bad_input([f"{path}: not UTF-8 text: {e.reason} (byte {e.start})"]) from None
    except json.JSONDecodeError as e:
        raise bad_input([f"{path}: not JSON: {e.msg} (line {e.lineno}, column {e.colno})"]) from None
    except ValueError as e:  # JSON, but beyond what Python reads (an integer of 5,000 digits)
        raise bad_input([f"{path}: not JSON Kalena reads: {e}"]) from None
    except RecursionError:
        raise bad_input([f"{path}: not JSON Kalena reads: nested too deeply"]) from None
    if not isinstance(record, dict):
        raise bad_input([f"{path}: expected a JSON object (value: a {type(record).__name__})"])
    return record


def _read_png(path: Path, present: set[str]) -> str | None:
    """``path`` as a ``data:`` URI, None if the folder has none; exit 2 if it is not a PNG."""
    if path.name not in present:
        return None
    try:
        data = path.read_bytes()
    except OSError as e:
        raise bad_input([f"{path}: cannot read: {e.strerror or e}"]) from None
    if not data.startswith(PNG_SIGNATURE):
        raise bad_input([f"{path}: not a PNG image (value: it starts with {data[:8]!r})"])
    return "data:image/png;base64," + base64.b64encode(data).decode("ascii")


# The page.

CSS = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1200px; padding: 0 1em;
       color: #222; line-height: 1.45; }
h1 { margin-bottom: 0.2em; }
h2 { border-bottom: 1px solid #ccc; padding-bottom: 0.2em; margin-top: 2em; }
nav a { margin-right: 1em; }
figure { margin: 1.2em 0; }
figure img { max-width: 100%; height: auto; border: 1px solid #ddd; }
figcaption { font-size: 0.9em; color: #444; }
code { background: #f3f3f3; padding: 0.1em 0.3em; border-radius: 3px; font-size: 0.92em; }
pre { background: #f3f3f3; padding: 0.5em 0.8em; overflow-x: auto; white-space: pre-wrap; }
table { border-collapse: collapse; margin: 0.8em 0; font-size: 0.9em; }
th, td { border: 1px solid #ddd; padding: 0.25em 0.6em; text-align: left; vertical-align: top; }
td table { margin: 0; }
th { background: #f7f7f7; }
.note { color: #666; font-style: italic; }
"""


def _command(kind: Kind, record: dict[str, Any] | None) -> str:
    """The caption's line on what made a figure (escaped)."""
    if record is None:
        return (
            f'<span class="note">the folder has no {escape(kind.record)}: the command is not recorded</span>'
        )
    command = record.get("command")
    if not isinstance(command, str) or not command:
        return f'<span class="note">{escape(kind.record)} does not record the command that made it</span>'
    return f'made by <pre class="command"><code>{escape(command)}</code></pre>'


def _section(kind: Kind, record: dict[str, Any] | None, images: dict[str, str]) -> str | None:
    plots = [(name, what) for name, what in kind.plots if name in images]
    tables = kind.tables(record) if record is not None else ""
    if not plots and not tables:
        return None
    parts = [f'<section id="{kind.anchor}"><h2>{escape(kind.title)}</h2><p>{escape(kind.intro)}</p>']
    for name, what in plots:
        parts.append(
            f'<figure><img src="{images[name]}" alt="{escape(name)}: {escape(what)}">'
            f"<figcaption><code>{escape(name)}</code>: {escape(what)}; {_command(kind, record)}"
            "</figcaption></figure>"
        )
    if tables:
        source = f"<div>From <code>{escape(kind.record)}</code>"
        if not plots:
            source += f"; {_command(kind, record)}"
        parts.append(source + "</div>" + tables)
    parts.append("</section>")
    return "".join(parts)


def render(folder: Path) -> tuple[str, list[str]]:
    """The page of ``folder`` and the titles of its sections; exit 2 on a bad file, or on a folder
    with none of ``KNOWN_FILES``."""
    try:  # the names only: a file that cannot be read is said when it is read
        present = {p.name for p in folder.iterdir()} & set(KNOWN_FILES)
    except OSError as e:
        raise bad_input([f"{folder}: cannot read the folder: {e.strerror or e}"]) from None
    if not present:
        raise bad_input(
            [f"{folder}: none of the files kalena report reads is there ({', '.join(KNOWN_FILES)})"]
        )
    records = {name: _read_record(folder / name, present) for name in dict.fromkeys(k.record for k in KINDS)}
    images = {
        name: uri
        for name, uri in ((p, _read_png(folder / p, present)) for k in KINDS for p, _ in k.plots)
        if uri
    }
    sections = [(k, _section(k, records[k.record], images)) for k in KINDS]
    shown = [(k, html) for k, html in sections if html is not None]
    nav = " ".join(f'<a href="#{k.anchor}">{escape(k.title)}</a>' for k, _ in shown)
    found = ", ".join(f"<code>{escape(n)}</code>" for n in KNOWN_FILES if n in present)
    page = (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        '<link rel="icon" href="data:,">'  # no favicon request: the page loads nothing else
        f"<title>Kalena report: {escape(folder.name or str(folder))}</title><style>{CSS}</style></head>\n"
        f"<body><header><h1>Kalena report</h1><p>Folder <code>{escape(str(folder))}</code> "
        f"(kalena {escape(__version__)}); files read: {found}.</p><nav>{nav}</nav></header>\n"
        + ("\n".join(html for _, html in shown) or '<p class="note">The files hold nothing to show.</p>')
        + "\n</body></html>\n"
    )
    return page, [k.title for k, _ in shown]


def report(
    run_dir: Annotated[
        Path,
        typer.Argument(
            metavar="RUN_DIR",
            help="The folder the evaluation commands wrote into (simulate, compact, sweep pareto, "
            "calibrate --out).",
            show_default=False,
        ),
    ],
    out: Annotated[
        Path | None,
        typer.Option(help="The HTML file to write.", show_default="RUN_DIR/report.html"),
    ] = None,
) -> None:
    """Write one self-contained HTML page of a run folder: its figures, each with the command that
    made it, and its records' key figures."""
    if not run_dir.is_dir():
        raise bad_input([f"{run_dir}: not a folder (RUN_DIR: where the evaluation commands wrote)"])
    target = out if out is not None else run_dir / REPORT_HTML
    if target.is_dir():
        raise bad_input([f"--out: a folder; give the HTML file's name (value: {str(target)!r})"])
    page, titles = render(run_dir)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(target, page)
    except OSError as e:
        raise bad_input([f"{target}: cannot write the report: {e.strerror or e}"]) from None
    table_console().print(f"wrote {target} ({'; '.join(titles)})")
