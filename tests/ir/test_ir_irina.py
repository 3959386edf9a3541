"""The bundled Irina benchmark reproduces Kuberina's published figures (PAPER §6.1, §7.1).

Figures: 186 nodes, 2,714 pods, requests cpu 7,198 / ram 27,840 GiB / gpu 152; Phase 0
takes exactly 2.25 cores and 2.75 GiB from every node; the full-packing blueprint uses 152
of 186 nodes at a mean CPU utilisation of 88.7 % (88.73 to two decimals) over active nodes;
the request ledger holds everywhere.
"""

import time

import numpy as np
import pytest

from kalena.core.model import Tier
from kalena.core.resources import DIMS
from kalena.data import IRINA_INFRA, irina_paths, irina_resource
from kalena.ir import load_cluster, read_document


@pytest.fixture(scope="module")
def irina():
    files = irina_paths()
    return load_cluster(files.infra, files.workloads, files.blueprint)


def test_bundled_files_are_found_by_importlib_resources():
    files = irina_paths()
    assert [p.name for p in files] == ["irina_infra.yaml", "irina_workloads.yaml", "irina_blueprint.yaml"]
    assert all(p.is_file() for p in files)
    assert irina_resource(IRINA_INFRA).read_text(encoding="utf-8").startswith("# MSC Irina")
    with pytest.raises(KeyError):
        irina_resource("secrets.yaml")


def test_counts_and_request_totals(irina):
    assert len(irina.nodes) == 186
    assert len(irina.daemonsets) == 4
    assert len(irina.workloads) == 2714
    totals = dict(zip(DIMS, irina.requests_matrix().sum(axis=0), strict=True))
    assert (totals["cpu"], totals["ram"], totals["gpu"]) == (7198, 27840, 152)
    assert all(w.tier is Tier.SERVICE for w in irina.workloads)


def test_phase0_deducts_exactly_2_25_cores_and_2_75_gib_per_node(irina):
    ded = irina.phase0_deduction()
    np.testing.assert_array_equal(ded[:, DIMS.index("cpu")], np.full(186, 2.25))
    np.testing.assert_array_equal(ded[:, DIMS.index("ram")], np.full(186, 2.75))
    assert irina.capacity_matrix()[:, 0].sum() == 9853.5  # PAPER §6.1 net cpu
    assert irina.capacity_matrix()[:, 1].sum() == 54400.5  # net ram


def test_blueprint_uses_152_of_186_nodes(irina):
    assert len(irina.placement) == 2714
    active = irina.active_nodes()
    assert len(active) == 152
    assert {"std-100", "mem-032", "gpu-020"}.isdisjoint(active)  # the 34 freed nodes include these


def test_mean_cpu_on_active_nodes_is_88_7_percent(irina):
    mean = irina.mean_active_utilisation("cpu")
    assert round(100 * mean, 2) == 88.73
    assert round(100 * mean, 1) == 88.7


def test_request_ledger_holds_on_every_node_and_dimension(irina):
    assert irina.request_ledger_breaches() == ()
    assert np.all(irina.node_load() <= irina.capacity_matrix())


def test_affinity_targets_resolve_to_real_pods(irina):
    anti = sum(len(w.anti_affinity.names) for w in irina.workloads)
    aff = sum(len(w.affinity.names) for w in irina.workloads)
    assert (anti, aff) == (4632, 496)  # PAPER §6.1: 5,128 constraints
    w = irina.workload("ai/llm-inference-0000")
    assert irina.targets_of(w.affinity) == {"ai/embedding-server-0000"}
    assert w.node_selector == {"gpu": "nvidia-a100"}


def test_workloads_load_in_well_under_a_few_seconds():
    start = time.perf_counter()
    doc = read_document(irina_paths().workloads)
    elapsed = time.perf_counter() - start
    assert sum(1 for _ in doc.pods()) == 2714
    assert elapsed < 3.0, f"loading the 415 KB Irina workloads took {elapsed:.2f} s"
