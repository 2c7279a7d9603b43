"""Fuzzing what is in Redis: the job and node records the scheduler reads (test_fuzz_requests.py
fuzzes what a user submits). Hypothesis drives the values; the server is the real one from conftest.

Properties:
- a scheduling cycle never raises on garbage records; a good job next to them is still placed;
  a job whose spec cannot be decoded ends failed with reason "quarantined: ...".
"""

from __future__ import annotations

import json
import uuid
from dataclasses import replace

import msgpack
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from dispatcher.core.errors import MalformedRecord
from dispatcher.core.model import GpuInfo
from dispatcher.clock import now_ms
from dispatcher.scheduler.loop import Scheduler
from dispatcher.core.spec import build_spec
from dispatcher.store import keys
from dispatcher.store.codec import MAX_SPEC_BYTES, decode_spec, encode_node_info, encode_spec
from dispatcher.store.connect import connect
from dispatcher.store.jobs import read_job, write_jobs
from dispatcher.store.nodes import write_heartbeat

FUZZ = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                        HealthCheck.data_too_large])


@pytest.fixture(scope="module")
def rc(redis_url):
    """One client for the module (hypothesis reruns the test body; function fixtures would not be reset)."""
    c = connect(redis_url)
    yield c
    c.close()


def fresh_ns() -> str:
    return f"f{uuid.uuid4().hex[:10]}"


def wipe(client, ns: str) -> None:
    names = list(client.scan_iter(match=f"{ns}:*", count=1000))
    if names:
        client.delete(*names)


def beat(client, ns, name="n1", gpus=4):
    write_heartbeat(client, ns, name, [GpuInfo(i, "NVIDIA A100-40GB", 40.0) for i in range(gpus)], 32, 256.0,
                    now_ms())


def submit_good(client, ns) -> str:
    (job_id,) = write_jobs(client, ns, [build_spec(command=["true"], user="alice", submit_ms=now_ms(), gpus=1)])
    return job_id


def raw_job(client, ns, fields: dict, *, index=("pending",), score=None) -> str:
    """A job hash written field by field, indexed like write_jobs does (plus jobs:active if asked)."""
    job_id = str(client.incr(keys.job_seq(ns)))
    score = now_ms() if score is None else score
    base = {"state": "pending", "attempt": 0, "epoch": 0, "submit_ms": score}
    base.update(fields)
    pipe = client.pipeline(transaction=True)
    pipe.delete(keys.job(ns, job_id))
    pipe.hset(keys.job(ns, job_id), mapping={k: v for k, v in base.items() if v is not None})
    pipe.zadd(keys.jobs_all(ns), {job_id: score})
    if "pending" in index:
        pipe.zadd(keys.jobs_pending(ns), {job_id: score})
    if "active" in index:
        pipe.zadd(keys.jobs_active(ns), {job_id: score})
    pipe.execute()
    return job_id


def next_id(client, ns) -> str:
    """The id raw_job will hand out next (what write_jobs would)."""
    return str(int(client.get(keys.job_seq(ns)) or 0) + 1)


def valid_spec_map(job_id: str, **over) -> dict:
    spec = build_spec(command=["python", "train.py"], user="bob", submit_ms=now_ms(), gpus=1, job_id=job_id)
    d = msgpack.unpackb(encode_spec(spec), raw=False)
    d.update(over)
    return d


def decodes(raw, job_id: str) -> bool:
    """A record the scheduler takes: a spec that decodes, and is for this job (not another's)."""
    try:
        return decode_spec(raw, key=f"job {job_id}").id == job_id
    except MalformedRecord:
        return False


def good_job_placed_or_crowded_out(client, ns, good: str, node="n1", gpus=4) -> None:
    """The good job is assigned, unless jobs whose records are valid took every GPU of the node."""
    job = read_job(client, ns, good)
    if job["state"] == "assigned":
        return
    held = client.hgetall(keys.node_alloc(ns, node))
    assert len(held) == gpus and good.encode() not in held.values(), (job, held)


# -- Redis records: the scheduler ------------------------------------------------------------
msgpack_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-2 ** 63, 2 ** 64 - 1), st.floats(), st.text(max_size=8),
              st.binary(max_size=8)),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=6), inner, max_size=4)),
    max_leaves=12,
)
SPEC_KEYS = list(valid_spec_map("0"))


@st.composite
def mutated_spec(draw):
    """A well-formed spec map with a few fields replaced by wild values or removed."""
    d = valid_spec_map("PLACEHOLDER")
    for k in draw(st.lists(st.sampled_from(SPEC_KEYS + ["extra"]), min_size=1, max_size=3, unique=True)):
        if draw(st.booleans()) and k in d:
            del d[k]
        else:
            d[k] = draw(st.one_of(msgpack_values, st.sampled_from(
                [-1, 0, 2 ** 64 - 1, float("inf"), float("nan"), "", "critical", "KILL", [], [""], [["A"]],
                 [["A", "1", "2"]], "x" * 1000])))
    return d


