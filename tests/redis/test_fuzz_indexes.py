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

from dispatcher.views import top
from dispatcher.views.board import Board
from dispatcher.core.errors import DispatcherError
from dispatcher.views.explain import explain
from dispatcher.views.forecast import read_eta
from dispatcher.clock import now_ms
from dispatcher.scheduler.loop import Scheduler
from dispatcher.store import keys
from dispatcher.store.codec import encode_node_info
from dispatcher.store.jobs import read_job, read_queue
from dispatcher.store.quarantine import FIXED, PER_NODE, report
from dispatcher.core.model import GpuInfo
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
    out = io.StringIO()
    top.run(Board(client, ns, ttl_s=0), once=True, out=out)
    assert "dispatch top" in out.getvalue()


def quarantined(client, ns) -> set[tuple[str, bytes]]:
    """(index, member) of every quarantine record, as raw as they were."""
    return {(f[b"key"].decode(), f[b"member"]) for _, f in client.xrange(keys.quarantine(ns))}


def in_quarantine(client, ns, index: str, member) -> bool:
    member = member if isinstance(member, bytes) else member.encode()
    got = client.xrange(keys.quarantine(ns))
    return any(f[b"key"] == index.encode() and f[b"member"] == member for _, f in got)


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
        top.run(Board(rc, ns, ttl_s=0), once=True, out=io.StringIO())
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


# -- fuzz: the streams agents and the leader read -------------------------------------------------
WILD = st.one_of(st.none(), st.booleans(), st.integers(-2 ** 63, 2 ** 63 - 1), st.floats(), st.text(max_size=6),
                 st.binary(max_size=6), st.lists(st.integers(-5, 5000), max_size=3))
COMMANDS = st.one_of(
    st.binary(max_size=12),
    st.fixed_dictionaries({"type": st.sampled_from(["preempt", "cancel", "shrink", "time", "kill", ""]) | WILD},
                          optional={"job": st.sampled_from(["1", "1:log", "", "x" * 65]) | WILD, "epoch": WILD,
                                    "mode": WILD, "keep": WILD, "by": WILD, "reason": WILD, "keep_wait": WILD,
                                    "time_s": WILD}
                          ).map(lambda d: msgpack.packb(d, use_bin_type=True)),
)


@FUZZ
@given(st.lists(st.one_of(COMMANDS, st.none()), min_size=1, max_size=6))
@example([msgpack.packb({"type": "preempt", "job": "1", "epoch": "x"}), None])
@example([msgpack.packb({"type": "shrink", "job": "1", "epoch": 1, "keep": [True]})])
def test_hostile_control_commands_never_stall_the_channel(rc, raws):
    """What the agent's control loop reads: only commands shaped as control.send sends them; the rest
    acked and in quarantine (read again and again, one would stall the channel for good)."""
    from dispatcher.store import control

    ns = fresh_ns()
    try:
        control.ensure_group(rc, ns, "n1")
        stream = keys.node_control(ns, "n1")
        good = {"type": "cancel", "job": "7", "epoch": 2, "reason": "bye"}
        for raw in raws:
            if raw is None:
                control.send(rc, ns, "n1", good)
            else:
                rc.xadd(stream, {b"c": raw})
        got = control.read(rc, ns, "n1", pending=False, block_ms=10)
        for _, cmd in got:
            control.malformed(cmd)  # raises for a malformed one
        assert sum(1 for _, c in got if c == good) >= sum(1 for r in raws if r is None)
        assert rc.xpending(stream, control.GROUP)["pending"] == len(got)  # the rest were acked
        dropped = sum(1 for _, f in rc.xrange(keys.quarantine(ns)) if f[b"key"] == stream.encode())
        assert dropped == len(raws) - len(got)
        assert control.read(rc, ns, "n1", pending=True) == got  # read again: the same, nothing stuck
    finally:
        wipe(rc, ns)


REQUEST = st.fixed_dictionaries({}, optional={k: WILD for k in ("id", "kind", "user", "ts", "body", "sig")})


@FUZZ
@given(st.lists(REQUEST, min_size=1, max_size=5), st.one_of(st.none(), st.sampled_from(["", "x", "1-2-3", "-1"])))
def test_hostile_requests_never_stop_the_leader(rc, requests, done):
    """The requests stream (identity on): every entry is answered or refused, the mark moves past all
    of them, and a mark that is no stream id is quarantined."""
    from dispatcher.auth.identity import Verifier
    from dispatcher.store.requests import RequestServer
    from dispatcher.store.scripts import Scripts

    ns = fresh_ns()
    try:
        last = None
        for r in requests:
            fields = {k: (v if isinstance(v, (bytes, str, int, float)) and not isinstance(v, bool) else repr(v))
                      for k, v in r.items()} or {"x": "y"}
            last = rc.xadd(keys.requests(ns), fields)
        if done is not None:
            rc.set(keys.requests_done(ns), done)
        server = RequestServer(rc, ns, Verifier(b"s" * 32), Scripts(rc, ns))
        for _ in range(3):
            server.serve()
        assert rc.get(keys.requests_done(ns)) == last
    finally:
        wipe(rc, ns)
