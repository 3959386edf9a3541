"""Quantity parsing: plain numbers are IR units, Kubernetes strings convert per dimension."""

import math

import pytest

from kalena.core.quantity import MAX_QUANTITY, QuantityError, QuantityTooLarge, parse_quantity

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


# bounds (docs/cli.md "Bounds on input") --------------------------------------------------------
TOO_LARGE = [
    ("string-1e400", "1e400"),
    ("exponent-bomb", "1e999999999"),
    ("above-2^42", "1e13"),
    ("int-beyond-float", 10**400),
    ("long-digit-string", "9" * 40),
    ("suffix-overflow", "99999999999999Ei"),
]


@pytest.mark.parametrize("raw", [b[1] for b in TOO_LARGE], ids=[b[0] for b in TOO_LARGE])
def test_a_quantity_beyond_the_bound_is_refused_naming_it(raw):
    with pytest.raises(QuantityTooLarge) as e:
        parse_quantity(raw, "cpu")
    assert "above the largest quantity accepted for cpu" in str(e.value) and len(str(e.value)) < 200


def test_the_bound_itself_is_accepted_and_every_thousandth_below_it_is_distinct():
    assert parse_quantity(MAX_QUANTITY, "cpu") == MAX_QUANTITY
    assert parse_quantity(str(int(MAX_QUANTITY)), "cpu") == MAX_QUANTITY
    with pytest.raises(QuantityTooLarge):
        parse_quantity(MAX_QUANTITY * (1 + 1e-12), "cpu")
    top = int(MAX_QUANTITY) - 1
    assert parse_quantity(f"{top}.998", "cpu") < parse_quantity(f"{top}.999", "cpu")


def test_a_caller_may_give_its_own_bound():
    assert parse_quantity("64Gi", "cpu", limit=2.0**53) == 64 * 2**30
    with pytest.raises(QuantityTooLarge):
        parse_quantity("9Pi", "cpu", limit=2.0**53)


def test_a_tiny_exponent_is_zero_at_once_and_a_denormal_is_a_number():
    assert parse_quantity("1e-999999999", "cpu") == 0.0
    assert parse_quantity("0e999999999", "cpu") == 0.0
    assert parse_quantity("5e-324", "cpu") == 5e-324
