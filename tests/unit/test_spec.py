"""Validating requests at the edge, and the msgpack codec."""

import dataclasses
import gc

import msgpack
import pytest

from dispatcher.core.errors import InvalidRequestError, MalformedRecord
from dispatcher.core.memo import gc_paused
from dispatcher.core.model import JobSpec
from dispatcher.core.spec import (
    build_spec,
    parse_gpu_types,
    parse_priority,
    spec_from_request,
)
from dispatcher.core.units import parse_duration
from dispatcher.store.codec import decode_spec, encode_spec


@pytest.mark.parametrize("text,seconds", [("90s", 90), ("15m", 900), ("2h", 7200), ("1h30m", 5400), ("1d", 86400),
                                          ("45", 45), ("0.5h", 1800), (" 2H ", 7200)])
def test_durations_read_like_people_write_them(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["soon", "", "-5m", "0", "1x", "h", "10m5", "inf", "nan"])
def test_a_bad_duration_names_the_flag(text):
    with pytest.raises(InvalidRequestError) as e:
        parse_duration(text)
    assert e.value.field == "--est"


@pytest.mark.parametrize("text,expected", [("critical", "critical"), ("HIGH", "high"), ("medium", "normal"),
                                           ("low", "low")])
def test_priority_classes_and_their_aliases(text, expected):
    assert parse_priority(text) == expected


def test_gpu_types_accept_a_list_or_any():
    assert parse_gpu_types("A100|H100") == ("A100", "H100")
    assert parse_gpu_types("a100, h100") == ("a100", "h100")
    assert parse_gpu_types("any") == () and parse_gpu_types(None) == ()


@pytest.mark.parametrize("field,kwargs", [
    ("--gpus", {"gpus": -1}), ("--gpus", {"gpus": 1.5}), ("--gpus", {"gpus": "x"}), ("--cpus", {"cpus": -2}),
    ("--gpu-mem", {"gpu_mem_gb": "lots"}), ("--mem", {"mem_gb": -1}), ("--priority", {"priority": "urgent"}),
    ("--name", {"name": "has space"}), ("--team", {"team": "a:b"}), ("--env", {"env": ["1BAD=x"]}),
    ("COMMAND", {"command": []}), ("--grace", {"grace": "later"}),
])
def test_every_bad_field_is_refused_with_its_flag(field, kwargs):
    base = dict(command=["true"], user="alice", submit_ms=1)
    base.update(kwargs)
    with pytest.raises(InvalidRequestError) as e:
        build_spec(**base)
    assert e.value.field == field


def test_a_long_bad_name_is_said_in_part_not_echoed_whole():
    with pytest.raises(InvalidRequestError) as e:
        build_spec(command=["true"], user="alice", submit_ms=1, name="x y" * 2000)
    assert len(str(e.value)) < 200 and "(6000 characters)" in str(e.value)


def test_a_spec_survives_the_codec():
    spec = build_spec(command=["python", "train.py", "--lr", "0.1"], user="alice", submit_ms=123, job_id="7",
                      name="train", team="vision", env=["A=1", "B=x=y"], gpus=2, gpu_type="A100|H100",
                      gpu_mem_gb="30", cpus=4, mem_gb=64, priority="high", est="2h", checkpointable=True,
                      grace="1m")
    assert decode_spec(encode_spec(spec)) == spec
    assert spec.env == (("A", "1"), ("B", "x=y")) and spec.est_s == 7200 and spec.grace_s == 60


def test_a_sweeps_jobs_share_their_checked_options_and_keep_their_own_fields():
    a, b = (build_spec(command=["python", "train.py", "--lr", lr], user="alice", submit_ms=ms, job_id=job, name=name,
                       gpus=2, est="2h", env=["A=1"]) for lr, ms, job, name in (("0.1", 1, "1", "a"), ("0.2", 2, "2", "b")))
    assert (a.command[-1], a.submit_ms, a.id, a.name) == ("0.1", 1, "1", "a")
    assert (b.command[-1], b.submit_ms, b.id, b.name) == ("0.2", 2, "2", "b")
    assert (b.gpus, b.est_s, b.env, b.user) == (2, 7200.0, (("A", "1"),), "alice")
    assert decode_spec(encode_spec(a)) == a and decode_spec(encode_spec(b)) == b
    assert decode_spec(encode_spec(a, "9")) == dataclasses.replace(a, id="9")
    with pytest.raises(InvalidRequestError):  # the name is checked for each job, not with the shared options
        build_spec(command=["true"], user="alice", submit_ms=1, gpus=2, est="2h", env=["A=1"], name="has space")


def test_filled_is_replace_without_running_init_again():
    spec = build_spec(command=["true"], user="alice", submit_ms=1, gpus=1)
    copy = spec.filled(id="5", command=("false",))
    assert copy == dataclasses.replace(spec, id="5", command=("false",)) and spec.id == ""
    with pytest.raises(dataclasses.FrozenInstanceError):
        copy.id = "6"


def test_a_batch_pauses_the_garbage_collector_and_restores_it_even_on_a_bad_request():
    assert gc.isenabled()
    with pytest.raises(InvalidRequestError), gc_paused():
        assert not gc.isenabled()
        spec_from_request({"command": ["true"], "gpus": "many"}, user="alice", submit_ms=1, cwd="/")
    assert gc.isenabled()


