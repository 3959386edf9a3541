"""Wiring the node agent for a Docker host (``kalena agent run --runtime docker``).

The agent is the same :class:`~kalena.agent.loop.Agent` as on any Linux host, with the Docker
implementations of its ports: the declaration from the engine's containers
(:class:`~kalena.docker.declarations.DockerDeclarations`), batch runs as containers
(:class:`~kalena.docker.runtime.DockerRuntime`), the writer that caps production through the
Engine API (:class:`~kalena.docker.enforcer.DockerEnforcer`), and the host's memory (production
containers live outside Kalena's root cgroup, so the root's working set is not the node's).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kalena.agent.actionlog import ActionLog
from kalena.agent.build import build_agent, cgroup_tree
from kalena.agent.cgroupfs import FsCgroupReader
from kalena.agent.config import AgentConfig
from kalena.agent.declaration import Declaration
from kalena.agent.layout import CgroupLayout, CgroupTree
from kalena.agent.loop import Agent
from kalena.agent.ports import SubmissionSource
from kalena.agent.telemetry import host_memory
from kalena.agent.writer import CgroupWriter, ManagedScope, WriteRecord
from kalena.docker.adoption import DockerAdoptions
from kalena.docker.cgroups import check_driver
from kalena.docker.cluster import ATTEMPT, PLACED_BY
from kalena.docker.declarations import DockerDeclarations
from kalena.docker.enforcer import DockerEnforcer
from kalena.docker.engine import DEFAULT_ENDPOINT, Engine, EventWatch, TlsFiles, connect
from kalena.docker.join import DaemonLink
from kalena.docker.runtime import DockerRuntime
from kalena.docker.stats import StatsFallback

#: Kalena's root on a Docker host: absolute, since ``--cgroup-parent`` is one path for every hierarchy.
DOCKER_ROOT = "/kalena"
#: The store's file in the agent's state folder.
STORE_FILE = "kalena.db"


def build_docker_agent(
    state_dir: Path,
    *,
    endpoint: str = DEFAULT_ENDPOINT,
    tls: TlsFiles | None = None,
    base: Declaration | None = None,
    config: AgentConfig | None = None,
    cgroup_root: str = DOCKER_ROOT,
    layout: CgroupLayout | None = None,
    clock: Callable[[], float] = time.time,
    watch_events: bool = True,
    relist_s: float = 30.0,
    store_path: Path | None = None,
    join: str | None = None,
    join_token: str | None = None,
    join_verify: Any = True,
) -> Agent:
    """An agent for the Docker engine at ``endpoint`` on this host (raises ``EngineError``,
    ``DriverError``, ``DeclarationError`` or ``StoreError`` with the reason; nothing is changed
    then). Its state, queue, history and action log are in the store at ``store_path`` (default
    ``<state_dir>/kalena.db``), where ``kalena submit`` queues jobs. ``join``: the URL of a cluster
    daemon to report to and take work from (:mod:`kalena.docker.join`), with its token."""
    engine = Engine(connect(endpoint, tls), endpoint)
    tree = cgroup_tree(cgroup_root, layout)
    check_driver(str(engine.info().get("CgroupDriver", "")), tree)
    holder: dict[str, Agent] = {}
    problems_log: list[tuple[str, ...]] = []

    def capped() -> dict[str, float]:
        agent = holder.get("agent")
        return dict(agent.state.production_originals) if agent is not None else {}

    def known() -> set[str]:  # the containers the agent's jobs were adopted from
        agent = holder.get("agent")
        jobs = agent.state.jobs.values() if agent is not None else ()
        return {j.adopted_from for j in jobs if j.adopted_from}

    adoptions = DockerAdoptions(None, engine, lambda: decls.adoptable, known, None, clock)
    decls = DockerDeclarations(
        engine,
        tree.layout,
        base=base,
        watch=EventWatch(engine) if watch_events else None,
        capped=capped,
        on_problems=problems_log.append,
        relist_s=relist_s,
        adopt=adoptions.accepts,
    )

    links: list[DaemonLink] = []

    def attempts() -> dict[str, str]:  # the daemon's jobs here, each with the attempt taken
        agent = holder.get("agent")
        jobs = agent.state.jobs.values() if agent is not None else ()
        return {j.name: (j.labels or {}).get(ATTEMPT, "") for j in jobs if PLACED_BY in (j.labels or {})}

    def wrap(inner: SubmissionSource | None, log: ActionLog) -> SubmissionSource | None:
        if join is not None:
            node = base.node.name if base is not None else str(engine.info().get("Name") or "docker-host")
            links.append(
                DaemonLink(
                    join,
                    node,
                    engine,
                    token=join_token,
                    inner=inner,
                    log=log,
                    clock=clock,
                    verify=join_verify,
                    known=attempts,
                )
            )
            inner = links[0]
        adoptions.inner, adoptions.log = inner, log
        return adoptions

    first = decls.build()  # raises: a first declaration that cannot apply starts nothing
    decls.current = first

    def make_writer(
        t: CgroupTree, audit: Callable[[WriteRecord], None] | None, clk: Callable[[], float]
    ) -> CgroupWriter:
        w = DockerEnforcer(t, ManagedScope(), clock=clk, audit=audit, engine=engine)
        w.containers_of = lambda: decls.containers
        return w

    def make_runtime(w: CgroupWriter, _r: FsCgroupReader, log: ActionLog, _dir: Path) -> DockerRuntime:
        def report(problems: tuple[str, ...]) -> None:
            log.append("label-problems", clock(), problems=list(problems))

        decls.on_problems = report
        for ps in problems_log:  # those of the first listing, before the log existed
            report(ps)
        return DockerRuntime(engine, w, tree, log)

    agent = build_agent(
        first,
        state_dir,
        config=config,
        clock=clock,
        tree=tree,
        writer=make_writer,
        runtime=make_runtime,
        declarations=decls,
        node_memory=host_memory,
        store_path=store_path or state_dir / STORE_FILE,
        wrap_submissions=wrap,
        wrap_telemetry=lambda inner, log: StatsFallback(inner, engine, lambda: decls.containers, log, clock),
    )
    holder["agent"] = agent
    for link in links:  # the report after each round: this host's view, the daemon's work back
        agent.after_step.append(link.report)
    return agent
