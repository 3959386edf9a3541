"""The write side: ONE cached, ordered, audited writer for every cgroup change the agent makes.

Every knob write, cgroup creation/removal and signal goes through :class:`CgroupWriter`:

* **scope**: a name outside :class:`ManagedScope` (Kalena's root subtree and adopted
  production cgroups, minus protected ones such as DaemonSet-class workloads) raises
  :class:`NotManaged` before anything is touched: that is a bug, never a runtime condition;
* **cache**: a value equal to what is there is skipped (the cache answers for ``cache_ttl_s``,
  after which the file is read again, so a value someone else changed is noticed);
* **order** (:func:`write_order_key`): narrowing writes first, deepest cgroup first; then
  widening writes, shallowest first. Mitigation (a cut) lands before anything is granted, and
  cgroup v1 rejects a child CFS quota above its parent's, so parents widen before children
  and children narrow before parents;
* **audit**: every write, creation, removal and signal leaves a :class:`WriteRecord` with its
  reason (handed to ``audit``); a failed write is a record too (the next round retries).

Knob translation:

===========  ==========================================  ===================================
knob         cgroup v2                                   cgroup v1
===========  ==========================================  ===================================
CPU_QUOTA    ``cpu.max`` ``"Q P"`` / ``"max P"``          ``cpu.cfs_quota_us`` ``Q`` / ``-1``
CPU_WEIGHT   ``cpu.weight`` (1..10000)                   ``cpu.shares`` = ``weight_to_shares``
MEMORY_HIGH  ``memory.high``                             ``memory.soft_limit_in_bytes``
MEMORY_MAX   ``memory.max``                              ``memory.limit_in_bytes``
===========  ==========================================  ===================================

``Q = cores x P`` with ``P`` the CFS period (100 ms, the kernel default), at least 1 ms (the
kernel's minimum quota). v1 has no ``memory.high``; its nearest equivalent is the soft limit,
which the kernel reclaims toward under global pressure instead of throttling the allocator.
"""

from __future__ import annotations

import contextlib
import enum
import math
import os
import signal
import time
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass
from pathlib import Path

from kalena.agent.cgroupfs import read_text, subtree_procs
from kalena.agent.layout import CgroupTree, Hierarchy, check_name
from kalena.agent.parsers import ParseError, parse_cpu_max, parse_limit_bytes, parse_single_int
from kalena.core.enforcement import weight_to_shares

#: The CFS period Kalena writes with v2 quotas (the kernel default, 100 ms): long enough that a
#: quota of a few milliseconds is meaningful, short enough that a throttled task waits < 100 ms.
CFS_PERIOD_US = 100_000
#: The kernel's smallest CFS quota (1 ms).
MIN_QUOTA_US = 1_000
#: Memory limits are kept in whole pages by the kernel: compare values at this granularity.
PAGE = 4096


class Knob(enum.Enum):
    CPU_QUOTA = "cpu-quota"  # cores; inf = no ceiling
    CPU_WEIGHT = "cpu-weight"  # v2 weight 1..10000
    MEMORY_HIGH = "memory-high"  # bytes; inf = none
    MEMORY_MAX = "memory-max"  # bytes; inf = none


#: cgroup v2's default ``cpu.weight`` (on v1 it is written as 2597 shares, above v1's default 1024:
#: a cgroup given back its weight never gets less than it had).
DEFAULT_WEIGHT = 100


class NotManaged(RuntimeError):
    """A write aimed at a cgroup Kalena does not manage: a bug in the caller."""


@dataclass(frozen=True, slots=True)
class ManagedScope:
    """Which cgroups Kalena may change.

    Relative names (under Kalena's root, ``""`` being the root) are managed; absolute names
    only when they are, or lie under, an ``adopted`` cgroup. ``protected`` names (and their
    subtrees) are never managed, wherever they are: DaemonSet-class workloads.
    """

    adopted: frozenset[str] = frozenset()
    protected: frozenset[str] = frozenset()

    @staticmethod
    def _within(name: str, base: str) -> bool:
        return name == base or name.startswith(base.rstrip("/") + "/")

    def allows(self, name: str) -> bool:
        if any(self._within(name, p) for p in self.protected):
            return False
        if not name.startswith("/"):
            return True
        return any(self._within(name, a) for a in self.adopted)


