"""``gc_paused``: the cyclic collector is off inside any open block, on threads at once, and back as
it was after the last one closes (it stays off where it was off)."""

from __future__ import annotations

import gc
import threading

from kalena.k8s.cache import gc_paused


def test_nested_and_concurrent_blocks_restore_the_collector_as_it_was():
    assert gc.isenabled()
    inside = threading.Barrier(3)
    leave = threading.Event()
    seen: list[bool] = []

    def hold() -> None:
        with gc_paused():
            inside.wait()
            seen.append(gc.isenabled())
            leave.wait(10)

    threads = [threading.Thread(target=hold) for _ in range(2)]
    for t in threads:
        t.start()
    inside.wait()
    with gc_paused(), gc_paused():
        assert not gc.isenabled()
    assert not gc.isenabled()  # the two threads still hold it
    leave.set()
    for t in threads:
        t.join(10)
    assert seen == [False, False]
    assert gc.isenabled()


def test_a_collector_switched_off_before_stays_off():
    gc.disable()
    try:
        with gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()
