"""``kalena ir``: validate and convert Kuberina IR documents.

Exit codes: 0 valid / converted; 2 any problem in the input (one line per problem on
stderr, ``FILE: KEYPATH: MESSAGE (value: VALUE)``) or a file that cannot be written.
Never a traceback for a bad document.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import numpy as np
import typer
from rich.markup import escape
from rich.table import Table

from kalena.cli.screen import table_console
from kalena.core.cluster import Cluster
from kalena.core.resources import DIMS
from kalena.data import irina_paths
from kalena.ir.build import DocumentSet, check_set
from kalena.ir.checks import soft_notes, unconstrained_notes
from kalena.ir.convert import to_v1
from kalena.ir.document import BlueprintDoc, Document, InfraDoc, WorkloadsDoc
from kalena.ir.errors import DOCUMENT, IRError, Problem
from kalena.ir.load import parse_document, read_documents
from kalena.ir.write import dump_document, scalar, write_files_atomic

app = typer.Typer(
    help="Kuberina IR documents (Infrastructure, Workloads, Blueprint): validate and convert.",
    no_args_is_help=True,
)

EXIT_BAD_INPUT = 2
_UNITS = {"cpu": "cpu", "ram": "GiB ram", "gpu": "gpu", "storage": "GiB storage"}


def _fail(problems: tuple[Problem, ...] | list[Problem]) -> typer.Exit:
    for p in problems:
        typer.echo(p.render(), err=True)
    return typer.Exit(EXIT_BAD_INPUT)


def _qty(v: float, dim: str) -> str:
    unit = _UNITS.get(dim, f"MB/s {dim}")
    return f"{v:,.4g} {unit}" if v < 1000 else f"{v:,.0f} {unit}"


def _summary(doc: Document) -> str:
    if isinstance(doc, InfraDoc):
        return f"{len(doc.nodes):,} nodes, {len(doc.daemonsets):,} DaemonSets"
    if isinstance(doc, WorkloadsDoc):
        pods = sum(1 for _ in doc.pods())
        spaces = len({d.namespace for d in doc.declarations})
        return (
            f"{pods:,} pods from {len(doc.declarations):,} declarations in {spaces} namespaces, "
            f"{len(doc.resolved_groups)} gangs"
        )
    assert isinstance(doc, BlueprintDoc)
    return f"{len(doc.solution):,} placements on {doc.active_nodes():,} nodes"


def _deduction(cluster: Cluster) -> str:
    """Phase 0 per node: one figure when every node pays the same, else the range."""
    ded = cluster.phase0_deduction()
    if ded.size == 0:
        return "no nodes"
    parts = []
    for j, dim in enumerate(DIMS):
        lo, hi = float(ded[:, j].min()), float(ded[:, j].max())
        if hi > 0:
            parts.append(_qty(hi, dim) if lo == hi else f"{_qty(lo, dim)}..{_qty(hi, dim)}")
    same = bool(np.all(ded == ded[0]))
    where = f"on each of {len(cluster.nodes):,} nodes" if same else "per node (varies)"
    return (", ".join(parts) or "nothing") + f" {where}"


def _cluster_table(cluster: Cluster, placed: bool) -> Table:
    table = Table(title="Cluster", show_header=False, title_justify="left")
    table.add_column("figure", style="bold")
    table.add_column("value")
    table.add_row("Phase 0 deduction", _deduction(cluster))
    req = cluster.requests_matrix().sum(axis=0) if cluster.workloads else np.zeros(len(DIMS))
    table.add_row(
        "Requested", ", ".join(_qty(float(req[j]), d) for j, d in enumerate(DIMS) if req[j] > 0) or "nothing"
    )
    if placed:
        active = cluster.active_nodes()
        freed = len(cluster.nodes) - len(active)
        table.add_row("Active nodes", f"{len(active):,} / {len(cluster.nodes):,} ({freed:,} unused)")
        table.add_row("Mean CPU on active nodes", f"{100 * cluster.mean_active_utilisation('cpu'):.2f} %")
        table.add_row("Mean RAM on active nodes", f"{100 * cluster.mean_active_utilisation('ram'):.2f} %")
        table.add_row("Request ledger", "holds on every node and dimension")
    return table


#: Soft-rule notes printed by ``ir validate`` before the rest is summed up in one line.
MAX_NOTES = 20


@app.command()
def validate(
    files: Annotated[
        list[Path] | None,
        typer.Argument(
            help="IR files of any kind (default: the bundled Irina benchmark).", show_default=False
        ),
    ] = None,
) -> None:
    """Check documents against IR v1 (or the legacy shapes) and against each other.

    With one document of each kind, also report Phase 0, active nodes and mean CPU.
    """
    paths: list[Path] = list(files) if files else list(irina_paths())
    try:
        docs = read_documents(paths)
        docset = DocumentSet.of(docs)
        cluster, problems = check_set(docset)
    except IRError as e:
        raise _fail(e.problems) from None
    if problems:
        raise _fail(problems)
    con = table_console()
    table = Table(title="Kuberina IR documents", title_justify="left")
    for col in ("file", "kind", "shape", "contents"):
        table.add_column(col)
    for doc in docs:
        table.add_row(escape(Path(doc.file).name), doc.kind, "legacy" if doc.legacy else "v1", _summary(doc))
    con.print(table)
    if cluster is not None:
        con.print(_cluster_table(cluster, placed=docset.complete))
    for line in unconstrained_notes(docset.infra) if docset.infra is not None else []:
        con.print(f"note: {escape(docset.infra.file)}: {escape(line)}")  # type: ignore[union-attr]
    checked = [k for k, d in (("infra", docset.infra), ("workloads", docset.workloads)) if d is not None]
    if docset.blueprint is not None and checked:
        con.print(f"[green]valid[/green]: blueprint cross-checked against {' and '.join(checked)}")
        notes = soft_notes(cluster) if cluster is not None and docset.complete else []
        for line in notes[:MAX_NOTES]:
            con.print(f"note: {escape(line)}")
        if len(notes) > MAX_NOTES:
            con.print(
                f"note: ... and {len(notes) - MAX_NOTES:,} more soft-rule notes ({len(notes):,} in all)"
            )
    else:
        con.print("[green]valid[/green]")


def _outputs(docs: list[Document], out: Path) -> dict[Path, Document]:
    targets: dict[Path, Document] = {}
    problems = []
    for doc in docs:
        target = out / Path(doc.file).name
        if target in targets:
            problems.append(Problem(doc.file, DOCUMENT, f"two inputs would both be written to {target}"))
        elif target.resolve() == Path(doc.file).resolve():
            problems.append(Problem(doc.file, DOCUMENT, "the output would overwrite this input", str(target)))
        targets[target] = doc
    if problems:
        raise IRError(problems)
    return targets


@app.command()
def convert(
    files: Annotated[
        list[Path], typer.Argument(help="IR files to convert (any kinds, at most one of each).")
    ],
    to: Annotated[str, typer.Option("--to", help="Target version; only v1 exists.")],
    out: Annotated[Path, typer.Option("--out", help="Output folder (created if missing).")],
    rename_map: Annotated[
        Path | None,
        typer.Option("--rename-map", help="Also write the pod renames (old id: new id) to this YAML file."),
    ] = None,
) -> None:
    """Write each document as IR v1 into OUT, renaming pods only where v1 cannot keep the name."""
    if to != "v1":
        raise _fail([Problem("kalena ir convert", "--to", "only v1 is a conversion target", to)])
    con = table_console()
    try:
        docs = read_documents(files)
        docset = DocumentSet.of(docs)
        _, problems = check_set(docset)
        if problems:
            raise IRError(problems)
        conv = to_v1(docset.infra, docset.workloads, docset.blueprint)
        converted = {d.kind: d for d in (conv.infra, conv.workloads, conv.blueprint) if d is not None}
        texts = {target: dump_document(converted[doc.kind]) for target, doc in _outputs(docs, out).items()}
        # Read the output back before writing anything: a conversion bug must not reach disk.
        reread = [parse_document(text, str(target)) for target, text in texts.items()]
        _, problems = check_set(DocumentSet.of(reread))
        if problems:
            raise IRError(problems)
    except IRError as e:
        raise _fail(e.problems) from None
    files: dict[Path, str] = dict(texts)
    if rename_map is not None:
        lines = [f"{scalar(k)}: {scalar(v)}" for k, v in conv.renames.items()]
        files[rename_map] = "\n".join(lines) + "\n" if lines else "{}\n"
    created = not out.exists()
    try:
        if out.exists() and not out.is_dir():
            raise NotADirectoryError(20, "not a folder", str(out))
        out.mkdir(parents=True, exist_ok=True)
        write_files_atomic(files)  # all of them or none
    except OSError as e:
        if created and out.is_dir() and not any(out.iterdir()):
            out.rmdir()
        where = e.filename or out
        raise _fail(
            [Problem(str(where), DOCUMENT, f"cannot write: {e.strerror or e}; nothing was written")]
        ) from None
    for target in files:
        con.print(f"wrote {escape(str(target))}")
    con.print(f"{len(conv.renames):,} pods renamed (a legacy pod p became declaration p, pod p-0)")
    for note in conv.notes:
        con.print(f"note: {escape(note)}")
