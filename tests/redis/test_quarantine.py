"""Hostile index entries, one scenario each (store/quarantine.py, store/repair.py), each of which failed
on the code before quarantine: an infinite pending score, indexes and streams of the wrong type, a GPU
held by no job, malformed control commands, a requests mark that is no stream id; and the commands
(queue, why, eta, top --once) run as a user runs them. The fuzzing is in test_fuzz_indexes.py."""

from __future__ import annotations

import math

import msgpack
import pytest

from dispatcher.store import control
from dispatcher.core.errors import DispatcherError
from dispatcher.views.explain import explain
from dispatcher.clock import now_ms
from dispatcher.scheduler.loop import Scheduler
from dispatcher.store import keys
from dispatcher.store.jobs import read_job
from dispatcher.store.quarantine import read_quarantine, report
from tests.redis.test_fuzz_indexes import in_quarantine, views
from tests.redis.test_fuzz_records import beat, submit_good


@pytest.mark.parametrize("score", [math.inf, -math.inf])
def test_an_infinite_pending_score_is_quarantined_and_the_job_still_runs(client, ns, score):
    beat(client, ns)
    hostile, good = submit_good(client, ns), submit_good(client, ns)
    submit_ms = int(client.hget(keys.job(ns, hostile), "submit_ms"))
    client.zadd(keys.jobs_pending(ns), {hostile: score})  # ZADD <ns>:jobs:pending +inf <id>
    views(client, ns, [good])  # before any scheduler: why, eta and top crashed here
    assert explain(client, ns, hostile)["outcome"]["code"] == "invalid"
    sched = Scheduler(client, ns)
    sched.cycle()  # raised OverflowError here, every cycle
    assert read_job(client, ns, good)["state"] == "assigned"
    assert in_quarantine(client, ns, keys.jobs_pending(ns), hostile)
    assert client.zscore(keys.jobs_pending(ns), hostile) == submit_ms  # put right, not dropped
    sched.cycle()
    assert read_job(client, ns, hostile)["state"] == "assigned"
    views(client, ns, [good, hostile])
    p = report(client, ns)
    assert p == ["1 entry quarantined (`dispatch quarantine` lists them, --clear once read)"]


def test_a_pending_index_of_the_wrong_type_is_set_aside_and_rebuilt(client, ns):
    beat(client, ns, gpus=1)
    first, second = submit_good(client, ns), submit_good(client, ns)
    client.delete(keys.jobs_pending(ns))
    client.set(keys.jobs_pending(ns), "x")  # DEL <ns>:jobs:pending; SET <ns>:jobs:pending x
    views(client, ns, [first, second])  # queue raised WRONGTYPE here
    assert any("not a zset" in line for line in report(client, ns))
    with pytest.raises(DispatcherError, match="cannot submit"):  # and nothing is written
        submit_good(client, ns)
    sched = Scheduler(client, ns)
    plan = sched.cycle()  # raised WRONGTYPE here, every cycle: nothing was ever placed
    assert [p.job_id for p in plan.placements] == [first]
    assert client.type(keys.jobs_pending(ns)) == b"zset"
    assert [m.decode() for m in client.zrange(keys.jobs_pending(ns), 0, -1)] == [second]
    (aside,) = client.keys(f"{keys.quarantine(ns)}:jobs:pending:*")
    assert client.get(aside) == b"x"
    assert any(r["key"] == keys.jobs_pending(ns) and r["moved_to"] == aside.decode()
               for r in read_quarantine(client, ns))
    third = submit_good(client, ns)
    views(client, ns, [second, third])


def test_an_idle_cluster_sets_a_wrong_typed_pending_index_aside_within_a_tick(client, ns):
    """Nothing changes, so no read meets it; submits fail on it meanwhile. The type check rides on the
    stats write the scheduler sends each cycle."""
    beat(client, ns)
    sched = Scheduler(client, ns)
    sched.cycle()
    client.set(keys.jobs_pending(ns), "x")
    sched._types_at = (-1e18, -1e18)  # a tick (and 15 s) have passed
    sched.cycle()
    assert client.type(keys.jobs_pending(ns)) == b"none"
    job = submit_good(client, ns)
    sched.cycle()
    assert read_job(client, ns, job)["state"] == "assigned"


def test_an_active_index_of_the_wrong_type_is_rebuilt_from_the_running_jobs(client, ns):
    beat(client, ns, gpus=2)
    sched = Scheduler(client, ns)
    running = submit_good(client, ns)
    sched.cycle()
    client.delete(keys.jobs_active(ns))
    client.sadd(keys.jobs_active(ns), "junk")
    views(client, ns, [running])
    waiting = submit_good(client, ns)
    sched.cycle()
    sched.cycle()
    assert client.type(keys.jobs_active(ns)) == b"zset"
    assert {m.decode() for m in client.zrange(keys.jobs_active(ns), 0, -1)} == {running, waiting}
    assert {read_job(client, ns, j)["gpus"][0] for j in (running, waiting)} == {0, 1}  # never double-booked


