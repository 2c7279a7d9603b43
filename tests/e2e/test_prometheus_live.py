"""A real Prometheus scraping two `dispatch dashboard` processes of one live cluster (a scheduler and
an agent on fake GPUs): the kept counters and histograms (store/counters.py: starts, ends, waits, start
latencies, a preempted job's requeue) are the same from both, every query of
examples/grafana/dispatch.json runs, and the rules of examples/prometheus/alerts.yml load and evaluate.

Needs Debian's `prometheus` package (/usr/bin/prometheus; .ci/run installs it): without it the test
skips locally and fails in CI. The test starts its own server on a free port, with its data in the
test's temporary directory, and stops it after.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import urllib.parse
from pathlib import Path

import pytest

from dispatcher.up.embedded import free_port
from tests.conftest import IN_CI
from tests.e2e.dashboard_kit import get, start_dashboard
from tests.redis.test_metric_examples import RULES, grafana_exprs

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

#: The kept counters and histograms that stand still once the jobs have ended (the cycles' go on).
KEPT = ("dispatch_jobs_started_total", "dispatch_jobs_ended_total", "dispatch_queue_wait_seconds_count",
        "dispatch_job_requeues_total",
        "dispatch_queue_wait_seconds_bucket", "dispatch_job_start_latency_seconds_count",
        "dispatch_job_start_latency_seconds_sum", "dispatch_job_run_seconds_count")


def start_prometheus(cli, tmp_path: Path, targets: list[str]) -> str:
    """Prometheus scraping `targets` (host:port) every second, with the example rules; its base URL."""
    binary = shutil.which("prometheus")
    if binary is None:
        if IN_CI:
            pytest.fail("prometheus missing: .ci/run installs Debian's prometheus package")
        pytest.skip("prometheus not installed (Debian's prometheus package)")
    port = free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(json.dumps({  # (JSON is YAML)
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(RULES)],
        "scrape_configs": [{"job_name": "dispatch", "static_configs": [{"targets": targets}]}]}))
    log = open(tmp_path / "prometheus.log", "wb")
    proc = subprocess.Popen([binary, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                             f"--web.listen-address=127.0.0.1:{port}"], stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    cli.procs.append(proc)  # stopped with the cluster at teardown
    base = f"http://127.0.0.1:{port}"

    def ready():
        if proc.poll() is not None:
            raise AssertionError(f"prometheus exited {proc.returncode}: {(tmp_path / 'prometheus.log').read_text()}")
        try:
            return get(base + "/-/ready", timeout=2)
        except OSError:
            return None

    cli.wait_for(ready, timeout=30, what="prometheus to be ready")
    return base


def query(base: str, expr: str) -> list[dict]:
    reply = json.loads(get(f"{base}/api/v1/query?query={urllib.parse.quote(expr)}"))
    assert reply["status"] == "success", (expr, reply)
    return reply["data"]["result"]


def by_instance(base: str, expr: str) -> dict[str, dict]:
    """{instance: {the other labels: value}} of an instant query."""
    out: dict[str, dict] = {}
    for r in query(base, expr):
        labels = {k: v for k, v in r["metric"].items() if k not in ("instance", "job")}
        out.setdefault(r["metric"]["instance"], {})[json.dumps(labels, sort_keys=True)] = float(r["value"][1])
    return out


def test_two_dashboards_export_the_same_kept_counters_to_a_real_prometheus(cli, tmp_path):
    cli.start("worker", "--node", "gpu-01", "--fake-gpus", "2xA100-80GB", "--work-dir", str(cli.home / "gpu-01"))
    cli.start("scheduler")
    jobs = [cli.submit("--priority", p, "--", "sh", "-c", cmd) for p, cmd in
            (("high", "sleep 0.3"), ("normal", "sleep 0.3"), ("normal", "echo ok"), ("low", "exit 3"))]
    cli.wait_for(lambda: all(cli.show(j)["state"] in ("succeeded", "failed") for j in jobs), timeout=60,
                 what="the jobs to end")
    dashboards = [start_dashboard(cli).removeprefix("http://") for _ in range(2)]
    base = start_prometheus(cli, tmp_path, dashboards)

    def all_scraped(n: int):
        got = by_instance(base, "sum without (state, class) (dispatch_jobs_ended_total)")
        return got if sorted(got) == sorted(dashboards) and all(v == {"{}": float(n)} for v in got.values()) else None

    cli.wait_for(lambda: all_scraped(len(jobs)), timeout=60, what="both dashboards scraped with every end counted")
    more = [cli.submit("--priority", "high", "--", "sh", "-c", "sleep 0.2") for _ in range(2)]  # while scraped
    long = cli.submit("--", "sleep", "300")
    jobs += [*more, long]
    cli.wait_for(lambda: cli.show(long)["state"] == "running", timeout=30, what="the long job to run")
    cli.run("preempt", long, "--force")  # back to the queue, and placed again
    cli.wait_for(lambda: (lambda j: j["state"] == "running" and j["attempt"] == 1)(cli.show(long)), timeout=30,
                 what="the preempted job to run again")
    cli.run("cancel", long)
    cli.wait_for(lambda: all(cli.show(j)["state"] in ("succeeded", "cancelled") for j in [*more, long]), timeout=60,
                 what="the jobs submitted while scraped to end")
    cli.wait_for(lambda: all_scraped(len(jobs)), timeout=60, what="their ends scraped")
    for metric in KEPT:
        got = by_instance(base, metric)
        first, second = (got.get(d) for d in dashboards)
        assert first and first == second, (metric, got)
    requeues = by_instance(base, "dispatch_job_requeues_total")
    assert list(requeues[dashboards[0]].values()) == [1.0] and requeues[dashboards[0]] == requeues[dashboards[1]]
    assert '"kind": "preempted"' in next(iter(requeues[dashboards[0]]))
    cycles = by_instance(base, 'dispatch_scheduler_cycle_duration_seconds_count{kind="full"}')
    assert sorted(cycles) == sorted(dashboards)  # counted on by the scheduler meanwhile
    started = query(base, f'sum(dispatch_jobs_started_total{{instance="{dashboards[0]}"}})')
    latencies = query(base, f'sum(dispatch_job_start_latency_seconds_count{{instance="{dashboards[0]}"}})')
    # every start timed (the long job started twice)
    assert float(started[0]["value"][1]) == float(latencies[0]["value"][1]) == len(jobs) + 1
    ended = by_instance(base, "dispatch_jobs_ended_total")[dashboards[0]]
    assert ended[json.dumps({"__name__": "dispatch_jobs_ended_total", "class": "low", "state": "failed"},
                            sort_keys=True)] == 1
    assert by_instance(base, 'dispatch_node_up{node="gpu-01"}')[dashboards[1]] == {
        json.dumps({"__name__": "dispatch_node_up", "node": "gpu-01"}, sort_keys=True): 1.0}

    for expr in grafana_exprs():  # every panel's query runs (an error fails query())
        query(base, expr.replace("$__rate_interval", "1m"))
    assert query(base, 'histogram_quantile(0.5, sum by (class, le) (max without (instance, job) '
                       '(rate(dispatch_queue_wait_seconds_bucket[1m]))))')  # the waits' p50 has data

    def rules_evaluated():
        groups = json.loads(get(base + "/api/v1/rules"))["data"]["groups"]
        rules = [r for g in groups for r in g["rules"]]
        return rules if len(rules) == 7 and all(r["health"] == "ok" for r in rules) else None

    rules = cli.wait_for(rules_evaluated, timeout=30, what="the example rules to evaluate")
    assert not [r["name"] for r in rules if r["state"] == "firing"]  # a healthy cluster: nothing fires
