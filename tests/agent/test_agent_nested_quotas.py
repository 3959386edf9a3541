"""Property: a batch run's descendants that set a CPU quota of their own (cgroup v1) are never
above their run's quota while it is below theirs, and get exactly their own back once it is not
(restoration), whatever the sequence of the run's quotas. The cgroup files are a dict here (the
kernel's side is tests/agent/test_agent_cgroups_real.py); the function is the agent's own."""

from __future__ import annotations

import math

from agent_testlib import one_run_plan
from hypothesis import given
from hypothesis import strategies as st

from kalena.agent import knobs
from kalena.agent.state import JobRecord
from kalena.agent.writer import Knob


class Files:
    """The CPU quotas of a run's descendants, as :class:`CgroupWriter` reads them on v1."""

    def __init__(self, own: dict[str, float]) -> None:
        self.quota = dict(own)

    def nested_quotas(self, name: str) -> dict[str, float]:
        return {cg: q for cg, q in self.quota.items() if cg.startswith(f"{name}/") and math.isfinite(q)}

    def apply(self, writes) -> None:
        for w in writes:
            assert w.knob is Knob.CPU_QUOTA
            self.quota[w.cgroup] = w.value


quotas = st.floats(min_value=0.01, max_value=8.0, allow_nan=False)


@given(
    own=st.dictionaries(st.sampled_from(["c0", "c1", "c0/inner", "c2"]), quotas, min_size=1),
    rounds=st.lists(st.one_of(quotas, st.just(math.inf)), min_size=1, max_size=12),
)
def test_descendants_stay_below_their_run_and_get_their_own_back(own, rounds):
    own = {f"batch/pod/{k}": v for k, v in own.items()}
    files = Files(own)
    runs = {"batch/pod": JobRecord("pod", ["true"], {"cpu": 0.1}, None, 1, 0.0, cgroup="batch/pod")}
    originals: dict[str, float] = {}
    for q in rounds:
        files.apply(knobs.nested_writes(one_run_plan("batch/pod", q), runs, originals, files))  # type: ignore[arg-type]
        for cg, mine in own.items():
            if q < mine:
                assert files.quota[cg] == q and originals[cg] == mine
            else:  # restoration: its own, exactly, and nothing kept of it
                assert files.quota[cg] == mine and cg not in originals
    files.apply(knobs.nested_writes(one_run_plan("batch/pod", math.inf), runs, originals, files))  # type: ignore[arg-type]
    assert files.quota == own and originals == {}
