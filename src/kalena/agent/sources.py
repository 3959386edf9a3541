"""Arming the node's kernel notifications for one declaration, and re-arming late ones.

PSI triggers come from :func:`kalena.agent.signals.trigger_specs`; memory events are:

* cgroup v1: usage-threshold eventfds on the node (``policy.round.trigger_fraction`` of its memory
  limit, or of its ram capacity when no limit is declared) and on each production workload
  (at its own memory limit: the limit-breach override's fast path), plus the node's OOM
  notification;
* cgroup v2: ``memory.events`` of the node and of each production workload.

A source whose cgroup does not exist yet (an adopted workload started after the agent) is kept
pending and retried at every estimation tick, as are PSI specs that fell back to polling.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from functools import partial
from typing import Any

from kalena.agent.actionlog import ActionLog
from kalena.agent.config import AgentConfig
from kalena.agent.declaration import Declaration
from kalena.agent.layout import CgroupTree
from kalena.agent.memevents import EventfdSource, MemoryEventsSource
from kalena.agent.notify import AgentEvent, Notifier
from kalena.agent.psi import PsiSetup, arm
from kalena.agent.signals import trigger_specs
from kalena.agent.writer import CgroupWriter

GIB = float(2**30)


class EventSources:
    """The armed PSI triggers and memory event sources of the current declaration."""

    def __init__(
        self,
        notifier: Notifier,
        tree: CgroupTree,
        writer: CgroupWriter,
        log: ActionLog,
        config: AgentConfig,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.notifier, self.tree, self.writer, self.log = notifier, tree, writer, log
        self.config, self.clock = config, clock
        self.psi = PsiSetup()
        self.memory: list[Any] = []
        self.pending: list[tuple[str, Callable[[], Any]]] = []

    def install(self, decl: Declaration) -> None:
        self.disarm()
        production = {a.spec.id: a.cgroup for a in decl.production}
        self.psi = arm(trigger_specs(self.tree, production, self.config), self.notifier)
        for p in self.psi.polled:  # fail-safe, but said out loud: averages are not triggers
            self.log.append("warning", self.clock(), what=f"PSI trigger unavailable, {p.describe()}")
        self.pending = self._memory_makers(decl)
        self._arm_pending(warn=True)

    def _memory_makers(self, decl: Declaration) -> list[tuple[str, Callable[[], Any]]]:
        mem = self.tree.layout.home("memory")
        if mem is None:
            return []
        out: list[tuple[str, Callable[[], Any]]] = []
        if mem.version == 1:
            node_limit = decl.memory_limit or decl.capacity()["ram"] * GIB
            targets: list[tuple[str, int | None, str]] = [("", None, "root:oom")]
            if math.isfinite(node_limit):
                targets.append(
                    ("", int(node_limit * self.config.policy.round.trigger_fraction), "root:usage")
                )
            for a in decl.production:
                limit = 0.0 if a.spec.limits is None else a.spec.limits["ram"]
                if limit > 0:
                    targets.append((a.cgroup, int(limit * GIB), f"{a.spec.id}:limit"))
            for cg, threshold, label in targets:
                check = partial(self.writer.check, cg)
                d = self.tree.dir(mem, cg)
                out.append(
                    (label, partial(EventfdSource.register, d, threshold=threshold, label=label, check=check))
                )
        else:
            for cg, label in [("", "root"), *((a.cgroup, a.spec.id) for a in decl.production)]:
                path = self.tree.dir(mem, cg) / "memory.events"
                out.append((label, partial(MemoryEventsSource, label, path, partial(self.writer.check, cg))))
        return out

    def _arm_pending(self, warn: bool = False) -> None:
        still = []
        for label, make in self.pending:
            try:
                src = make()
            except OSError as e:
                if warn:
                    self.log.append(
                        "warning", self.clock(), what=f"memory event source {label} not armed yet: {e}"
                    )
                still.append((label, make))
                continue
            self.notifier.add(src)
            self.memory.append(src)
        self.pending = still

    def rearm(self, now: float) -> None:
        """Arm what could not be armed before (cgroups created after the agent started)."""
        if self.psi.polled and self.psi.retry(self.notifier):
            self.log.append("psi", now, report=self.psi.report())
        if self.pending:
            self._arm_pending()

    def poll_fallbacks(self, now: float, mono: float) -> list[AgentEvent]:
        return self.psi.poll_fallbacks(now, mono)

    def disarm(self) -> None:
        self.psi.close(self.notifier)
        for src in self.memory:
            self.notifier.remove(src)
        self.memory = []

    def report(self) -> dict[str, Any]:
        return {
            "psi": self.psi.report(),
            "psi_window_s": self.psi.window_s,
            "memory_events": [s.label for s in self.memory],
            "memory_events_pending": [label for label, _ in self.pending],
        }
