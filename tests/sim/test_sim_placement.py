"""The batch queue and the pre-pass admission bound."""

from __future__ import annotations

import numpy as np
import pytest

from kalena.sim.placement import BatchQueue, fit_counts, fit_counts_many

# (id, request (cpu, ram), slack rows, counts)
COUNTS = [
    ("binding-dimension-decides", (1.0, 2.0), [[4.0, 4.0], [10.0, 100.0]], [2, 10]),
    ("negative-slack-is-zero", (1.0, 1.0), [[-3.0, 5.0]], [0]),
    ("ineligible-node", (1.0, 1.0), [[-np.inf, -np.inf]], [0]),
    ("unconstrained-dimension", (1.0, 0.0), [[3.5, -1.0]], [3]),
]


@pytest.mark.parametrize(("req", "slack", "counts"), [c[1:] for c in COUNTS], ids=[c[0] for c in COUNTS])
def test_fit_counts(req, slack, counts):
    assert fit_counts(np.array(req), np.array(slack, dtype=float)).tolist() == counts


def test_queue_keeps_pod_order_within_a_class_and_counts():
    q = BatchQueue()
    for key, task in (("a", 5), ("b", 1), ("a", 2), ("a", 9)):
        q.add(key, task)
    assert q.classes == {"a": [2, 5, 9], "b": [1]} and len(q) == 4
    q.take("a", [2, 9])
    q.take("b", [1])
    assert q.classes == {"a": [5]} and len(q) == 1


def test_fit_counts_many_equals_fit_counts_row_by_row():
    rng = np.random.default_rng(0)
    slack = rng.uniform(-2, 10, (30, 8))
    slack[3] = -np.inf
    reqs = np.zeros((12, 8))
    reqs[:, 0] = rng.uniform(0.01, 3, 12)
    reqs[:6, 1] = rng.uniform(0.1, 4, 6)
    many = fit_counts_many(reqs, slack)
    for k in range(len(reqs)):
        assert many[k].tolist() == fit_counts(reqs[k], slack).tolist()
