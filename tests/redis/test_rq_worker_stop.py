"""The node agent's RQ worker stops promptly: a SIGTERM to `dispatch up` or to an agent must not wait
a minute for RQ's command listener (workers/rq_worker.py), against a real server."""

import time

from rq import Queue

from workers.rq_worker import AgentWorker


def test_the_command_listener_stops_within_a_second_when_it_read_the_unsubscribe_first(client, ns):
    worker = AgentWorker([Queue(f"{ns}.q", connection=client)], connection=client, name=f"{ns}.worker")
    worker.subscribe()
    worker.pubsub.unsubscribe()  # RQ's teardown, step one
    time.sleep(0.5)  # the listener reads the reply before the stop comes, as on a loaded machine
    t0 = time.monotonic()
    worker.pubsub_thread.stop()  # step two (redis-py 8 joins the thread here; earlier ones only flag it)
    worker.pubsub_thread.join(90)
    assert not worker.pubsub_thread.is_alive()
    assert time.monotonic() - t0 < 3.0  # RQ's own listener waits 60 s
    worker.pubsub.close()
