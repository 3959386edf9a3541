"""``ContextKeeper``: the scheduling context a shell keeps between passes, in one place.

:func:`~kalena.core.placement.schedule` reads a :class:`SchedulingContext`; this is the record
behind it, over a ledger's nodes (indices in its methods, names in its JSON), fed by the shell
with what happened and asked for the context of each pass. It reads no clock: ``now`` comes in.

* **cooldowns**: ``evicted(key, n, now, until)`` sets ``(key, n) -> max(until, previous)``; an
  entry is dropped once ``until <= now`` (the ``EvictionCooldown`` filter ignores it from then).
* **blacklist**: the core's ``harmful_pairs`` over the eviction history (``evicted`` records one
  ``EvictionEvent`` per eviction), pruned to the pairing window ``(now - window, now]``. It is
  recomputed only when the history changed (an eviction, or an event left the window), the
  earliest pairing's ``until`` passed or ``now`` reached an event that was still ahead of the
  last recomputation (a clock stepped back): between those, ``harmful_pairs`` returns the same set.
* **eligibility**: ``ineligible(n, until)`` (escalation's deadline); node ``n`` is eligible at
  ``now`` iff ``until <= now``.
* **images**: ``started(image, n)``: the node holds the image once a pod of it started there.
* **volatility**: ``sample(U)`` writes the ledger's reservation sums ``(N, 8)`` into a ring of
  ``samples`` slots; ``refresh_volatility(C)`` sets ``v = reservation_volatility(ring, C,
  RECLAIMABLE)``. The default ring holds 30 samples: at one a minute, half an hour, long enough
  for a variance over 30 points and short enough to follow a node whose load pattern changed.

Arrays and mappings handed out (the context, the accessors) are never changed afterwards: masks
and deadlines are copied on write, the cooldowns are copied into each context.

JSON (:meth:`to_json` / :meth:`from_json`, version 1): plain JSON types, finite numbers only, nodes
by name; ``NaN`` in a reservation sample (a missing sample) is written ``null``. The blacklist is
not stored: it is a function of the history and is recomputed at the first refresh after a load.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import Any

import numpy as np

from kalena.core.enforcement.config import PairingConfig
from kalena.core.enforcement.pairing import EvictionEvent, harmful_pairs
from kalena.core.ledger import Ledger
from kalena.core.model import WorkloadSpec
from kalena.core.placement.config import SchedulingContext
from kalena.core.placement.score import reservation_volatility
from kalena.core.resources import NDIM, RECLAIMABLE

CONTEXT_VERSION = 1
VOLATILITY_SAMPLES = 30


def _read_only(a: np.ndarray) -> np.ndarray:
    a.setflags(write=False)
    return a


class ContextKeeper:
    """The scheduling context of a ledger's nodes between passes (module docstring)."""

    def __init__(
        self,
        nodes: Sequence[str],
        pairing: PairingConfig | None = None,
        *,
        samples: int = VOLATILITY_SAMPLES,
    ) -> None:
        names = tuple(nodes)
        if not all(isinstance(n, str) and n for n in names) or len(set(names)) != len(names):
            raise ValueError(f"ContextKeeper.nodes must be distinct non-empty names, got {list(names)!r}")
        if isinstance(samples, bool) or not isinstance(samples, int) or samples < 1:
            raise ValueError(f"ContextKeeper.samples must be an integer >= 1, got {samples!r}")
        self.nodes = names
        self.node_index: Mapping[str, int] = MappingProxyType({n: i for i, n in enumerate(names)})
        self.pairing = pairing if pairing is not None else PairingConfig()
        n = len(names)
        self._cooldowns: dict[tuple[str, int], float] = {}
        self._history: list[EvictionEvent] = []
        self._blacklist: frozenset[tuple[str, int]] = frozenset()
        self._blacklist_until = math.inf
        self._blacklist_at = -math.inf  # the time the blacklist was computed for
        self._history_changed = False
        self._ineligible = _read_only(np.full(n, -np.inf))
        self._images: dict[str, np.ndarray] = {}
        self._series = np.full((samples, n, NDIM), np.nan)
        self._taken = 0
        self._volatility = _read_only(np.zeros(n))

    @classmethod
    def of(cls, ledger: Ledger, pairing: PairingConfig | None = None, **kw: Any) -> ContextKeeper:
        """A keeper over ``ledger``'s nodes (same indices)."""
        return cls(ledger.node_names, pairing, **kw)

    # what the shell reports -------------------------------------------------------------------------
    def evicted(self, key: str, node: int, now: float, cooldown_until: float | None = None) -> None:
        """Equivalence class ``key`` was evicted from ``node`` at ``now``; it may not return before
        ``cooldown_until`` (``None``: no cooldown, the eviction only counts for the pairing rule)."""
        name = self.nodes[node]
        if not isinstance(key, str) or not key:
            raise ValueError(f"equivalence key must be a non-empty string, got {key!r}")
        if cooldown_until is not None:
            if not math.isfinite(cooldown_until):
                raise ValueError(f"cooldown_until must be finite, got {cooldown_until!r}")
            pair = (key, int(node))
            self._cooldowns[pair] = max(cooldown_until, self._cooldowns.get(pair, -math.inf))
        self._history.append(EvictionEvent(key, name, now))
        self._history_changed = True

    def started(self, image: str, node: int) -> None:
        """A pod of ``image`` started on ``node`` (the node now holds the image; "" is no image)."""
        if not image:
            return
        mask = self._images.get(image)
        if mask is not None and mask[node]:
            return
        new = np.zeros(len(self.nodes), dtype=bool) if mask is None else mask.copy()
        new[node] = True
        self._images[image] = _read_only(new)

    def ineligible(self, node: int, until: float) -> None:
        """Escalation made ``node`` slack-ineligible until ``until`` (replacing any earlier deadline)."""
        if not math.isfinite(until):
            raise ValueError(f"ineligible until must be finite, got {until!r}")
        new = self._ineligible.copy()
        new[node] = until
        self._ineligible = _read_only(new)

    def sample(self, reservation_sum: np.ndarray) -> None:
        """One sample of the ledger's reservation sums ``(N, 8)`` into the ring (NaN: missing)."""
        u = np.asarray(reservation_sum, dtype=np.float64)
        if u.shape != self._series.shape[1:]:
            raise ValueError(f"reservation_sum must have shape {self._series.shape[1:]}, got {u.shape}")
        if np.isinf(u).any():
            raise ValueError("reservation_sum must be finite (or NaN for a missing value)")
        self._series[self._taken % len(self._series)] = u
        self._taken += 1

    def refresh_volatility(self, capacity: np.ndarray) -> None:
        """``v = reservation_volatility(ring, capacity, RECLAIMABLE)`` over the samples kept."""
        self._volatility = _read_only(reservation_volatility(self._series, capacity, RECLAIMABLE))

    # one pass ---------------------------------------------------------------------------------------
    def refresh(self, now: float) -> None:
        """Drop the cooldowns over at ``now``, prune the history to the pairing window and
        recompute the blacklist if the history changed, a pairing expired or ``now`` is before the
        time it was computed for (module docstring)."""
        if self._cooldowns:
            self._cooldowns = {k: v for k, v in self._cooldowns.items() if v > now}
        lo = now - self.pairing.window_s
        if self._history and self._history[0].time <= lo:
            self._history = [e for e in self._history if e.time > lo]
            self._history_changed = True
        # an answer computed for a later time is not this time's (a clock stepped back): recompute
        if not (self._history_changed or now >= self._blacklist_until or now < self._blacklist_at):
            return
        pairs = harmful_pairs(self._history, self.pairing, now)
        index = self.node_index
        self._blacklist = frozenset((p.key, index[p.node]) for p in pairs)
        # harmful_pairs ignores events after ``now`` (a wall clock stepped back): they count from
        # their own time on, so the answer is also stale then
        ahead = min((e.time for e in self._history if e.time > now), default=math.inf)
        self._blacklist_until = min(min((p.until for p in pairs), default=math.inf), ahead)
        self._blacklist_at = now
        self._history_changed = False

    def context(self, now: float, pods: Iterable[WorkloadSpec] = ()) -> SchedulingContext:
        """The context of a pass at ``now`` for ``pods`` (their images' masks), after :meth:`refresh`."""
        self.refresh(now)
        images = {p.image: self._images[p.image] for p in pods if p.image in self._images}
        return SchedulingContext(
            now=now,
            cooldowns=dict(self._cooldowns),
            blacklist=self._blacklist,
            eligible=self.eligible(now),
            images=images,
            volatility=self._volatility,
        )

    # read-only views ----------------------------------------------------------------------------------
    def eligible(self, now: float) -> np.ndarray:
        """``(N,)`` bool: nodes escalation has not made slack-ineligible at ``now``."""
        return self._ineligible <= now

    @property
    def cooldowns(self) -> Mapping[tuple[str, int], float]:
        """``(key, node) -> until``, as of the last refresh plus the evictions since."""
        return MappingProxyType(self._cooldowns)

    @property
    def blacklist(self) -> frozenset[tuple[str, int]]:
        """``(key, node)`` harmful pairings as of the last refresh."""
        return self._blacklist

    @property
    def history(self) -> tuple[EvictionEvent, ...]:
        return tuple(self._history)

    @property
    def ineligible_until(self) -> np.ndarray:
        """``(N,)`` each node's slack-ineligibility deadline (``-inf``: none)."""
        return self._ineligible

    @property
    def images(self) -> Mapping[str, np.ndarray]:
        return MappingProxyType(self._images)

    @property
    def volatility(self) -> np.ndarray:
        """``(N,)`` as of the last :meth:`refresh_volatility` (zeros before)."""
        return self._volatility

    @property
    def samples_taken(self) -> int:
        return self._taken

    def samples(self) -> np.ndarray:
        """The ring's filled slots, oldest first: ``(min(taken, ring), N, 8)``."""
        ring = len(self._series)
        filled = min(self._taken, ring)
        return self._series[[(self._taken - filled + i) % ring for i in range(filled)]]

    # JSON ---------------------------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        """Plain JSON types, nodes by name (module docstring)."""
        names = self.nodes
        kept = self.samples()
        return {
            "version": CONTEXT_VERSION,
            "nodes": list(names),
            "cooldowns": [[k, names[n], float(t)] for (k, n), t in self._cooldowns.items()],
            "evictions": [[e.key, e.node, float(e.time)] for e in self._history],
            "ineligible_until": {
                names[n]: float(t) for n, t in enumerate(self._ineligible.tolist()) if t != -math.inf
            },
            "images": {i: [names[n] for n in np.flatnonzero(m).tolist()] for i, m in self._images.items()},
            "ring": len(self._series),
            "samples_taken": self._taken,
            "reservation_samples": {
                name: [[None if math.isnan(x) else x for x in row] for row in kept[:, n].tolist()]
                for n, name in enumerate(names)
            },
            "volatility": {name: float(v) for name, v in zip(names, self._volatility.tolist(), strict=True)},
        }

    @classmethod
    def from_json(cls, data: Any, pairing: PairingConfig | None = None) -> ContextKeeper:
        """The inverse of :meth:`to_json`; bad input raises ``ValueError`` naming the key."""
        r = _Reader(data)
        nodes = r.names()
        ring = r.integer("ring", lo=1)
        k = cls(nodes, pairing, samples=ring)
        for i, (key, n, until) in enumerate(r.triples("cooldowns", k.node_index)):
            pair = (key, k.node_index[n])
            if pair in k._cooldowns:
                raise ValueError(f"scheduling context cooldowns[{i}]: ({key!r}, {n!r}) appears twice")
            k._cooldowns[pair] = until
        k._history = [EvictionEvent(key, n, t) for key, n, t in r.triples("evictions", k.node_index)]
        k._history_changed = True  # the blacklist is not stored: recomputed at the next refresh
        deadlines = np.full(len(nodes), -np.inf)
        for n, t in r.by_node("ineligible_until", k.node_index).items():
            deadlines[k.node_index[n]] = r.number(t, f"ineligible_until.{n}")
        k._ineligible = _read_only(deadlines)
        for image, where in r.mapping("images").items():
            ok = isinstance(where, list) and where and all(isinstance(w, str) for w in where)
            if not ok or any(w not in k.node_index for w in where):
                raise r.fail(f"images.{image}", "a non-empty list of the nodes", where)
            mask = np.zeros(len(nodes), dtype=bool)
            mask[[k.node_index[w] for w in where]] = True
            k._images[image] = _read_only(mask)
        k._taken = r.integer("samples_taken", lo=0)
        k._series[:] = np.nan
        filled = min(k._taken, ring)
        rows = r.by_node("reservation_samples", k.node_index)
        if set(rows) != set(nodes):
            raise ValueError("scheduling context reservation_samples: must have one entry per node")
        for n, samples in rows.items():
            where = f"reservation_samples.{n}"
            if not isinstance(samples, list) or len(samples) != filled:
                raise ValueError(f"scheduling context {where}: must be a list of {filled} samples")
            for i, row in enumerate(samples):
                slot = (k._taken - filled + i) % ring
                k._series[slot, k.node_index[n]] = r.sample(row, f"{where}[{i}]")
        vol = r.by_node("volatility", k.node_index)
        if set(vol) != set(nodes):
            raise ValueError("scheduling context volatility: must have one entry per node")
        k._volatility = _read_only(
            np.array([r.number(vol[n], f"volatility.{n}") for n in nodes], dtype=np.float64)
        )
        return k


