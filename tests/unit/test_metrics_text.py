"""/metrics as written by views/metrics.py (the text format 0.0.4, without prometheus_client's metric
objects): it parses with prometheus_client's own parser into the families, types, labels and values a
board and the counters give, label values and HELP text escaped, numbers as prometheus_client writes them."""

from __future__ import annotations

import math

import pytest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.utils import floatToGoString

from dispatcher import __version__
from dispatcher.store import counters
from dispatcher.views import metrics
from dispatcher.views.metrics import ClusterCollector, exposition

ODD = 'a "quoted" \\ back\nslash'


def gpu(index, state, job="", util=50.0, name="A100-SXM-80GB"):
    return {"index": index, "name": name, "util_pct": util, "mem_used_gb": 12.5, "mem_total_gb": 80.0,
            "job": job, "state": state}


def overview(age_s=2.5):
    return {
        "classes": [{"class": "high", "pending": 3, "held": 1, "running": 1, "oldest_wait_s": 12.0, "gpus": 2},
                    {"class": "low", "pending": 0, "held": 0, "running": 0, "oldest_wait_s": 0.0, "gpus": 0}],
        "nodes": [{"name": "n1", "alive": True, "seen_s_ago": 0.4, "drain": {"reason": "bad fan", "by": "root"},
                   "gpus": [gpu(0, "held", job="7"), gpu(1, "drained", util=0.0)]},
                  {"name": ODD, "alive": False, "seen_s_ago": 90.0, "gpus": [gpu(0, "dead", name=ODD)]}],
        "totals": {"gpus": 2, "held": 1, "util_pct": 25.0, "frag": 0.5},
        "usage": {"teams": [{"team": "vision", "gpus": 2, "gpus_pending": 4}, {"team": ODD, "gpus": 0,
                                                                                "gpus_pending": 1}]},
        "scheduler": {"cycles": 40, "placed": 9, "preempted": 1, "requeued_lost": 0, "cycle_ms": 15.0,
                      "age_s": age_s},
        "outcomes": {"counts": {"completed": 5, "failed": 1}},
        "alerts": [{"kind": "dead_node", "severity": "critical", "subject": ODD},
                   {"kind": "wait", "severity": "warning", "subject": "high"}],
    }


COUNTED = {"histograms": {"queue_wait": {(("class", "high"),): {"buckets": list(range(1, 16)), "sum": 42.5,
                                                                "count": 15}}},
           "counters": {"jobs_started": {(("class", "high"),): 9, (("class", ODD),): 2},
                        "requeues": {(("class", "low"),): 1, (("class", "low"), ("kind", "idle")): 3}}}


class Board:
    client, ns = None, "t"

    def __init__(self, view):
        self.view = view

    def overview(self):
        return self.view


def scrape(monkeypatch, view=None, counted=COUNTED) -> tuple[str, dict]:
    monkeypatch.setattr(counters, "read", lambda client, ns: counted)
    text = exposition(ClusterCollector(Board(view or overview()))).decode()
    return text, {f.name: f for f in text_string_to_metric_families(text)}


def values(family) -> dict:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value for s in family.samples}


