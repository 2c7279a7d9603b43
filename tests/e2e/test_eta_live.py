"""Start-time forecasts, live: a scheduler and a node agent with fake GPUs; a job queued behind a
running job with a known estimate gets an eta (`dispatch eta`, and a line of `dispatch why --fresh`), then
actually starts, and the forecast's error against that start is measured and printed."""

from __future__ import annotations

import json

import pytest

from dispatcher.core import errors

pytestmark = pytest.mark.timeout(120)


def test_eta_of_a_queued_job_matches_when_it_actually_starts(cli, tmp_path):
    cli.start("scheduler")
    cli.start("worker", "--node", "en", "--fake-gpus", "2xA100-40GB", "--work-dir", str(tmp_path / "en"))
    first = cli.submit("--gpus", "1", "--est", "4s", "--", "sleep", "4")
    cli.wait_for(lambda: cli.show(first)["state"] == "running", what=f"job {first} to run")
    queued = cli.submit("--gpus", "2", "--", "sleep", "5")  # needs both GPUs: waits for the first job

    out = json.loads(cli.run("eta", queued, "--json").stdout)
    start = out["start"]
    assert start["node"] == "en" and start["after_jobs"] == [first], out
    assert 1.0 <= start["in_s"] <= 4.5, out  # the first job's 4 s estimate, less what it has run
    assert out["change"] == "--gpus 1" and out["change_start"]["in_s"] == 0, out  # one GPU is free now
    line = cli.run("eta", queued).stdout.strip()
    assert line.startswith(f"job {queued}: expected to start in ~") and f"when job {first} ends" in line, line
    assert line.endswith("with --gpus 1 it would start now on en"), line
    why = cli.run("why", queued, "--fresh").stdout  # the what-if carries the forecast
    print(f"\n$ dispatch eta {queued}\n{line}\n$ dispatch why {queued} --fresh\n{why}")
    assert "  forecast: expected to start in ~" in why, why

    cli.wait_for(lambda: cli.show(queued)["started_at"], what=f"job {queued} to start")
    actual = cli.show(queued)["started_at"]
    error_s = actual - start["at"]
    print(f"\njob {queued}: forecast start {start['at']:.3f} (in {start['in_s']} s), actual {actual:.3f}: "
          f"error {error_s:+.3f} s")
    assert abs(error_s) < 2.0, (start, actual)  # the estimate was right; the rest is the scheduler's and agent's latency

    assert cli.run("eta", queued).stdout.startswith(f"job {queued}: running; started at ")


def test_eta_of_an_unknown_job_is_a_one_line_not_found(cli):
    p = cli.run("eta", "424242", check=False)
    assert p.returncode == errors.EXIT_NOT_FOUND, (p.returncode, p.stderr)
    assert len(p.stderr.strip().splitlines()) == 1 and "Traceback" not in p.stderr, p.stderr
