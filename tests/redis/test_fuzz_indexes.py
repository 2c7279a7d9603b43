"""Fuzzing what the scheduler and the read-only views iterate: the job indexes, the changed set,
the heartbeat index, a node's GPU holders, the decision log, the samples and control streams, and
every key read whole put there with the wrong type (store/quarantine.py). The server is the
real one from conftest.

Properties:
- the views (queue, why, eta, top) never raise on hostile entries, before or after a scheduler met
  them, and list the good jobs;
- scheduling cycles never raise; the good jobs are placed;
- each hostile entry the scheduler reads leaves its index into <ns>:quarantine with its reason (a
  pending job's bad score is put right instead: the job still runs), and a key of the wrong type
  is renamed aside to <ns>:quarantine:<key>:<ms> with the job indexes rebuilt behind it.
"""

from __future__ import annotations

import io
import math

import msgpack
import pytest
import redis
from hypothesis import example, given, settings
from hypothesis import strategies as st
from rich.console import Console

from dispatcher import control, top
from dispatcher.board import Board
from dispatcher.errors import DispatcherError
from dispatcher.explain import explain
from dispatcher.forecast import read_eta
from dispatcher.scheduler import Scheduler, now_ms
from dispatcher.store import keys
from dispatcher.store.codec import encode_node_info
from dispatcher.store.jobs import read_job, read_queue
from dispatcher.store.quarantine import FIXED, PER_NODE, read_quarantine, report
from dispatcher.model import GpuInfo
from tests.redis.test_fuzz_records import FUZZ, beat, fresh_ns, raw_job, submit_good, wipe

FUZZ_FEW = settings(FUZZ, max_examples=25)


@pytest.fixture(scope="module")
def rc(redis_url):
    from dispatcher.store.connect import connect

    c = connect(redis_url)
    yield c
    c.close()


def views(client, ns, good: list[str]) -> None:
    """queue, why, eta and top --once, as the CLI calls them: no exception, the good jobs listed."""
    listed = {j["id"] for j in read_queue(client, ns)}
    assert set(good) <= listed, (good, listed)
    report(client, ns)
    for job_id in good:
        out = explain(client, ns, job_id)
        assert out["job"]["id"] == job_id
        read_eta(client, ns, job_id)
    console = Console(file=io.StringIO(), width=120)
    top.run(Board(client, ns, ttl_s=0), once=True, console=console)
    assert "dispatch top" in console.file.getvalue()


def quarantined(client, ns) -> set[tuple[str, bytes]]:
    """(index, member) of every quarantine record, as raw as they were."""
    return {(f[b"key"].decode(), f[b"member"]) for _, f in client.xrange(keys.quarantine(ns))}


def in_quarantine(client, ns, index: str, member) -> bool:
    member = member if isinstance(member, bytes) else member.encode()
    got = client.xrange(keys.quarantine(ns))
    return any(f[b"key"] == index.encode() and f[b"member"] == member for _, f in got)


# -- plain scenarios: each failed on the code before quarantine ---------------------------------
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
    assert p == [f"1 index entry quarantined (see {keys.quarantine(ns)})"]


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
    from dispatcher.spec import build_spec
    from dispatcher.store.jobs import write_jobs
    from dispatcher.store.scripts import Scripts

    beat(client, ns, gpus=1)
    sched = Scheduler(client, ns)
    (low,) = write_jobs(client, ns, [build_spec(command=["true"], user="bob", submit_ms=now_ms(), gpus=1,
                                                priority="low", checkpointable=True)])
    sched.cycle()
    Scripts(client, ns).mark_running(low, 1, now_ms() - 120_000, 123)  # past min_run_s
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
    from dispatcher.identity import Verifier
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


# -- fuzz: hostile entries in every index and stream --------------------------------------------
INDEXES = ("pending", "active")
BAD_MEMBERS = st.one_of(st.sampled_from([b"", b"1:log", b"\xff", b"a b", b"x" * 65, b"1\n", "é".encode()]),
                        st.binary(min_size=1, max_size=6).filter(lambda b: not b.isalnum()))
GHOSTS = st.from_regex(r"g[0-9a-z]{1,6}", fullmatch=True)
NOT_TIMES = st.sampled_from([math.inf, -math.inf, 1e300, -1e300, 2.0 ** 60])
KEY_TYPES = ("string", "list", "set", "zset", "stream", "hash")

