"""Edges of a request that QA found: a relative or empty --cwd, empty values taken as none, JSON's true
taken as a count, an update checked against a default grace, and the pure pieces of drain and queue."""

from __future__ import annotations

import pytest

from dispatcher.cli.jobs import _held
from dispatcher.core.arrays import request_jobs
from dispatcher.core.errors import InvalidRequestError
from dispatcher.core.model import JobSpec
from dispatcher.core.spec import build_spec, spec_from_request
from dispatcher.core.updates import amended
from dispatcher.store.nodes import UNREADABLE, Drain, kept_reason


def request(fields: dict, cwd: str = "/home/ada/runs"):
    return spec_from_request({"command": ["python", "train.py"], **fields}, user="ada", submit_ms=1, cwd=cwd)


def refused(fields: dict, flag: str) -> str:
    with pytest.raises(InvalidRequestError) as e:
        request_jobs({"command": ["python", "train.py"], **fields}, request, "0")
    assert e.value.field == flag and "\n" not in str(e.value), (e.value.field, str(e.value))
    return str(e.value)


@pytest.mark.parametrize("given,resolved", [
    ("..", "/home/ada"), ("sub", "/home/ada/runs/sub"), ("./sub/../other/", "/home/ada/runs/other"),
    (".", "/home/ada/runs"), ("/scratch/x", "/scratch/x"), ("/scratch/../x", "/scratch/../x"), (None, "/home/ada/runs")])
def test_a_relative_cwd_is_taken_from_the_submitters_directory_as_slurms_chdir(given, resolved):
    assert request({"cwd": given}).cwd == resolved


def test_a_request_without_cwd_runs_where_it_was_submitted_and_build_spec_keeps_its_own():
    assert request({}).cwd == "/home/ada/runs"
    assert build_spec(command=["true"], user="ada", submit_ms=1).cwd == ""  # (the Python-level builder: as given)


@pytest.mark.parametrize("fields,flag,words", [
    ({"cwd": ""}, "--cwd", "--cwd: empty; give a directory"),
    ({"cwd": "  "}, "--cwd", "--cwd: empty"),
    ({"cwd": 5}, "--cwd", "--cwd: 5 is not a directory"),
    ({"user": ""}, "--user", "--user: empty; give a user name"),
    ({"est": ""}, "--est", "--est: empty; give a duration"),
    ({"hang_timeout": ""}, "--hang-timeout", "--hang-timeout: empty"),
    ({"array": ""}, "--array", "--array: '' names no index; give the indices, e.g. 0-99%8"),
    ({"array": "  "}, "--array", "--array: '  ' names no index"),
    ({"array": True}, "--array", "--array: True names no index"),
    ({"gpus": True}, "--gpus", "--gpus: True is not a whole number"),
    ({"cpus": False}, "--cpus", "--cpus: False is not a whole number"),
    ({"retries": True}, "--retries", "--retries: True is not a whole number"),
    ({"grace": True}, "--grace", "--grace: True is not a duration"),  # as --time, --est: read as a duration
    ({"mem": ""}, "--mem", "--mem: empty; give a number, or leave --mem out"),
    ({"gpus": 1, "gpu_mem": " "}, "--gpu-mem", "--gpu-mem: empty"),
    ({"gpus": 8, "nodes": ""}, "--nodes", "--nodes: empty"),  # `--nodes "$N"` with N unset: not one node
    ({"nodes": 2, "gpus_per_node": ""}, "--gpus-per-node", "--gpus-per-node: empty"),
    ({"gpus": 2, "min_gpus": "", "checkpointable": True}, "--min-gpus", "--min-gpus: empty"),
    ({"gpus": 1, "gpu_type": ""}, "--gpu-type", "--gpu-type: '' names no GPU type"),  # not any GPU
    ({"gpus": 1, "gpu_type": "|"}, "--gpu-type", "--gpu-type: '|' names no GPU type"),
    ({"gpus": 1, "gpu_type": []}, "--gpu-type", "--gpu-type: '' names no GPU type"),
    ({"gpus": "99999999999999999999"}, "--gpus", "--gpus: 99999999999999999999 is out of range; allowed 0 to 1024"),
    ({"cpus": 10**20}, "--cpus", "--cpus: 100000000000000000000 is out of range; allowed 1 to 4096"),
    ({"cpus": 0}, "--cpus", "--cpus: 0 is out of range; allowed 1 to 4096"),  # (as sbatch: a job takes a CPU)
    ({"env": {"A": "x\0y"}}, "--env", "--env: the value of A holds a NUL byte"),  # (it was stuck assigned)
    ({"cwd": "/tmp\0x"}, "--cwd", "--cwd: '/tmp\\x00x' holds a NUL byte"),
    ({"notify": "echo\0hi"}, "--notify", "--notify: it holds a NUL byte"),  # (it said: at most 4096 characters)
    ({"command": ["tr\0ue"]}, "COMMAND", "the command's argument 'tr\\x00ue' holds a NUL byte"),
    ({"gpus": "\u0663"}, "--gpus", "--gpus: '\u0663' is not a whole number"),  # only ASCII digits
    ({"gpus": "2-\u0663"}, "--gpus", "--gpus: '\u0663' is not a whole number"),
    ({"grace": "2d"}, "--grace", "--grace: '2d' is out of range; allowed 0s to 1d"),  # as it is: 0s is taken
    ({"grace": -1}, "--grace", "--grace: -1 is out of range; allowed 0s to 1d"),
    ({"time": "99999999999999999999"}, "--time", "--time: '99999999999999999999' is out of range; allowed 1s to "
     "11574d (about 31 years)"),  # minutes, told as a duration: not 6e+21 against a bound in seconds
    ({"est": float("nan")}, "--est", "--est: nan is out of range"),
    ({"gpus": 1, "gpu_mem": True}, "--gpu-mem", "--gpu-mem: True is not a number"),
    ({"name": ""}, "--name", "--name: empty; give a name, or leave --name out"),  # QA: these were taken as none
    ({"team": ""}, "--team", "--team: empty; give a team"),  # (no team: no team quota)
    ({"checkpoint_signal": ""}, "--checkpoint-signal", "--checkpoint-signal: empty"),  # (TERM, not the one meant)
    ({"output": " "}, "--output", "--output: empty; give a file pattern"),
    ({"notify": ""}, "--notify", "--notify: empty"),
    ({"gpus": "1-4", "scaling": ""}, "--scaling", "--scaling: empty"),
    ({"command": [""]}, "COMMAND", "the program to run is ''; name one"),
    ({"command": [" ", "x"]}, "COMMAND", "the program to run is ' '"),
])
def test_an_empty_or_boolean_value_is_refused_in_one_line_not_taken_as_none_or_one(fields, flag, words):
    assert refused(fields, flag).startswith(words)