class _Reader:
    """Field checks for :meth:`ContextKeeper.from_json`: each error names the key."""

    KEYS = frozenset(
        {
            "version",
            "nodes",
            "cooldowns",
            "evictions",
            "ineligible_until",
            "images",
            "ring",
            "samples_taken",
            "reservation_samples",
            "volatility",
        }
    )

    def __init__(self, data: Any) -> None:
        if not isinstance(data, Mapping):
            raise ValueError(f"scheduling context: must be a mapping, got {type(data).__name__}")
        if data.get("version") != CONTEXT_VERSION:
            raise ValueError(
                f"scheduling context version: must be {CONTEXT_VERSION}, got {data.get('version')!r}"
            )
        missing = sorted(self.KEYS - set(data))
        if missing:
            raise ValueError(f"scheduling context {missing[0]}: missing")
        extra = sorted(set(data) - self.KEYS, key=str)
        if extra:
            raise ValueError(f"scheduling context {extra[0]}: unknown key")
        self.data = data

    @staticmethod
    def fail(key: str, rule: str, value: Any) -> ValueError:
        return ValueError(f"scheduling context {key}: must be {rule}, got {value!r}")

    def names(self) -> list[str]:
        v = self.data["nodes"]
        if not isinstance(v, list) or not all(isinstance(n, str) and n for n in v) or len(set(v)) != len(v):
            raise self.fail("nodes", "a list of distinct non-empty names", v)
        return v

    def integer(self, key: str, lo: int) -> int:
        v = self.data[key]
        if isinstance(v, bool) or not isinstance(v, int) or v < lo:
            raise self.fail(key, f"an integer >= {lo}", v)
        return v

    def number(self, v: Any, key: str) -> float:
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
            raise self.fail(key, "a finite number", v)
        return float(v)

    def sample(self, row: Any, key: str) -> list[float]:
        if not isinstance(row, list) or len(row) != NDIM:
            raise self.fail(key, f"a list of {NDIM} numbers or nulls", row)
        return [math.nan if x is None else self.number(x, f"{key}[{d}]") for d, x in enumerate(row)]

    def mapping(self, key: str) -> Mapping[str, Any]:
        v = self.data[key]
        if not isinstance(v, Mapping) or not all(isinstance(x, str) and x for x in v):
            raise self.fail(key, "a mapping with non-empty string keys", v)
        return v

    def by_node(self, key: str, nodes: Mapping[str, int]) -> Mapping[str, Any]:
        v = self.mapping(key)
        for n in v:
            if n not in nodes:
                raise ValueError(f"scheduling context {key}.{n}: not one of the nodes")
        return v

    def triples(self, key: str, nodes: Mapping[str, int]) -> list[tuple[str, str, float]]:
        """``[[equivalence key, node name, time], ...]``."""
        v = self.data[key]
        if not isinstance(v, list):
            raise self.fail(key, "a list of [equivalence key, node, time]", v)
        out = []
        for i, item in enumerate(v):
            where = f"{key}[{i}]"
            if not isinstance(item, list) or len(item) != 3 or not isinstance(item[0], str) or not item[0]:
                raise self.fail(where, "[equivalence key, node, time]", item)
            if not isinstance(item[1], str) or item[1] not in nodes:
                raise ValueError(f"scheduling context {where}: node {item[1]!r} is not one of the nodes")
            out.append((item[0], item[1], self.number(item[2], where)))
        return out
