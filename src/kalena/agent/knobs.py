"""The desired cgroup state of one round, as writes for the one writer (which skips what is unchanged).

* every batch run: ``CPU_QUOTA`` = the core's quota, ``CPU_WEIGHT`` = the core's batch weight,
  ``MEMORY_MAX`` = its memory limit (none: no limit), ``MEMORY_HIGH`` = its memory request when
  slack memory is denied (the kernel reclaims it back toward what it asked for instead of
  letting it grow into memory the ledger never gave it; seed 000 §2.7: slack memory is off by
  default), else its limit;
* on cgroup v1, a batch run's descendants that set a CPU quota of their own (a Kubernetes pod's
  containers with CPU limits): the smaller of theirs and the run's, since the kernel refuses a
  quota below a descendant's; their own (kept in the state file) once the run's is above it;
* every production cgroup: the anti-starvation cap while the core asks for one; the quota it had
  before the first cap (kept in the state file) once the cap is no longer asked for;
* Kalena's root: the node's memory limit when the declaration sets one.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, MutableMapping

from kalena.agent.state import JobRecord
from kalena.agent.writer import CgroupWriter, Knob, KnobWrite
from kalena.core.enforcement import StarvationDecision, ThrottlePlan

GIB = float(2**30)


def batch_writes(plan: ThrottlePlan, runs: Mapping[str, JobRecord]) -> list[KnobWrite]:
    """Quota and weight per batch decision, plus the run's memory envelope."""
    out = []
    for d in plan.decisions:
        job = runs.get(d.workload)
        if job is None or job.cgroup is None:
            continue
        why = f"throttle {d.workload}: {d.cause.value} (allowance {plan.allowance:.3g} cores)"
        out.append(KnobWrite(job.cgroup, Knob.CPU_QUOTA, d.quota, why))
        if d.weight is not None:
            out.append(KnobWrite(job.cgroup, Knob.CPU_WEIGHT, d.weight, f"batch weight {d.weight}"))
        out.extend(memory_writes(job))
    return out


def nested_writes(
    plan: ThrottlePlan,
    runs: Mapping[str, JobRecord],
    originals: MutableMapping[str, float],
    writer: CgroupWriter,
) -> list[KnobWrite]:
    """The quotas of the runs' descendants that set one (cgroup v1 only: module docstring).

    ``originals`` (descendant cgroup -> its own quota, cores) is updated in place: the first
    lowering records the quota found, the restoration forgets it, and so does the end of its run.
    The writer orders the writes: a descendant narrows before its run, and widens after it.
    """
    out = []
    for d in plan.decisions:
        job = runs.get(d.workload)
        if job is None or job.cgroup is None:
            continue
        for cg, found in sorted(writer.nested_quotas(job.cgroup).items()):
            own = originals.get(cg, found)
            if d.quota < own:
                originals.setdefault(cg, found)
                out.append(KnobWrite(cg, Knob.CPU_QUOTA, d.quota, f"lower {cg} with its run {d.workload}"))
            elif cg in originals:
                out.append(KnobWrite(cg, Knob.CPU_QUOTA, originals.pop(cg), f"restore {cg}: its own quota"))
    running = [job.cgroup for job in runs.values() if job.cgroup]
    for cg in [c for c in originals if not any(c.startswith(f"{r}/") for r in running)]:
        del originals[cg]  # its run ended: its cgroups are gone with it
    return out


def memory_writes(job: JobRecord) -> list[KnobWrite]:
    assert job.cgroup is not None
    limit = (job.limits or {}).get("ram", 0.0)
    max_bytes = limit * GIB if limit > 0 else math.inf
    request = job.requests.get("ram", 0.0)
    high = max_bytes if job.slack_memory or request <= 0 else min(max_bytes, request * GIB)
    return [
        KnobWrite(job.cgroup, Knob.MEMORY_MAX, max_bytes, "batch memory limit"),
        KnobWrite(job.cgroup, Knob.MEMORY_HIGH, high, "batch memory high (slack memory denied)"),
    ]


def production_writes(
    starvation: StarvationDecision,
    production: Mapping[str, str],
    originals: MutableMapping[str, float],
    writer: CgroupWriter,
) -> list[KnobWrite]:
    """Anti-starvation caps on services, and the restoration of caps no longer asked for.

    ``originals`` (cgroup -> cores, ``inf`` = none) is updated in place: the first cap records
    the quota found, the restoration forgets it.
    """
    caps = {d.workload: d for d in starvation.caps}
    out = []
    for wid, cg in sorted(production.items()):
        d = caps.get(wid)
        if d is not None:
            if cg not in originals:
                found = writer.current(cg, Knob.CPU_QUOTA)
                originals[cg] = math.inf if found is None else found
            cap = min(d.quota, originals[cg])
            out.append(KnobWrite(cg, Knob.CPU_QUOTA, cap, f"anti-starvation cap on {wid}: {d.reason.detail}"))
        elif cg in originals:
            out.append(KnobWrite(cg, Knob.CPU_QUOTA, originals.pop(cg), f"uncap {wid}: anti-starvation over"))
    return out


def restore_writes(
    originals: MutableMapping[str, float], writer: CgroupWriter, reason: str
) -> list[KnobWrite]:
    """Put every capped production cgroup back to its own quota (start, shutdown); clears ``originals``."""
    out = [
        KnobWrite(cg, Knob.CPU_QUOTA, v, reason)
        for cg, v in sorted(originals.items())
        if writer.scope.allows(cg)
    ]
    originals.clear()
    return out
