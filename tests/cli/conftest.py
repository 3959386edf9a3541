"""The CLI tests use the agent tests' cgroup helpers (``tests/agent/agent_testlib.py``)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "agent"))
