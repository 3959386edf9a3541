"""The resource vector and the reclaimability classes."""

import math

import numpy as np
import pytest

from kalena.core import resources as r
from kalena.core.resources import Resources


def test_dimension_order_and_classes():
    assert r.DIMS == ("cpu", "ram", "gpu", "storage", "disk.read", "disk.write", "network.in", "network.out")
    assert r.COMPRESSIBLE.tolist() == [True, False, False, False, True, True, True, True]
    assert r.NON_COMPRESSIBLE.tolist() == [False, True, False, True, False, False, False, False]
    assert r.NON_RECLAIMABLE.tolist() == [False, False, True, False, False, False, False, False]
    assert int(r.RECLAIMABLE.sum()) == 7
    with pytest.raises(ValueError):
        r.RECLAIMABLE[0] = False  # the masks are shared constants: read-only


def test_from_mapping_and_of_agree():
    a = Resources.from_mapping({"cpu": "500m", "ram": "1Gi", "disk.read": 20, "network.out": "1G"})
    b = Resources.of(cpu=0.5, ram=1, disk_read=20, net_out=1000)
    assert a == b
    assert a["cpu"] == 0.5 and a[r.NET_OUT] == 1000.0


def test_unknown_dimension_names_the_valid_set():
    with pytest.raises(KeyError, match="unknown resource dimension 'cores'"):
        Resources.from_mapping({"cores": 1})


def test_negative_and_nan_rejected():
    with pytest.raises(ValueError, match="cpu"):
        Resources((-1.0,) + (0.0,) * 7)
    with pytest.raises(ValueError, match="ram"):
        Resources((0.0, math.nan) + (0.0,) * 6)


def test_arithmetic_and_fit():
    cap = Resources.of(cpu=4, ram=8)
    used = Resources.of(cpu=3, ram=9)
    assert cap.minus(used) == Resources.of(cpu=1, ram=0)
    assert (used + used)["cpu"] == 6
    assert not used.fits_within(cap)
    assert Resources.of(cpu=4, ram=8).fits_within(cap)
    inf = Resources.unconstrained()
    assert inf.minus(used)["ram"] == math.inf
    assert used.fits_within(inf)


def test_stack_shape():
    arr = r.stack([Resources.of(cpu=1), Resources.of(ram=2)])
    assert arr.shape == (2, 8) and arr.dtype == np.float64
    assert arr[1, r.RAM] == 2.0
    assert r.stack([]).shape == (0, 8)


def test_str_lists_nonzero_only():
    assert str(Resources.of(cpu=2, ram=0.5)) == "{cpu=2, ram=0.5}"
    assert str(Resources.zero()) == "{}"