GARBAGE_SPEC = st.one_of(
    st.binary(max_size=40),
    st.sampled_from([b"", b"\xc1", b"\xff\x00junk", b"\x00" * (MAX_SPEC_BYTES + 1), b"x" * 300_000,
                     msgpack.packb([1, 2, 3]), msgpack.packb({"v": 99}), msgpack.packb({1: 2}),
                     msgpack.packb({"v": 1, "cmd": "rm -rf /"}), msgpack.packb(None), b"\x92" * 50_000]),
    msgpack_values.map(lambda v: msgpack.packb(v, use_bin_type=True)),
    mutated_spec(),  # a map: packed with the job's own id in the test
)


@FUZZ
@given(st.lists(GARBAGE_SPEC, min_size=1, max_size=3))
def test_garbage_specs_are_quarantined_and_a_good_job_still_runs(rc, garbage):
    ns = fresh_ns()
    try:
        beat(rc, ns)
        good = submit_good(rc, ns)
        bad = {}
        for g in garbage:
            job_id = next_id(rc, ns)
            if isinstance(g, dict):
                g = msgpack.packb({**g, "id": job_id} if g.get("id") == "PLACEHOLDER" else g, use_bin_type=True)
            assert raw_job(rc, ns, {"spec": g}) == job_id
            bad[job_id] = g
        Scheduler(rc, ns).cycle()
        good_job_placed_or_crowded_out(rc, ns, good)
        for job_id, g in bad.items():
            job = read_job(rc, ns, job_id)
            if decodes(g, job_id):
                if job["state"] == "failed":  # a valid spec whose dependency can never end well (job 0, none)
                    assert job["reason"].startswith("dependency job "), job
                else:
                    assert job["state"] in ("pending", "assigned"), job
            else:
                assert job["state"] == "failed" and job["reason"].startswith("quarantined:"), job
                assert rc.zscore(keys.jobs_pending(ns), job_id) is None
    finally:
        wipe(rc, ns)


def test_a_spec_whose_id_names_another_job_does_not_crash_the_cycle(client, ns):
    """A record under job 7 whose spec says it is job 999 (or job 1, a real one)."""
    beat(client, ns)
    good = submit_good(client, ns)
    liar = raw_job(client, ns, {"spec": msgpack.packb(valid_spec_map("999"))})
    thief = raw_job(client, ns, {"spec": msgpack.packb(valid_spec_map(good))})
    Scheduler(client, ns).cycle()
    assert read_job(client, ns, good)["state"] == "assigned"
    for job_id in (liar, thief):
        job = read_job(client, ns, job_id)
        assert job["state"] == "failed" and job["reason"].startswith("quarantined:"), job


def test_a_record_without_its_spec_is_quarantined_pending_or_skipped_active_and_scheduling_goes_on(client, ns):
    """A pending job hash whose spec field was deleted crash-looped the scheduler (an operator's script, a
    partial restore): it is quarantined like a garbage spec; an active one costs only its own view."""
    beat(client, ns)
    good = submit_good(client, ns)
    lost = raw_job(client, ns, {"spec": msgpack.packb(valid_spec_map("PLACEHOLDER"))})
    client.hdel(keys.job(ns, lost), "spec")
    running = raw_job(client, ns, {"state": "running", "epoch": 1, "node": "n1", "gpus": "7"}, index=("active",))
    client.hdel(keys.job(ns, running), "spec")
    Scheduler(client, ns).cycle()
    assert read_job(client, ns, good)["state"] == "assigned"
    job = read_job(client, ns, lost)
    assert job["state"] == "failed" and job["reason"].startswith("quarantined:") and "no spec" in job["reason"], job
    assert read_job(client, ns, running)["state"] == "running"  # its agent still runs it, and records its end


def test_a_job_key_of_the_wrong_redis_type_does_not_stop_scheduling(client, ns):
    beat(client, ns)
    good = submit_good(client, ns)
    for i, make in enumerate((lambda k: client.set(k, "x"), lambda k: client.rpush(k, "x"),
                              lambda k: client.sadd(k, "x"))):
        job_id = f"wrongtype{i}"
        make(keys.job(ns, job_id))
        client.zadd(keys.jobs_pending(ns), {job_id: now_ms()})
        client.zadd(keys.jobs_all(ns), {job_id: now_ms()})
    Scheduler(client, ns).cycle()
    assert read_job(client, ns, good)["state"] == "assigned"


