"""`dispatch tune`: it beats a FIFO-like policy on a trace built to punish it, `dispatch simulate`
confirms the gain, it declines when nothing beats the policy in force, and it replays a live
cluster's own history from Redis."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from dispatcher.cli import cli as dispatch
from dispatcher.core.model import GpuInfo
from dispatcher.policy.profiles import parse_policy
from dispatcher.scheduler.policy_source import PolicySource
from dispatcher.clock import now_ms
from dispatcher.scheduler.loop import Scheduler
from dispatcher.sim.tune import objective
from dispatcher.sim.workload import TraceJob, format_trace
from dispatcher.core.spec import build_spec
from dispatcher.store.jobs import write_jobs
from dispatcher.store.nodes import write_heartbeat
from dispatcher.store.scripts import Scripts

#: Submit order, nothing else: no class, no estimate, no reservation, no preemption. A team, to see it kept.
FIFO_LIKE = """[defaults]
weights = { priority = 0.0, wait = 1.0, fairness = 0.0, remaining = 0.0, fit = 0.0, attained = 0.0 }
aging_horizon = "3650d"
reservations = 0
preemption = false
[teams.vision]
limit_gpus = 4
"""
H = 3600.0


def bursts(n: int, longs: int, shorts: int, every_s: float, long_s: float = 2 * H, short_s: float = 300.0):
    """Every `every_s`: `longs` 1-GPU jobs of `long_s`, then a minute later `shorts` jobs of `short_s`.
    In submit order the short ones wait for the long ones that did not fit; shortest first they do not."""
    jobs = []
    for b in range(n):
        t = b * every_s
        jobs += [TraceJob(f"L{b}-{i}", t + i, f"u{i % 3}", 1, long_s) for i in range(longs)]
        jobs += [TraceJob(f"S{b}-{i:02d}", t + 60 + i, f"u{3 + i % 4}", 1, short_s) for i in range(shorts)]
    return jobs


def invoke(*args) -> dict:
    result = CliRunner().invoke(dispatch, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return json.loads(result.output) if "--json" in args else {"text": result.output}


@pytest.fixture
def punishing(tmp_path):
    trace, fifo = tmp_path / "week.csv", tmp_path / "fifo.toml"
    trace.write_text(format_trace(bursts(8, longs=8, shorts=20, every_s=5 * H)))  # 224 jobs on 4 GPUs
    fifo.write_text(FIFO_LIKE)
    return trace, fifo


def test_tune_beats_a_fifo_like_policy_and_simulate_confirms_the_gain(punishing, tmp_path):
    trace, fifo = punishing
    out = tmp_path / "tuned.toml"
    report = invoke("tune", "--trace", str(trace), "--nodes", "1x4xA100-80GB", "--current", str(fifo),
                    "--out", str(out), "--json")
    tuned = parse_policy(out.read_text())
    assert tuned.profiles["default"].teams == parse_policy(FIFO_LIKE).profiles["default"].teams
    # every job of the trace is normal: nothing there tells the other classes' starvation bounds
    was, got = parse_policy(FIFO_LIKE).profiles["default"].starvation_s, tuned.profiles["default"].starvation_s
    assert {c: got[c] for c in ("critical", "high", "low")} == {c: was[c] for c in ("critical", "high", "low")}, got
    assert got["high"] <= got["normal"] <= got["low"], got
    now, then = report["current"]["avg_jct_s"], report["candidate"]["avg_jct_s"]
    assert then < now * 0.8, (now, then)  # short jobs no longer wait for long ones: well over 20%
    assert report["wall_s"] < 30, report["wall_s"]
    assert {c["setting"] for c in report["changes"]} >= {"profiles.default.weights.wait"}
    sim = invoke("simulate", str(trace), "--nodes", "1x4xA100-80GB", "--compare", f"{fifo},{out}", "--json")
    by = sim["policies"]
    assert by[str(out)]["avg_jct_s"] < by[str(fifo)]["avg_jct_s"] * 0.8, by
    text = invoke("tune", "--trace", str(trace), "--nodes", "1x4xA100-80GB", "--current", str(fifo),
                  "--out", str(out), "--budget", "4")["text"]
    assert "average JCT" in text and "normal wait p99" in text and "Jain fairness" in text, text
    assert f"try it: dispatch policy apply {out}" in text, text


def test_tune_declines_and_writes_nothing_when_no_candidate_beats_the_policy_in_force(tmp_path):
    trace, out = tmp_path / "quiet.csv", tmp_path / "tuned.toml"
    trace.write_text(format_trace(bursts(3, longs=2, shorts=2, every_s=6 * H)))  # never more jobs than GPUs
    text = invoke("tune", "--trace", str(trace), "--gpus", "8", "--current", "default", "--out", str(out))["text"]
    assert "no candidate beats the policy in force" in text and not out.exists(), text


@pytest.mark.parametrize("change, rejected", [
    ({}, ""),
    ({"normal": {"avg_wait_s": 3000.0, "p99_wait_s": 3500.0}}, ""),  # normal work may trade within its target
    ({"normal": {"avg_wait_s": 1000.0, "p99_wait_s": 4000.0}}, "normal p99 wait"),  # past its 3600 s target
    ({"high": {"avg_wait_s": 29.0, "p99_wait_s": 29.0}}, ""),  # 0 -> 29 s: within the 30 s floor
    ({"high": {"avg_wait_s": 31.0, "p99_wait_s": 0.0}}, "high average wait"),  # high work must jump the queue
], ids=["better", "normal-trades-within-its-target", "normal-past-its-target", "within-floor", "past-floor"])
def test_the_objective_is_average_jct_within_the_promises(change, rejected):
    now = {"avg_jct_s": 5000.0, "p99_wait_8plus_gpus_s": 100.0,
           "per_class": {"high": {"avg_wait_s": 0.0, "p99_wait_s": 0.0},
                         "normal": {"avg_wait_s": 1000.0, "p99_wait_s": 2000.0}}}
    cand = {**now, "avg_jct_s": 4000.0, "per_class": {**now["per_class"], **change}}
    score, why = objective(cand, now, {"normal": 3600.0})
    assert (score, why[:len(rejected)]) == ((4000.0 if not rejected else None), rejected)
    big = {**cand, "p99_wait_8plus_gpus_s": 112.0}  # 12% worse than now
    assert objective(big, now, {"normal": 3600.0})[0] is None
    easy = {"p99_wait_8plus_gpus_s": 200.0}  # ... but fifo-easy makes them wait longer still: allowed
    assert objective(big, now, {"normal": 3600.0}, easy)[0] == (4000.0 if not rejected else None)


def finished_history(client, ns, jobs: list[TraceJob], start_ms: int) -> None:
    """Each job submitted, placed, run and ended through the store's own scripts, at the trace's times."""
    s = Scripts(client, ns)
    specs = [build_spec(user=j.user, submit_ms=start_ms + int(j.submit_s * 1000), command=["true"], gpus=j.gpus)
             for j in jobs]
    for job_id, j, spec in zip(write_jobs(client, ns, specs), jobs, specs):
        started = spec.submit_ms + 1000
        epoch = s.commit_placement(job_id, "n1", (0,), 0, started)
        assert s.mark_running(job_id, epoch, started, 4242) == 1
        assert s.finish(job_id, "n1", epoch, "succeeded", 0, started + int(j.duration_s * 1000)) == 1


def test_tune_replays_a_live_clusters_history_against_the_policy_in_force(client, ns, cli, tmp_path):
    p = cli.run("tune", check=False)
    assert p.returncode == 2 and "run some jobs first, or pass --trace" in p.stderr, p.stderr
    assert "no job submitted in the last 7d ran to an end" in p.stderr, p.stderr  # --since bounds the submit
    finished_history(client, ns, bursts(3, longs=4, shorts=10, every_s=3 * H, long_s=H, short_s=180.0),
                     now_ms() - int(2 * 86400 * 1000))
    write_heartbeat(client, ns, "n1", [GpuInfo(i, "NVIDIA A100-40GB", 40.0) for i in range(2)], 8, 64.0, now_ms())
    fifo = tmp_path / "fifo.toml"
    fifo.write_text(FIFO_LIKE)
    Scheduler(client, ns, policy=PolicySource(fifo)).cycle()  # publishes the policy in force
    out = tmp_path / "tuned.toml"
    report = json.loads(cli.run("tune", "--since", "7d", "--out", str(out), "--json").stdout)
    assert report["workloads"] == {"history (7d)": 42} and report["gpus"] == 2, report
    assert report["candidate"]["avg_jct_s"] < report["current"]["avg_jct_s"], report
    assert parse_policy(out.read_text()).profiles["default"].teams == parse_policy(FIFO_LIKE).profiles["default"].teams


def refused(tmp_path, *args, code: int = 2) -> str:
    """The one line `dispatch tune ARGS` fails with, run as the user runs it (its own process), with no
    server to find (a state directory of its own, no DISPATCH_REDIS_URL)."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "DISPATCH_REDIS_URL"} | {"DISPATCH_HOME": str(tmp_path / "h")}
    p = subprocess.run([sys.executable, "-m", "dispatcher", "tune", *map(str, args)], capture_output=True, text=True,
                       env=env, timeout=120)
    assert p.returncode == code and p.stdout == "" and len(p.stderr.strip().splitlines()) == 1, (p.returncode,
                                                                                                p.stdout, p.stderr)
    return p.stderr.strip()


