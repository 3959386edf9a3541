"""Score terms with hand-computed numbers, the volatility helper and the weights."""

import math
import re
import warnings

import numpy as np
import pytest

from kalena.core.placement import (
    PlacementConfig,
    bucket_key,
    colocation,
    image_masks,
    reservation_volatility,
    stability,
    stranded_balance,
)
from kalena.core.placement.score import StrandedParts

CPU_RAM = np.array([1, 1, 0, 0, 0, 0, 0, 0], dtype=bool)
INF = math.inf


def v8(*xs: float) -> np.ndarray:
    out = np.zeros(8)
    out[: len(xs)] = xs
    return out


STRANDED = [
    # id, quantised slack, request, capacity, dims, expected
    # f = (2/8, 6/16) = (0.25, 0.375): std 0.0625, score 1 - 0.125
    ("uneven-after-placement", v8(4, 8), v8(2, 2), v8(8, 16), CPU_RAM, 0.875),
    # f = (0.5, 0.5): perfectly balanced
    ("balanced", v8(4, 8), v8(0, 0), v8(8, 16), CPU_RAM, 1.0),
    # f = (0.5, 0.25): std 0.125
    ("ram-poor", v8(4, 4), v8(0, 0), v8(8, 16), CPU_RAM, 0.75),
    # f = (1, 0): the worst imbalance, std 0.5
    ("all-cpu-no-ram", v8(8, 0), v8(0, 0), v8(8, 16), CPU_RAM, 0.0),
    # request larger than slack clips at 0: f = (0, 0.5), std 0.25
    ("clipped", v8(1, 8), v8(2, 0), v8(8, 16), CPU_RAM, 0.5),
    # an unconstrained dimension is ignored: one usable dimension left, nothing to strand
    ("inf-capacity-ignored", v8(4, INF), v8(0, 0), v8(8, INF), CPU_RAM, 1.0),
    # zero capacity ignored the same way
    ("zero-capacity-ignored", v8(4, 0), v8(0, 0), v8(8, 0), CPU_RAM, 1.0),
]


@pytest.mark.parametrize(
    ("q", "req", "cap", "dims", "want"), [c[1:] for c in STRANDED], ids=[c[0] for c in STRANDED]
)
def test_stranded_balance(q, req, cap, dims, want):
    got = stranded_balance(q[None], req, cap[None], dims)
    assert got.shape == (1,)
    assert got[0] == pytest.approx(want)


def test_stranded_over_seven_dimensions_is_in_unit_interval():
    rng = np.random.default_rng(0)
    cap = rng.uniform(1, 100, size=(50, 8))
    q = rng.uniform(-10, 100, size=(50, 8))
    s = stranded_balance(q, rng.uniform(0, 5, size=8), cap, PlacementConfig().stranded_mask)
    assert np.all((s >= 0) & (s <= 1))


COLOC = [
    ("empty", 0, 0, 0.0),
    ("service-only", 3, 0, 0.5),
    ("mixed", 1, 2, 1.0),
    ("batch-only", 0, 4, 0.0),
]


@pytest.mark.parametrize(("svc", "bat", "want"), [c[1:] for c in COLOC], ids=[c[0] for c in COLOC])
def test_colocation(svc, bat, want):
    assert colocation(np.array([svc]), np.array([bat]))[0] == want


STABILITY = [("flat", 0.0, 1.0), ("half", 0.005, 0.5), ("at-scale", 0.01, 0.0), ("beyond", 0.05, 0.0)]


@pytest.mark.parametrize(("var", "want"), [c[1:] for c in STABILITY], ids=[c[0] for c in STABILITY])
def test_stability(var, want):
    assert stability(np.array([var]), 0.01)[0] == pytest.approx(want)


def test_reservation_volatility_by_hand():
    cap = np.array([v8(8, 16)])
    cap[0, 2:] = INF  # only cpu and ram are finite
    series = np.zeros((3, 1, 8))
    series[:, 0, 0] = [2, 6, np.nan]  # cpu 0.25, 0.75 of capacity (missing sample ignored): var 0.0625
    series[:, 0, 1] = [4, 4, 4]  # ram flat: var 0
    assert reservation_volatility(series, cap)[0] == pytest.approx(0.03125)
    one = reservation_volatility(series[:1], cap)
    assert one[0] == 0.0  # one sample has no variance


def test_image_masks_and_bucket_key():
    m = image_masks([{"a"}, {"a", "b"}, set()])
    assert m["a"].tolist() == [True, True, False] and m["b"].tolist() == [False, True, False]
    assert bucket_key(np.array([0.3, 0.49, 0.5, -0.1, INF]), np.full(5, 0.25)).tolist() == [1, 1, 2, -1, INF]