FIELD_GARBAGE = st.one_of(
    st.binary(max_size=12),
    st.text(max_size=12),
    st.integers().map(str),
    st.floats().map(repr),
    st.sampled_from([b"\xff", b"", b"-1", b"1e3", b" 7 ", b"\xb2", "²".encode(), "٣".encode(), b"9" * 5000,
                     b"pending", b"PENDING", b"running", b"assigned", b"preempting", b"failed", b"0,1", b"0,,x"]),
)


@FUZZ
@given(state=st.none() | FIELD_GARBAGE, epoch=st.none() | FIELD_GARBAGE, attempt=st.none() | FIELD_GARBAGE,
       ghost_id=st.none() | st.binary(min_size=1, max_size=8))
@example(state=b"\xff", epoch=None, attempt=None, ghost_id=None)
@example(state=None, epoch=None, attempt=None, ghost_id=b"\xff")
@example(state=None, epoch=b"x", attempt=b"\xb2", ghost_id=None)
def test_garbage_in_the_fields_of_a_pending_job_never_breaks_the_cycle(rc, state, epoch, attempt, ghost_id):
    ns = fresh_ns()
    try:
        beat(rc, ns)
        good = submit_good(rc, ns)
        job_id = next_id(rc, ns)
        fields = {"spec": encode_spec(replace(build_spec(command=["true"], user="eve", submit_ms=now_ms(),
                                                         gpus=1), id=job_id)),
                  "state": state, "epoch": epoch, "attempt": attempt}
        raw_job(rc, ns, fields)
        for k, v in (("state", state), ("epoch", epoch), ("attempt", attempt)):
            if v is None:
                rc.hdel(keys.job(ns, job_id), k)
        if ghost_id is not None:  # an index entry with no record behind it
            rc.zadd(keys.jobs_pending(ns), {ghost_id: now_ms()})
        sched = Scheduler(rc, ns)
        sched.cycle()
        sched.cycle()
        good_job_placed_or_crowded_out(rc, ns, good)
        if state == b"pending" and not all(_parses_as_int(v) for v in (epoch, attempt)):
            job = read_job(rc, ns, job_id)
            assert job["state"] == "failed" and job["reason"].startswith("quarantined:"), job
    finally:
        wipe(rc, ns)


def _parses_as_int(value) -> bool:
    if value is None:
        return True
    try:
        int(value if isinstance(value, bytes) else str(value).encode())
        return True
    except ValueError:
        return False


ACTIVE_FIELDS = ("node", "gpus", "assigned_ms", "started_ms", "epoch", "checkpoint_ms", "last_preempted_ms")


@FUZZ
@given(state=st.sampled_from([b"assigned", b"running", b"preempting"]) | FIELD_GARBAGE,
       garbage=st.dictionaries(st.sampled_from(ACTIVE_FIELDS), FIELD_GARBAGE, min_size=1, max_size=4))
@example(state=b"running", garbage={"epoch": b"x"})
@example(state=b"running", garbage={"gpus": b"0,x"})
@example(state=b"running", garbage={"node": b"\xff"})
@example(state=b"\xff", garbage={"node": b"n1"})
def test_garbage_in_the_fields_of_an_active_job_never_breaks_the_cycle(rc, state, garbage):
    ns = fresh_ns()
    try:
        beat(rc, ns)
        good = submit_good(rc, ns)
        job_id = next_id(rc, ns)
        spec = replace(build_spec(command=["true"], user="eve", submit_ms=now_ms(), gpus=1), id=job_id)
        fields = {"spec": encode_spec(spec), "state": state, "epoch": 1, "attempt": 0, "node": "n1", "gpus": "0",
                  "assigned_ms": now_ms(), **garbage}
        raw_job(rc, ns, fields, index=("active",))
        sched = Scheduler(rc, ns)
        sched.cycle()
        sched.cycle()
        good_job_placed_or_crowded_out(rc, ns, good)
    finally:
        wipe(rc, ns)


@st.composite
def node_info(draw):
    """A node's info field: bytes, any msgpack value, or the right shape with wild values."""
    kind = draw(st.integers(0, 2))
    if kind == 0:
        return draw(st.binary(max_size=30))
    if kind == 1:
        return msgpack.packb(draw(msgpack_values), use_bin_type=True)
    wild = st.one_of(st.integers(-5, 2 ** 40), st.floats(), st.text(max_size=5), st.none(), st.just([]))
    gpus = draw(st.lists(st.lists(wild, min_size=5, max_size=7), max_size=3))
    d = {"v": 1, "cpus": draw(wild), "mem_gb": draw(wild), "gpus": gpus}
    if draw(st.booleans()):  # mostly well-formed GPUs with odd numbers
        d["gpus"] = [[draw(st.integers(-3, 10)), "NVIDIA A100-40GB", draw(st.floats(allow_nan=True)), "",
                      draw(st.floats()), draw(st.floats())] for _ in range(draw(st.integers(0, 3)))]
        d["cpus"], d["mem_gb"] = draw(st.integers(-5, 2 ** 40)), draw(st.floats())
    return msgpack.packb(d, use_bin_type=True)


