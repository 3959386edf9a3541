"""The engine's event watch outlives a stream that breaks in a way nobody planned for.

The engine and its event stream are real; the break is injected into the stream (an error from
inside the HTTP library, as CI once saw: a ``KeyError`` while requests read the environment),
since a real engine cannot be made to raise one on demand."""

from __future__ import annotations

import threading

import pytest
from docker_testlib import until

from kalena.docker.engine import Engine, EventWatch

pytestmark = [pytest.mark.docker]


class BreaksOnce:
    """The real engine, whose first event stream raises a ``KeyError`` at its first event."""

    def __init__(self, engine: Engine) -> None:
        self.engine, self.opened = engine, 0

    def events(self, stop: threading.Event, on_open=None):
        self.opened += 1
        first = self.opened == 1
        for ev in self.engine.events(stop, on_open):
            if first:
                raise KeyError("PYTEST_CURRENT_TEST")
            yield ev


def test_an_unforeseen_error_in_the_stream_reopens_it_and_never_leaves_a_stale_view(
    engine, image, tag, containers
):
    broken = BreaksOnce(engine)
    watch = EventWatch(broken, reconnect_s=0.2)  # type: ignore[arg-type] - the engine, wrapped
    try:
        assert until(lambda: watch.streaming, 60)
        name = f"ev1-{tag}"
        containers.append(name)
        engine.api.create_container(image, ["true"], name=name)  # an event: the first stream breaks
        assert until(lambda: broken.opened >= 2 and watch.streaming, 60), "the stream was reopened"
        assert watch._thread.is_alive()
        assert watch.take()  # the view is suspect after the break: list again
        again = f"ev2-{tag}"
        containers.append(again)
        engine.api.create_container(image, ["true"], name=again)
        assert until(watch.take, 60), "events still come through the reopened stream"
    finally:
        watch.close()
