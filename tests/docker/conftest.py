"""Fixtures for the Docker runtime's tests: a real engine (the one the test setup starts), the test
image built from this machine's static busybox, and cleanup of every container and cgroup a test
made. Without an engine the tests are skipped with the reason."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from kalena.docker.cgroups import remove_empty_tree
from kalena.docker.engine import DEFAULT_ENDPOINT, Engine, EngineError, connect
from kalena.testing.docker import NoStaticBusybox, busybox_image

ENDPOINT = os.environ.get("KALENA_TEST_DOCKER_HOST", DEFAULT_ENDPOINT)


@pytest.fixture(scope="session")
def engine() -> Engine:
    if os.geteuid() != 0:
        pytest.skip("the Docker runtime's tests need root (cgroups and the engine's socket)")
    try:
        return Engine(connect(ENDPOINT), ENDPOINT)
    except EngineError as e:
        pytest.skip(f"no Docker engine ({e}); scripts/setup-and-test.sh installs and starts one")


@pytest.fixture(scope="session")
def image(engine: Engine) -> str:
    try:
        return busybox_image(engine)
    except NoStaticBusybox as e:
        pytest.skip(str(e))


@pytest.fixture
def tag() -> str:
    """A name part unique to this test (parallel tests share the engine)."""
    return uuid.uuid4().hex[:8]


@pytest.fixture
def cgroup_root(tag: str) -> Iterator[str]:
    """An absolute Kalena root for this test only; its empty directories are removed at teardown in
    every mounted hierarchy (runc makes the batch parents in those Kalena does not use too)."""
    root = f"/kalena-test-{tag}"
    yield root
    for top in Path("/sys/fs/cgroup").glob("*/" + root.lstrip("/")):
        remove_empty_tree(top)


@pytest.fixture
def containers(engine: Engine, tag: str, cgroup_root: str) -> Iterator[list[str]]:
    """Names of the containers a test starts (its own and Kalena's); all removed at teardown,
    before the test's cgroup root is (a container still there keeps its cgroup parent busy)."""
    made: list[str] = []
    yield made
    for c in engine.api.containers(all=True):
        names = [n.lstrip("/") for n in c.get("Names", [])]
        if any(tag in n for n in names) or any(n in made for n in names):
            engine.remove(c["Id"])


@pytest.fixture(scope="session")
def second_engine(engine: Engine) -> Iterator[Engine]:
    """A second Docker engine on this machine (its own dockerd, data root and socket), with the
    test image; stopped and removed at the end of the session."""
    import tempfile

    from kalena.testing.docker import SecondEngine

    base = Path(tempfile.mkdtemp(prefix="kd2-", dir="/tmp"))  # short: the socket path has a limit
    second = SecondEngine(base)
    try:
        made = second.wait()
        busybox_image(made)
    except (RuntimeError, NoStaticBusybox) as e:
        second.stop()
        pytest.skip(f"no second Docker engine: {e}")
    yield made
    second.stop()


@pytest.fixture
def swarm(second_engine: Engine) -> Iterator[Engine]:
    """The second engine as a one-node swarm's manager; its services removed and the swarm left
    at teardown."""
    api = second_engine.api
    api.init_swarm(advertise_addr="127.0.0.1", listen_addr="127.0.0.1:2377")
    try:
        yield second_engine
    finally:
        for svc in api.services():
            api.remove_service(svc["ID"])
        api.leave_swarm(force=True)
