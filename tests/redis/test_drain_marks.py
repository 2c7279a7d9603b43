"""The drain mark (store/nodes.py, keys.nodes_drain) against a real server: heartbeats leave it alone,
the scheduler honours it from one cycle to the next and across a new Scheduler, a hostile mark still
drains, and a key of the wrong type costs no cycle."""

from __future__ import annotations

import pytest

from dispatcher.core.errors import NotFoundError
from dispatcher.clock import now_ms
from dispatcher.scheduler.loop import Scheduler
from dispatcher.store import keys
from dispatcher.store.jobs import read_job
from dispatcher.store.nodes import Drain, drain, read_nodes, remove_node, resume
from tests.redis.test_fuzz_records import beat, submit_good


def test_a_heartbeat_and_a_clean_agent_exit_leave_the_mark_and_a_new_scheduler_honours_it(client, ns):
    beat(client, ns)
    assert drain(client, ns, "n1", "  disk\nswap ", "ops", 1234) is None  # the reason is one line
    beat(client, ns)  # the agent's next heartbeat, and a restarted agent's first
    remove_node(client, ns, "n1", "")
    beat(client, ns)
    (node,), _ = read_nodes(client, ns)
    assert node.drain == Drain("disk swap", "ops", 1234)
    job = submit_good(client, ns)
    for _ in range(2):  # two schedulers, as after a restart: each reads the mark whole
        sched = Scheduler(client, ns)
        assert sched.cycle().verdicts and sched.leading
        sched.cycle()
        assert read_job(client, ns, job)["state"] == "pending"
        sched.lease.release()
    assert read_job(client, ns, job)["reason"].startswith("n1 is drained: disk swap; ")
    assert resume(client, ns, "n1") == Drain("disk swap", "ops", 1234)
    assert resume(client, ns, "n1") is None
    sched.cycle()
    assert read_job(client, ns, job)["state"] == "assigned"


def test_a_node_never_seen_is_refused_by_name(client, ns):
    beat(client, ns, "n1")
    beat(client, ns, "n2")
    with pytest.raises(NotFoundError, match="no node 'n3'; known nodes: n1, n2"):
        drain(client, ns, "n3", "", "ops", now_ms())
    assert client.exists(keys.nodes_drain(ns)) == 0


def test_a_mark_that_cannot_be_read_still_drains_and_resume_takes_it(client, ns):
    beat(client, ns)
    client.hset(keys.nodes_drain(ns), mapping={"n1": b"\xc1 not msgpack", "bad name!": b"x"})
    job = submit_good(client, ns)
    Scheduler(client, ns).cycle()
    assert read_job(client, ns, job)["state"] == "pending"
    (node,), problems = read_nodes(client, ns)
    assert node.drain.reason == "(its drain mark is unreadable)" and not problems
    assert resume(client, ns, "n1").reason == "(its drain mark is unreadable)"


def test_a_drain_key_of_the_wrong_type_is_set_aside_and_scheduling_goes_on(client, ns):
    beat(client, ns)
    client.set(keys.nodes_drain(ns), "x")
    job = submit_good(client, ns)
    nodes, problems = read_nodes(client, ns)  # a view: the nodes, and the problem said
    assert [n.name for n in nodes] == ["n1"] and problems == [f"{keys.nodes_drain(ns)} is no hash"]
    Scheduler(client, ns).cycle()
    assert client.exists(keys.nodes_drain(ns)) == 0  # renamed aside (quarantine.FIXED)
    assert read_job(client, ns, job)["state"] == "assigned"


def test_a_drain_again_without_a_reason_keeps_the_reason_and_a_new_reason_replaces_it(client, ns):
    beat(client, ns)
    assert drain(client, ns, "n1", "disk swap", "ops", 1000) is None
    assert drain(client, ns, "n1", "", "bob", 2000) == Drain("disk swap", "ops", 1000)
    (node,), _ = read_nodes(client, ns)
    assert node.drain == Drain("disk swap", "bob", 2000)  # who and when are the latest drain's
    assert drain(client, ns, "n1", "  ", "ops", 3000).reason == "disk swap"
    assert drain(client, ns, "n1", "driver upgrade", "ops", 4000).reason == "disk swap"
    assert resume(client, ns, "n1") == Drain("driver upgrade", "ops", 4000)
    assert drain(client, ns, "n1", "", "ops", 5000) is None  # a fresh drain after resume: no old reason
    assert resume(client, ns, "n1").reason == ""
    client.hset(keys.nodes_drain(ns), "n1", b"\xc1 not msgpack")
    drain(client, ns, "n1", "", "ops", 6000)
    (node,), _ = read_nodes(client, ns)
    assert node.drain == Drain("", "ops", 6000)  # an unreadable mark's stand-in is no reason to keep


def test_every_view_calls_a_drained_nodes_free_gpus_drained_not_free(client, ns):
    # `nodes` said 0/4 free for a draining node while /metrics, top and the board said 2 free
    from dispatcher.views.board import Board
    from dispatcher.views.metrics import ClusterCollector, exposition
    from dispatcher.views.node import node_view

    beat(client, ns)
    drain(client, ns, "n1", "disk swap", "ops", now_ms())
    [node] = Board(client, ns).overview()["nodes"]
    assert {g["state"] for g in node["gpus"]} == {"drained"}, node
    assert {g["state"] for g in node_view(client, ns, "n1", 60.0)["gpus"]} == {"drained"}
    text = exposition(ClusterCollector(Board(client, ns))).decode()
    assert 'dispatch_node_gpus{node="n1",state="free"} 0.0' in text and 'state="drained"} ' in text