def test_an_array_of_none_is_no_array_and_an_index_as_a_number_is_one():
    assert [s.array_index for s in request_jobs({"command": ["true"], "array": None}, request, "0")] == [None]
    assert [s.array_index for s in request_jobs({"command": ["true"], "array": 3}, request, "0")] == [3]


@pytest.mark.parametrize("grace", ["0", "0s", 0, "1d"])
def test_a_grace_from_0s_to_1d_is_taken_as_its_message_says(grace):
    assert request({"grace": grace}).grace_s in (0.0, 86400.0)


def test_an_empty_argument_after_the_program_is_still_an_argument():
    assert request({"command": ["echo", ""]}).command == ("echo", "")


@pytest.mark.parametrize("arg, shown", [({"a": 1}, '{"a": 1}'), (None, "null"), (True, "true"), ([1], "[1]"),
                                       (float("inf"), "Infinity"), (float("nan"), "NaN")])  # (1.5e400: inf)
def test_a_command_argument_that_is_no_text_is_refused_not_run_as_pythons_repr(arg, shown):
    with pytest.raises(InvalidRequestError) as e:  # (a --from line's ["echo", {"a": 1}, null] ran `echo {'a': 1} None`)
        spec_from_request({"command": ["echo", arg]}, user="u", submit_ms=0, cwd="/")
    assert str(e.value) == f"the command's arguments must be text or numbers, got {shown}"
    from pathlib import Path
    spec = spec_from_request({"command": ["train", 3, 0.5, Path("/data")]}, user="u", submit_ms=0, cwd="/")
    assert spec.command == ("train", "3", "0.5", "/data")  # (the Python API's numbers and paths, as text)


def test_too_many_dependency_ids_say_how_many_and_that_an_arrays_id_names_them_all():
    with pytest.raises(InvalidRequestError) as e:  # (it said "at most 64 jobs" of 48_[0-64])
        spec_from_request({"command": ["true"], "after": "48_[0-64]"}, user="u", submit_ms=0, cwd="/")
    assert str(e.value) == "--after: 65 job ids given, at most 64 (an array's id alone waits for every element of it)"


def test_an_update_of_time_takes_slurms_forms_and_any_limit_whatever_the_grace():
    job = request({"grace": "1s"})
    assert amended(job, {"time": "10s"}).time_limit_s == 10.0
    assert amended(job, {"time": "1:00:00"}).time_limit_s == 3600.0
    assert amended(request({}), {"time": "10s"}).time_limit_s == 10.0  # (the grace comes after the limit)
    assert amended(JobSpec(id="", command=("true",), grace_s=0.0), {"time": "1"}).time_limit_s == 60.0
    with pytest.raises(InvalidRequestError, match="--est: empty"):
        amended(job, {"est": ""})


def test_a_drain_again_without_a_reason_keeps_the_old_one():
    was = Drain("disk swap", "ops", 5)
    assert kept_reason("", was) == "disk swap"
    assert kept_reason("new", was) == "new"
    assert kept_reason("", None) == "" and kept_reason("", Drain(UNREADABLE, "", 0)) == ""


def _row(**over) -> dict:
    return {"gpus_requested": 4, "min_gpus": 1, "state": "running", "gpus": [0, 3], **over}


@pytest.mark.parametrize("job,cell", [
    (_row(), "2/4"), (_row(gpus=[0, 1, 2, 3]), "4"), (_row(min_gpus=None, gpus=[0, 1]), "4"),
    (_row(state="pending", gpus=[]), "4"), (_row(state="succeeded"), "4"), (_row(state="preempting"), "2/4"),
    # QA: on two whole 2-GPU nodes (larger than any node) it holds all 4, but showed 2/4 (rank 0's GPUs)
    (_row(gpus=[0, 1], ranks=[["n2", [0, 1]], ["vm", [0, 1]]]), "4"),
])
def test_queue_shows_what_a_shrunk_elastic_job_holds_beside_what_it_asked(job, cell):
    assert _held(job) == cell
