"""Data shipped inside Kalena: the Irina benchmark (Kuberina's 186-node, 2,714-pod testbed).

Located with :mod:`importlib.resources`, so an installed Kalena finds its copies wherever the
package lives. Provenance: ``irina/PROVENANCE.md`` beside the files.
"""

from __future__ import annotations

from importlib.resources import files
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import NamedTuple

IRINA_INFRA = "irina_infra.yaml"
IRINA_WORKLOADS = "irina_workloads.yaml"
IRINA_BLUEPRINT = "irina_blueprint.yaml"


class IrinaFiles(NamedTuple):
    infra: Path
    workloads: Path
    blueprint: Path


def irina_resource(name: str) -> Traversable:
    """One bundled Irina file as a resource (works for any package loader)."""
    if name not in (IRINA_INFRA, IRINA_WORKLOADS, IRINA_BLUEPRINT):
        raise KeyError(f"no bundled Irina file {name!r}")
    return files(__name__).joinpath("irina", name)


def irina_paths() -> IrinaFiles:
    """Filesystem paths of the three bundled Irina files (infra, workloads, blueprint).

    Kalena installs as a regular package, so its resources are plain files; a loader that
    cannot give a path (a zip import) is reported rather than silently extracted.
    """
    out = []
    for name in (IRINA_INFRA, IRINA_WORKLOADS, IRINA_BLUEPRINT):
        res = irina_resource(name)
        if not isinstance(res, Path):
            raise FileNotFoundError(f"bundled {name} is not on the filesystem ({res!r})")
        out.append(res)
    return IrinaFiles(*out)
