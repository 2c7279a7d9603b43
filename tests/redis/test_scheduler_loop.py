"""The scheduler's loop (Scheduler.run) against a real server: when it runs a full cycle and when a
submit takes the quick path."""

import threading
import time

from dispatcher.config import Timing
from dispatcher.scheduler.loop import Scheduler
from dispatcher.store import counters
from tests.redis.test_store import beat, submit


def cycles_by_kind(client, ns) -> dict[str, int]:
    got = counters.read(client, ns)["histograms"].get("cycle", {})
    return {dict(labels)["kind"]: h["count"] for labels, h in got.items()}


def test_submits_more_often_than_the_tick_take_the_quick_path_and_full_cycles_keep_their_pace(client, ns):
    """A steady stream of submits must not put the full cycle off until one of them finds the last
    full cycle's state a tick old and waits behind a full cycle of its own (issue 16's react)."""
    tick_s, every_s, n = 0.5, 0.15, 20
    beat(client, ns, gpus=2)
    sched = Scheduler(client, ns, timing=Timing(tick_s=tick_s))
    stop = threading.Event()
    loop = threading.Thread(target=sched.run, args=(stop,), daemon=True)
    loop.start()
    try:
        deadline = time.monotonic() + 30
        while cycles_by_kind(client, ns).get("full", 0) < 1:  # the first (full) cycle is done
            assert time.monotonic() < deadline and loop.is_alive(), "the scheduler never cycled"
            time.sleep(0.02)
        before = cycles_by_kind(client, ns)
        t0 = time.monotonic()
        for _ in range(n):  # 4 GPUs on a 2-GPU node: each gets a verdict, none starts (no wake-ups of our own)
            submit(client, ns, gpus=4)
            time.sleep(every_s)
        took_s = time.monotonic() - t0
    finally:
        stop.set()
        loop.join(10)
    after = cycles_by_kind(client, ns)
    quick = after.get("quick", 0) - before.get("quick", 0)
    full = after.get("full", 0) - before.get("full", 0)
    assert quick >= n - 2, (quick, full)  # before: about one submit in every tick waited for a full cycle
    assert full >= int(took_s / tick_s) - 2, (quick, full, took_s)  # still about one a tick
