"""The exported fit rule: U + R <= C on every dimension, with reasons carrying the numbers."""

import math

import numpy as np
import pytest

from kalena.core.ledger import (
    fits_mask,
    insufficient_resources,
    insufficient_resources_rows,
    shortfall,
    tolerant_capacity,
)
from kalena.core.resources import LEGACY_FLAT_NAMES, dim_index
from kalena.core.verdict import ReasonCode


def vec(**kw: float) -> np.ndarray:
    """An 8-vector; unlike ``res`` it accepts ``inf`` (unconstrained capacity)."""
    out = np.zeros(8)
    for k, v in kw.items():
        out[dim_index(LEGACY_FLAT_NAMES.get(k, k))] = v
    return out


CASES = [
    # id, request, used, capacity, insufficient dims
    ("fits-with-room", vec(cpu=1, ram=2), vec(cpu=2, ram=4), vec(cpu=4, ram=8), ()),
    ("exact-fit", vec(cpu=2, ram=4), vec(cpu=2, ram=4), vec(cpu=4, ram=8), ()),
    ("cpu-short", vec(cpu=2.5, ram=1), vec(cpu=2, ram=4), vec(cpu=4, ram=8), ("cpu",)),
    (
        "ram-and-disk-short",
        vec(ram=5, disk_read=20),
        vec(ram=4, disk_read=90),
        vec(ram=8, disk_read=100),
        ("ram", "disk.read"),
    ),
    ("gpu-short", vec(gpu=1), vec(gpu=8), vec(gpu=8), ("gpu",)),
    ("unconstrained-never-short", vec(cpu=1000), vec(cpu=5), vec(cpu=math.inf), ()),
    ("float-drift-absorbed", vec(cpu=0.3), vec(cpu=0.1 + 0.2 + 0.4 - 0.4), vec(cpu=0.6), ()),
]


@pytest.mark.parametrize(("req", "used", "cap", "dims"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_insufficient_resources(req, used, cap, dims):
    reasons = insufficient_resources(req, used, cap)
    assert tuple(r.dimension for r in reasons) == dims
    assert all(r.code is ReasonCode.INSUFFICIENT_RESOURCE for r in reasons)
    for r in reasons:
        assert r.shortfall > 0
    assert bool(fits_mask(req, used[None], tolerant_capacity(cap)[None])[0]) == (not dims)


def test_reason_numbers_are_the_inputs():
    (r,) = insufficient_resources(vec(cpu=2.5), vec(cpu=2), vec(cpu=4))
    assert (r.requested, r.used, r.capacity, r.shortfall) == (2.5, 2.0, 4.0, 0.5)
    assert r.phrase() == "Insufficient cpu"


def test_vectorised_over_nodes_and_shortfall():
    used = np.array([vec(cpu=1), vec(cpu=3), vec(cpu=3.5)])
    cap = np.array([vec(cpu=4)] * 3)
    req = vec(cpu=1)
    assert fits_mask(req, used, tolerant_capacity(cap)).tolist() == [True, True, False]
    assert shortfall(req, used, cap)[:, 0].tolist() == [-2.0, 0.0, 0.5]


def test_tolerance_is_tiny():
    # a millicore over on a 1,000-core node is still rejected
    assert insufficient_resources(vec(cpu=0.001), vec(cpu=1000), vec(cpu=1000))


def test_reasons_for_many_nodes_are_the_one_node_reasons():
    req = np.array(CASES[3][1])
    used = np.array([c[2] for c in CASES])
    cap = np.array([c[3] for c in CASES])
    want = [insufficient_resources(req, u, c) for u, c in zip(used, cap, strict=True)]
    assert insufficient_resources_rows(req, used, cap) == want
    assert insufficient_resources_rows(req, used[:0], cap[:0]) == []
