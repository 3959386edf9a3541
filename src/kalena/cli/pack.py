"""``kalena pack``: Infrastructure + Workloads -> a Blueprint, by the core's packer.

With ``--manifests``, the cluster is read from Kubernetes YAML (:mod:`kalena.manifests.cluster`):
its Nodes, DaemonSets (taken off each node's capacity) and workloads, unrolled to their replicas,
whose required pod affinity, anti-affinity, node affinity and hard spread the packer keeps.

Exit codes: 0 every workload placed (and the blueprint written with ``--out``); 1 some workloads
could not be placed under the hard rules (each printed with its reason; nothing written); 2 bad
input (one line per problem, ``FILE: KEYPATH: MESSAGE (value: VALUE)``) or an unwritable output.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Annotated

import numpy as np
import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from kalena.cli.screen import bad_input, table_console
from kalena.core.cluster import Cluster
from kalena.core.packing import PackResult, pack
from kalena.core.resources import CPU, RAM
from kalena.data import irina_paths
from kalena.ir import IRError, load_cluster
from kalena.ir.checks import soft_notes
from kalena.ir.document import BlueprintDoc, MetaDoc
from kalena.ir.write import dump_blueprint, write_text_atomic
from kalena.manifests.cluster import ManifestCluster, read_cluster

EXIT_PENDING = 1
#: soft-rule notes printed before the rest are only counted
SHOWN_NOTES = 20


def _mean_used(result: PackResult, cap: np.ndarray, holds: np.ndarray, d: int) -> float | None:
    """Mean over the active nodes (``holds``: those holding a pod) of requested / capacity on
    dimension ``d`` (Kuberina's figure); None where no active node has a finite capacity there
    (JSON has no NaN)."""
    c = cap[:, d]
    active = holds & np.isfinite(c) & (c > 0)
    return round(float((result.load[active, d] / c[active]).mean()), 4) if active.any() else None


def summary(
    cluster: Cluster, result: PackResult, notes: list[str], manifests: ManifestCluster | None = None
) -> dict[str, object]:
    """The figures a person (or ``--json``) reads; from Kubernetes manifests also the soft rules
    the packer does not weigh, by kind, and the nodes whose DaemonSets ask more than they have."""
    used_names = set(result.placement.values())
    holds = np.array([n.name in used_names for n in cluster.nodes], dtype=bool)
    cap = cluster.capacity_matrix()
    out: dict[str, object] = {
        "workloads": len(cluster.workloads),
        "placed": len(result.placement),
        "pending": [{"workload": w, "reason": why} for w, why in result.pending],
        "nodes": len(cluster.nodes),
        "active_nodes": result.active_nodes,
        "mean_cpu_on_active_nodes": _mean_used(result, cap, holds, CPU),
        "mean_ram_on_active_nodes": _mean_used(result, cap, holds, RAM),
        "soft_rules_broken": len(notes),
    }
    if manifests is not None:
        out.update(manifest_figures(manifests))
    return out


def manifest_figures(mc: ManifestCluster) -> dict[str, object]:
    """What a pack of Kubernetes manifests leaves out (``kalena pack`` and ``kalena compact``)."""
    return {
        "soft_rules_not_weighed": mc.unweighed(),
        "daemonsets_over_allocatable": [
            {"node": o.node, "dimension": o.dimension, "requested": o.requested, "allocatable": o.allocatable}
            for o in mc.daemonset_overflow
        ],
    }


def command(
    files: Annotated[
        list[Path] | None,
        typer.Argument(
            help="INFRA WORKLOADS (IR v1 or legacy); default: the bundled Irina benchmark.",
            show_default=False,
        ),
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option("--out", help="Write the blueprint here (IR v1), only when every workload is placed."),
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", metavar="", help="Print the figures as JSON instead of tables.")
    ] = False,
    manifests: Annotated[
        list[Path] | None,
        typer.Option(
            "--manifests",
            help="Kubernetes YAML (Nodes and workloads; a folder: its *.yaml) instead of INFRA WORKLOADS; "
            "repeatable. Its required affinity, anti-affinity and hard spread are kept.",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Pack production by its requests: Infrastructure + Workloads -> a Blueprint (hard rules kept,
    soft affinity reported)."""
    cluster, mc = read_input(files, manifests)
    result = pack(cluster)
    notes = soft_notes(dataclasses.replace(cluster, placement=result.placement))
    figures = summary(cluster, result, notes, mc)
    if as_json:
        typer.echo(json.dumps(figures, indent=2))
    else:
        _show(figures, notes, result, mc)
    if result.pending:
        if out is not None:
            typer.echo(f"{out}: not written: {len(result.pending)} workloads could not be placed", err=True)
        raise typer.Exit(EXIT_PENDING)
    if out is not None:
        doc = BlueprintDoc(
            str(out),
            legacy=False,
            solution=tuple((w.id, result.placement[w.id]) for w in cluster.workloads),
            metadata=MetaDoc(feasible=True),
        )
        try:
            write_text_atomic(out, dump_blueprint(doc))
        except OSError as e:
            raise bad_input([f"{out}: cannot write the blueprint: {e.strerror or e}"]) from None
        if not as_json:
            typer.echo(f"wrote {out}")


def read_input(
    files: list[Path] | None, manifests: list[Path] | None
) -> tuple[Cluster, ManifestCluster | None]:
    """The cluster to pack (INFRA WORKLOADS, the bundled Irina, or Kubernetes manifests) and, for
    manifests, what ties it back to them (what the packer leaves out is reported from it)."""
    if manifests:
        if files:
            raise bad_input(["pack: give INFRA WORKLOADS or --manifests, not both"])
        try:
            mc = read_cluster(manifests)
        except IRError as e:
            raise bad_input([p.render() for p in e.problems]) from None
        if not mc.cluster.nodes:
            raise bad_input([f"{', '.join(map(str, manifests))}: no Node object: the packer needs the nodes"])
        return mc.cluster, mc
    paths = list(files) if files else list(irina_paths())[:2]
    if len(paths) != 2:
        raise bad_input([f"pack: expected INFRA WORKLOADS (two files), got {len(paths)}"])
    try:
        return load_cluster(paths[0], paths[1]), None
    except IRError as e:
        raise bad_input([p.render() for p in e.problems]) from None


def _show(
    figures: dict[str, object], notes: list[str], result: PackResult, mc: ManifestCluster | None
) -> None:
    con = table_console()
    table = Table(title="Packed by requests", show_header=False, title_justify="left")
    table.add_column("what")
    table.add_column("value", justify="right")
    table.add_row("workloads placed", f"{figures['placed']:,} of {figures['workloads']:,}")
    table.add_row("active nodes", f"{figures['active_nodes']:,} of {figures['nodes']:,}")
    for dim in ("cpu", "ram"):
        mean = figures[f"mean_{dim}_on_active_nodes"]
        shown = f"{mean:.1%}" if isinstance(mean, float) else "n/a"
        table.add_row(f"mean {dim} requested on active nodes", shown)
    table.add_row("soft rules broken (affinity, antiAffinity)", f"{len(notes):,}")
    con.print(table)
    for line in notes[:SHOWN_NOTES]:
        con.print(f"note: {escape(line)}")
    if len(notes) > SHOWN_NOTES:
        con.print(f"note: and {len(notes) - SHOWN_NOTES:,} more soft rules broken")
    if mc is not None:
        show_manifest_notes(con, mc)
    for wid, why in result.pending:
        con.print(f"pending: {escape(wid)}: {escape(why)}")


def show_manifest_notes(con: Console, mc: ManifestCluster) -> None:
    """What the packer left out of the manifests, as note lines."""
    unweighed = mc.unweighed()
    if unweighed:
        parts = [
            f"{c['terms']:,} {kind} term{'s' if c['terms'] != 1 else ''} "
            f"({c['pod_types']:,} pod type{'s' if c['pod_types'] != 1 else ''})"
            for kind, c in unweighed.items()
        ]
        con.print(f"note: not weighed (the packer keeps Kubernetes' hard rules only): {', '.join(parts)}")
    over = mc.daemonset_overflow
    for o in over[:SHOWN_NOTES]:
        con.print(f"note: {escape(o.describe())}")
    if len(over) > SHOWN_NOTES:
        con.print(
            f"note: and {len(over) - SHOWN_NOTES:,} more nodes whose DaemonSets ask more than they have"
        )