@dataclass(frozen=True, slots=True)
class KnobWrite:
    """Desired value of one knob on one cgroup, with the reason it is wanted."""

    cgroup: str
    knob: Knob
    value: float
    reason: str


@dataclass(frozen=True, slots=True)
class WriteRecord:
    """What the writer did. ``mono`` is ``time.perf_counter()`` at completion (for latency)."""

    time: float
    mono: float
    action: str  # "write", "mkdir", "rmdir", "signal", "kill"
    cgroup: str
    path: str
    old: str | None
    new: str
    reason: str
    outcome: str  # "written", "unchanged", "failed: ..."

    @property
    def ok(self) -> bool:
        return not self.outcome.startswith("failed")

    def to_json(self) -> dict[str, object]:
        return {
            "time": self.time,
            "action": self.action,
            "cgroup": self.cgroup,
            "path": self.path,
            "old": self.old,
            "new": self.new,
            "reason": self.reason,
            "outcome": self.outcome,
        }


@dataclass(frozen=True, slots=True)
class PendingWrite:
    """A write resolved to its file, with its direction, for ordering."""

    write: KnobWrite
    path: Path
    old: str | None
    new: str
    narrows: bool

    @property
    def depth(self) -> int:
        return len(self.path.parent.parts)


def write_order_key(p: PendingWrite) -> tuple[int, int, str, str]:
    """Order of a batch of writes, smallest key first.

    1. Narrowing writes before widening ones: the cut is the mitigation and must not wait.
    2. Narrowing: deepest cgroup first (a v1 parent's CFS quota may only shrink once its
       children fit under it); widening: shallowest first (a child may only grow into a
       parent that already grew).
    3. Path, then knob name: a fixed final tie-break.
    """
    depth = -p.depth if p.narrows else p.depth
    return (0 if p.narrows else 1, depth, str(p.path), p.write.knob.value)


