"""`dispatch submit --time DURATION` (Slurm's --time) at the edge: the durations it takes, the one line
for each bad value, a limit shorter than the grace, and records written before the field existed."""

from __future__ import annotations

import subprocess
import sys

import msgpack
import pytest

from dispatcher.core.errors import InvalidRequestError, MalformedRecord
from dispatcher.core.spec import spec_from_request
from dispatcher.core.units import parse_duration, parse_time_limit
from dispatcher.store.codec import decode_spec, encode_spec


def request(**fields):
    return spec_from_request({"command": ["python", "train.py"], **fields}, user="alice", submit_ms=1, cwd="/w")


@pytest.mark.parametrize("value,seconds", [("90s", 90.0), ("15m", 900.0), ("3h", 10800.0), ("1d", 86400.0),
                                           ("1h30m", 5400.0), (120, 120.0), ("45", 2700.0), ("1:00:00", 3600.0)])
def test_a_time_limit_is_a_duration_and_survives_the_codec(value, seconds):
    spec = request(time=value)
    assert spec.time_limit_s == seconds
    assert decode_spec(encode_spec(spec)).time_limit_s == seconds


@pytest.mark.parametrize("text,seconds", [
    ("90", 90 * 60), ("1", 60), ("0.5", 30), ("30:00", 1800), ("120:00", 7200), ("0:45", 45), ("1:30:00", 5400),
    ("2-12", 2 * 86400 + 12 * 3600), ("1-00:30", 86400 + 1800), ("1-2:03:04", 86400 + 7384), (" 15 ", 900),
    ("90s", 90), ("15m", 900), ("3h", 10800), ("1d", 86400), ("1h30m", 5400), ("2H", 7200)])
def test_time_takes_slurms_forms_a_bare_number_being_minutes_and_the_unit_forms(text, seconds):
    assert parse_time_limit(text) == seconds
    assert request(time=text, grace="1s").time_limit_s == seconds


@pytest.mark.parametrize("text", ["soon", "-5", "-1", "1-", "1:", ":30", "1::2", "1-2-3", "1:2:3:4", "1-1:2:3:4",
                                  "1e3", "inf", "nan", "1h30", "5s5", "1.5:00"])
def test_a_time_that_is_no_form_of_either_is_refused_naming_time(text):
    with pytest.raises(InvalidRequestError) as e:
        parse_time_limit(text)
    assert e.value.field == "--time" and "is not a duration" in str(e.value) and "Slurm's" in str(e.value)


def test_only_time_reads_a_bare_number_as_minutes():
    assert parse_duration("90") == 90.0  # --est, --grace, --hang-timeout and the policy keys: seconds
    spec = request(est="90", hang_timeout="90", grace="90", time="90")
    assert (spec.est_s, spec.hang_timeout_s, spec.grace_s, spec.time_limit_s) == (90.0, 90.0, 90.0, 5400.0)
    with pytest.raises(InvalidRequestError, match="--hang-timeout: '1:00:00' is not a duration"):
        request(hang_timeout="1:00:00")  # (--est takes Slurm's colon forms: below)


def test_a_job_without_time_has_no_limit():
    spec = request()
    assert spec.time_limit_s is None and decode_spec(encode_spec(spec)).time_limit_s is None


@pytest.mark.parametrize("fields,words", [
    ({"time": "soon"}, "--time: 'soon' is not a duration; use e.g. 90s, 15m, 2h or 1h30m, or Slurm's 30 (minutes)"),
    ({"time": ""}, "--time: empty; give a duration"),
    ({"time": "1:2:3:4"}, "--time: '1:2:3:4' is not a duration"),
    ({"time": "0:00:00"}, "--time: duration must be positive"),
    ({"time": "0"}, "--time: duration must be positive, got '0'; no limit is UNLIMITED (or no --time)"),
    ({"time": "-5m"}, "--time: '-5m' is not a duration"),
    ({"time": 0}, "--time: 0 is out of range; allowed 1s to 11574d (about 31 years)"),
    ({"time": "1d1d"}, "--time: '1d1d' is not a duration"),  # each unit once, largest first
    ({"time": "1h1h"}, "--time: '1h1h' is not a duration"),
    ({"time": "30m1h"}, "--time: '30m1h' is not a duration"),
    ({"time": "1:99"}, "--time: '1:99': a minute or second after a colon is 0 to 59"),  # Slurm's MM:SS
    ({"time": "1:60:00"}, "--time: '1:60:00': a minute or second after a colon is 0 to 59"),
    ({"time": "9" * 400}, "--time: '999"),
    ({"time": True}, "--time: True is not a duration"),
])
def test_a_bad_time_limit_is_one_line_naming_the_flag(fields, words):
    with pytest.raises(InvalidRequestError) as e:
        request(**fields)
    assert e.value.field == "--time" and str(e.value).startswith(words) and "\n" not in str(e.value)


