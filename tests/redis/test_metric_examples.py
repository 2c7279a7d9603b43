"""The examples built on /metrics (examples/grafana/dispatch.json, examples/prometheus/alerts.yml): every
metric their queries use is one `dispatch dashboard` exports, and the alert rules pass promtool's check
and their own tests (examples/prometheus/alerts_test.yml). promtool comes with Debian's `prometheus`
package (.ci/run installs it): without it the promtool tests skip locally and fail in CI."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from dispatcher.views.board import Board
from dispatcher.views.metrics import ClusterCollector, exposition
from tests.conftest import IN_CI

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
GRAFANA = EXAMPLES / "grafana" / "dispatch.json"
RULES = EXAMPLES / "prometheus" / "alerts.yml"
NAME = re.compile(r"\bdispatch_[a-z0-9_]+\b")
#: The samples of each kind of family, by suffix (prometheus_client's text format).
SUFFIXES = {"counter": ("_total", "_created"), "histogram": ("_bucket", "_sum", "_count", "_created"),
            "gauge": ("",), "info": ("",), "untyped": ("",)}


def exported_names(client, ns: str) -> set[str]:
    """The sample names /metrics can carry, from its families' TYPE lines (present with no samples too)."""
    text = exposition(ClusterCollector(Board(client, ns))).decode()
    names = set()
    for name, kind in re.findall(r"^# TYPE (\S+) (\S+)$", text, re.M):
        base = name.removesuffix("_total") if kind == "counter" else name  # (0.26 names a counter with it)
        names |= {base + s for s in SUFFIXES[kind]}
    return names


def grafana_exprs() -> list[str]:
    board = json.loads(GRAFANA.read_text())
    panels = [p for top in board["panels"] for p in (top, *top.get("panels", ()))]
    return [t["expr"] for p in panels for t in p.get("targets", ())]


def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        if IN_CI:
            pytest.fail("promtool missing: .ci/run installs Debian's prometheus package")
        pytest.skip("promtool not installed (Debian's prometheus package)")
    return found


def test_every_metric_the_grafana_dashboard_and_the_rules_query_is_exported(client, ns):
    exported = exported_names(client, ns)
    assert {"dispatch_jobs_started_total", "dispatch_queue_wait_seconds_bucket", "dispatch_class_gpus",
            "dispatch_job_requeues_total", "dispatch_job_start_latency_seconds_bucket"} <= exported
    exprs = grafana_exprs()
    assert len(exprs) >= 20 and all(NAME.search(e) for e in exprs)
    used = {n for e in exprs for n in NAME.findall(e)}
    assert used - exported == set()
    rules = {n for line in RULES.read_text().splitlines() if not line.lstrip().startswith("#")
             for n in NAME.findall(line)}
    assert len(rules) >= 8 and rules - exported == set()


def test_the_grafana_dashboard_covers_what_operators_ask_for():
    used = " ".join(grafana_exprs())
    for metric in ("dispatch_jobs_pending", "dispatch_queue_wait_seconds_bucket",
                   "dispatch_cluster_gpu_allocation_ratio", "dispatch_cluster_gpu_utilization_ratio",
                   "dispatch_cluster_fragmentation_ratio",
                   "dispatch_jobs_started_total", "dispatch_jobs_ended_total", "dispatch_job_preemptions_total",
                   "dispatch_job_requeues_total", "dispatch_scheduler_cycle_duration_seconds_bucket",
                   "dispatch_node_gpus", "dispatch_alert"):
        assert metric in used, metric
    assert "histogram_quantile(0.5," in used and "histogram_quantile(0.95," in used


def test_the_alert_rules_pass_promtool_and_their_tests():
    tool = promtool()
    check = subprocess.run([tool, "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60)
    assert check.returncode == 0, check.stdout + check.stderr
    run = subprocess.run([tool, "test", "rules", "alerts_test.yml"], cwd=RULES.parent, capture_output=True,
                         text=True, timeout=60)
    assert run.returncode == 0 and "SUCCESS" in run.stdout, run.stdout + run.stderr


def test_the_rules_thresholds_are_the_policy_defaults():
    """alerts.yml says its thresholds mirror the [alerts] defaults: they do."""
    from dispatcher.core.alerts import AlertConfig
    from dispatcher.policy.config import PolicyConfig

    text, cfg, policy = RULES.read_text(), AlertConfig(), PolicyConfig()
    assert f'{{class="critical"}}) > {cfg.critical_wait_s:g}' in text
    assert f'{{class="high"}}) > {cfg.high_wait_s:g}' in text
    assert f"(dispatch_cluster_gpu_allocation_ratio) < {cfg.low_util_pct / 100:g}" in text
    assert f"for: {cfg.low_util_for_s / 60:g}m" in text
    assert f"(dispatch_gpu_utilization_ratio) < {policy.idle_util_pct / 100:g}" in text
    assert f"for: {policy.idle_warn_s / 60:g}m" in text


def test_metrics_content_type_names_its_charset_once(client, ns):
    """QA: /metrics answered `text/plain; version=0.0.4; charset=utf-8; charset=utf-8` (werkzeug added a
    charset to one already there). Go's mime.ParseMediaType refuses a repeated parameter, and Prometheus
    3 fails a scrape whose Content-Type does not parse: every scrape of the dashboard failed."""
    from dispatcher.views.dashboard import create_app

    app = create_app(Board(client, ns)).test_client()
    for headers in ({}, {"Accept-Encoding": "gzip"}):
        r = app.get("/metrics", headers=headers)
        assert r.status_code == 200 and r.headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
    assert app.get("/api/board").headers["Content-Type"] == "application/json"
