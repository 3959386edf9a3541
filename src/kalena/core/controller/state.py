"""What one node round hands the next: the only state the controller keeps, as plain arrays.

Per node: the batch cpu allowance (the throttle's ``A_prev``) and the escalation runs. Per
workload (by the shell's stable ``slot``, checked against the workload id, or against the view's
``serial`` where the shell gives one): the reservation the previous round saw, so that a "why
evicted" record names the workload whose reservation rose since then (a workload placed again
counts as a newcomer where serials are given). A shell stores it between rounds (the agent in its
crash-safe state file, through :meth:`RoundState.to_json`) and passes it back unchanged.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from kalena.core.enforcement.escalation import EscalationRuns
from kalena.core.resources import DIMS, NDIM

STATE_VERSION = 1


def _num(x: float) -> float | str:
    """JSON has no NaN or infinity: they travel as the strings "nan", "inf", "-inf"."""
    return x if math.isfinite(x) else ("nan" if math.isnan(x) else ("inf" if x > 0 else "-inf"))


def _unnum(x: object, key: str) -> float:
    if isinstance(x, str) and x in ("nan", "inf", "-inf"):
        return float(x)
    if isinstance(x, bool) or not isinstance(x, int | float):
        raise ValueError(f"round state {key}: must be a number, got {x!r}")
    return float(x)


@dataclass(frozen=True, slots=True, eq=False)
class RoundState:
    """The controller's memory between rounds (module docstring)."""

    allowance: np.ndarray
    runs: EscalationRuns
    # the previous round's rows: their slots (P,), workload ids (P,) and reservations (P, 8); from
    # a view with serials, the serials (P,) (-1: a free slot) stand where the ids would
    previous_slots: np.ndarray | None = None
    previous_ids: np.ndarray | None = None
    previous_reservation: np.ndarray | None = None
    previous_serials: np.ndarray | None = None

    @classmethod
    def initial(cls, n_nodes: int) -> RoundState:
        """Before the first round: no allowance yet, no history, nothing seen."""
        return cls(np.full(n_nodes, np.nan), EscalationRuns.empty(n_nodes))

    @property
    def n_nodes(self) -> int:
        return len(self.allowance)

    def previous_of(
        self, slots: np.ndarray, ids: np.ndarray, serials: np.ndarray | None = None
    ) -> np.ndarray | None:
        """The previous round's reservations of these rows (NaN: not seen there), or None.

        A row is the one seen before if its slot held the same workload: the same serial where
        both rounds have serials, else the same id."""
        if self.previous_serials is not None:
            before, now = self.previous_serials, serials
        else:
            before, now = self.previous_ids, ids
        if self.previous_slots is None or before is None or now is None or self.previous_reservation is None:
            return None
        out = np.full((len(slots), NDIM), np.nan)
        top = max(int(self.previous_slots.max(initial=-1)), int(np.max(slots, initial=-1))) + 1
        where = np.full(top, -1, dtype=np.int64)  # slot -> previous row (built only when asked)
        where[self.previous_slots] = np.arange(len(self.previous_slots))
        k = where[slots]
        seen = np.flatnonzero(k >= 0)
        hit = seen[before[k[seen]] == np.asarray(now, dtype=before.dtype)[seen]]
        out[hit] = self.previous_reservation[k[hit]]
        return out

    def equals(self, other: RoundState) -> bool:
        """Equal arrays (NaN equal to NaN): what a JSON round trip must preserve."""

        def same(a: np.ndarray | None, b: np.ndarray | None) -> bool:
            if a is None or b is None:
                return a is None and b is None
            if a.dtype == object or b.dtype == object:
                return a.shape == b.shape and bool(np.all(a == b))
            return bool(np.array_equal(a, b, equal_nan=True))

        r, s = self.runs, other.runs
        return (
            same(self.allowance, other.allowance)
            and all(
                same(getattr(r, f), getattr(s, f))
                for f in ("open_time", "open_dims", "rounds", "first", "last", "dims")
            )
            and self._seen() == other._seen()
        )

    def _seen(self) -> dict[str | int, tuple[int, tuple[float | str, ...]]] | None:
        """The previous round's workloads: id (or serial) -> (slot, reservation); free slots left out."""
        keys = self.previous_ids if self.previous_serials is None else self.previous_serials
        if keys is None or self.previous_slots is None or self.previous_reservation is None:
            return None
        return {
            (str(w) if self.previous_serials is None else int(w)): (
                int(self.previous_slots[i]),
                tuple(_num(x) for x in self.previous_reservation[i].tolist()),
            )
            for i, w in enumerate(keys.tolist())
            if (w if self.previous_serials is None else w >= 0)
        }

    # JSON -------------------------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        """Plain JSON types; dimensions by name; NaN and infinities as strings."""
        r = self.runs

        def dims(mask: np.ndarray) -> list[list[str]]:
            return [[DIMS[d] for d in np.flatnonzero(row)] for row in mask]

        out: dict[str, Any] = {
            "version": STATE_VERSION,
            "allowance": [_num(x) for x in self.allowance.tolist()],
            "open_time": [_num(x) for x in r.open_time.tolist()],
            "open_dims": dims(r.open_dims),
            "rounds": [int(x) for x in r.rounds.tolist()],
            "first": [_num(x) for x in r.first.tolist()],
            "last": [_num(x) for x in r.last.tolist()],
            "dims": dims(r.dims),
        }
        if self.previous_ids is not None and self.previous_reservation is not None:
            assert self.previous_slots is not None
            keep = [i for i, w in enumerate(self.previous_ids.tolist()) if w]  # free slots: nobody
            ids = [str(self.previous_ids[i]) for i in keep]
            rows = self.previous_reservation[keep].tolist()
            out["previous"] = {w: [_num(x) for x in row] for w, row in zip(ids, rows, strict=True)}
            out["previous_slots"] = {w: int(self.previous_slots[i]) for w, i in zip(ids, keep, strict=True)}
        seen = self._seen() if self.previous_serials is not None else None
        if seen is not None:  # [serial, slot, reservation] per workload
            out["previous_by_serial"] = [[k, slot, list(row)] for k, (slot, row) in seen.items()]
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RoundState:
        """The inverse of :meth:`to_json`; malformed content raises ``ValueError`` naming the key."""
        if not isinstance(data, Mapping):
            raise ValueError(f"round state: must be a mapping, got {type(data).__name__}")
        if data.get("version") != STATE_VERSION:
            raise ValueError(f"round state version: must be {STATE_VERSION}, got {data.get('version')!r}")
        known = {"version", "allowance", "open_time", "open_dims", "rounds", "first", "last", "dims"}
        extra = set(data) - known - {"previous", "previous_slots", "previous_by_serial"}
        if extra:
            raise ValueError(f"round state {sorted(extra)[0]}: unknown key")

        def nums(key: str) -> np.ndarray:
            v = data.get(key)
            if not isinstance(v, list):
                raise ValueError(f"round state {key}: must be a list")
            return np.array([_unnum(x, f"{key}[{i}]") for i, x in enumerate(v)], dtype=np.float64)

        def masks(key: str, n: int) -> np.ndarray:
            v = data.get(key)
            if not isinstance(v, list) or len(v) != n:
                raise ValueError(f"round state {key}: must be a list of {n} lists of dimension names")
            out = np.zeros((n, NDIM), dtype=bool)
            for i, row in enumerate(v):
                if not isinstance(row, list) or any(d not in DIMS for d in row):
                    raise ValueError(f"round state {key}[{i}]: must list dimension names, got {row!r}")
                for d in row:
                    out[i, DIMS.index(d)] = True
            return out

        allowance = nums("allowance")
        n = len(allowance)
        cols = {k: nums(k) for k in ("open_time", "first", "last")}
        rounds = data.get("rounds")
        if not isinstance(rounds, list) or any(
            isinstance(x, bool) or not isinstance(x, int) or x < 0 for x in rounds
        ):
            raise ValueError("round state rounds: must be a list of non-negative integers")
        for k, a in (*cols.items(), ("rounds", rounds)):
            if len(a) != n:
                raise ValueError(f"round state {k}: must have {n} entries, got {len(a)}")
        runs = EscalationRuns(
            cols["open_time"],
            masks("open_dims", n),
            np.array(rounds, dtype=np.int64),
            cols["first"],
            cols["last"],
            masks("dims", n),
        )
        prev, where = data.get("previous"), data.get("previous_slots")
        if "previous_by_serial" in data:
            if prev is not None or where is not None:
                raise ValueError("round state previous_by_serial: given with previous, which it replaces")
            return cls(allowance, runs, *_by_serial(data["previous_by_serial"]))
        if prev is None and where is None:
            return cls(allowance, runs)
        if not isinstance(prev, Mapping) or not isinstance(where, Mapping) or set(prev) != set(where):
            raise ValueError("round state previous: must map the same workload ids as previous_slots")
        ids = list(where)  # JSON keeps the order written: the rows come back as they were
        slots = np.zeros(len(ids), dtype=np.int64)
        res = np.full((len(ids), NDIM), np.nan)
        for k, wid in enumerate(ids):
            s = where[wid]
            if isinstance(s, bool) or not isinstance(s, int) or s < 0:
                raise ValueError(
                    f"round state previous_slots.{wid}: must be a non-negative integer, got {s!r}"
                )
            row = prev[wid]
            if not isinstance(row, list) or len(row) != NDIM:
                raise ValueError(f"round state previous.{wid}: must list {NDIM} numbers")
            slots[k] = s
            res[k] = [_unnum(x, f"previous.{wid}") for x in row]
        if len(set(slots.tolist())) != len(ids):
            raise ValueError("round state previous_slots: two workloads in one slot")
        return cls(allowance, runs, slots, np.array(ids, dtype=object).reshape(-1), res)


