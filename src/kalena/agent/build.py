"""Wiring: one function that builds a ready-to-start :class:`~kalena.agent.loop.Agent`.

State folder layout (``--state-dir``)::

    state.json     the crash-safe state file (:mod:`.state`)
    actions.jsonl  the action log (:mod:`.actionlog`), including every cgroup write
    inbox/         batch submissions (:mod:`.runtime`)
    jobs/          batch runs' output

or, with a store (``store_path``; the Docker runtime's ``<state-dir>/kalena.db``), all of the
state, the action log, the queue, the jobs' history and the series in that one SQLite database
(:mod:`.dbstate`, :mod:`kalena.store`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from kalena.agent.actionlog import ActionLog
from kalena.agent.archiving import ArchiveTap
from kalena.agent.cadvisor import CadvisorClient, CadvisorTelemetry
from kalena.agent.cgroupfs import FsCgroupReader
from kalena.agent.config import AgentConfig
from kalena.agent.dbstate import DbActionLog, DbStateStore, DbSubmissions
from kalena.agent.declaration import Declaration
from kalena.agent.layout import BATCH_PARENT, CgroupLayout, CgroupTree, default_root, detect
from kalena.agent.loop import Agent, scope_of
from kalena.agent.notify import Notifier
from kalena.agent.ports import (
    DeclarationSource,
    Disruptor,
    PlacedSource,
    Runtime,
    StatePort,
    SubmissionSource,
)
from kalena.agent.runtime import ProcessRuntime
from kalena.agent.state import StateStore
from kalena.agent.telemetry import CgroupfsTelemetry, TelemetrySource
from kalena.agent.writer import CgroupWriter, ManagedScope, WriteRecord
from kalena.archive import Archive
from kalena.store import Store


def cgroup_tree(cgroup_root: str = "auto", layout: CgroupLayout | None = None) -> CgroupTree:
    """Kalena's cgroup tree on this host (``layout`` detected unless given); ``"auto"`` is
    :func:`~kalena.agent.layout.default_root` for the layout."""
    layout = layout or detect()
    return CgroupTree(layout, default_root(layout) if cgroup_root == "auto" else cgroup_root)


def purge_host(declaration: Declaration, cgroup_root: str = "auto") -> tuple[CgroupTree, bool]:
    """Undo an agent's runs on this host: SIGKILL every batch run, remove the batch cgroups, then
    Kalena's root where nothing else lives under it. Production and DaemonSet cgroups are outside
    what it may touch (the declaration's scope). Returns the tree and whether every batch process
    was gone within the writer's bound."""
    tree = cgroup_tree(cgroup_root)
    writer = CgroupWriter(tree, scope_of(declaration))
    if not writer.purge(BATCH_PARENT, "agent purge"):
        return tree, False
    writer.remove_if_empty("", "agent purge")
    return tree, True


#: Makes the agent's writer: ``(tree, audit, clock) -> writer`` (a shell's own writer, such as the
#: Docker runtime's, which sends production caps through the Engine API).
Audit = Callable[[WriteRecord], None]
WriterFactory = Callable[[CgroupTree, Audit | None, Callable[[], float]], CgroupWriter]
#: Makes the agent's runtime: ``(writer, reader, log, state_dir) -> runtime``.
RuntimeFactory = Callable[[CgroupWriter, FsCgroupReader, ActionLog, Path], Runtime]


def _process_runtime(
    writer: CgroupWriter, reader: FsCgroupReader, _log: ActionLog, state_dir: Path
) -> Runtime:
    return ProcessRuntime(writer, reader, state_dir / "jobs")


def build_agent(
    declaration: Declaration,
    state_dir: Path,
    *,
    config: AgentConfig | None = None,
    cgroup_root: str = "auto",
    layout: CgroupLayout | None = None,
    cadvisor_url: str | None = None,
    cadvisor_api: str = "v2.0",
    clock: Callable[[], float] = time.time,
    declaration_path: Path | None = None,
    audit_writes: bool = True,
    tree: CgroupTree | None = None,
    writer: WriterFactory | None = None,
    runtime: RuntimeFactory = _process_runtime,
    declarations: DeclarationSource | None = None,
    node_memory: Callable[[], tuple[float | None, float | None]] | None = None,
    store_path: Path | None = None,
    archive_path: str | Path | None = None,
    wrap_submissions: Callable[[SubmissionSource | None, ActionLog], SubmissionSource | None] | None = None,
    wrap_telemetry: Callable[[TelemetrySource, ActionLog], TelemetrySource] | None = None,
    placed: PlacedSource | None = None,
    disruptor: Disruptor | None = None,
) -> Agent:
    """An agent for this host (``layout`` detected unless given) keeping its files in ``state_dir``.

    ``cgroup_root="auto"`` is :func:`~kalena.agent.layout.default_root` for the layout. A shell
    other than the process runtime passes its own ``tree``, ``writer``, ``runtime``,
    ``declarations`` and ``node_memory`` (the Docker runtime: :mod:`kalena.docker.agent`); an
    enforce-only agent (``config.admit = False``) its ``placed`` batch and, where evicting is the
    cluster's, its ``disruptor`` (Kubernetes: :mod:`kalena.k8s.agent`). The usage archive goes
    into the store's file when there is a store, else to ``archive_path`` when given.
    """
    config = config or AgentConfig()
    tree = tree or cgroup_tree(cgroup_root, layout)
    state_dir.mkdir(parents=True, exist_ok=True)
    store: StatePort
    submissions: SubmissionSource | None = None
    if store_path is not None:
        db = Store(store_path)  # raises StoreError (not a store, a newer schema)
        saver = DbStateStore(db, declaration.node.name, clock)
        store, submissions = saver, DbSubmissions(saver)
        log: ActionLog = DbActionLog(db, declaration.node.name, saver)
    else:  # the state file; the usage archive, if asked for, in a file (or server) of its own
        tap = ArchiveTap(Archive(archive_path), declaration.node.name) if archive_path is not None else None
        store = StateStore(state_dir / "state.json", tap)
        log = ActionLog(state_dir / "actions.jsonl", tap)

    def audit(rec: WriteRecord) -> None:
        log.append("write", rec.time, **{k: v for k, v in rec.to_json().items() if k != "time"})

    reader = FsCgroupReader(tree)
    audit_fn = audit if audit_writes else None
    made = (
        writer(tree, audit_fn, clock)
        if writer is not None
        else CgroupWriter(tree, ManagedScope(), clock=clock, audit=audit_fn)
    )
    telemetry: TelemetrySource
    if cadvisor_url:
        home = tree.layout.home("memory") or tree.layout.hierarchies[0]
        telemetry = CadvisorTelemetry(
            CadvisorClient(cadvisor_url, api=cadvisor_api), lambda cg: tree.path(home, cg)
        )
    else:
        telemetry = CgroupfsTelemetry(reader)
    if wrap_telemetry is not None:  # a shell's fallback behind the files (Docker: the stats API)
        telemetry = wrap_telemetry(telemetry, log)
    if wrap_submissions is not None:  # a shell's own source around the queue (Docker: adoption)
        submissions = wrap_submissions(submissions, log)
    return Agent(
        declaration,
        config,
        tree=tree,
        reader=reader,
        writer=made,
        telemetry=telemetry,
        notifier=Notifier(clock),
        store=store,
        log=log,
        runtime=runtime(made, reader, log, state_dir),
        inbox=state_dir / "inbox" if store_path is None and submissions is None else None,
        submissions=submissions,
        clock=clock,
        declaration_path=declaration_path,
        declarations=declarations,
        node_memory=node_memory,
        placed=placed,
        disruptor=disruptor,
    )
