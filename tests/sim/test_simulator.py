"""The simulator: the seed scenario, a seeded workload checked against ranges, and the CLI."""

import json
import random
import subprocess
import sys

import pytest

from dispatcher.sim.compare import simulate, table
from dispatcher.sim.nodes import make_nodes
from dispatcher.sim.policies import BASELINES, SimPolicy, dispatch_policy
from dispatcher.sim.workload import EstimateModel, TraceJob, format_trace, parse_trace, synthetic

SEED_NODE = "1x2xA100-40GB+2xV100-16GB"


def run(trace, nodes, policies, est="lognormal:1", seed=0):
    return simulate(trace, nodes, policies, estimates=EstimateModel.parse(est), make_rng=random.Random, seed=seed)


def test_the_seed_scenario_replays_in_the_same_order_as_the_live_test():
    # all four are waiting when the first cycle runs, as in tests/e2e/test_seed_scenario.py
    trace = [TraceJob("JOB-001", 0, "u", 1, 15, ("A100",), "high"), TraceJob("JOB-002", 0, "u", 2, 60, ("A100",), "low"),
             TraceJob("JOB-003", 0, "u", 1, 30, ("V100",), "normal"),
             TraceJob("JOB-004", 0, "u", 1, 10, ("A100",), "critical")]
    out = run(trace, make_nodes(SEED_NODE, None), [dispatch_policy()], est="oracle")
    starts = out["results"]["dispatch"].starts
    first = [(job, gpus) for t, job, _, gpus, _ in sorted(starts, key=lambda s: (s[0], s[4])) if t == 0]
    assert [job for job, _ in first] == ["JOB-004", "JOB-001", "JOB-003"], first
    assert {g for _, gpus in first[:2] for g in gpus} == {0, 1} and set(first[2][1]) <= {2, 3}
    (t2, _, _, gpus2, _) = next(s for s in starts if s[1] == "JOB-002")
    assert t2 == 15 and gpus2 == (0, 1), "JOB-002 starts when both A100s are free: JOB-001 ends at 15 s"
    assert out["policies"]["dispatch"]["finished"] == 4


@pytest.fixture(scope="module")
def seeded():
    """400 Philly-like jobs on 48 GPUs (6 nodes of 8), seed 7: contended but finishing."""
    trace = synthetic(400, random.Random(7), users=8, load_gpus=40.0)
    names = ["fifo", "fifo-strict", "fifo-easy", "sjf", "srtf", "las"]
    return run(trace, make_nodes(None, 48), [BASELINES[n] for n in names] + [dispatch_policy()], seed=3)


def test_every_policy_finishes_every_job_of_a_seeded_trace(seeded):
    for name, m in seeded["policies"].items():
        assert m["finished"] == m["jobs"] == 400, (name, m["finished"])


def test_seeded_trace_metrics_fall_in_their_ranges(seeded):
    p = seeded["policies"]
    fifo = p["fifo"]["avg_jct_s"]
    # An oracle that runs short jobs first cannot do worse than submit order on average.
    assert p["sjf"]["avg_jct_s"] <= fifo
    # Preempting for shorter remaining work (with true durations) beats not preempting, within noise.
    assert p["srtf"]["avg_jct_s"] <= p["sjf"]["avg_jct_s"] * 1.10
    # Stopping at the first job that does not fit can only leave GPUs idle: never better than fifo.
    assert p["fifo-strict"]["avg_jct_s"] >= fifo * 0.999
    for name, m in p.items():
        # GPUs are busy part of the time, never more than all of it.
        assert 0.0 < m["utilization"] <= 1.0, (name, m["utilization"])
        # Jain's index lies in (0, 1] by definition.
        assert 0.0 < m["jain_fairness"] <= 1.0, (name, m["jain_fairness"])
        # No job completes before its own duration: waits are >= 0, so mean JCT >= mean duration.
        assert m["avg_wait_s"] >= -1e-6 and m["p99_jct_s"] >= m["p50_jct_s"], name
    # Only the preemptive policies preempt; fifo never does.
    assert p["fifo"]["preemptions"] == 0 and p["las"]["preemptions"] > 0


def test_a_trace_survives_format_and_parse():
    jobs = synthetic(20, random.Random(1))
    assert parse_trace(format_trace(jobs)) == sorted(jobs, key=lambda j: (j.submit_s, j.job_id))


