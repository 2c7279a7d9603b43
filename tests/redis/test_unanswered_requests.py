"""A signed request (identity on: every `dispatch up`) that the scheduler answers late, or not at all.

While `up` restarts a scheduler killed -9, the new one leads only once the old lease lapses (5 s):
a submit then waited past redis-py's 5 s socket timeout, was told "the embedded server is
restarting; try again in a moment", and the scheduler carried the request out anyway, so a user who
did as told ran the job twice."""

from __future__ import annotations

import threading
import time

import pytest

from dispatcher.auth.identity import Verifier, token_for
from dispatcher.clock import now_ms
from dispatcher.core.errors import DispatcherError
from dispatcher.core.spec import build_spec
from dispatcher.store import keys
from dispatcher.store.codec import encode_spec
from dispatcher.store.requests import RequestServer, send
from dispatcher.store.scripts import Scripts

SECRET = b"s" * 32


def _submit(client, ns, timeout_s: float) -> dict:
    spec = build_spec(command=["true"], user="alice", submit_ms=now_ms())
    return send(client, ns, "submit", "alice", token_for(SECRET, "alice"), {"specs": [encode_spec(spec)]},
                timeout_s=timeout_s)


@pytest.fixture
def leader(client, ns):
    server = RequestServer(client, ns, Verifier(SECRET, admins=()), Scripts(client, ns))
    server.publish_mode()
    return server


def test_an_answer_later_than_the_socket_timeout_is_still_taken(client, ns, leader):
    late = threading.Timer(6.0, leader.serve)
    late.start()
    try:
        answer = _submit(client, ns, timeout_s=15)
    finally:
        late.join()
    assert answer["ids"] == ["1"] and client.exists(keys.job(ns, "1"))


def test_a_request_no_scheduler_answers_is_withdrawn_and_not_carried_out_later(client, ns, leader):
    with pytest.raises(DispatcherError, match="withdrawn: nothing was done"):
        _submit(client, ns, timeout_s=6)
    assert leader.serve() == 0  # the scheduler, back, has nothing to carry out
    assert not client.exists(keys.job(ns, "1"))
    soon = threading.Timer(0.2, leader.serve)
    soon.start()
    try:
        assert _submit(client, ns, timeout_s=5)["ids"] == ["1"]  # the next one is answered, under the first id
    finally:
        soon.join()


def test_a_login_that_may_not_take_a_request_back_is_told_to_look_before_it_sends_again(client, ns, leader, redis_url):
    from dispatcher.store import roles
    from dispatcher.store.connect import connect

    roles.apply(client, ns, {r: f"pw-{r}" for r in roles.ROLES})
    user = connect(roles.role_url(redis_url, ns, "user", "pw-user"))  # `dispatch login` of `up --shared`
    try:
        with pytest.raises(DispatcherError, match="may still be carried out once a scheduler runs: look for it"):
            _submit(user, ns, timeout_s=1)
    finally:
        user.close()
        client.execute_command("ACL", "DELUSER", *[roles.username(ns, r) for r in roles.ROLES])


def test_a_request_read_before_its_sender_took_it_back_is_not_carried_out_after(client, ns, leader):
    from dispatcher.store.connect import text

    read = threading.Event()

    def slow_scheduler():  # reads the request, then stalls past the sender's wait before it acts
        while not (entries := client.xrange(keys.requests(ns))):
            threading.Event().wait(0.01)
        read.set()
        threading.Event().wait(1.5)
        for entry_id, fields in entries:
            leader._handle(text(entry_id), {text(k): v for k, v in fields.items()})

    t = threading.Thread(target=slow_scheduler)
    t.start()
    try:
        with pytest.raises(DispatcherError, match="withdrawn: nothing was done"):
            _submit(client, ns, timeout_s=1)
    finally:
        t.join()
    assert read.is_set() and not client.exists(keys.job(ns, "1")), "told nothing was done, and nothing was"


def test_a_request_claimed_just_as_its_sender_gives_up_is_answered_not_taken_back(client, ns, leader):
    from dispatcher.store.connect import text
    from dispatcher.store.requests import _withdraw

    rid = "r" * 32
    entry = client.xadd(keys.requests(ns), {"id": rid, "kind": "submit", "user": "alice", "ts": "0", "body": b"",
                                            "sig": ""})
    client.set(keys.request_seen(ns, rid), "claim:" + text(entry))  # a scheduler carries it out now
    late = threading.Timer(0.5, lambda: client.rpush(keys.reply(ns, rid), b"answer"))
    late.start()
    try:
        got, withdrawn = _withdraw(client, ns, entry, rid)
    finally:
        late.join()
    assert not withdrawn and got[1] == b"answer" and client.xlen(keys.requests(ns)) == 1


def test_a_request_the_server_went_away_under_is_carried_out_once_it_is_back_not_refused(own_server, ns):
    """The leader lost its server while it carried a submit out: it could be answered 'malformed request
    (ConnectionError)', exit 2, and marked handled (when the server was back for that answer); it stays to
    be carried out once the server is back, once."""
    import signal

    import redis

    from dispatcher.store.connect import connect

    class DyingServer(Verifier):  # the server dies as the leader seals the job it writes, and is back at once
        checked = died = False

        @property
        def secret(self):
            if DyingServer.checked and not DyingServer.died:
                DyingServer.died = True
                own_server.proc.send_signal(signal.SIGKILL)
                own_server.proc.wait()
                threading.Timer(1.0, own_server.start).start()  # back a moment later, as `up` brings it
            return SECRET

        @secret.setter
        def secret(self, value):
            pass

        def request_ok(self, *args):
            ok = super().request_ok(*args)
            DyingServer.checked = True
            return ok

    client = connect(own_server.url)
    leader = RequestServer(client, ns, DyingServer(SECRET, admins=()), Scripts(client, ns))
    leader.publish_mode()
    answers: list = []
    sender = threading.Thread(target=lambda: answers.append(_submit(connect(own_server.url), ns, timeout_s=60)))
    sender.start()
    try:
        while not client.exists(keys.requests(ns)):
            pass
        while not answers and sender.is_alive():  # as the scheduler's loop rides out the server's restart
            try:
                leader.serve()
            except redis.exceptions.ConnectionError:
                time.sleep(0.2)
    finally:
        sender.join(60)
    assert DyingServer.died and answers and answers[0]["ok"], answers
    written = [k for k in client.scan_iter(match=keys.job(ns, "*")) if k.decode().count(":") == 2]
    assert [k.decode() for k in written] == [keys.job(ns, answers[0]["ids"][0])], "the job it was told of, once"
