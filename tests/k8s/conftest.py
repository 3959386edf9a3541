"""The real control plane for the Kubernetes tests (:mod:`kalena.testing.k8s`): one per pytest
process (each xdist worker starts its own; ports and folders are its own), stopped at the end of
the session. Without the harness's binaries the tests that need it are skipped, naming the build."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from kalena.testing.k8s import ControlPlane, HarnessMissing, find_binaries


@pytest.fixture(scope="session")
def control_plane() -> Iterator[ControlPlane]:
    try:
        bins = find_binaries()
    except HarnessMissing as e:
        pytest.skip(str(e))
    with ControlPlane(bin_dir=bins) as cp:
        yield cp