@pytest.mark.parametrize("text,words", [
    ("job_id,submit_time_s\n", "first line"),
    ("submit_time_s,job_id,user,num_gpus,duration_s,gpu_type,priority\n0,a,u,1,5,,\n",
     "(these columns, in this order; state,exit_code,team may follow), got 'submit_time_s,job_id,user,"),
    ("", "first line must be job_id,submit_time_s,user,num_gpus,duration_s,gpu_type,priority (these columns, in "
         "this order; state,exit_code,team may follow), got ''"),
    ("job_id,submit_time_s,user,num_gpus,duration_s,gpu_type,priority\na,0,u,1,-5,,\n", ":2:"),
    ("job_id,submit_time_s,user,num_gpus,duration_s,gpu_type,priority\na,0,u,x,5,,\n", ":2: num_gpus must be a whole"),
    ("job_id,submit_time_s,user,num_gpus,duration_s,gpu_type,priority\na,0,u,1,5,,urgent\n",
     "unknown priority 'urgent'; use critical, high, normal, low or leave it empty (normal)"),
])
def test_a_bad_trace_gets_a_one_line_error_from_the_cli(tmp_path, text, words):
    path = tmp_path / "t.csv"
    path.write_text(text)
    p = subprocess.run([sys.executable, "-m", "dispatcher", "simulate", str(path), "--gpus", "8"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and words in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr


def test_dispatch_simulate_prints_a_table_and_json(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text(format_trace(synthetic(60, random.Random(2), users=4, load_gpus=10.0)))
    cmd = [sys.executable, "-m", "dispatcher", "simulate", str(path), "--gpus", "16", "--compare", "fifo,sjf,dispatch"]
    table = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert table.returncode == 0 and "sjf (oracle)" in table.stdout and "vs fifo" in table.stdout, table.stderr
    out = json.loads(subprocess.run(cmd + ["--json"], capture_output=True, text=True, timeout=120).stdout)
    for name in ("fifo", "sjf", "dispatch"):
        m = out["policies"][name]
        for key in ("avg_jct_s", "p50_jct_s", "p99_jct_s", "avg_wait_s", "p99_wait_s", "makespan_s", "utilization",
                    "jain_fairness", "preemptions", "per_class", "per_user"):
            assert key in m, (name, key)
    assert out["policies"]["fifo"]["jct_vs_fifo"] == 1.0


def test_jobs_the_cluster_can_never_hold_are_named_under_the_table(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("job_id,submit_time_s,user,num_gpus,duration_s,gpu_type,priority\n"
                    "huge,0,u,16,100,,\nh100,5,u,1,30,H100,\nfits,7,,2,50,,low\n")
    p = subprocess.run([sys.executable, "-m", "dispatcher", "simulate", str(path), "--gpus", "8"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert "dispatch: 2 of 3 jobs never finished (left out of its JCT and waits), e.g. huge (16 GPUs), " \
           "h100 (1 GPU of H100)" in p.stdout, p.stdout


def test_simulate_plots_a_png(tmp_path):
    pytest.importorskip("matplotlib")
    path = tmp_path / "t.csv"
    path.write_text(format_trace(synthetic(40, random.Random(4), users=3, load_gpus=8.0)))
    png = tmp_path / "out.png"
    p = subprocess.run([sys.executable, "-m", "dispatcher", "simulate", str(path), "--gpus", "8", "--compare",
                        "fifo,las", "--plot", str(png)], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_srtf_lets_a_resumed_job_finish_its_restore_before_judging_what_it_has_left():
    # One GPU. A (100 s) is preempted at 80 s for B (10 s), saves until 110, and resumes at 120 with
    # 20 s of work after its 30 s restore: it ends at 170. Long jobs arriving from 145 s must not
    # stop it: the oracle's estimate of its attempt is 50 s, not the 20 s of work alone (with which it
    # looked past its estimate, "unknown", at 140 s, and every arrival preempted it again).
    trace = [TraceJob("A", 0, "u", 1, 100), TraceJob("B", 80, "u", 1, 10)]
    trace += [TraceJob(f"L{i}", 145 + 5 * i, "v", 1, 1000) for i in range(5)]
    out = run(trace, make_nodes(None, 1, 1), [BASELINES["srtf"]], est="oracle")
    jobs = {j.spec.id: j for j in out["results"]["srtf"].jobs}
    assert (jobs["A"].preemptions, jobs["A"].end_s) == (1, 170.0)
    assert out["policies"]["srtf"]["finished"] == len(trace)


def test_a_policy_that_preempts_jobs_before_they_progress_stops_as_stalled_instead_of_running_forever():
    # Shortest remaining time on users' (lognormal) estimates, preemptive with no minimum run: a job
    # past its estimate counts as "unknown" and any other job preempts it, inside its 30 s restore,
    # every time it is placed again. On two GPUs these ten jobs never finish.
    trace = [TraceJob("j0", 12.1, "u0", 1, 97.7), TraceJob("j4", 75.2, "u0", 1, 196.6),
             TraceJob("j3", 84.6, "u1", 1, 124.1), TraceJob("j2", 107.4, "u2", 1, 101.4),
             TraceJob("j9", 143.1, "u1", 1, 52.8), TraceJob("j7", 167.9, "u0", 1, 87.4),
             TraceJob("j8", 183.3, "u1", 1, 193.4), TraceJob("j6", 218.9, "u2", 1, 66.7),
             TraceJob("j5", 243.1, "u0", 1, 62.7), TraceJob("j1", 275.5, "u2", 1, 193.6)]
    policy = SimPolicy("remaining", BASELINES["srtf"].config, "srtf on users' estimates")
    out = run(trace, make_nodes(None, 2, 2), [policy], seed=0)
    m = out["policies"]["remaining"]
    assert 86400 <= m["stalled_at_s"] <= 2 * 86400 and m["finished"] < len(trace), m
    assert "remaining (stalled)" in table(out) and "remaining stalled on day 1." in table(out)
    # the same jobs finish under srtf with true durations: its estimates of a resumed attempt hold
    assert run(trace, make_nodes(None, 2, 2), [BASELINES["srtf"]])["policies"]["srtf"]["finished"] == len(trace)
