"""Quantity parsing: plain numbers are IR units, Kubernetes strings convert per dimension."""

import math

import pytest

from kalena.core.quantity import QuantityError, parse_quantity

CASES = [
    ("cpu-millicores", "2500m", "cpu", 2.5),
    ("cpu-plain-number", 4, "cpu", 4.0),
    ("cpu-numeric-string", "0.25", "cpu", 0.25),
    ("cpu-100m-equals-0.1", "100m", "cpu", 0.1),
    ("ram-Mi", "512Mi", "ram", 0.5),
    ("ram-Gi", "16Gi", "ram", 16.0),
    ("ram-decimal-G", "5G", "ram", 5e9 / 2**30),
    ("ram-plain-is-GiB", 24, "ram", 24.0),
    ("ram-Ki", "1048576Ki", "ram", 1.0),
    ("storage-Ti", "2Ti", "storage", 2048.0),
    ("disk-G-is-MB/s", "5G", "disk.read", 5000.0),
    ("disk-M", "500M", "disk.write", 500.0),
    ("net-G", "1G", "network.in", 1000.0),
    ("net-Mi", "1Mi", "network.out", 2**20 / 1e6),
    ("exponent-form", "1e3", "cpu", 1000.0),
    ("gpu-whole", "1", "gpu", 1.0),
    ("leading-plus", "+2", "cpu", 2.0),
]


@pytest.mark.parametrize(("raw", "dim", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_parse(raw, dim, expected):
    assert math.isclose(parse_quantity(raw, dim), expected, rel_tol=1e-12)


BAD = [
    ("negative-number", -1),
    ("negative-string", "-1"),
    ("unknown-suffix", "12Zi"),
    ("boolean", True),
    ("nan", float("nan")),
    ("inf", float("inf")),
    ("empty", ""),
    ("garbage", "two cores"),
    ("list", [1]),
    ("none", None),
]


@pytest.mark.parametrize("raw", [b[1] for b in BAD], ids=[b[0] for b in BAD])
def test_rejects(raw):
    with pytest.raises(QuantityError) as e:
        parse_quantity(raw, "cpu")
    assert "cpu" in str(e.value)