BAD_CONFIG = [
    ("negative-weight", {"image_weight": -1.0}, "image_weight must be a finite number >= 0, got -1.0"),
    ("nan-weight", {"stranded_weight": math.nan}, "stranded_weight must be"),
    ("bool-weight", {"stranded_weight": True}, "stranded_weight must be"),
    ("zero-scale", {"volatility_scale": 0.0}, "volatility_scale must be a finite number > 0, got 0.0"),
    ("short-widths", {"bucket_width": (1.0,) * 7}, "bucket_width must be a sequence of 8 numbers"),
    ("zero-width", {"bucket_width": (0.0,) + (1.0,) * 7}, "bucket_width[0] must be a finite number > 0"),
    ("unknown-dim", {"stranded_dims": ("cpu", "bogus")}, "stranded_dims must be names from cpu, ram,"),
    ("gpu-dim", {"stranded_dims": ("cpu", "gpu")}, "(gpu is never slack), got ('cpu', 'gpu')"),
    ("number-flag", {"equivalence_reuse": 1}, "equivalence_reuse must be true or false, got 1"),
    ("zero-sample", {"sample_feasible": 0}, "sample_feasible must be an integer >= 1, got 0"),
    ("float-threshold", {"sample_above_nodes": 1.5}, "sample_above_nodes must be an integer >= 1"),
]


@pytest.mark.parametrize(("kw", "msg"), [c[1:] for c in BAD_CONFIG], ids=[c[0] for c in BAD_CONFIG])
def test_config_rejects_bad_values_naming_key_and_value(kw, msg):
    with pytest.raises(ValueError, match=re.escape(msg)) as info:
        PlacementConfig(**kw)
    assert str(info.value).startswith("PlacementConfig.")


def test_config_normalises_sequences_read_from_yaml():
    c = PlacementConfig(bucket_width=[1] * 8, stranded_dims=["cpu", "ram"])
    assert c.bucket_width == (1.0,) * 8 and c.stranded_dims == ("cpu", "ram")
    assert c == PlacementConfig(bucket_width=(1.0,) * 8, stranded_dims=("cpu", "ram")) and hash(c)


def test_config_defaults_and_weights():
    c = PlacementConfig()
    assert c.weight("image") == 3.0 and c.weight("stranded") == 1.0
    assert c.stranded_mask.sum() == 7 and not c.stranded_mask[2]
    # image locality outweighs the other three terms together at their extremes
    assert c.image_weight >= c.stranded_weight + c.colocation_weight + c.volatility_weight


def _formula(q, request, capacity, dims):
    """The stranded term written out, each sum over the dimensions in order, one column at a
    time (the bitwise yardstick: NumPy's own row sums round differently by layout)."""
    q, c = q[:, dims], capacity[:, dims]
    invalid = ~(np.isfinite(c) & (c > 0))
    with np.errstate(divide="ignore", invalid="ignore"):
        f = (q - request[dims]) / c
    np.clip(f, 0.0, 1.0, out=f)
    f[invalid] = 0.0
    n = f.shape[1] - invalid.sum(axis=1)
    safe_n = np.maximum(n, 1)
    total = np.zeros(len(f))
    for j in range(f.shape[1]):
        total = total + f[:, j]
    dev = f - (total / safe_n)[:, None]
    dev[invalid] = 0.0
    var = np.zeros(len(f))
    for j in range(f.shape[1]):
        var = var + dev[:, j] * dev[:, j]
    return np.where(n >= 2, 1.0 - 2.0 * np.sqrt(var / safe_n), 1.0)


def _random_nodes(rng, k):
    cap = rng.uniform(0.5, 200, (k, 8)) * 10.0 ** rng.integers(-3, 3, (k, 8))
    m = rng.random((k, 8))
    cap[m < 0.1] = INF
    cap[(m > 0.1) & (m < 0.15)] = 0.0
    slack = cap - rng.uniform(0, 1.2, (k, 8)) * np.where(np.isfinite(cap), cap, 100.0)
    width = PlacementConfig().width_array
    return np.floor(slack / width) * width, cap


@pytest.mark.parametrize("seed", range(60))
def test_stranded_parts_are_bitwise_the_formula_for_any_subset(seed):
    # The score cache recomputes a few nodes at a time from StrandedParts: every value must be the
    # formula's to the last bit, for the same nodes in the same batch (a tie may hinge on it).
    rng = np.random.default_rng(seed)
    dims = rng.random(8) < 0.8
    for k in (1, 2, 3, 17, 60):  # (one node: the single-node path the cache's usual miss takes)
        q, cap = _random_nodes(rng, k)
        req = rng.uniform(0, 5, 8) * (rng.random(8) < 0.7)
        assert stranded_balance(q, req, cap, dims).tobytes() == _formula(q, req, cap, dims).tobytes()
        parts = StrandedParts(cap, dims)
        for idx in (np.arange(k), rng.permutation(k)[: max(1, k // 3)], np.array([k - 1])):
            got = parts.balance(q[idx][:, dims], req[dims], idx)
            assert got.tobytes() == _formula(q[idx], req, cap[idx], dims).tobytes()
        whole = parts.balance(q[:, dims], req[dims], np.arange(k))
        for n in range(k):  # a node alone (the cache's usual miss) gives what it gives among others
            alone = parts.balance(q[[n]][:, dims], req[dims], np.array([n]))
            assert alone.tobytes() == whole[[n]].tobytes()


def test_stranded_parts_accept_an_unbounded_request_quietly():
    q, cap = _random_nodes(np.random.default_rng(1), 5)
    req = v8(1, INF)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # inf - inf on an unusable cell must not warn
        got = stranded_balance(q, req, cap, CPU_RAM)
        one = StrandedParts(cap, CPU_RAM).balance(q[[2]][:, CPU_RAM], req[CPU_RAM], np.array([2]))
    assert got.tobytes() == _formula(q, req, cap, CPU_RAM).tobytes()
    assert one.tobytes() == got[[2]].tobytes()
