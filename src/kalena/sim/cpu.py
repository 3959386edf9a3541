"""CPU on the simulated nodes: contention (the kernel's part) and batch quotas (the core's throttle).

**Contention.** Each row wants ``w`` cores: production its demand (under an anti-starvation cap, if
one applies), batch ``min(demand, quota)``. Where a node's wants exceed its capacity ``C``, the CFS
scheduler shares ``C`` in proportion to cgroup ``cpu.weight`` (production from its request, batch at
the core's minimal ``batch_weight``), nobody above its want: weighted max-min fairness, computed by
the core's :func:`~kalena.core.enforcement.water_fill`. Production demand left unmet is recorded.
The node's cpu PSI ``some`` is modelled as the share of wanted cpu time that waited,
``psi = max(0, 1 - C / sum w)``.

**Quotas** for the next tick follow the core's :func:`~kalena.core.enforcement.plan_throttle`. Its
allowance (``batch_cpu_allowance``'s formula) is evaluated for all nodes at once. Where no batch cap binds
(every ``A * b_i / sum b <= cap_i``, ``b_i = max(R_i, q_min)``) and cpu PSI is below the threshold,
``plan_throttle``'s quotas reduce exactly to

    q_i = min(C, max(q_min, max(min(floor_i, cap_i), A * b_i / sum b)))

which this module evaluates for all nodes at once (the *fast path*). Every other node with batch
goes through ``plan_throttle`` itself. :func:`audit` compares the two on sampled nodes; the
simulator counts mismatches (a mismatch is a simulator bug) and the tests assert there are none.
"""

from __future__ import annotations

import math

import numpy as np

from kalena.core.enforcement import (
    NodeConditions,
    ThrottleConfig,
    batch_cpu_allowance,
    plan_throttle,
    water_fill,
)
from kalena.core.resources import CPU, NDIM

REL_TOL = 1e-9


def contend(
    live: np.ndarray, node: np.ndarray, want: np.ndarray, weight: np.ndarray, capacity: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(granted cpu per row, psi ``some`` per node): module formula; rows outside ``live`` untouched."""
    n = len(capacity)
    total = np.bincount(node[live], weights=want[live], minlength=n)
    granted = want.copy()
    psi = np.zeros(n)
    over = np.flatnonzero(total > capacity * (1.0 + REL_TOL))
    if len(over):
        psi[over] = 1.0 - capacity[over] / total[over]
        on = node[live]
        for k in over:
            rows = live[on == k]
            granted[rows] = water_fill(float(capacity[k]), want[rows], weight[rows])
    return granted, psi


def pressure_conditions(psi: float) -> NodeConditions:
    """The snapshot conditions of a node whose cpu PSI ``some`` is ``psi`` (other dims unknown)."""
    some = np.full(NDIM, np.nan)
    some[CPU] = psi
    return NodeConditions(psi_some=some)


def allowances(
    capacity: np.ndarray,
    claim: np.ndarray,
    batch_used: np.ndarray,
    sampled: np.ndarray,
    pressured: np.ndarray,
    previous: np.ndarray,
    config: ThrottleConfig,
) -> np.ndarray:
    """The batch cpu allowance ``A_n`` of every node, by ``batch_cpu_allowance``'s formula, vectorised.

    ``previous`` NaN is the first round; ``sampled`` False means no batch usage is known (the
    core's ``batch_used=None``). Audited against the core through ``plan_throttle`` (see
    :func:`audit`), which computes the same allowance from the same inputs.
    """
    with np.errstate(invalid="ignore"):
        target = np.minimum(np.maximum(capacity - claim - config.headroom_fraction * capacity, 0.0), capacity)
    target = np.where(np.isinf(capacity), np.inf, target)
    base = np.minimum(np.where(np.isnan(previous), np.inf, previous), np.where(sampled, batch_used, np.inf))
    keep = 1.0 - config.pressure_cut
    ref = np.where(np.isinf(base), target, base)
    cut = np.minimum(target, keep * ref if keep > 0 else 0.0)
    target = np.where(pressured, cut, target)
    first = np.isnan(previous)
    shrink = first | (target <= np.where(first, np.inf, previous))
    with np.errstate(invalid="ignore"):
        grown = np.minimum(target, previous + config.growth_fraction * capacity)
    return np.where(shrink, target, grown)


def core_allowance(
    capacity: float,
    claim: float,
    used: float | None,
    pressured: bool,
    previous: float | None,
    config: ThrottleConfig,
) -> float:
    """The core's own allowance for one node (used by the tests to check :func:`allowances`)."""
    return batch_cpu_allowance(capacity, claim, used, pressured, previous, config)[1]


def fast_quotas(
    on: np.ndarray,
    request: np.ndarray,
    caps: np.ndarray,
    floors: np.ndarray,
    allowance: np.ndarray,
    capacity: np.ndarray,
    config: ThrottleConfig,
) -> tuple[np.ndarray, np.ndarray]:
    """(quota per batch row, (N,) bool nodes where a cap binds): the fast path of the module docstring.

    ``on``, ``request`` (cpu), ``caps`` and ``floors`` are per batch row; ``allowance`` and
    ``capacity`` (cpu) per node.
    """
    n = len(capacity)
    basis = np.maximum(request, config.min_quota_cores)
    total = np.bincount(on, weights=basis, minlength=n)
    a = allowance[on]
    with np.errstate(invalid="ignore", divide="ignore"):
        share = np.where(np.isinf(a), caps, a / total[on] * basis)
    binds = np.zeros(n, dtype=bool)
    binds[on[share > caps * (1.0 + REL_TOL)]] = True
    floor = np.minimum(floors, caps)
    q = np.where(floor > share, floor, share)
    q = np.minimum(capacity[on], np.maximum(config.min_quota_cores, q))
    return q, binds


def core_quotas(snap, config: ThrottleConfig, now: float, previous: float | None, floors) -> dict[str, float]:  # type: ignore[no-untyped-def]
    """The core's plan for one node, as workload id -> quota."""
    plan = plan_throttle(snap, config, now, previous, floors)
    return {d.workload: d.quota for d in plan.decisions}


def audit(fast: dict[str, float], core: dict[str, float]) -> int:
    """How many quotas differ between the fast path and the core (relative tolerance 1e-9)."""
    bad = 0
    for wid, q in core.items():
        f = fast.get(wid)
        if f is None or not math.isclose(f, q, rel_tol=REL_TOL, abs_tol=1e-12):
            bad += 1
    return bad + len(set(fast) - set(core))
