"""A warning that repeats while Redis is away is said once, then every 30 s with a count, then once
more when it works again: ten minutes of outage are a few lines, not thousands."""

import logging

from dispatcher.store.connect import redis_reason as reason
from dispatcher.store.repeating import Repeating


def test_a_failure_every_second_for_a_minute_is_three_lines_and_one_when_it_works_again(caplog):
    now = [0.0]
    failing = Repeating(logging.getLogger("t"), "heartbeat", clock=lambda: now[0])
    with caplog.at_level(logging.WARNING):
        for second in range(61):
            now[0] = float(second)
            failing.failure(ConnectionError("connection refused"), f"{second}s without one")
        failing.success()
        failing.success()  # once only
    assert [r.getMessage() for r in caplog.records] == [
        "heartbeat failed (0s without one): connection refused",
        "heartbeat failed (30s without one, 31 failures in a row): connection refused",
        "heartbeat failed (60s without one, 61 failures in a row): connection refused",
        "heartbeat works again after 61 failures in a row"]


def test_a_pipelines_error_is_the_servers_words_without_the_command_it_repeats():
    e = Exception("Command # 1 (HSET dispatch:node:n1 info \x81\xa4cpus...) of pipeline caused error: "
                  "NOREPLICAS Not enough good replicas to write.")
    assert reason(e) == "NOREPLICAS Not enough good replicas to write."
    assert reason(Exception("MISCONF no disk : <redis.connection.Connection>")) == "MISCONF no disk"
