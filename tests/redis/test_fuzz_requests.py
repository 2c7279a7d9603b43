"""Fuzzing what a user submits: build_spec (the API's and the CLI's one door) either returns a spec
that the store can write and the scheduler can read back unchanged, or raises InvalidRequestError,
never another exception; the CLI answers a hostile value with one line on stderr and exit code 2, no
traceback, and writes nothing. (test_fuzz_records.py fuzzes what is in Redis.)"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from dispatcher.core.errors import InvalidRequestError
from dispatcher.core.model import JobSpec
from dispatcher.core.spec import build_spec
from dispatcher.store import keys
from dispatcher.store.codec import MAX_SPEC_BYTES, decode_spec, encode_spec

from .test_fuzz_records import FUZZ


# -- user input: build_spec ------------------------------------------------------------------
HOSTILE_SCALARS = [
    None, True, False, 0, -1, 1, 2, 10 ** 30, 10 ** 400, -10 ** 400, 0.5, -0.0, 1e308, float("inf"),
    float("-inf"), float("nan"), "", " ", "0", "1", "-1", "1.5", "1e400", "-1e400", "inf", "nan", "NaN", "0x10",
    "1_000", "٣", "²", "9" * 5000, "9" * 400, "\x00", "\udcff", "1h30m", "90s", "0s", "-5m", "critical", "urgent",
    "A100|H100", "A100,,", "SIGUSR1", "KILL", "A=1", "=1", "a b", "x" * 65, "é", "alice", "any",
]
WILD = st.one_of(
    st.sampled_from(HOSTILE_SCALARS),
    st.integers(),
    st.floats(),
    st.text(max_size=12),
    st.text(st.characters(codec="utf-8"), max_size=8),
    st.binary(max_size=6),
    st.lists(st.one_of(st.text(max_size=6), st.integers(), st.none()), max_size=3),
    st.tuples(st.text(max_size=4), st.text(max_size=4)),
    st.dictionaries(st.text(max_size=4), st.text(max_size=4), max_size=2),
)
COMMANDS = st.one_of(
    st.lists(st.text(max_size=20), max_size=4),
    st.lists(st.sampled_from(HOSTILE_SCALARS), max_size=3),
    st.tuples(st.text(min_size=1, max_size=10)),
    WILD,
)
ENVS = st.one_of(
    st.lists(st.one_of(st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,5}=[^\x00]{0,8}", fullmatch=True),
                       st.text(max_size=8)), max_size=3),
    st.lists(st.tuples(st.text(max_size=4), st.text(max_size=4)), max_size=2),
    st.lists(st.tuples(st.sampled_from(HOSTILE_SCALARS), st.sampled_from(HOSTILE_SCALARS)), max_size=2),
    WILD,
)
FIELDS = ("name", "team", "cwd", "gpus", "gpu_type", "gpu_mem_gb", "cpus", "mem_gb", "priority", "est",
          "checkpointable", "grace", "share", "min_gpus", "preemptible", "checkpoint_signal", "retries")
REQUESTS = st.fixed_dictionaries(
    {"command": COMMANDS},
    optional={"user": WILD, "env": ENVS, **{f: WILD for f in FIELDS}},
)


@FUZZ
@given(REQUESTS)
@example({"command": ["x"], "gpus": float("inf")})
@example({"command": ["x"], "gpu_mem_gb": 10 ** 400})
@example({"command": ["x"], "env": {"A": "1"}})
@example({"command": ["x"], "env": [("A", 1)]})
@example({"command": ["x"], "gpu_type": ["A100", 7]})
@example({"command": ["\udcff"]})
@example({"command": ["x"], "cwd": "\udcff"})
@example({"command": ["x"], "env": ["BIG=" + "v" * 200_000, "BIG2=" + "v" * 100_000]})
@example({"command": 5})
def test_build_spec_returns_a_storable_spec_or_raises_invalid_request(req):
    try:
        spec = build_spec(submit_ms=1_700_000_000_000, **{"user": "alice", **req})
    except InvalidRequestError:
        return
    assert isinstance(spec, JobSpec)
    spec = replace(spec, id="1")
    try:
        raw = encode_spec(spec)  # what write_jobs stores, before it writes anything
    except InvalidRequestError:
        return
    assert len(raw) <= MAX_SPEC_BYTES, f"accepted a spec of {len(raw)} bytes, which the scheduler quarantines"
    assert decode_spec(raw) == spec, "the scheduler would read back a different job (or quarantine it)"


# -- user input: the CLI ---------------------------------------------------------------------
HOSTILE_ARGV = {
    "gpus-inf": ["--gpus", "inf"],
    "gpus-huge": ["--gpus", "9" * 30],
    "gpus-fraction": ["--gpus", "1.5"],
    "gpus-thousands-digits": ["--gpus", "9" * 5000],
    "cpus-negative": ["--cpus", "-1"],
    "mem-nan": ["--mem", "nan"],
    "gpu-mem-1e400": ["--gpu-mem", "1e400"],
    "est-zero": ["--est", "0s"],
    "est-garbage": ["--est", "1e999h"],
    "grace-inf": ["--grace", "1e400"],
    "priority-unknown": ["--priority", "\u2603"],
    "gpu-type-shell": ["--gpu-type", "$(reboot)"],
    "env-no-key": ["--env", "=x"],
    "env-not-pair": ["--env", "JUSTAKEY"],
    "name-space": ["--name", "a b"],
    "user-too-long": ["--user", "u" * 65],
    "min-gpus-over": ["--gpus", "1", "--min-gpus", "2", "--checkpointable"],
    "share-without-mem": ["--share"],
    "signal-kill": ["--checkpoint-signal", "KILL"],
    "retries-huge": ["--retries", "101"],
    "no-command": [],
    "command-too-long": ["--", "x" * 70_000],
    "too-many-env": [a for i in range(300) for a in ("--env", f"K{i}=v")],
    "non-utf8-command": ["--", b"\xff\xfe"],
    "non-utf8-cwd": ["--cwd", b"/tmp/\xff"],
    "non-utf8-env-value": ["--env", b"A=\xff"],
    "non-utf8-name": ["--name", b"\xff"],
}


@pytest.mark.parametrize("argv", list(HOSTILE_ARGV.values()), ids=list(HOSTILE_ARGV))
def test_the_cli_answers_a_hostile_value_with_one_line(cli, client, argv):
    if argv and argv[0] != "--" and "--" not in argv:
        argv = [*argv, "--", "true"]
    p = subprocess.run([sys.executable, "-m", "dispatcher", "submit", *argv], env=cli.env(), capture_output=True,
                       timeout=60)
    out, err = p.stdout.decode(errors="replace"), p.stderr.decode(errors="replace").strip()
    assert "Traceback" not in err + out, err
    assert p.returncode == 2, f"exit {p.returncode}: {err}"
    assert len(err.splitlines()) == 1 and err.startswith("dispatch: error:"), err
    assert client.zcard(keys.jobs_all(cli.ns)) == 0  # nothing was written
