"""The views' shared read (views/fresh.py): never served older than its bound, one read for all who
ask meanwhile, and a slow read backs the bound off."""

import threading
import time

import pytest
import redis

from dispatcher.views import fresh
from dispatcher.views.fresh import Fresh, PerRead


def test_a_slow_read_is_reused_for_several_times_as_long_as_it_took():
    calls = []

    def slow_read():
        calls.append(time.monotonic())
        time.sleep(0.3)  # as a read of a very long queue would
        return len(calls)

    cache = Fresh(0.0, slow_read)  # no ttl of its own: only the back-off keeps it
    assert cache.get() == 1
    assert cache.get() == 1  # within 5 x 0.3 s of the read: reused, not read again
    assert len(calls) == 1


def test_past_its_ttl_a_value_is_never_served_the_next_read_is_waited_for():
    calls = []
    cache = Fresh(0.5, lambda: calls.append(1) or len(calls))
    assert (cache.get(), cache.get()) == (1, 1)
    time.sleep(0.6)
    assert cache.get() == 2 and len(calls) == 2  # read again before answering (the old code served 1)
    assert cache.get() == 2 and len(calls) == 2


def test_viewers_who_ask_during_a_read_share_it_and_wait_for_it():
    started, release = threading.Event(), threading.Event()
    calls = []

    def read():
        calls.append(1)
        if len(calls) > 1:
            started.set()
            release.wait(10)  # the second read is slow, as a read of a long queue
        return len(calls)

    cache = Fresh(0.0, read)
    assert cache.get() == 1
    time.sleep(0.01)  # past 5 x the first read's time
    got = []
    viewers = [threading.Thread(target=lambda: got.append(cache.get())) for _ in range(20)]
    for v in viewers:
        v.start()
    assert started.wait(5)
    time.sleep(0.1)
    assert got == [] and len(calls) == 2  # nobody was served the old value; one read for all
    release.set()
    for v in viewers:
        v.join(5)
    assert got == [2] * 20 and len(calls) == 2


def test_a_failed_read_is_the_error_of_those_who_waited_for_it_and_the_next_viewer_reads_again():
    calls = []

    def read():
        calls.append(1)
        if len(calls) == 2:
            time.sleep(0.2)
            raise ConnectionError("server gone")
        return len(calls)

    cache = Fresh(0.0, read)
    assert cache.get() == 1
    time.sleep(0.01)
    errors = []

    def viewer():
        try:
            errors.append(cache.get())
        except ConnectionError as e:
            errors.append(str(e))

    viewers = [threading.Thread(target=viewer) for _ in range(5)]
    for v in viewers:
        v.start()
    for v in viewers:
        v.join(5)
    assert errors == ["server gone"] * 5 and len(calls) == 2  # not the last value, shown as if live
    assert cache.get() == 3


def test_a_read_that_hangs_times_its_waiters_out_and_the_next_viewer_reads_again(monkeypatch):
    monkeypatch.setattr(fresh, "WAIT_S", 0.3)
    hang = threading.Event()
    calls = []

    def read():
        calls.append(1)
        if len(calls) == 1:
            hang.wait(10)  # a connection that stopped answering
        return len(calls)

    cache = Fresh(1.0, read)
    threading.Thread(target=cache.get, daemon=True).start()
    time.sleep(0.05)
    with pytest.raises(redis.exceptions.TimeoutError, match="taken over"):
        cache.get()
    assert cache.get() == 2  # the hung read is past WAIT_S: a read of its own
    hang.set()
    time.sleep(0.05)
    assert cache.get() == 2  # the hung read, ended late, does not replace the newer one


def test_what_is_made_of_a_read_is_made_once_per_read():
    made = []

    def make(read):
        made.append(read)
        time.sleep(0.1)
        return f"text of {read['n']}"

    per = PerRead(make)
    first, second = {"n": 1}, {"n": 2}
    got = []
    threads = [threading.Thread(target=lambda: got.append(per.get(first))) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(5)
    assert got == ["text of 1"] * 8 and made == [first]
    assert per.get(second) == "text of 2" and per.get(second) == "text of 2" and made == [first, second]
