"""The dashboard's shared cache backs off when computing its value is slow (a long queue)."""

import time

from dispatcher.views.board import Cached


def test_a_slow_read_is_reused_for_several_times_as_long_as_it_took():
    calls = []

    def slow_read():
        calls.append(time.monotonic())
        time.sleep(0.3)  # as a read of a very long queue would
        return len(calls)

    cache = Cached(0.0, slow_read)  # no ttl of its own: only the back-off keeps it
    assert cache.get() == 1
    assert cache.get() == 1  # within 5 x 0.3 s of the read: reused, not read again
    assert len(calls) == 1


def test_a_quick_read_is_redone_once_its_ttl_has_passed():
    calls = []
    cache = Cached(0.5, lambda: calls.append(1) or len(calls))
    assert (cache.get(), cache.get()) == (1, 1)
    time.sleep(0.6)
    assert cache.get() == 1  # served at once; the next read runs in the background
    deadline = time.monotonic() + 5
    while cache.get() != 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert cache.get() == 2 and len(calls) == 2


def test_a_viewer_never_waits_on_a_slow_read_after_the_first():
    import threading

    release = threading.Event()
    calls = []

    def read():
        calls.append(1)
        if len(calls) > 1:
            release.wait(10)  # the second read hangs, as a read of a long queue would
        return len(calls)

    cache = Cached(0.0, read)
    assert cache.get() == 1
    time.sleep(0.01)
    t0 = time.monotonic()
    got = [cache.get() for _ in range(20)]  # the slow read runs in the background, once
    assert got == [1] * 20 and time.monotonic() - t0 < 1.0 and len(calls) == 2
    release.set()


def test_a_failed_background_read_keeps_the_last_value():
    calls = []

    def read():
        calls.append(1)
        if len(calls) == 2:
            raise ConnectionError("server gone")
        return len(calls)

    cache = Cached(0.0, read)
    assert cache.get() == 1
    deadline = time.monotonic() + 5
    while len(calls) < 3 and time.monotonic() < deadline:
        assert cache.get() in (1, 3)
        time.sleep(0.01)
    assert cache.get() == 3