HOSTILE = st.one_of(
    st.tuples(st.just("score"), NOT_TIMES),
    st.tuples(st.just("ghost"), st.sampled_from(INDEXES), GHOSTS),
    st.tuples(st.just("member"), st.sampled_from(INDEXES + ("changed",)), BAD_MEMBERS),
    st.tuples(st.just("wrong_record"), st.sampled_from(INDEXES), st.sampled_from(KEY_TYPES[:-1])),
    st.tuples(st.just("not_its_state"), st.sampled_from(INDEXES), st.sampled_from(["succeeded", "failed",
                                                                                      "cancelled", "bogus", ""])),
    st.tuples(st.just("beat"), st.one_of(BAD_MEMBERS, st.from_regex(r"z[a-z0-9]{0,5}", fullmatch=True)),
              st.one_of(NOT_TIMES, st.just(None)), st.booleans()),
    st.tuples(st.just("alloc"), st.integers(0, 3), st.one_of(GHOSTS, st.just("~g1,g2"), st.binary(max_size=4))),
    st.tuples(st.just("decision"), st.one_of(st.binary(max_size=8), st.dictionaries(
        st.sampled_from(["kind", "t_ms", "job", "node", "gpus", "score", "terms", "why"]),
        st.one_of(st.text(max_size=3), st.floats(), st.integers(-2 ** 63, 2 ** 63 - 1), st.none(),
                  st.lists(st.text(max_size=2), max_size=2)),
        max_size=8).map(msgpack.packb))),
    st.tuples(st.just("sample"), st.dictionaries(st.sampled_from(["gpus", "held", "util_pct", "frag", "pending"]),
                                                  st.sampled_from(["x", "nan", "inf", "-1", "1e400", ""]),
                                                  max_size=5)),
)


def plant(client, ns, kind, *args) -> tuple[str, bytes | str, str] | None:
    """Write one hostile entry; returns (index key, member, what the scheduler must do: 'quarantine',
    'restore', 'met' (only when a placement meets it), 'changed' (read on the next incremental cycle),
    or 'skip' (views skip it))."""
    idx = {"pending": keys.jobs_pending(ns), "active": keys.jobs_active(ns), "changed": keys.jobs_changed(ns)}
    if kind == "score":
        job = submit_good(client, ns)
        client.zadd(keys.jobs_pending(ns), {job: args[0]})
        return keys.jobs_pending(ns), job, "restore"
    if kind == "ghost":
        client.zadd(idx[args[0]], {args[1]: now_ms()})
        return idx[args[0]], args[1], "quarantine"
    if kind == "member":
        if args[0] == "changed":
            return idx["changed"], args[1], "changed"
        client.zadd(idx[args[0]], {args[1]: now_ms()})
        return idx[args[0]], args[1], "quarantine"
    if kind == "wrong_record":
        job_id = f"w{client.incr(keys.job_seq(ns))}"
        key = keys.job(ns, job_id)
        {"string": lambda: client.set(key, "x"), "list": lambda: client.rpush(key, "x"),
         "set": lambda: client.sadd(key, "x"), "zset": lambda: client.zadd(key, {"x": 1}),
         "stream": lambda: client.xadd(key, {"x": 1})}[args[1]]()
        client.zadd(idx[args[0]], {job_id: now_ms()})
        return idx[args[0]], job_id, "quarantine"
    if kind == "not_its_state":
        job_id = raw_job(client, ns, {"state": args[1] or None}, index=(args[0],))
        if not args[1]:
            client.hdel(keys.job(ns, job_id), "state")
        return idx[args[0]], job_id, "quarantine"
    if kind == "beat":
        name, score, with_record = args
        if name == "n1" or (isinstance(name, str) and score is None and with_record):
            return None  # a well-formed node: not hostile
        if with_record and isinstance(name, str):
            client.hset(keys.node(ns, name), mapping={"info": encode_node_info([GpuInfo(0, "NVIDIA T4", 16.0)],
                                                                               4, 16.0), "seen_ms": now_ms()})
        client.zadd(keys.nodes_heartbeat(ns), {name: now_ms() if score is None else score})
        return keys.nodes_heartbeat(ns), name, "quarantine"
    if kind == "alloc":
        client.hset(keys.node_alloc(ns, "n1"), str(args[0]), args[1])
        return keys.node_alloc(ns, "n1"), str(args[0]), "met"
    if kind == "decision":
        client.lpush(keys.decisions(ns), args[0])
        return None
    if kind == "sample":
        client.xadd(keys.samples(ns), args[0] or {"x": "y"})
        return None
    raise AssertionError(kind)


@FUZZ
@given(st.lists(HOSTILE, min_size=1, max_size=6))
@example([("score", math.inf)])
@example([("ghost", "active", "g1"), ("member", "changed", b"1:log")])
@example([("wrong_record", "pending", "list"), ("not_its_state", "active", "succeeded")])
@example([("beat", b"\xff", None, False), ("beat", "zz", math.inf, True), ("beat", "zy", None, False)])
@example([("alloc", 0, "g1"), ("alloc", 1, "~g1,g2"), ("alloc", 2, b"\xff"), ("alloc", 3, "g3")])
@example([("decision", msgpack.packb({"kind": "start", "t_ms": "x", "job": 1})),
          ("sample", {"gpus": "nan", "held": "inf"})])