GARBAGE_NODE = st.fixed_dictionaries({
    "name": st.one_of(st.from_regex(r"[a-z0-9]{1,8}", fullmatch=True), st.binary(min_size=1, max_size=8)),
    "score": st.one_of(st.integers(0, 2 ** 52).map(float), st.floats(allow_nan=False),
                       st.just(None)),  # None: now
    "info": st.one_of(st.none(), node_info()),
    "alloc": st.dictionaries(FIELD_GARBAGE, FIELD_GARBAGE, max_size=3),
    "seen_ms": st.none() | FIELD_GARBAGE,
})


@FUZZ
@given(st.lists(GARBAGE_NODE, min_size=1, max_size=3))
@example([{"name": "inf", "score": float("inf"), "info": encode_node_info([GpuInfo(0, "x", 1.0)], 1, 1.0),
           "alloc": {}, "seen_ms": None}])
@example([{"name": "sup", "score": None, "info": encode_node_info([GpuInfo(0, "x", 1.0)], 1, 1.0),
           "alloc": {"²".encode(): b"1"}, "seen_ms": None}])
@example([{"name": b"\xff", "score": None, "info": encode_node_info([GpuInfo(0, "x", 1.0)], 1, 1.0),
           "alloc": {}, "seen_ms": None}])
def test_garbage_node_records_never_break_the_cycle(rc, nodes):
    ns = fresh_ns()
    try:
        beat(rc, ns)
        good = submit_good(rc, ns)
        for n in nodes:
            name = n["name"]
            sname = name.decode(errors="replace") if isinstance(name, bytes) else name
            if sname == "n1":
                continue
            key = keys.node(ns, sname).encode() if isinstance(name, str) else f"{ns}:node:".encode() + name
            if n["info"] is not None:
                rc.hset(key, "info", n["info"])
            if n["seen_ms"] is not None:
                rc.hset(key, "seen_ms", n["seen_ms"])
            if n["alloc"]:
                rc.hset(key + b":alloc", mapping=n["alloc"])
            score = now_ms() if n["score"] is None else n["score"]
            rc.zadd(keys.nodes_heartbeat(ns), {name: score})
        sched = Scheduler(rc, ns)
        sched.cycle()
        sched.cycle()
        job = read_job(rc, ns, good)
        assert job["state"] == "assigned", job
    finally:
        wipe(rc, ns)



# -- Redis records: what users read ----------------------------------------------------------
READ_FIELDS = ("state", "node", "gpus", "attempt", "epoch", "submit_ms", "assigned_ms", "started_ms", "finished_ms",
               "exit_code", "reason", "cancel_ms", "preemptions", "gpu_s_lost", "last_preempted_ms", "lost")


@FUZZ
@given(garbage=st.dictionaries(st.sampled_from(READ_FIELDS), FIELD_GARBAGE, min_size=1, max_size=4),
       spec=st.none() | GARBAGE_SPEC.filter(lambda g: isinstance(g, bytes)))
@example(garbage={"attempt": b"x"}, spec=None)
@example(garbage={"gpus": b"0,x"}, spec=None)
@example(garbage={"state": b"\xff"}, spec=None)
@example(garbage={"gpu_s_lost": b"nan"}, spec=None)
def test_one_garbage_record_does_not_hide_the_queue(rc, garbage, spec):
    """`dispatch queue` reads every record: a garbage one must not make the listing fail for everyone,
    and `dispatch show` of it answers with a view or a DispatcherError, never another exception."""
    from dispatcher.core.errors import DispatcherError
    from dispatcher.store.jobs import read_queue

    ns = fresh_ns()
    try:
        good = submit_good(rc, ns)
        job_id = next_id(rc, ns)
        raw = spec if spec is not None else encode_spec(
            replace(build_spec(command=["true"], user="eve", submit_ms=now_ms()), id=job_id))
        raw_job(rc, ns, {"spec": raw, **garbage})
        listed = {j["id"] for j in read_queue(rc, ns, include_final=True)}
        assert good in listed
        try:
            read_job(rc, ns, job_id)
        except DispatcherError:
            pass
    finally:
        wipe(rc, ns)


def test_the_queue_command_survives_a_garbage_record(cli, client):
    good = cli.submit("--", "true")
    bad = cli.submit("--", "true")
    client.hset(keys.job(cli.ns, bad), mapping={"attempt": "x", "state": b"\xff", "gpus": "0,x"})
    p = cli.run("queue", "--all", "--json", check=False)
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr
    assert good in {j["id"] for j in json.loads(p.stdout)}
    p = cli.run("show", bad, check=False)
    assert "Traceback" not in p.stderr and "internal error" not in p.stderr, p.stderr
