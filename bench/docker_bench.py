"""What the Docker benchmarks share: the engine with the test image, a tag for their names, and
percentiles in milliseconds."""

from __future__ import annotations

import argparse
import uuid

import numpy as np

from kalena.docker.engine import DEFAULT_ENDPOINT, Engine, connect
from kalena.testing.docker import busybox_image


def arguments(doc: str) -> argparse.ArgumentParser:
    """The parser every Docker benchmark starts from: ``--endpoint`` and ``--json``."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--endpoint", default=DEFAULT_ENDPOINT)
    ap.add_argument("--json", default=None)
    return ap


def engine_and_image(endpoint: str) -> tuple[Engine, str, str]:
    """The engine at ``endpoint``, the test image on it, and a tag unique to this run."""
    engine = Engine(connect(endpoint), endpoint)
    return engine, busybox_image(engine), uuid.uuid4().hex[:8]


def percentiles(xs: list[float]) -> dict[str, float]:
    a = np.asarray(xs) * 1e3
    return {
        "p50_ms": float(np.percentile(a, 50)),
        "p99_ms": float(np.percentile(a, 99)),
        "max_ms": float(a.max()),
        "n": len(xs),
    }
