"""The binding dimension: which dimension binds, on how many nodes, by what margin, what would fit."""

import numpy as np
import pytest

from kalena.core.placement import BindingDimension, binding_dimension, binding_sort_key


def rows(*pairs: tuple[float, float]) -> np.ndarray:
    out = np.zeros((len(pairs), 8))
    out[:, :2] = pairs
    return out


CAP = (8.0, 16.0)
CASES = [
    # id, used (cpu, ram) per candidate node, request (cpu, ram), expected
    # n0 short 1 core, n1 short 1 GiB: one node each, cpu first by dimension order;
    # on n0 ram fits and 1 core is free, so a 1-core request would fit
    ("tie-goes-to-dimension-order", [(7, 4), (6, 15)], (2, 2), BindingDimension("cpu", 1, 1.0, 1.0)),
    ("cpu-everywhere", [(7, 0), (7.5, 0), (6.5, 0)], (2, 0), BindingDimension("cpu", 3, 0.5, 1.5)),
    ("ram-binds-more-nodes", [(7, 15), (1, 15), (1, 15)], (2, 2), BindingDimension("ram", 3, 1.0, 1.0)),
    ("no-node-fits-the-others", [(7, 15)], (2, 2), BindingDimension("cpu", 1, 1.0, None)),
    ("already-over-capacity", [(9, 0)], (1, 0), BindingDimension("cpu", 1, 2.0, None)),
    ("fits-everywhere", [(1, 1)], (1, 1), None),
    ("no-candidates", [], (1, 1), None),
]


@pytest.mark.parametrize(("used", "req", "want"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_binding_dimension(used, req, want):
    u = rows(*used) if used else np.zeros((0, 8))
    cap = rows(*[CAP] * len(used)) if used else np.zeros((0, 8))
    r = np.zeros(8)
    r[:2] = req
    assert binding_dimension(r, u, cap) == want


SORT = [
    ("more-nodes-first", [(3, 1), (5, 4)], [(5, 4), (3, 1)]),
    ("then-dimension-order", [(2, 7), (2, 0)], [(2, 0), (2, 7)]),
]


@pytest.mark.parametrize(("items", "want"), [c[1:] for c in SORT], ids=[c[0] for c in SORT])
def test_binding_sort_key(items, want):
    assert sorted(items, key=lambda t: binding_sort_key(*t)) == want