def test_requests_that_differ_in_command_and_name_only_share_a_template_but_not_those_fields():
    lines = [{"command": ["python", "train.py", "--seed", str(i)], "name": f"s{i}", "gpus": 2, "est": "1h"}
             for i in range(3)]
    specs = [spec_from_request(r, user="alice", submit_ms=5, cwd="/w") for r in lines]
    assert [(s.command[-1], s.name) for s in specs] == [("0", "s0"), ("1", "s1"), ("2", "s2")]
    assert {(s.gpus, s.est_s, s.user, s.cwd, s.submit_ms) for s in specs} == {(2, 3600.0, "alice", "/w", 5)}
    with pytest.raises(InvalidRequestError, match="unknown field 'gpu'"):
        spec_from_request({"command": ["true"], "gpu": 2}, user="alice", submit_ms=5, cwd="/w")


def test_the_decoders_memory_of_shared_fields_never_lets_a_bad_record_through():
    spec = build_spec(command=["true"], user="alice", submit_ms=1, job_id="1", gpus=1, retries=2)
    d = msgpack.unpackb(encode_spec(spec))
    assert decode_spec(msgpack.packb(d)) == spec  # remembered now
    for field, value in [("gpus", True), ("retries", True), ("cpus", 1.0)]:  # equal to good values as keys
        with pytest.raises(MalformedRecord, match=f"bad {field}"):
            decode_spec(msgpack.packb(dict(d, **{field: value})))
    for field in ("cmd", "user", "ckpt", "submit_ms"):
        with pytest.raises(MalformedRecord, match=f"missing field '{field}'"):
            decode_spec(msgpack.packb({k: v for k, v in d.items() if k != field}))
    with pytest.raises(MalformedRecord, match="bad env"):
        decode_spec(msgpack.packb(dict(d, env={"A": "1"})))  # a map: not even hashable


def test_a_record_written_before_the_optional_fields_existed_still_decodes():
    spec = build_spec(command=["true"], user="alice", submit_ms=1, job_id="1")
    d = msgpack.unpackb(encode_spec(spec))
    old = {k: v for k, v in d.items()
           if k not in ("share", "min_gpus", "preemptible", "ckpt_sig", "retries", "after", "after_any", "scaling")}
    assert decode_spec(msgpack.packb(old)) == spec


def test_a_spec_built_by_hand_with_lists_still_encodes():
    spec = JobSpec(id="1", command=["a"], env=[["A", "b"]], after=["2"])
    assert decode_spec(encode_spec(spec)) == JobSpec(id="1", command=("a",), env=(("A", "b"),), after=("2",))


@pytest.mark.parametrize("raw", [b"", b"\xc1", msgpack.packb("str"), msgpack.packb({"v": 2}),
                                 msgpack.packb({"v": 1}), None])
def test_the_codec_refuses_what_is_not_a_spec(raw):
    with pytest.raises(MalformedRecord):
        decode_spec(raw)


def test_a_spec_with_a_wrong_type_inside_is_refused():
    spec = build_spec(command=["true"], user="alice", submit_ms=1)
    d = msgpack.unpackb(encode_spec(spec))
    for field, value in [("gpus", -1), ("gpus", "2"), ("cmd", "true"), ("prio", "urgent"), ("est_s", -1)]:
        bad = dict(d, **{field: value})
        with pytest.raises(MalformedRecord):
            decode_spec(msgpack.packb(bad))


@pytest.mark.parametrize("fields, flag", [({"gpu_type": "TPU"}, "--gpu-type"), ({"gpu_mem": 40}, "--gpu-mem")])
def test_a_gpu_constraint_without_gpus_is_refused_not_ignored(fields, flag):
    with pytest.raises(InvalidRequestError, match=f"{flag} needs --gpus N"):
        spec_from_request({"command": ["x"], **fields}, user="u", submit_ms=1, cwd="/")


@pytest.mark.parametrize("user", ["José", "李雷", "o'neil"])
def test_a_user_name_may_be_in_any_script_but_holds_no_space_colon_quote_or_newline(user):
    if "'" in user:
        with pytest.raises(InvalidRequestError, match="--user"):
            spec_from_request({"command": ["x"], "user": user}, user="u", submit_ms=1, cwd="/")
    else:
        assert spec_from_request({"command": ["x"], "user": user}, user="u", submit_ms=1, cwd="/").user == user
    for bad in (f"{user} x", f"{user}:x", f"{user}\n"):
        with pytest.raises(InvalidRequestError, match="--user"):
            spec_from_request({"command": ["x"], "user": bad}, user="u", submit_ms=1, cwd="/")


def test_env_that_dispatch_sets_for_every_job_is_refused_not_silently_overridden(tmp_path):
    # --env CUDA_VISIBLE_DEVICES=5 was accepted; the job then saw the GPUs it was given, the user never told
    from pathlib import Path

    from dispatcher.core.fields import SET_BY_DISPATCH
    from workers.jobenv import attempt_env

    for key in ("CUDA_VISIBLE_DEVICES", "DISPATCH_JOB_ID"):
        with pytest.raises(InvalidRequestError, match=f"dispatch sets {key} for every job"):
            build_spec(command=["true"], user="alice", submit_ms=1, env=[f"{key}=5"])
    assert build_spec(command=["true"], user="alice", submit_ms=1, env=["DISPATCH_MINE=5"]).env == (("DISPATCH_MINE",
                                                                                                       "5"),)
    # the list is what an attempt's environment sets over the spec's, an array element's included
    spec = build_spec(command=["true"], user="alice", submit_ms=1)
    spec = dataclasses.replace(spec, array_index=0, array_of="7", array_count=2)
    env = attempt_env({}, spec, job_id="7", epoch=1, node="n", address="a", agent="g", ns="d", gpu_list="0",
                      attempt=0, ckpt=Path(tmp_path), socket_path="s", cap="c")
    assert set(env) == SET_BY_DISPATCH
