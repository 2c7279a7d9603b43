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


def test_a_stop_the_agent_took_before_rq_put_in_its_handlers_stops_the_worker_before_its_first_wait(client, ns):
    # the agent's own SIGTERM handler set its stop just after the agent looked at it, before work() put in
    # RQ's handlers: RQ never heard of it and waited in BLPOP (minutes); `dispatch up` killed it after 60 s
    import signal
    import threading

    from rq.serializers import JSONSerializer

    from dispatcher.store.connect import clone

    rq_client = clone(client, socket_timeout=None)
    worker = AgentWorker([Queue(f"{ns}.q", connection=rq_client, serializer=JSONSerializer)], connection=rq_client,
                         serializer=JSONSerializer, name=f"{ns}.worker")
    worker.asked = threading.Event()
    worker.asked.set()

    def waited(*_):
        raise AssertionError("the worker waited for work though its agent had been asked to stop")

    kept = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGALRM)}
    signal.signal(signal.SIGALRM, waited)
    signal.alarm(20)
    try:
        worker.work(logging_level="WARNING", with_scheduler=False)  # (RQ's handlers: the main thread only)
    finally:
        signal.alarm(0)
        for s, handler in kept.items():
            signal.signal(s, handler)
    assert worker.stop_asked


def test_a_redis_error_in_the_command_listener_is_waited_out_not_a_thread_ending_in_a_traceback(client, ns,
                                                                                                 monkeypatch):
    # a full disk's MISCONF ended RQ's listener thread with a traceback in the agent's log
    import pytest
    import redis

    from workers import rq_worker

    naps = []
    monkeypatch.setattr(rq_worker.time, "sleep", naps.append)
    worker = AgentWorker([Queue(f"{ns}.q", connection=client)], connection=client, name=f"{ns}.worker")
    misconf = redis.exceptions.ResponseError("MISCONF Errors writing to the AOF file: No space left on device")
    worker._listener_error(misconf, None, None)  # returns: the thread listens again
    assert naps == [2.0]
    with pytest.raises(ValueError):  # not Redis's: as RQ's handler, the thread ends
        worker._listener_error(ValueError("a bug"), None, None)


def test_a_sigterm_while_the_agent_starts_and_retries_stops_it(cli, client, ns):
    # the agent looks for another agent of its node before its RQ worker starts, retrying while Redis refuses
    # (here its user lacks HMGET); a SIGTERM then set an event of the command's that nothing read, and the
    # agent ran on: `dispatch up` stopped in the same window waited its whole 60 s, then killed it
    import signal
    import subprocess
    from urllib.parse import urlsplit

    user = f"{ns}-agent"
    client.execute_command("ACL", "SETUSER", user, "on", ">pw", "~*", "&*", "+@connection", "+hget")
    try:
        url = f"redis://{user}:pw@{urlsplit(cli.url).netloc.rpartition('@')[2]}/0"
        agent = cli.start("worker", "--fake-gpus", "1xA100-40GB", "--node", "n1", DISPATCH_REDIS_URL=url)
        cli.wait_for(lambda: "no other agent runs this node" in "".join(p.read_text() for p in cli.home.glob("*.log")),
                     what="the agent to retry its first look at its node")
        agent.send_signal(signal.SIGTERM)
        try:
            code = agent.wait(20)
        except subprocess.TimeoutExpired:
            raise AssertionError("the agent did not stop on SIGTERM while it retried") from None
        assert code == 0
    finally:
        client.execute_command("ACL", "DELUSER", user)


def test_rqs_retry_error_while_the_server_is_away_is_said_once_a_minute(monkeypatch):
    # an outage filled the agent's log with "rq.worker ERROR ... could not connect ... retrying" every 2 s
    import logging

    from workers import rq_worker

    clock = [1000.0]
    monkeypatch.setattr(rq_worker.time, "monotonic", lambda: clock[0])
    seldom = rq_worker._SeldomAway()

    def record(msg):
        return logging.LogRecord("rq.worker", logging.ERROR, "", 0, msg, (), None)
    away = "Worker %s: could not connect to Redis instance: %s retrying in %d seconds..."
    said = []
    for _ in range(40):  # 80 s of tries, one every 2 s
        said.append(seldom.filter(record(away)))
        clock[0] += 2.0
    assert said.count(True) == 2 and said[0] and said[30]
    assert seldom.filter(record("Worker %s: found an unhandled exception, quitting..."))
