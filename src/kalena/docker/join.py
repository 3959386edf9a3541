"""An agent joined to a cluster daemon (``kalena docker serve --join URL``): it reports after each
round and takes the work the daemon answers with (:mod:`kalena.docker.cluster`).

:class:`DaemonLink` is a :class:`~kalena.agent.ports.SubmissionSource` around the agent's own
queue: the jobs the daemon placed on this host come in as submissions (labelled placed by the
cluster, so the container says so too), its cancels as cancel requests; they are taken with the
save that holds them, as every submission, and the next report (which lists them) is the
daemon's acknowledgement: a job sent twice before that is refused the second time by name.

A daemon that does not answer changes nothing on the host: the agent goes on with what runs,
warns once, and reports again at its next round.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable
from typing import Any

import httpx

from kalena.agent.actionlog import ActionLog
from kalena.agent.loop import Agent
from kalena.agent.ports import SubmissionSource
from kalena.agent.runtime import Intake, SubmissionError, parse_submission
from kalena.docker.cluster import ATTEMPT, CLUSTER, PLACED_BY
from kalena.docker.engine import Engine

IMAGES_EVERY_S = 10.0


def placement_context(agent: Agent) -> dict[str, Any]:
    """What this host's scheduling context bars (its keeper: one node), for the daemon's placement:
    the cooldowns of the jobs evicted here, the harmful pairings, escalation's deadline."""
    keeper = agent.batch.keeper
    until = float(keeper.ineligible_until[0]) if len(keeper.ineligible_until) else -math.inf
    return {
        "cooldowns": {key: float(t) for (key, _n), t in sorted(keeper.cooldowns.items())},
        "blacklist": sorted(key for key, _n in keeper.blacklist),
        "ineligible_until": until if math.isfinite(until) else None,
    }


class DaemonLink:
    def __init__(
        self,
        url: str,
        node: str,
        engine: Engine,
        *,
        token: str | None = None,
        inner: SubmissionSource | None = None,
        log: ActionLog | None = None,
        clock: Callable[[], float] = time.time,
        client: httpx.Client | None = None,
        verify: Any = True,
        known: Callable[[], dict[str, str]] = dict,
    ) -> None:
        """``known``: the daemon's jobs this agent has, each with the attempt it took."""
        self.url, self.node, self.engine, self.inner = url, node, engine, inner
        self.log, self.clock, self.known = log, clock, known
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.client = client or httpx.Client(base_url=url, headers=headers, timeout=5.0, verify=verify)
        self.work: list[dict[str, Any]] = []
        self.down: str | None = None
        self._images: list[str] = []
        self._images_at = -math.inf

    # -- the submission source ------------------------------------------------------------------
    def new(self) -> Intake:
        got = self.inner.new() if self.inner is not None else Intake([], [], [])
        subs, cancels, problems = list(got.submissions), list(got.cancels), list(got.problems)
        taken = self.known()
        # a cancel names the attempt it ends: one of an attempt this host does not hold is stale
        # and ends nothing; one it holds goes first, and a new attempt of that job waits for the
        # next answer (the agent takes submissions before cancels: it would end the new one)
        ending = {
            str(w.get("job"))
            for w in self.work
            if w.get("kind") == "cancel"
            and taken.get(str(w.get("job"))) == str((w.get("spec") or {}).get("attempt", ""))
        }
        for w in self.work:
            name = str(w.get("job"))
            spec = dict(w.get("spec") or {})
            attempt = str(spec.pop("attempt", ""))
            if w.get("kind") == "cancel":
                if name in ending:
                    cancels.append((("daemon-cancel", name), name))
                continue
            if taken.get(name) == attempt or name in ending:
                continue  # already here (the daemon has not seen the report yet), or it waits
            where = f"daemon {self.url}: job {name}"
            try:
                sub = parse_submission(spec, where)
            except SubmissionError as e:
                problems.extend(e.problems)
                continue
            sub = dataclasses.replace(sub, labels={**sub.labels, PLACED_BY: CLUSTER, ATTEMPT: attempt})
            subs.append((("daemon", name), where, sub))
        self.work = []
        return Intake(subs, cancels, problems)

    def commit(self, outcomes: dict[object, str], save: Callable[[], object]) -> None:
        mine = {t for t in outcomes if isinstance(t, tuple) and t[:1] in (("daemon",), ("daemon-cancel",))}
        rest = {t: o for t, o in outcomes.items() if t not in mine}
        if self.inner is not None:
            self.inner.commit(rest, save)
        else:
            save()

    # -- the report -----------------------------------------------------------------------------
    def images(self) -> list[str]:
        now = self.clock()
        if now - self._images_at >= IMAGES_EVERY_S:
            try:
                self._images = sorted(
                    {t for img in self.engine.api.images() for t in img.get("RepoTags") or []}
                )
                self._images_at = now
            except Exception:
                pass
        return self._images

    def report(self, agent: Agent) -> bool:
        """Send this host's report; keep the work of the answer for the next intake."""
        status = getattr(agent.store, "last_node", None) or {}
        jobs = {}
        for name, job in agent.state.jobs.items():
            if (job.labels or {}).get(PLACED_BY) != CLUSTER:
                continue
            steps = [[t.state.value, t.time, t.reason.value] for t in agent.state.history(name)]
            jobs[name] = {
                "state": agent.state.task(name).value,
                "run": job.run,
                "exit_code": job.exit_code,
                "steps": steps,
                "placed_by": CLUSTER,
                "attempt": (job.labels or {}).get(ATTEMPT, ""),
            }
        body = {"status": status, "images": self.images(), "jobs": jobs, "context": placement_context(agent)}
        try:
            r = self.client.post(f"/v1/nodes/{self.node}/report", json=body)
            r.raise_for_status()
            self.work = list(r.json().get("work") or [])
        except (httpx.HTTPError, ValueError) as e:
            if self.down is None and self.log is not None:
                self.log.append("warning", self.clock(), what=f"cluster daemon {self.url} not reachable: {e}")
            self.down = str(e)
            return False
        if self.down is not None and self.log is not None:
            self.log.append("warning", self.clock(), what=f"cluster daemon {self.url} reachable again")
        self.down = None
        return True
