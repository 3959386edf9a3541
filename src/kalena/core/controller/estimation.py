"""The estimator's limit ``L``, one rule for every shell (SPEC: The reservation).

    L = max(min(limit, C), R)

``limit`` is the workload's own limit (``inf`` where it has none), ``C`` its node's capacity and
``R`` its request. The reservation never needs to exceed what the node can give (a limit above
capacity cannot be reached), and it must never be forced below the request (``r_0 = R``; a
capacity below a request, which a shrunk node can show, must not fail the estimator).
"""

from __future__ import annotations

import numpy as np


def estimator_limits(limit: np.ndarray, capacity: np.ndarray, request: np.ndarray) -> np.ndarray:
    """``max(min(limit, C), R)`` element-wise, shape of ``limit`` ((W, 8) with ``capacity`` per row)."""
    return np.maximum(np.minimum(limit, capacity), request)
