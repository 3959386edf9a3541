"""``kalena report``'s page in a real browser: headless Debian Chromium opens it offline and it
renders with no console error, no exception and every image loaded (naturalWidth > 0); a page
made to fail proves the check can fail.

The browser is driven over the DevTools protocol (a websocket, ``websocket-client``, which the
``kubernetes`` client already brings): Runtime and Log domains on, the file navigated to, errors
collected until the load event and a moment after, then the images counted in the page.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from report_testlib import make_run_folder
from typer.testing import CliRunner

from kalena.cli.main import app

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
pytestmark = pytest.mark.skipif(
    not os.access(CHROMIUM, os.X_OK),
    reason="Debian's chromium is not installed (scripts/setup-and-test.sh installs it)",
)
#: Wide: a loaded two-core CI machine starts a browser slowly.
TIMEOUT = 120.0
#: Root needs --no-sandbox; the rest keep an offline machine's browser from calling Google's hosts.
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-quic",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--remote-debugging-port=0",
)
IMAGES = "JSON.stringify(Array.from(document.images, i => [i.alt, i.complete, i.naturalWidth]))"


class Browser:
    """One headless Chromium on a fresh profile, one page, over the DevTools protocol."""

    def __init__(self, profile: Path) -> None:
        import websocket  # websocket-client, a dependency of the kubernetes client

        profile.mkdir()
        self.log = (profile.parent / "chromium.log").open("wb")
        self.proc = subprocess.Popen(
            [CHROMIUM, *FLAGS, f"--user-data-dir={profile}", "about:blank"],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its renderer and helper processes in a group of their own
        )
        port_file = profile / "DevToolsActivePort"
        deadline = time.monotonic() + TIMEOUT
        while not (port_file.is_file() and port_file.read_text().count("\n") >= 1):
            assert self.proc.poll() is None, f"chromium exited {self.proc.returncode}: see {self.log.name}"
            assert time.monotonic() < deadline, "chromium wrote no DevToolsActivePort"
            time.sleep(0.1)
        port = int(port_file.read_text().splitlines()[0])
        no_proxy = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with no_proxy.open(f"http://127.0.0.1:{port}/json/list", timeout=TIMEOUT) as r:
            targets = json.load(r)
        page = next(t for t in targets if t["type"] == "page")
        self.ws = websocket.create_connection(
            page["webSocketDebuggerUrl"], timeout=TIMEOUT, suppress_origin=True
        )
        self.next_id = 0
        self.events: list[dict[str, Any]] = []

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        """Send a command and wait for its answer, keeping the events that arrive meanwhile."""
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == self.next_id:
                assert "error" not in msg, (method, msg["error"])
                return msg["result"]
            self.events.append(msg)

    def wait_for(self, event: str) -> None:
        deadline = time.monotonic() + TIMEOUT
        while not any(e.get("method") == event for e in self.events):
            assert time.monotonic() < deadline, f"no {event}"
            self.events.append(json.loads(self.ws.recv()))

    def settle(self, seconds: float) -> None:
        """Keep the events of the next ``seconds`` (an error logged after the load event)."""
        import websocket

        self.ws.settimeout(0.2)
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            with contextlib.suppress(websocket.WebSocketTimeoutException):
                self.events.append(json.loads(self.ws.recv()))
        self.ws.settimeout(TIMEOUT)

    def open(self, page: Path) -> tuple[list[str], list[list[Any]], list[str]]:
        """Load ``page``: its errors, its images ([alt, complete, naturalWidth]) and every URL it
        requested."""
        self.events.clear()
        for domain in ("Runtime", "Log", "Page", "Network"):
            self.call(f"{domain}.enable")
        self.call("Page.navigate", url=page.as_uri())
        self.wait_for("Page.loadEventFired")
        self.settle(1.0)
        images = json.loads(
            self.call("Runtime.evaluate", expression=IMAGES, returnByValue=True)["result"]["value"]
        )
        return _errors(self.events), images, _requests(self.events)

    def close(self) -> None:
        try:
            if getattr(self, "ws", None) is not None:
                self.ws.close()
        finally:
            if self.proc.poll() is None:  # asked first: the browser then reaps its own helpers
                self.proc.terminate()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.proc.wait(timeout=15)
            with contextlib.suppress(ProcessLookupError):  # what is left of the group it started, by id
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=TIMEOUT)
            self.log.close()


def _errors(events: list[dict[str, Any]]) -> list[str]:
    out = []
    for e in events:
        p = e.get("params", {})
        if e.get("method") == "Runtime.consoleAPICalled" and p["type"] in ("error", "assert"):
            out.append("console: " + " ".join(str(a.get("value", a.get("description"))) for a in p["args"]))
        elif e.get("method") == "Runtime.exceptionThrown":
            details = p["exceptionDetails"]
            out.append(f"exception: {details.get('exception', {}).get('description', details.get('text'))}")
        elif e.get("method") == "Log.entryAdded" and p["entry"]["level"] == "error":
            out.append(f"log: {p['entry']['text']} {p['entry'].get('url', '')}")
    return out


def _requests(events: list[dict[str, Any]]) -> list[str]:
    return [e["params"]["request"]["url"] for e in events if e.get("method") == "Network.requestWillBeSent"]


@pytest.fixture
def browser(tmp_path: Path):
    b = Browser(tmp_path / "profile")
    try:
        yield b
    finally:
        b.close()


def test_the_report_renders_offline_with_no_error_and_every_image_loaded(tmp_path: Path, browser: Browser):
    folder, _ = make_run_folder(tmp_path)
    r = CliRunner().invoke(app, ["report", str(folder)])
    assert r.exit_code == 0, r.output
    errors, images, requested = browser.open(folder / "report.html")
    assert errors == []
    assert len(images) == 7 and all(complete and width > 0 for _, complete, width in images), images
    assert all(url.startswith(("file:", "data:")) for url in requested), requested


def test_the_check_fails_on_a_page_with_a_console_error_and_a_broken_image(tmp_path: Path, browser: Browser):
    bad = tmp_path / "bad.html"
    bad.write_text(
        '<!DOCTYPE html><html><head><link rel="icon" href="data:,"></head><body>'
        '<script>console.error("deliberate")</script><img alt="gone" src="missing.png">'
        '<script>throw new Error("thrown")</script></body></html>'
    )
    errors, images, _ = browser.open(bad)
    # each channel seen: the console, an uncaught exception, and the browser's own log
    by = {e.split(":")[0]: e for e in errors}
    assert sorted(by) == ["console", "exception", "log"] and len(errors) == 3, errors
    assert "deliberate" in by["console"] and "thrown" in by["exception"] and "missing.png" in by["log"]
    assert images == [["gone", True, 0]]
