"""Builders for controller tests: random multi-node views (hypothesis) and one-node slices of them."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import strategies as st

from kalena.core.enforcement.nodes import NodesView
from kalena.core.resources import CPU, NDIM, RAM, STORAGE


def node_view(view: NodesView, k: int) -> NodesView:
    """Node ``k`` of ``view`` alone, its rows in view order (the one-node case of a round)."""
    rows = view.rows_of(k)

    def node_col(a: np.ndarray | None) -> np.ndarray | None:
        return None if a is None else a[k : k + 1]

    return NodesView(
        names=(view.names[k],),
        capacity=view.capacity[k : k + 1],
        epoch=view.epoch[k : k + 1],
        node=np.zeros(len(rows), dtype=np.int64),
        ids=view.ids[rows],
        keys=view.keys[rows],
        is_batch=view.is_batch[rows],
        is_daemonset=view.is_daemonset[rows],
        priority=view.priority[rows],
        request=view.request[rows],
        reservation=view.reservation[rows],
        limit=view.limit[rows],
        usage=view.usage[rows],
        started_at=view.started_at[rows],
        slack_cpu=view.slack_cpu[rows],
        evicting=view.evicting[rows],
        throttled_s=view.throttled_s[rows],
        slot=view.slot[rows],
        triggered=view.triggered[k : k + 1],
        acute=view.acute[k : k + 1],
        psi_some=view.psi_some[k : k + 1],
        memory_events=view.memory_events[k : k + 1],
        node_used=node_col(view.node_used),
        node_limit=node_col(view.node_limit),
        serial=None if view.serial is None else view.serial[rows],
    )


_amount = st.sampled_from([0.0, 0.25, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])


@st.composite
def _row(draw: st.DrawFn) -> dict:
    req = np.zeros(NDIM)
    req[CPU], req[RAM] = draw(_amount), draw(_amount)
    req[STORAGE] = draw(st.sampled_from([0.0, 1.0]))
    res = req.copy()
    res[CPU] = draw(st.sampled_from([req[CPU], req[CPU] * 0.5, req[CPU] + 1]))
    res[RAM] = draw(st.sampled_from([req[RAM], req[RAM] * 0.5, req[RAM] + 1]))
    use = np.full(NDIM, np.nan)
    if draw(st.booleans()):
        use[CPU] = draw(_amount)
        use[RAM] = draw(_amount)
    lim = np.full(NDIM, np.inf)
    if draw(st.booleans()):
        lim[RAM] = max(req[RAM], 0.5) * draw(st.sampled_from([1.0, 1.5]))
    if draw(st.booleans()):
        lim[CPU] = max(req[CPU], 0.5) * 2
    return {
        "is_batch": draw(st.booleans()),
        "is_daemonset": draw(st.booleans()) and draw(st.booleans()),
        "priority": draw(st.integers(0, 3)),
        "request": req,
        "reservation": res,
        "limit": lim,
        "usage": use,
        "started_at": draw(st.sampled_from([-math.inf, 0.0, 50.0, 100.0])),
        "slack_cpu": draw(st.booleans()) or draw(st.booleans()),
        "evicting": draw(st.booleans()) and draw(st.booleans()) and draw(st.booleans()),
        "throttled_s": draw(st.sampled_from([0.0, 0.0, 100.0, 250.0])),
    }


@st.composite
def nodes_views(draw: st.DrawFn, max_nodes: int = 4, max_rows: int = 6) -> NodesView:
    """A random view: 1..max_nodes nodes, 0..max_rows residents each, rows shuffled across nodes."""
    n = draw(st.integers(1, max_nodes))
    rows: list[tuple[int, dict]] = []
    for k in range(n):
        rows.extend((k, draw(_row())) for _ in range(draw(st.integers(0, max_rows))))
    # free slots among the rows, as a shell with a free list has them: garbage a policy must ignore
    holes = draw(st.integers(0, 3))
    rows.extend((draw(st.integers(0, n - 1)), {**draw(_row()), "absent": True}) for _ in range(holes))
    perm = draw(st.permutations(range(len(rows)))) if rows else []
    rows = [rows[i] for i in perm]
    w = len(rows)
    present = np.array([not r.get("absent", False) for _, r in rows], dtype=bool)

    def col(key: str, dtype: type) -> np.ndarray:
        return np.array([r[key] for _, r in rows], dtype=dtype).reshape(
            (w, *np.shape(rows[0][1][key])) if w else (0,)
        )

    def mat(key: str) -> np.ndarray:
        return np.array([r[key] for _, r in rows], dtype=np.float64).reshape(w, NDIM)

    cap = np.zeros((n, NDIM))
    cap[:, CPU] = [draw(st.sampled_from([4.0, 8.0])) for _ in range(n)]
    cap[:, RAM] = [draw(st.sampled_from([6.0, 8.0, 12.0])) for _ in range(n)]
    cap[:, STORAGE] = draw(st.sampled_from([math.inf, 10.0]))
    cap[:, 3 + 1 :] = 100.0
    psi = np.full((n, NDIM), np.nan)
    psi[:, CPU] = [draw(st.sampled_from([math.nan, 0.0, 0.1, 0.5])) for _ in range(n)]
    triggered = np.zeros((n, NDIM), dtype=bool)
    acute = np.zeros((n, NDIM), dtype=bool)
    triggered[:, RAM] = [draw(st.booleans()) and draw(st.booleans()) for _ in range(n)]
    acute[:, RAM] = [draw(st.booleans()) and draw(st.booleans()) for _ in range(n)]
    triggered[:, CPU] = [draw(st.booleans()) and draw(st.booleans()) for _ in range(n)]
    return NodesView(
        names=tuple(f"node-{k}" for k in range(n)),
        capacity=cap,
        epoch=np.array([draw(st.integers(0, 5)) for _ in range(n)], dtype=np.int64),
        node=np.array([k for k, _ in rows], dtype=np.int64),
        ids=np.array([f"w{i}" if present[i] else "" for i in range(w)], dtype=object),
        keys=np.array([f"k{i % 3}" for i in range(w)], dtype=object),
        is_batch=col("is_batch", bool),
        is_daemonset=col("is_daemonset", bool),
        priority=col("priority", np.int64),
        request=mat("request"),
        reservation=mat("reservation"),
        limit=mat("limit"),
        usage=mat("usage"),
        started_at=col("started_at", np.float64),
        slack_cpu=col("slack_cpu", bool),
        evicting=col("evicting", bool),
        throttled_s=col("throttled_s", np.float64),
        slot=np.arange(w, dtype=np.int64) * 2 + 1,
        triggered=triggered,
        acute=acute,
        psi_some=psi,
        memory_events=np.array([draw(st.sampled_from([0, 0, 1])) for _ in range(n)], dtype=np.int64),
        present=present if holes else None,
    ).check()