def _by_serial(entries: object) -> tuple[np.ndarray, None, np.ndarray, np.ndarray]:
    """``previous_by_serial`` ([serial, slot, reservation] each) as the state's columns."""
    if not isinstance(entries, list):
        raise ValueError("round state previous_by_serial: must be a list of [serial, slot, reservation]")
    slots = np.zeros(len(entries), dtype=np.int64)
    serials = np.zeros(len(entries), dtype=np.int64)
    res = np.full((len(entries), NDIM), np.nan)
    for k, e in enumerate(entries):
        key = f"previous_by_serial[{k}]"
        if not isinstance(e, list) or len(e) != 3:
            raise ValueError(f"round state {key}: must be [serial, slot, reservation]")
        for j, what in ((0, "serial"), (1, "slot")):
            v = e[j]
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise ValueError(f"round state {key}: the {what} must be a non-negative integer, got {v!r}")
        if not isinstance(e[2], list) or len(e[2]) != NDIM:
            raise ValueError(f"round state {key}: the reservation must list {NDIM} numbers")
        serials[k], slots[k] = e[0], e[1]
        res[k] = [_unnum(x, key) for x in e[2]]
    if len(set(slots.tolist())) != len(entries) or len(set(serials.tolist())) != len(entries):
        raise ValueError("round state previous_by_serial: two workloads in one slot, or one serial twice")
    return slots, None, res, serials