def test_a_control_stream_of_the_wrong_type_still_gets_the_preemption(client, ns):
    from dispatcher.core.spec import build_spec
    from dispatcher.store.jobs import write_jobs
    from dispatcher.store.scripts import Scripts

    beat(client, ns, gpus=1)
    sched = Scheduler(client, ns)
    (low,) = write_jobs(client, ns, [build_spec(command=["true"], user="bob", submit_ms=now_ms(), gpus=1,
                                                priority="low", checkpointable=True)])
    sched.cycle()
    Scripts(client, ns).mark_running(low, 1, now_ms() - 1_200_000, 123)  # past min_run_s (5 min)
    client.set(keys.node_control(ns, "n1"), "junk")
    (urgent,) = write_jobs(client, ns, [build_spec(command=["true"], user="alice", submit_ms=now_ms(), gpus=1,
                                                   priority="critical")])
    for _ in range(3):
        sched.cycle()
        if read_job(client, ns, low)["state"] == "preempting":
            break
    assert read_job(client, ns, low)["state"] == "preempting"
    assert client.type(keys.node_control(ns, "n1")) == b"stream"
    (cmd,) = control.read(client, ns, "n1", pending=False, block_ms=10)
    assert cmd[1]["type"] == "preempt" and cmd[1]["job"] == low and cmd[1]["by"] == f"job {urgent}"


def test_a_gpu_held_by_no_job_is_freed_when_a_placement_meets_it(client, ns):
    beat(client, ns, gpus=1)
    client.hset(keys.node_alloc(ns, "n1"), "0", "999")  # job 999 does not exist
    job = submit_good(client, ns)
    sched = Scheduler(client, ns)
    sched.cycle()  # refused: GPU 0 is held
    sched.cycle()
    assert read_job(client, ns, job)["state"] == "assigned"
    assert in_quarantine(client, ns, keys.node_alloc(ns, "n1"), "0")
    assert client.hget(keys.node_alloc(ns, "n1"), "0") == job.encode()


def test_malformed_control_commands_are_acked_and_quarantined(client, ns):
    control.ensure_group(client, ns, "n1")
    stream = keys.node_control(ns, "n1")
    for raw in (b"\xff", msgpack.packb([1]), msgpack.packb({"type": "preempt", "job": "1", "epoch": "x"}),
                msgpack.packb({"type": "preempt", "job": "1:log", "epoch": 1}),
                msgpack.packb({"type": "cancel", "job": "1", "epoch": 1, "reason": 5})):
        client.xadd(stream, {b"c": raw})
    control.send(client, ns, "n1", {"type": "cancel", "job": "7", "epoch": 2, "reason": "bye"})
    got = control.read(client, ns, "n1", pending=False, block_ms=10)
    assert [c for _, c in got] == [{"type": "cancel", "job": "7", "epoch": 2, "reason": "bye"}]
    pending = client.xpending(stream, control.GROUP)["pending"]
    assert pending == 1  # only the good one, until its agent acks it
    assert sum(1 for r in read_quarantine(client, ns) if r["key"] == stream) == 5


def test_a_requests_mark_that_is_no_stream_id_is_quarantined_not_a_crash(client, ns):
    from dispatcher.auth.identity import Verifier
    from dispatcher.store.requests import RequestServer
    from dispatcher.store.scripts import Scripts

    client.xadd(keys.requests(ns), {"id": "r1", "kind": "bogus"})
    newest = client.xadd(keys.requests(ns), {"id": "r2", "kind": "bogus"})
    client.set(keys.requests_done(ns), "garbage")
    server = RequestServer(client, ns, Verifier(b"s" * 32), Scripts(client, ns))
    assert server.serve() == 0
    assert client.get(keys.requests_done(ns)) == newest  # none of those before runs (again)
    assert in_quarantine(client, ns, keys.requests_done(ns), b"")
    client.xadd(keys.requests(ns), {"id": "r3", "kind": "bogus"})
    assert server.serve() == 1


# -- the commands themselves --------------------------------------------------------------------
def test_the_commands_keep_working_on_hostile_indexes(cli, client):
    """`dispatch queue`, `why`, `eta` and `top --once` through the CLI: exit 0, no traceback, the good
    jobs shown; then the same with the pending index of the wrong type."""
    good, hostile = cli.submit("--", "true"), cli.submit("--", "true")
    client.zadd(keys.jobs_pending(cli.ns), {hostile: math.inf, "ghost": -math.inf, b"1:log": 5})

    def commands_work():
        p = cli.run("queue", check=False)
        assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr
        assert good in p.stdout.split() and hostile in p.stdout.split(), p.stdout
        for args in (("why", good), ("eta", good), ("why", hostile), ("top", "--once")):
            p = cli.run(*args, check=False)
            assert p.returncode == 0 and "Traceback" not in p.stderr and "internal error" not in p.stderr, (args, p)
        return p

    commands_work()
    Scheduler(client, cli.ns).cycle()
    assert "3 entries quarantined" in cli.run("queue").stdout
    client.delete(keys.jobs_pending(cli.ns))
    client.set(keys.jobs_pending(cli.ns), "x")
    commands_work()
    assert "not a zset" in cli.run("queue").stdout


def test_hostile_wake_ups_do_not_stop_a_running_scheduler(client, ns):
    """The events channel is pub/sub: whatever is published there only wakes the loop up."""
    import threading

    beat(client, ns)
    stop = threading.Event()
    sched = Scheduler(client, ns)
    loop = threading.Thread(target=sched.run, args=(stop,), daemon=True)
    loop.start()
    try:
        for data in (b"\xff", b"", b"submit" * 1000, b"placed", b"lost", "é".encode()) * 20:
            client.publish(keys.events(ns), data)
        job = submit_good(client, ns)
        deadline = now_ms() + 10_000
        while read_job(client, ns, job)["state"] != "assigned":
            assert now_ms() < deadline and loop.is_alive(), "the scheduler stopped scheduling"
            stop.wait(0.05)
    finally:
        stop.set()
        loop.join(10)
