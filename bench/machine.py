"""What every benchmark's JSON records about the machine that produced its figures."""

from __future__ import annotations

import os
import platform
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