def test_a_limit_shorter_than_the_grace_is_taken_as_in_slurm_the_grace_comes_after_it():
    assert request(time="3s", grace="3s").time_limit_s == 3.0
    assert request(time="3s", grace="1s").grace_s == 1.0
    assert request(time="20s").time_limit_s == 20.0  # the default grace, 30s
    assert request(time="0:20").time_limit_s == 20.0  # Slurm's MM:SS


def test_a_record_written_before_time_existed_reads_as_no_limit():
    spec = request(hang_timeout="30m")
    d = msgpack.unpackb(encode_spec(spec, job_id="7"))
    assert d.pop("time_s") is None
    old = decode_spec(msgpack.packb(d))
    assert old.time_limit_s is None and old.hang_timeout_s == 1800.0 and old.id == "7"


@pytest.mark.parametrize("value", [-1, 0, "1h", (1,), float("inf")])
def test_a_malformed_stored_limit_is_a_malformed_record_not_a_crash(value):
    d = msgpack.unpackb(encode_spec(request(time="1h"), job_id="7"))
    with pytest.raises(MalformedRecord, match="bad time_s"):
        decode_spec(msgpack.packb(dict(d, time_s=value)))


@pytest.mark.parametrize("argv,words", [
    (["--time", "later"], "--time: 'later' is not a duration"),
    (["--time", "0:00"], "--time: duration must be positive"),
])
def test_dispatch_submit_says_what_is_wrong_with_time_in_one_line(argv, words):
    code = "import sys; from dispatcher.cli import main; sys.argv = ['dispatch', 'submit', *sys.argv[1:]]; main()"
    done = subprocess.run([sys.executable, "-c", code, *argv, "--", "true"], capture_output=True, text=True,
                          timeout=60, env={"PATH": "/usr/bin:/bin", "HOME": "/nonexistent"})
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(f"dispatch: error: {words}")
    assert len(done.stderr.strip().splitlines()) == 1 and "Usage" not in done.stderr and not done.stdout


def test_a_windows_edge_is_a_duration_or_a_date_as_sacct_takes_it():
    import datetime

    from dispatcher.lab.window import seconds_ago

    now = datetime.datetime(2026, 12, 6, 12, 0).timestamp()
    assert seconds_ago("7d", now, flag="--since") == 7 * 86400
    assert seconds_ago("2026-12-01", now, flag="--since") == 5 * 86400 + 12 * 3600
    assert seconds_ago("2026-12-06T09:30", now, flag="--since") == 2.5 * 3600
    assert seconds_ago("2026-12-06 11:59:30", now, flag="--until") == 30
    assert seconds_ago("2027-01-01", now, flag="--until") == 0  # to come: now
    for bad in ("2026-13-01", "2026-02-30", "yesterday"):
        with pytest.raises(InvalidRequestError, match="^--since: "):
            seconds_ago(bad, now, flag="--since")


def test_a_sessions_idle_timeout_reads_as_its_time_limit_does():
    from dispatcher.core.spec import idle_timeout_s

    assert (idle_timeout_s("30"), idle_timeout_s("1:00:00"), idle_timeout_s("90s"), idle_timeout_s("0")) == \
        (1800, 3600, 90, None)  # a bare number is minutes, as --time's; 0 is never
    for bad in ("0.5s", "99999999d", "-1", "", "soon"):
        with pytest.raises(InvalidRequestError, match="^--idle-timeout: "):
            idle_timeout_s(bad)


@pytest.mark.parametrize("value,seconds", [("1:00:00", 3600.0), ("30:00", 1800.0), ("2-12", 216000.0), ("90", 90.0),
                                           ("1h30m", 5400.0)])
def test_an_estimate_takes_slurms_colon_and_day_forms_and_a_bare_number_stays_seconds(value, seconds):
    assert request(est=value).est_s == seconds


def test_a_running_jobs_time_limit_bounds_when_its_gpus_come_back_in_a_reservation():
    from tests.builders import NOW_MS, make_job, plan_of, verdict_of
    from tests.preemption_builders import full_node, running_job

    # no estimate: its end was unknown (24 h away), though --time 60 and --grace 5 stop it 45 s from now
    limited = running_job("lim", "normal", 0, 1, started_s_ago=20, checkpointable=False, time_limit_s=60.0, grace_s=5.0)
    plan = plan_of([make_job("w").gpus(2)], [full_node("n1", 2)], [limited])
    assert [r.start_ms for r in plan.reservations] == [NOW_MS + 45_000]
    assert verdict_of(plan, "w").reason.endswith("holds a reservation on n1 GPUs [0, 1] starting in ~45 s")
    longer = running_job("est", "normal", 0, 1, started_s_ago=20, checkpointable=False, est_s=30.0, time_limit_s=600.0)
    plan = plan_of([make_job("w").gpus(2)], [full_node("n1", 2)], [longer])  # (an estimate inside the limit holds)
    assert [r.start_ms for r in plan.reservations] == [NOW_MS + 10_000]
