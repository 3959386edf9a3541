"""``scripts/fit_traces.py`` regenerates every fitted constant the simulator ships (issue 13, item 2).

The traces are the stored excerpts beside the repository (``../shared/data/traces``); an installed
Kalena never reads them, so this runs only where they are.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from kalena.sim.params.fitted import FITTED

ROOT = Path(__file__).resolve().parents[2]
TRACES = ROOT.parent / "shared" / "data" / "traces"
pytestmark = pytest.mark.skipif(not TRACES.is_dir(), reason=f"shared traces not found at {TRACES}")


def _script():
    spec = importlib.util.spec_from_file_location("fit_traces", ROOT / "scripts" / "fit_traces.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_the_shipped_constants_are_what_the_fit_gives_today():
    m = _script()
    fit = {
        "production": m.fit_production(TRACES),
        "dynamics": m.fit_dynamics(TRACES),
        "batch": m.fit_batch(TRACES),
    }
    namespace: dict = {}
    exec(m.render_py(fit), namespace)  # the module text --write would write
    assert namespace["FITTED"] == FITTED
    # and every key the FITTING.md table names has its meaning written down
    named = [k for section in fit.values() for k in section if not k.endswith(("_n", "_names"))]
    assert [k for k in named if k not in m.MEANING] == []
