"""Signatures that cannot be replayed: a signed request taken from the stream and sent again, and a
signed spec copied into another job hash, are refused (issue 18's attacks, with a full-rights Redis
login standing in for whatever a user could reach before the roles: the refusals here are the
leader's and the node's, not the ACL's)."""

from __future__ import annotations

import json

import msgpack
import pytest

from dispatcher.store import keys
from dispatcher.store.codec import decode_spec, encode_spec
from dispatcher.store.connect import text
from tests.e2e.test_identity_live import as_user, lab  # noqa: F401 (a fixture)

pytestmark = pytest.mark.timeout(120)


def answers(client, ns: str, request_id: str, n: int) -> list[dict]:
    got = []
    for _ in range(n):
        reply = client.blpop([keys.reply(ns, request_id)], timeout=20)
        assert reply is not None, f"no answer to replay {len(got) + 1} of request {request_id}"
        got.append(msgpack.unpackb(reply[1], raw=False))
    return got


def test_a_signed_submit_taken_from_the_stream_and_added_again_runs_once(cli, lab, client):
    job = cli.run("submit", "--", "echo", "once", **as_user(lab, "alice")).stdout.strip()
    cli.wait_for(lambda: cli.show(job)["state"] == "succeeded", what="alice's job")
    (entry_id, fields), = client.xrange(keys.requests(cli.ns))
    for _ in range(2):  # the attacker re-adds alice's signed request, twice
        client.xadd(keys.requests(cli.ns), fields)
    client.publish(keys.events(cli.ns), b"request")
    refused = answers(client, cli.ns, text(fields[b"id"]), 2)
    assert all(not a["ok"] and "already handled" in a["error"] and "replay is refused" in a["error"]
               for a in refused), refused
    assert [j["id"] for j in json.loads(cli.run("queue", "--all", "--json").stdout)] == [job]  # one job, run once
    log = "\n".join(p.read_text() for p in cli.home.glob("scheduler-*.log"))
    assert "already handled" in log  # the leader logged the replays


def test_a_signed_spec_copied_into_another_job_hash_is_refused_by_the_node(cli, lab, client):
    job = cli.run("submit", "--", "echo", "mine", **as_user(lab, "alice")).stdout.strip()
    cli.wait_for(lambda: cli.show(job)["state"] == "succeeded", what="alice's job")
    record = client.hgetall(keys.job(cli.ns, job))
    copy = str(int(job) + 1000)  # the same spec (re-encoded under the new id, as the id is in it) and seal
    spec = encode_spec(decode_spec(record[b"spec"]), copy)
    client.hset(keys.job(cli.ns, copy), mapping={b"spec": spec, b"seal": record[b"seal"],
                                                 b"state": b"pending", b"attempt": b"0", b"epoch": b"0",
                                                 b"submit_ms": record[b"submit_ms"]})
    client.zadd(keys.jobs_all(cli.ns), {copy: int(record[b"submit_ms"])})
    client.zadd(keys.jobs_pending(cli.ns), {copy: int(record[b"submit_ms"])})
    client.sadd(keys.jobs_changed(cli.ns), copy)
    client.publish(keys.events(cli.ns), b"submit")
    cli.wait_for(lambda: cli.show(copy)["state"] == "failed", what="the node to refuse the copy")
    assert "not what user alice signed" in cli.show(copy)["reason"]
    assert cli.run("logs", copy).stdout == ""  # nothing ran


def test_a_launch_the_leader_did_not_seal_runs_nothing(cli, lab, client, tmp_path):
    """Someone with a write login (an agent's) makes alice's finished job look placed again and queues
    its launch on the node: the node wants the leader's seal of that attempt, and starts nothing."""
    from rq import Queue
    from rq.serializers import JSONSerializer

    marker = tmp_path / "runs"
    job = cli.run("submit", "--", "sh", "-c", f"echo ran >> {marker}", **as_user(lab, "alice")).stdout.strip()
    cli.wait_for(lambda: cli.show(job)["state"] == "succeeded", what="alice's job")
    epoch = int(client.hget(keys.job(cli.ns, job), "epoch")) + 1
    client.hset(keys.job(cli.ns, job), mapping={"state": "assigned", "node": "n1", "epoch": epoch, "gpus": ""})
    queue = Queue(keys.rq_queue_name(cli.ns, "n1"), connection=client, serializer=JSONSerializer)
    queue.enqueue("workers.jobs.launch", job, epoch, job_timeout=-1, result_ttl=0)
    cli.wait_for(lambda: "without the leader's seal" in "".join(p.read_text() for p in cli.home.glob("worker-*.log")),
                 what="the node to refuse the launch")
    assert marker.read_text() == "ran\n"  # once, from the leader's placement
