"""Usage from counters (cgroupfs and cAdvisor), cAdvisor over real loopback HTTP with recorded payloads."""

from __future__ import annotations

import json
import math
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from agent_testlib import FIXTURES

from kalena.agent.cadvisor import CadvisorClient, CadvisorError, CadvisorTelemetry, counters_from_stat
from kalena.agent.cgroupfs import CgroupReading
from kalena.agent.parsers import IoBytes
from kalena.agent.telemetry import CgroupfsTelemetry, Counters, UsageMeter

RECORDED = json.loads((FIXTURES / "cadvisor/subcontainers_k8s1.2_dd-agent_metrics_1.2.json").read_text())
DD_AGENT = "/1d6e5db3abbfbb69718899748a882e2519da5b5d798b4b6bf1ec7dd6b5f26a60"


# -- the meter ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("prev", "cur", "expected"),
    [
        (None, Counters(10.0, 5_000_000_000, 2**30), {"ram": 1.0}),
        (
            Counters(10.0, 1_000_000_000, 0, 0, 0),
            Counters(12.0, 2_000_000_000, 2**29, 4_000_000, 2_000_000),
            {"cpu": 0.5, "ram": 0.5, "disk.read": 2.0, "disk.write": 1.0},
        ),
        (Counters(10.0, 9_000_000_000, 2**30), Counters(11.0, 1_000_000_000, 2**30), {"ram": 1.0}),
        (Counters(10.0, 1, None), Counters(11.0, None, None), {}),
        (Counters(10.0, 1, 1), Counters(10.0, 2, 2**30), {"ram": 1.0}),
    ],
    ids=["first-sample-has-no-rate", "rates", "counter-reset-is-missing", "nothing-read", "zero-interval"],
)
def test_usage_meter(prev, cur, expected):
    m = UsageMeter()
    if prev is not None:
        m.update({"w": prev})
    got = m.update({"w": cur})["w"]
    assert got.keys() == expected.keys()
    for k, v in expected.items():
        assert got[k] == pytest.approx(v)


def test_throttled_time_over_the_window():
    m = UsageMeter(window_s=10.0)
    for t, ns in [(0, 0), (5, 1e9), (10, 3e9), (15, 6e9), (20, 6e9)]:
        m.update({"b": Counters(float(t), throttled_ns=int(ns))})
    # baseline = the last entry at or before 20 - 10 = 10 s (3 s throttled): 6 - 3 = 3 s
    assert m.throttled_s() == {"b": pytest.approx(3.0)}
    m.update({"b": Counters(21.0, throttled_ns=0)})  # counter restarted: history begins again
    assert m.throttled_s() == {}


class _Reader:
    def __init__(self, readings):
        self.readings = readings

    def read(self, name, with_limit=True, with_throttling=True):
        return self.readings.get(name, CgroupReading())


def test_cgroupfs_source_skips_unreadable_cgroups():
    src = CgroupfsTelemetry(_Reader({"batch/a": CgroupReading(10, 0, 100, 80, 200.0, IoBytes(1, 2))}))
    got = src.counters({"a": "batch/a", "b": "batch/gone"}, now=7.0)
    assert got == {"a": Counters(7.0, 10, 80, 1, 2, 0)}


# -- cAdvisor ----------------------------------------------------------------------------------------
def test_counters_from_a_recorded_v13_sample():
    c = counters_from_stat(next(x for x in RECORDED if x["name"] == DD_AGENT)["stats"][0])
    assert c.cpu_ns == 1634848700452
    assert c.working_set == 90456064
    assert (c.io_read, c.io_write) == (14802944, 3379200)
    assert c.time == pytest.approx(1466179557.646708)  # 2016-06-17T16:05:57.64670846Z


def v20_payload(k: int) -> dict:
    """A v2.0 ``stats`` answer re-shaped from the recorded v1.3 samples (no v2.0 capture exists):
    v2.0's ``DeprecatedContainerStats`` carries the same v1 ``cpu``/``memory``/``diskio`` objects
    plus ``has_*`` flags, keyed by container name."""
    out = {}
    for c in RECORDED:
        s = dict(c["stats"][min(k, len(c["stats"]) - 1)])
        s.update(has_cpu=True, has_memory=True, has_diskio="diskio" in s)
        out[c["name"]] = [s]
    return out


class _Recorded(BaseHTTPRequestHandler):
    """Serves the k-th recorded sample on the k-th request, as a real cAdvisor would over time."""

    calls = 0
    broken = False

    def do_GET(self):
        k = type(self).calls
        type(self).calls += 1
        if type(self).broken:
            self.send_error(500)
            return
        if self.path.startswith("/api/v1.3/subcontainers/"):
            body = [dict(c, stats=c["stats"][: k + 1]) for c in RECORDED]
        elif self.path.startswith("/api/v2.0/stats/") and "recursive=true" in self.path:
            body = v20_payload(k)
        else:
            self.send_error(404)
            return
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture
def cadvisor():
    handler = type("Handler", (_Recorded,), {"calls": 0, "broken": False})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", handler
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("api", ["v1.3", "v2.0"])
def test_cadvisor_rates_from_two_recorded_samples(cadvisor, api):
    url, _ = cadvisor
    src = CadvisorTelemetry(CadvisorClient(url, api=api), {"dd": DD_AGENT, "kubelet": "/kubelet"})
    meter = UsageMeter()
    cgroups = {"w-dd": "dd", "w-kubelet": "kubelet", "w-absent": "/nope"}
    meter.update(src.counters(cgroups, now=0.0))
    usage = meter.update(src.counters(cgroups, now=1.0))
    assert set(usage) == {"w-dd", "w-kubelet"}  # absent containers are missing data, not zero
    # dd-agent: 405919989 ns of CPU and 348160 B read over 19.774225 s (cAdvisor's timestamps)
    assert usage["w-dd"]["cpu"] == pytest.approx(405919989 / 19.774225e9, rel=1e-6)
    assert usage["w-dd"]["disk.read"] == pytest.approx(348160 / 19.774225 / 1e6, rel=1e-6)
    assert usage["w-dd"]["ram"] == pytest.approx(93540352 / 2**30)
    assert usage["w-kubelet"]["cpu"] == pytest.approx(
        (16123237019970 - 16123089672810) / 11.224766e9, rel=1e-5
    )


def test_cadvisor_failure_is_missing_data(cadvisor):
    url, handler = cadvisor
    handler.broken = True
    src = CadvisorTelemetry(CadvisorClient(url, api="v2.0"))
    assert src.counters({"w": "/kubelet"}, now=0.0) == {}
    assert "500" in src.last_error
    with pytest.raises(CadvisorError):
        CadvisorClient("http://127.0.0.1:9", timeout_s=0.5).latest()  # nothing listens on port 9


def test_cadvisor_client_validates_its_api():
    with pytest.raises(ValueError, match="cadvisor api"):
        CadvisorClient("http://x", api="v9")
    assert (
        CadvisorClient("http://x/", api="v1.3", root="/kubepods").url()
        == "http://x/api/v1.3/subcontainers/kubepods/"
    )
    assert math.isfinite(counters_from_stat({"timestamp": "2016-06-17T16:05:57Z", "has_cpu": False}).time)
