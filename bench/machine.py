"""What every benchmark's JSON records about the machine that produced its figures."""

from __future__ import annotations

import json
import os
import platform
import sys
from typing import Any

import numpy as np


def machine_info(**extra: Any) -> dict[str, Any]:
    return {
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "platform": platform.platform(),
        **extra,
    }


def print_load(when: str) -> tuple[float, float, float]:
    """The load average, printed ``when`` ("before" names the cpus too) and returned: other
    processes sharing the cores slow every figure."""
    load = os.getloadavg()
    cpus = f" on {os.cpu_count()} cpus" if when == "before" else ""
    print(f"load average {when}: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}{cpus}")
    return load


def write_json(path: str | None, benchmark: str, params: dict[str, Any], results: Any, load: Any) -> None:
    """The benchmark's JSON record (the command, the machine, the parameters, the results) at
    ``path``, when one was given."""
    if not path:
        return
    doc = {
        "benchmark": benchmark,
        "command": " ".join([sys.executable.rsplit("/", 1)[-1], *sys.argv]),
        "machine": machine_info(load_average_after=load),
        "params": params,
        "results": results,
    }
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(doc, fh, indent=2)