def test_hostile_index_entries_are_quarantined_and_good_jobs_still_run(rc, hostile):
    ns = fresh_ns()
    try:
        beat(rc, ns)
        good = submit_good(rc, ns)
        planted: dict[tuple[str, bytes], str] = {}
        changed = []
        for h in hostile:
            got = plant(rc, ns, *h)
            if got is not None:
                index, member, what = got
                member = member if isinstance(member, bytes) else member.encode()
                if what == "changed":
                    changed.append(member)
                planted[(index, member)] = what
        views(rc, ns, [good])  # hostile entries present, no scheduler yet
        sched = Scheduler(rc, ns)
        sched.cycle()
        if changed:  # the first cycle reads everything (and takes the changed set whole, unread)
            rc.sadd(keys.jobs_changed(ns), *changed)
        sched.cycle()
        assert read_job(rc, ns, good)["state"] == "assigned"
        restored = [m.decode() for (_, m), what in planted.items() if what == "restore"]
        for job_id in restored:
            assert read_job(rc, ns, job_id)["state"] in ("pending", "assigned")
            assert rc.zscore(keys.jobs_pending(ns), job_id) in (None, float(rc.hget(keys.job(ns, job_id),
                                                                                   "submit_ms")))
        views(rc, ns, [good, *restored])
        moved = quarantined(rc, ns)
        for (index, member), what in planted.items():
            if what in ("quarantine", "restore", "changed"):
                assert (index, member) in moved, (index, member, what, moved)
            if what == "quarantine":
                gone = rc.zscore(index, member) is None
                assert gone, (index, member)
        for g, holder in rc.hgetall(keys.node_alloc(ns, "n1")).items():  # a GPU a job got is that job's
            placed = [j for j in (good, *restored) if read_job(rc, ns, j)["gpus"] == [int(g)]]
            if placed:
                assert holder == placed[0].encode() or (keys.node_alloc(ns, "n1"), g) in moved
    finally:
        wipe(rc, ns)


# -- fuzz: any key read whole, of the wrong type --------------------------------------------------
WHOLE_KEYS = [(f.__name__, t) for f, t in FIXED] + [(f"{f.__name__}:n1", t) for f, t in PER_NODE]


def _make(client, key: str, kind: str) -> None:
    client.delete(key)
    {"string": lambda: client.set(key, "x"), "list": lambda: client.rpush(key, "x"),
     "set": lambda: client.sadd(key, "x"), "zset": lambda: client.zadd(key, {"x": 1}),
     "stream": lambda: client.xadd(key, {"x": 1}), "hash": lambda: client.hset(key, "x", "y")}[kind]()


@FUZZ_FEW
@given(st.lists(st.tuples(st.sampled_from(WHOLE_KEYS), st.sampled_from(KEY_TYPES)), min_size=1, max_size=3),
       st.booleans())
@example([(("jobs_pending", "zset"), "string")], False)
@example([(("jobs_active", "zset"), "set"), (("jobs_all", "zset"), "list")], True)
@example([(("scheduler_leader", "string"), "hash"), (("scheduler_token", "string"), "list")], False)
@example([(("node_alloc:n1", "hash"), "string"), (("node:n1", "hash"), "list")], True)
@example([(("quarantine", "stream"), "string"), (("jobs_pending", "zset"), "hash")], False)
def test_any_key_of_the_wrong_type_is_set_aside_and_scheduling_goes_on(rc, broken, running_first):
    ns = fresh_ns()
    try:
        beat(rc, ns)
        sched = Scheduler(rc, ns)
        first = submit_good(rc, ns) if running_first else None
        if first:
            sched.cycle()
        good = submit_good(rc, ns)
        wrong = {}
        for (name, want), kind in broken:
            if kind == want:
                continue
            builder, _, node = name.partition(":")
            key = getattr(keys, builder)(ns, node) if node else getattr(keys, builder)(ns)
            _make(rc, key, kind)
            wrong[key] = want
        listed = {j["id"] for j in read_queue(rc, ns)}
        assert good in listed or keys.jobs_all(ns) in wrong or keys.jobs_pending(ns) in wrong
        for job_id in (good, first):
            if job_id:
                try:
                    explain(rc, ns, job_id)
                    read_eta(rc, ns, job_id)
                except DispatcherError:
                    pass
        top.run(Board(rc, ns, ttl_s=0), once=True, console=Console(file=io.StringIO()))
        for _ in range(4):
            sched._types_at = (-1e18, -1e18)  # a tick (and 15 s) have passed
            sched.cycle()
            try:  # its agent writes the node again (and, as an agent does, carries on when it cannot)
                beat(rc, ns)
            except redis.exceptions.ResponseError:
                pass
        assert read_job(rc, ns, good)["state"] == "assigned"
        if first:
            assert read_job(rc, ns, first)["state"] == "assigned"
            assert read_job(rc, ns, first)["gpus"] != read_job(rc, ns, good)["gpus"]
        for key, want in wrong.items():
            assert rc.type(key).decode() in (want, "none"), key
            if key not in (keys.jobs_changed(ns), keys.nodes_changed(ns)):  # those a read deletes whole
                assert rc.keys(keys.quarantined(ns, key, 0)[:-1] + "*"), key
        for job_id in (good, first):
            if job_id:
                assert rc.zscore(keys.jobs_all(ns), job_id) is not None
        views(rc, ns, [j for j in (good, first) if j])
    finally:
        wipe(rc, ns)