def test_the_families_their_types_and_their_samples(monkeypatch):
    text, fams = scrape(monkeypatch)
    types = {name: f.type for name, f in fams.items()}
    assert types["dispatch_build_info"] == "gauge"  # as prometheus_client wrote an info metric in 0.0.4
    assert {types[n] for n in ("dispatch_queue_wait_seconds", "dispatch_job_run_seconds",
                               "dispatch_scheduler_cycle_duration_seconds")} == {"histogram"}
    for name in ("dispatch_jobs_started", "dispatch_jobs_ended", "dispatch_job_requeues", "dispatch_placements",
                 "dispatch_scheduler_cycles"):
        assert types[name] == "counter", name
        assert f"# TYPE {name}_total counter\n" in text  # as prometheus_client 0.26 names them
    for name in ("dispatch_jobs_pending", "dispatch_node_gpus", "dispatch_gpu_info", "dispatch_alert",
                 "dispatch_cluster_gpu_allocation_ratio", "dispatch_scheduler_stats_age_seconds"):
        assert types[name] == "gauge", name
    assert 'dispatch_build_info{version="%s"} 1.0\n' % __version__ in text

    assert values(fams["dispatch_jobs_pending"]) == {("dispatch_jobs_pending", (("class", "high"),)): 3.0,
                                                     ("dispatch_jobs_pending", (("class", "low"),)): 0.0}
    gpus = values(fams["dispatch_node_gpus"])
    assert gpus[("dispatch_node_gpus", (("node", "n1"), ("state", "held")))] == 1.0
    assert gpus[("dispatch_node_gpus", (("node", "n1"), ("state", "drained")))] == 1.0  # free, but drained
    assert gpus[("dispatch_node_gpus", (("node", "n1"), ("state", "free")))] == 0.0
    assert gpus[("dispatch_node_gpus", (("node", ODD), ("state", "dead")))] == 1.0
    assert len(gpus) == 2 * 5  # every state of every node, zeros included
    util = values(fams["dispatch_gpu_utilization_ratio"])
    assert util[("dispatch_gpu_utilization_ratio", (("gpu", "0"), ("node", "n1")))] == 0.5
    assert values(fams["dispatch_gpu_memory_total_bytes"])[
        ("dispatch_gpu_memory_total_bytes", (("gpu", "1"), ("node", "n1")))] == 80e9
    assert 'dispatch_gpu_memory_total_bytes{gpu="1",node="n1"} 8e+10\n' in text
    assert values(fams["dispatch_gpu_allocated"])[("dispatch_gpu_allocated", (("gpu", "1"), ("node", "n1")))] == 0
    assert values(fams["dispatch_node_up"])[("dispatch_node_up", (("node", ODD),))] == 0.0
    assert values(fams["dispatch_node_drained"]) == {("dispatch_node_drained", (("node", "n1"),)): 1.0,
                                                     ("dispatch_node_drained", (("node", ODD),)): 0.0}
    assert values(fams["dispatch_cluster_gpu_allocation_ratio"]) == {
        ("dispatch_cluster_gpu_allocation_ratio", ()): 0.5}
    assert values(fams["dispatch_alerts_active"])[("dispatch_alerts_active", (("kind", "dead_node"),))] == 1.0
    assert values(fams["dispatch_placements"]) == {("dispatch_placements_total", ()): 9.0}
    assert values(fams["dispatch_jobs_started"])[("dispatch_jobs_started_total", (("class", ODD),))] == 2.0
    # a counter's label missing from one of its series is written empty, as prometheus_client did
    assert values(fams["dispatch_job_requeues"]) == {
        ("dispatch_job_requeues_total", (("class", "low"), ("kind", ""))): 1.0,
        ("dispatch_job_requeues_total", (("class", "low"), ("kind", "idle"))): 3.0}
    assert fams["dispatch_jobs_ended"].samples == []  # a family with no series: HELP and TYPE only


def test_histograms_are_cumulative_buckets_with_inf_last_then_count_and_sum(monkeypatch):
    text, fams = scrape(monkeypatch)
    samples = fams["dispatch_queue_wait_seconds"].samples
    buckets = [s for s in samples if s.name.endswith("_bucket")]
    assert [s.labels["le"] for s in buckets] == [str(float(b)) for b in counters.BUCKETS["queue_wait"]] + ["+Inf"]
    assert [s.value for s in buckets] == list(range(1, 16)) and all(s.labels["class"] == "high" for s in buckets)
    got = values(fams["dispatch_queue_wait_seconds"])
    assert got[("dispatch_queue_wait_seconds_count", (("class", "high"),))] == 15.0
    assert got[("dispatch_queue_wait_seconds_sum", (("class", "high"),))] == 42.5
    assert 'dispatch_queue_wait_seconds_bucket{class="high",le="+Inf"} 15.0\n' \
           'dispatch_queue_wait_seconds_count{class="high"} 15.0\n' \
           'dispatch_queue_wait_seconds_sum{class="high"} 42.5\n' in text
    assert fams["dispatch_job_run_seconds"].samples == []


def test_label_values_and_help_text_are_escaped(monkeypatch):
    text, fams = scrape(monkeypatch)
    assert 'node="a \\"quoted\\" \\\\ back\\nslash"' in text
    assert all(line.startswith(("#", "dispatch_")) for line in text.splitlines())  # no raw newline got out
    alert = values(fams["dispatch_alert"])
    assert alert[("dispatch_alert", (("kind", "dead_node"), ("severity", "critical"), ("subject", ODD)))] == 1.0
    info = values(fams["dispatch_gpu_info"])
    assert info[("dispatch_gpu_info", (("gpu", "0"), ("model", ODD), ("node", ODD)))] == 1.0
    assert values(fams["dispatch_team_gpus_pending"])[("dispatch_team_gpus_pending", (("team", ODD),))] == 1.0
    out = []
    metrics.family(out, "x", "gauge", 'one \\ two\nthree "q"')
    assert out == ['# HELP x one \\\\ two\\nthree "q"\n# TYPE x gauge\n']
    assert next(text_string_to_metric_families(out[0] + "x 1\n")).documentation == 'one \\ two\nthree "q"'


def test_a_scheduler_that_never_published_reads_nan(monkeypatch):
    text, fams = scrape(monkeypatch, overview(age_s=None), {"histograms": {}, "counters": {}})
    assert "dispatch_scheduler_stats_age_seconds NaN\n" in text
    assert math.isnan(fams["dispatch_scheduler_stats_age_seconds"].samples[0].value)


@pytest.mark.parametrize("value", [0, 1, True, 0.0, -0.0, 0.5, 1 / 3, 12.5e9, 80e9, 123456.7, 1234567, 1e16,
                                   1.5e22, 5e-05, -3.0, -2.5e9, float("inf"), float("-inf"), float("nan")])
def test_numbers_are_written_as_prometheus_client_writes_them(value):
    assert metrics.number(value) == floatToGoString(value)
