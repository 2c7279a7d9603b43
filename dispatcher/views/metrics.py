"""Prometheus metrics of a cluster, from the board (dispatcher/views/board.py) and the leading
scheduler's counters (store/counters.py): served at /metrics by `dispatch dashboard`. The names and
labels are listed in docs/dashboard.md.

Gauges are read at each scrape (from the board's last read). The histograms (queue wait, start
latency, run time, cycle time) and the counters of starts, ends, preemptions and requeues are the
scheduler's, kept in Redis where each event is decided, so every dashboard process exports the same
numbers, and a restart of one neither loses nor counts them again.

Units: seconds and bytes; a share of a whole (allocation, utilization, fragmentation) is a ratio
from 0 to 1 named `_ratio`, never a percent (Prometheus's base units; docs/dashboard.md).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, InfoMetricFamily

from .. import __version__
from ..store import counters

ALERT_KINDS = ("wait", "low_util", "dead_node", "zombie", "idle_gpu")
#: The scheduler's histograms and counters as exported: (store/counters.py name, metric name, help).
HISTOGRAMS = (("queue_wait", "dispatch_queue_wait_seconds", "Wait from submit to each start, by class"),
              ("start_latency", "dispatch_job_start_latency_seconds",
               "Time from each placement to its agent marking the job running, by class"),
              ("job_run", "dispatch_job_run_seconds", "Run time of each ended job's last attempt, by class"),
              ("cycle", "dispatch_scheduler_cycle_duration_seconds", "Duration of each scheduling cycle, by kind"))
COUNTERS = (("jobs_started", "dispatch_jobs_started", "Jobs started, by class"),
            ("jobs_ended", "dispatch_jobs_ended", "Jobs that ended, by final state and class"),
            ("preemptions", "dispatch_job_preemptions", "Preemptions started, by the victim's class and mode"),
            ("requeues", "dispatch_job_requeues", "Jobs back in the queue after holding GPUs, by class and kind "
                                                  "(preempted, idle, node_lost, lost, other)"))


def _gauge(name, doc, labels=()):
    return GaugeMetricFamily(name, doc, labels=list(labels))


class ClusterCollector:
    def __init__(self, board):
        self.board = board

    def describe(self):
        return []  # collected at scrape time only; registering must not read Redis

    def collect(self):
        v = self.board.overview()
        yield InfoMetricFamily("dispatch_build", "The dispatch version serving these metrics",
                               value={"version": __version__})
        yield from _counted(counters.read(self.board.client, self.board.ns))
        yield from _classes(v)
        yield from _nodes(v)
        yield from _cluster(v)
        yield from _teams(v)
        yield from _scheduler(v)
        yield from _outcomes_and_alerts(v)


def _counted(got: dict):
    for name, metric, doc in HISTOGRAMS:
        per = got["histograms"].get(name, {})
        labels = sorted({k for lbl in per for k, _ in lbl})
        h = HistogramMetricFamily(metric, doc, labels=labels)
        bounds = [str(float(b)) for b in counters.BUCKETS[name]] + ["+Inf"]
        for lbl, v in sorted(per.items()):
            d = dict(lbl)
            h.add_metric([d.get(k, "") for k in labels], list(zip(bounds, v["buckets"])), v["sum"])
        yield h
    for name, metric, doc in COUNTERS:
        per = got["counters"].get(name, {})
        labels = sorted({k for lbl in per for k, _ in lbl})
        c = CounterMetricFamily(metric, doc + " (the scheduler's, kept in Redis)", labels=labels)
        for lbl, n in sorted(per.items()):
            d = dict(lbl)
            c.add_metric([d.get(k, "") for k in labels], n)
        yield c


def _teams(v: dict):
    held = _gauge("dispatch_team_gpus", "GPUs held by each team's running jobs", ["team"])
    pending = _gauge("dispatch_team_gpus_pending", "GPUs asked for by each team's pending jobs", ["team"])
    for t in v["usage"]["teams"]:
        held.add_metric([t["team"]], t["gpus"])
        pending.add_metric([t["team"]], t["gpus_pending"])
    yield from (held, pending)


def _classes(v: dict):
    pending = _gauge("dispatch_jobs_pending", "Pending jobs, by class", ["class"])
    gpus = _gauge("dispatch_class_gpus", "GPUs held by each class's running jobs", ["class"])
    running = _gauge("dispatch_jobs_running", "Jobs holding resources (assigned, running, preempting), by class",
                     ["class"])
    oldest = _gauge("dispatch_oldest_pending_wait_seconds", "Longest wait among pending jobs, by class",
                    ["class"])
    for c in v["classes"]:
        pending.add_metric([c["class"]], c["pending"])
        running.add_metric([c["class"]], c["running"])
        oldest.add_metric([c["class"]], c["oldest_wait_s"])
        gpus.add_metric([c["class"]], c["gpus"])
    yield from (pending, running, oldest, gpus)


def _nodes(v: dict):
    gpus = _gauge("dispatch_node_gpus", "GPUs of each node by state (free, held, blocked by a zombie, dead)",
                  ["node", "state"])
    util = _gauge("dispatch_gpu_utilization_ratio", "GPU utilization (0 to 1) as the node's agent last read it",
                  ["node", "gpu"])
    alloc = _gauge("dispatch_gpu_allocated", "1 while a job holds the GPU", ["node", "gpu"])
    info = _gauge("dispatch_gpu_info", "1 for each GPU, with its model", ["node", "gpu", "model"])
    mem_used = _gauge("dispatch_gpu_memory_used_bytes", "GPU memory in use", ["node", "gpu"])
    mem_total = _gauge("dispatch_gpu_memory_total_bytes", "GPU memory", ["node", "gpu"])
    age = _gauge("dispatch_node_heartbeat_age_seconds", "Time since the node's last heartbeat", ["node"])
    up = _gauge("dispatch_node_up", "1 while the node heartbeats within the node timeout", ["node"])
    for n in v["nodes"]:
        age.add_metric([n["name"]], n["seen_s_ago"])
        up.add_metric([n["name"]], 1 if n["alive"] else 0)
        for state in ("free", "held", "blocked", "dead"):
            gpus.add_metric([n["name"], state], sum(1 for g in n["gpus"] if g["state"] == state))
        for g in n["gpus"]:
            labels = [n["name"], str(g["index"])]
            util.add_metric(labels, g["util_pct"] / 100.0)
            alloc.add_metric(labels, 1 if g["job"] else 0)
            info.add_metric(labels + [g["name"]], 1)
            mem_used.add_metric(labels, g["mem_used_gb"] * 1e9)
            mem_total.add_metric(labels, g["mem_total_gb"] * 1e9)
    yield from (gpus, util, alloc, info, mem_used, mem_total, age, up)


def _cluster(v: dict):
    t = v["totals"]
    yield GaugeMetricFamily("dispatch_cluster_gpus", "Usable GPUs on live nodes", value=t["gpus"])
    yield GaugeMetricFamily("dispatch_cluster_gpu_allocation_ratio", "GPUs held / usable GPUs, live nodes",
                            value=t["held"] / t["gpus"] if t["gpus"] else 0.0)
    yield GaugeMetricFamily("dispatch_cluster_gpu_utilization_ratio",
                            "Mean GPU utilization (0 to 1), live nodes", value=t["util_pct"] / 100.0)
    yield GaugeMetricFamily("dispatch_cluster_fragmentation_ratio",
                            "Share of free GPUs on nodes with fewer free than the smallest pending request", value=t["frag"])


def _scheduler(v: dict):
    s = v["scheduler"]
    for name, key, doc in (("dispatch_scheduler_cycles", "cycles", "Scheduling cycles run by the leader"),
                           ("dispatch_placements", "placed", "Jobs started by the leader"),
                           ("dispatch_preemptions", "preempted", "Preemptions started by the leader"),
                           ("dispatch_lost_requeues", "requeued_lost", "Jobs requeued from dead nodes")):
        yield CounterMetricFamily(name, doc + " (resets when another scheduler takes the lead)", value=s[key])
    yield GaugeMetricFamily("dispatch_scheduler_cycle_seconds", "Duration of the leader's last cycle",
                            value=s["cycle_ms"] / 1000.0)
    yield GaugeMetricFamily("dispatch_scheduler_stats_age_seconds",
                            "Time since the leader last published (a stalled or absent scheduler)",
                            value=s["age_s"] if s["age_s"] is not None else float("nan"))


def _outcomes_and_alerts(v: dict):
    finished = _gauge("dispatch_recent_jobs_finished", "The newest finished jobs (up to 1000), by final state",
                      ["state"])
    for state, n in v["outcomes"]["counts"].items():
        finished.add_metric([state], n)
    yield finished

    active = _gauge("dispatch_alerts_active", "Alerts in force, by kind", ["kind"])
    each = _gauge("dispatch_alert", "1 for each alert in force", ["kind", "severity", "subject"])
    for kind in ALERT_KINDS:
        active.add_metric([kind], sum(1 for a in v["alerts"] if a["kind"] == kind))
    for a in v["alerts"]:
        each.add_metric([a["kind"], a["severity"], a["subject"]], 1)
    yield from (active, each)


def exposition(collector: ClusterCollector) -> bytes:
    """The text exposition format of one scrape."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return generate_latest(registry)