def test_tune_proposes_nothing_for_a_trace_with_no_job_or_none_that_fits(tmp_path):
    """A header alone was replayed as 0 s against 0 s and a candidate written with 'changes' to apply."""
    empty, huge, out = tmp_path / "empty.csv", tmp_path / "huge.csv", tmp_path / "tuned.toml"
    empty.write_text(format_trace([]))
    err = refused(tmp_path, "--trace", empty, "--gpus", 8, "--current", "default", "--out", out, "--budget", 2)
    assert "empty.csv: no jobs in this trace, only its header" in err and not out.exists(), err
    huge.write_text(format_trace([TraceJob(f"j{i}", i * 60.0, "u", 16, 600.0) for i in range(4)]))  # 16 GPUs on 8
    text = invoke("tune", "--trace", str(huge), "--gpus", "8", "--current", "default", "--out", str(out),
                  "--budget", "3")["text"]
    assert "no candidate beats the policy in force" in text and not out.exists(), text


def test_tune_refuses_an_out_file_it_could_not_write_before_the_search(punishing, tmp_path):
    trace, fifo = punishing
    out = tmp_path / "no" / "tuned.toml"  # was: the whole search, then "internal error: FileNotFoundError"
    err = refused(tmp_path, "--trace", trace, "--nodes", "1x4xA100-80GB", "--current", fifo, "--out", out)
    assert f"--out {out}: no folder {out.parent}" in err, err


def test_the_objective_rejects_a_candidate_that_finishes_fewer_jobs():
    now = {"jobs": 10, "avg_jct_s": 5000.0, "p99_wait_8plus_gpus_s": 0.0, "per_class": {}}
    score, why = objective({**now, "jobs": 9, "avg_jct_s": 100.0}, now)
    assert score is None and why == "finishes 9 jobs, the policy in force 10", why


def test_tune_without_a_server_says_which_flag_does_without_it(punishing, tmp_path):
    """With no `dispatch up` and no --redis, the policy in force (--current live, the default) and the live
    cluster (no --nodes) cannot be read: the one line says what to give instead."""
    trace, _ = punishing
    err = refused(tmp_path, "--trace", trace, "--gpus", 4, code=3)
    assert err.startswith("dispatch: error: no server") and "or give --current FILE or default" in err, err
    err = refused(tmp_path, "--trace", trace, "--current", "default", code=3)
    assert "without Redis give it with --nodes SPEC or --gpus N" in err, err
