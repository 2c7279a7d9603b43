"""The dashboard's shared cache backs off when computing its value is slow (a long queue)."""

import time

from dispatcher.views.board import _Cached


def test_a_slow_read_is_reused_for_several_times_as_long_as_it_took():
    calls = []

    def slow_read():
        calls.append(time.monotonic())
        time.sleep(0.3)  # as a read of a very long queue would
        return len(calls)

    cache = _Cached(0.0, slow_read)  # no ttl of its own: only the back-off keeps it
    assert cache.get() == 1
    assert cache.get() == 1  # within 5 x 0.3 s of the read: reused, not read again
    assert len(calls) == 1


def test_a_quick_read_is_redone_once_its_ttl_has_passed():
    calls = []
    cache = _Cached(0.5, lambda: calls.append(1) or len(calls))
    assert (cache.get(), cache.get()) == (1, 1)
    time.sleep(0.6)
    assert cache.get() == 2