def _bytes_text(v: float, v1: bool) -> str:
    if math.isinf(v):
        return "-1" if v1 else "max"
    return str(int(v) // PAGE * PAGE)


class CgroupWriter:
    """The agent's only way to change cgroups (see the module docstring)."""

    def __init__(
        self,
        tree: CgroupTree,
        scope: ManagedScope,
        *,
        clock: Callable[[], float] = time.time,
        audit: Callable[[WriteRecord], None] | None = None,
        cache_ttl_s: float = 60.0,
    ) -> None:
        self.tree = tree
        self.scope = scope
        self.clock = clock
        self.audit = audit
        self.cache_ttl_s = cache_ttl_s
        self._cache: dict[Path, tuple[str, float]] = {}

    # -- scope ----------------------------------------------------------------------------------
    def check(self, name: str) -> None:
        if name:
            check_name(name)
        if not self.scope.allows(name):
            raise NotManaged(f"cgroup {name!r} is not managed by Kalena (protected or outside its scope)")

    # -- knob translation -----------------------------------------------------------------------
    def _knob_home(self, knob: Knob) -> Hierarchy | None:
        ctrl = "memory" if knob in (Knob.MEMORY_HIGH, Knob.MEMORY_MAX) else "cpu"
        return self.tree.layout.home(ctrl)

    @staticmethod
    def _period_us(h: Hierarchy, d: Path) -> int:
        """The CFS period the quota is measured against: v2 always gets ``CFS_PERIOD_US`` (it is
        written with the quota); v1 keeps the cgroup's own ``cpu.cfs_period_us``."""
        if h.version == 2:
            return CFS_PERIOD_US
        text = read_text(d / "cpu.cfs_period_us")
        try:
            return CFS_PERIOD_US if text is None else parse_single_int(text, "cpu.cfs_period_us")
        except ParseError:
            return CFS_PERIOD_US

    def _encode(self, knob: Knob, h: Hierarchy, d: Path, value: float) -> tuple[str, str]:
        """(file name, text) for ``value`` in hierarchy ``h``, cgroup directory ``d``."""
        v1 = h.version == 1
        if knob is Knob.CPU_QUOTA:
            if math.isinf(value):
                return ("cpu.cfs_quota_us", "-1") if v1 else ("cpu.max", f"max {CFS_PERIOD_US}")
            period = self._period_us(h, d)
            q = max(MIN_QUOTA_US, round(value * period))
            return ("cpu.cfs_quota_us", str(q)) if v1 else ("cpu.max", f"{q} {CFS_PERIOD_US}")
        if knob is Knob.CPU_WEIGHT:
            w = int(value)
            return ("cpu.shares", str(weight_to_shares(w))) if v1 else ("cpu.weight", str(w))
        if knob is Knob.MEMORY_HIGH:
            return ("memory.soft_limit_in_bytes" if v1 else "memory.high", _bytes_text(value, v1))
        return ("memory.limit_in_bytes" if v1 else "memory.max", _bytes_text(value, v1))

    def current(self, name: str, knob: Knob) -> float | None:
        """The knob's value now (cores for CPU_QUOTA, ``inf`` = none; bytes for memory; the file's
        number for CPU_WEIGHT), or ``None`` if it cannot be read."""
        h = self._knob_home(knob)
        if h is None:
            return None
        d = self.tree.dir(h, name)
        filename, _ = self._encode(knob, h, d, 1.0 if knob is Knob.CPU_WEIGHT else math.inf)  # (its name)
        text = read_text(d / filename)
        if text is None:
            return None
        try:
            value = self._decode(filename, text.strip())
        except ParseError:
            return None
        if knob is Knob.CPU_QUOTA and math.isfinite(value):
            return value / self._period_us(h, d)
        return value

    def nested_quotas(self, name: str) -> dict[str, float]:
        """The CPU quotas (cores) of ``name``'s descendants that set one, on a cgroup v1 CPU
        hierarchy: there the kernel refuses (EINVAL) a quota below a descendant's, so those are
        lowered with it (:func:`kalena.agent.knobs.nested_writes`). ``{}`` on v2, whose ``cpu.max``
        is not checked along the path (each level bounds what is below it)."""
        h = self._knob_home(Knob.CPU_QUOTA)
        if h is None or h.version != 1:
            return {}
        base = self.tree.dir(h, name)
        out: dict[str, float] = {}
        for d, _, _ in os.walk(base):
            rel = os.path.relpath(d, base)
            if rel == ".":
                continue
            child = f"{name}/{rel}" if name else rel
            q = self.current(child, Knob.CPU_QUOTA)
            if q is not None and math.isfinite(q):
                out[child] = q
        return out

    @staticmethod
    def _decode(filename: str, text: str) -> float:
        """A file's current value in the unit the comparison uses (quota us, shares, bytes)."""
        if filename == "cpu.max":
            return parse_cpu_max(text)[0]
        if filename == "cpu.cfs_quota_us":
            q = parse_single_int(text, filename)
            return math.inf if q < 0 else float(q)
        if filename in ("cpu.shares", "cpu.weight"):
            return float(parse_single_int(text, filename))
        b = parse_limit_bytes(text, filename)
        return b if math.isinf(b) else float(int(b) // PAGE * PAGE)

    def _current(self, path: Path, now: float) -> str | None:
        """The file's value: from the cache while fresh, else read (and cached)."""
        hit = self._cache.get(path)
        if hit is not None and now - hit[1] < self.cache_ttl_s:
            return hit[0]
        text = read_text(path)
        if text is None:
            return None
        self._cache[path] = (text.strip(), now)
        return text.strip()

    # -- writes ---------------------------------------------------------------------------------
    def plan(self, writes: Iterable[KnobWrite]) -> list[PendingWrite]:
        """Resolve, de-duplicate (last write per file wins) and order; unchanged values dropped."""
        now = self.clock()
        last: dict[Path, tuple[KnobWrite, str]] = {}
        for w in writes:
            self.check(w.cgroup)
            h = self._knob_home(w.knob)
            if h is None:
                continue  # the controller does not exist on this host: nothing to write
            d = self.tree.dir(h, w.cgroup)
            filename, text = self._encode(w.knob, h, d, w.value)
            last[d / filename] = (w, text)
        pending = []
        for path, (w, text) in last.items():
            old = self._current(path, now)
            try:
                cur = None if old is None else self._decode(path.name, old)
            except ParseError:
                cur = None
            new = self._decode(path.name, text)
            if cur is not None and cur == new:
                continue
            narrows = cur is not None and new < cur
            pending.append(PendingWrite(w, path, old, text, narrows))
        pending.sort(key=write_order_key)
        return pending

    def apply(self, writes: Iterable[KnobWrite]) -> tuple[WriteRecord, ...]:
        """Carry out ``writes`` in :func:`write_order_key` order; return what was written or failed."""
        out = []
        for p in self.plan(writes):
            outcome = "written"
            try:
                with open(p.path, "w") as f:
                    f.write(p.new)
                self._cache[p.path] = (p.new, self.clock())
            except OSError as e:
                outcome = f"failed: {e.strerror or e}"
                self._cache.pop(p.path, None)
            out.append(self._record("write", p.write.cgroup, p.path, p.old, p.new, p.write.reason, outcome))
        return tuple(out)

    def _record(
        self, action: str, cgroup: str, path: Path | str, old: str | None, new: str, reason: str, outcome: str
    ) -> WriteRecord:
        rec = WriteRecord(
            self.clock(), time.perf_counter(), action, cgroup, str(path), old, new, reason, outcome
        )
        if self.audit is not None:
            self.audit(rec)
        return rec

    def forget(self, name: str) -> None:
        """Drop what the cache knows about ``name``'s files (someone else wrote them)."""
        tops = [self.tree.dir(h, name) for h in self.tree.layout.hierarchies]
        self._cache = {p: v for p, v in self._cache.items() if p.parent not in tops}

    # -- cgroup lifecycle -----------------------------------------------------------------------
    def create(self, name: str, reason: str) -> tuple[WriteRecord, ...]:
        """Make ``name`` (and its missing parents, one level at a time) in every hierarchy Kalena uses.

        On a v2 hierarchy each new cgroup's parent gets ``+cpu +memory +io`` in its
        ``cgroup.subtree_control`` (those its ``cgroup.controllers`` offers) so the child has the
        knobs, but only where that parent is Kalena's root or below it: the root's own parent is
        not Kalena's to change, so the controllers must be delegated to the root by the host
        (systemd does so for the hierarchy root). A failure to enable is recorded and the cgroup
        is still usable for membership and PSI.
        """
        self.check(name)
        out = []
        for h in self.tree.layout.hierarchies:
            target = self.tree.dir(h, name)
            if target.is_dir():
                continue
            root = self.tree.dir(h, "")
            chain = [target]
            while not chain[-1].parent.is_dir() and chain[-1].parent != chain[-1]:
                chain.append(chain[-1].parent)
            for d in reversed(chain):
                if h.version == 2 and (d.parent == root or root in d.parent.parents):
                    out.extend(self._enable_controllers(name, d.parent, reason))
                try:
                    d.mkdir()
                    out.append(self._record("mkdir", name, d, None, "", reason, "written"))
                except FileExistsError:
                    pass
                except OSError as e:
                    out.append(self._record("mkdir", name, d, None, "", reason, f"failed: {e.strerror or e}"))
                    break
        return tuple(out)

    def _enable_controllers(self, name: str, parent: Path, reason: str) -> list[WriteRecord]:
        out: list[WriteRecord] = []
        offered = set((read_text(parent / "cgroup.controllers") or "").split())
        enabled = set((read_text(parent / "cgroup.subtree_control") or "").split())
        for c in ("cpu", "memory", "io"):
            if c in offered and c not in enabled:
                try:
                    with open(parent / "cgroup.subtree_control", "w") as f:
                        f.write(f"+{c}")
                    outcome = "written"
                except OSError as e:
                    outcome = f"failed: {e.strerror or e}"
                control = parent / "cgroup.subtree_control"
                out.append(self._record("write", name, control, None, f"+{c}", reason, outcome))
        return out

    def remove(self, name: str, reason: str) -> tuple[WriteRecord, ...]:
        """Remove ``name`` (which must be empty of processes) and its empty children, in every hierarchy."""
        self.check(name)
        out = []
        for h in self.tree.layout.hierarchies:
            top = self.tree.dir(h, name)
            if not top.is_dir():
                continue
            children = sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts))
            dirs = [*children, top]
            for d in dirs:
                try:
                    d.rmdir()
                    outcome = "written"
                except OSError as e:
                    outcome = f"failed: {e.strerror or e}"
                out.append(self._record("rmdir", name, d, None, "", reason, outcome))
        tops = [self.tree.dir(h, name) for h in self.tree.layout.hierarchies]
        self._cache = {p: v for p, v in self._cache.items() if not any(p.is_relative_to(t) for t in tops)}
        return tuple(out)

    def remove_if_empty(self, name: str, reason: str) -> tuple[WriteRecord, ...]:
        """Remove ``name`` in every hierarchy where it holds no process and no child cgroup (the
        root or the batch parent at shutdown: what Kalena made, once nothing runs in it)."""
        self.check(name)
        out = []
        for h in self.tree.layout.hierarchies:
            d = self.tree.dir(h, name)
            if (
                not d.is_dir()
                or any(p.is_dir() for p in d.iterdir())
                or (read_text(d / "cgroup.procs") or "").split()
            ):
                continue
            try:
                d.rmdir()
                outcome = "written"
            except OSError as e:  # a process joined meanwhile, or the kernel still holds it
                outcome = f"failed: {e.strerror or e}"
            out.append(self._record("rmdir", name, d, None, "", reason, outcome))
        return tuple(out)

    def procs_files(self, name: str) -> tuple[Path, ...]:
        """The ``cgroup.procs`` file of ``name`` in every hierarchy (for placing a new process)."""
        self.check(name)
        return tuple(self.tree.dir(h, name) / "cgroup.procs" for h in self.tree.layout.hierarchies)

    # -- signals --------------------------------------------------------------------------------
    def pids(self, name: str) -> list[int]:
        """The processes in ``name`` and its descendant cgroups (nothing written)."""
        for h in (self.tree.layout.v2, self.tree.layout.home("memory"), *self.tree.layout.hierarchies):
            if h is None:
                continue
            pids = subtree_procs(self.tree.dir(h, name))
            if pids is not None:
                return pids
        return []

    def signal(
        self, name: str, sig: int, reason: str, only: Collection[int] | None = None
    ) -> tuple[int, ...]:
        """Send ``sig`` to every process in ``name`` (with ``only``: to those of them that are still
        members of ``name``, so a reused pid outside it is never hit); returns the pids signalled."""
        self.check(name)
        sent = []
        members = self.pids(name)
        for pid in members if only is None else [p for p in members if p in set(only)]:
            try:
                os.kill(pid, sig)
                sent.append(pid)
            except ProcessLookupError:
                pass
        self._record(
            "signal", name, "cgroup.procs", None, f"{signal.Signals(sig).name} {sent}", reason, "written"
        )
        return tuple(sent)

    def kill(self, name: str, reason: str) -> tuple[int, ...]:
        """SIGKILL every process in ``name``: ``cgroup.kill`` where the kernel has it (atomic, no
        fork race), else SIGKILL to each listed process, repeated while new ones appear."""
        self.check(name)
        pids = self.pids(name)
        v2 = self.tree.layout.v2
        if v2 is not None:
            killfile = self.tree.dir(v2, name) / "cgroup.kill"
            if killfile.exists():
                try:
                    with open(killfile, "w") as f:
                        f.write("1")
                    self._record("kill", name, killfile, None, "1", reason, "written")
                    return tuple(pids)
                except OSError:
                    pass  # fall back to signalling each process
        for _ in range(10):  # a few rounds catch children forked while we signalled
            current = self.pids(name)
            if not current:
                break
            for pid in current:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        self._record("kill", name, "cgroup.procs", None, f"SIGKILL {pids}", reason, "written")
        return tuple(pids)

    def purge(self, name: str, reason: str, bound_s: float = 10.0) -> bool:
        """SIGKILL everything under ``name`` and remove its cgroups, deepest first (uninstall,
        benchmarks). Returns whether everything is gone within ``bound_s`` seconds."""
        self.check(name)
        end = time.monotonic() + bound_s
        for h in self.tree.layout.hierarchies:
            top = self.tree.dir(h, name)
            if not top.is_dir():
                continue
            dirs = [*sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)), top]
            for d in dirs:
                while True:
                    pids = [int(x) for x in (read_text(d / "cgroup.procs") or "").split()]
                    for pid in pids:
                        with contextlib.suppress(ProcessLookupError):
                            os.kill(pid, signal.SIGKILL)
                    try:
                        d.rmdir()
                        break
                    except FileNotFoundError:
                        break
                    except OSError:
                        if time.monotonic() > end:
                            return False
                        time.sleep(0.02)
            self._record("rmdir", name, top, None, "", reason, "written")
        return True
