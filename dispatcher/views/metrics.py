"""Prometheus metrics of a cluster, from the board (dispatcher/views/board.py): served at /metrics by
`dispatch dashboard`. The names and labels are listed in docs/dashboard.md.

Everything but the queueing-delay histogram is read fresh at each scrape (gauges, and the
leading scheduler's counters). The histogram is this process's own: it observes each start
in the decision log once (the wait from submit to that start), so it counts from when the
exporter started, taking in the log's backlog at the first scrape, as a histogram must.
"""

from __future__ import annotations

import threading

from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from ..store.decisions import DECISIONS_KEPT, read_decisions
from ..store.jobs import read_jobs

#: Queueing-delay buckets, seconds: from a few seconds to a day.
DELAY_BUCKETS_S = (1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200, 14400, 43200, 86400)
ALERT_KINDS = ("wait", "low_util", "dead_node", "zombie", "idle_gpu")


def _gauge(name, doc, labels=()):
    return GaugeMetricFamily(name, doc, labels=list(labels))


class ClusterCollector:
    def __init__(self, board):
        self.board = board
        self._delay = Histogram("dispatch_queue_wait_seconds", "Wait from submit to each start, by class",
                                ["class"], buckets=DELAY_BUCKETS_S, registry=None)
        self._lock = threading.Lock()
        self._seen: set[tuple[float, str]] = set()

    def _observe_new_starts(self) -> None:
        starts = [d for d in read_decisions(self.board.client, self.board.ns, limit=DECISIONS_KEPT)
                  if d["kind"] == "start"]
        with self._lock:
            new = [d for d in starts if (d["time"], d["job"]) not in self._seen]
            self._seen = {(d["time"], d["job"]) for d in starts}
            jobs = {j["id"]: j for j in read_jobs(self.board.client, self.board.ns, list({d["job"] for d in new}))}
            for d in new:
                j = jobs.get(d["job"])
                if j and j["submitted_at"] and j["priority"]:
                    self._delay.labels(j["priority"]).observe(max(0.0, d["time"] - j["submitted_at"]))

    def describe(self):
        return []  # collected at scrape time only; registering must not read Redis

    def collect(self):
        v = self.board.overview()
        self._observe_new_starts()
        yield from self._delay.collect()
        yield from _classes(v)
        yield from _nodes(v)
        yield from _cluster(v)
        yield from _scheduler(v)
        yield from _outcomes_and_alerts(v)


def _classes(v: dict):
    pending = _gauge("dispatch_jobs_pending", "Pending jobs, by class", ["class"])
    running = _gauge("dispatch_jobs_running", "Jobs holding resources (assigned, running, preempting), by class",
                     ["class"])
    oldest = _gauge("dispatch_oldest_pending_wait_seconds", "Longest wait among pending jobs, by class",
                    ["class"])
    for c in v["classes"]:
        pending.add_metric([c["class"]], c["pending"])
        running.add_metric([c["class"]], c["running"])
        oldest.add_metric([c["class"]], c["oldest_wait_s"])
    yield from (pending, running, oldest)


def _nodes(v: dict):
    gpus = _gauge("dispatch_node_gpus", "GPUs of each node by state (free, held, blocked by a zombie, dead)",
                  ["node", "state"])
    util = _gauge("dispatch_gpu_utilization_percent", "GPU utilization as the node's agent last read it",
                  ["node", "gpu"])
    alloc = _gauge("dispatch_gpu_allocated", "1 while a job holds the GPU", ["node", "gpu"])
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
            util.add_metric(labels, g["util_pct"])
            alloc.add_metric(labels, 1 if g["job"] else 0)
            mem_used.add_metric(labels, g["mem_used_gb"] * 1e9)
            mem_total.add_metric(labels, g["mem_total_gb"] * 1e9)
    yield from (gpus, util, alloc, mem_used, mem_total, age, up)


def _cluster(v: dict):
    t = v["totals"]
    yield GaugeMetricFamily("dispatch_cluster_gpus", "Usable GPUs on live nodes", value=t["gpus"])
    yield GaugeMetricFamily("dispatch_cluster_gpu_allocation_ratio", "GPUs held / usable GPUs, live nodes",
                            value=t["held"] / t["gpus"] if t["gpus"] else 0.0)
    yield GaugeMetricFamily("dispatch_cluster_gpu_utilization_percent", "Mean GPU utilization, live nodes",
                            value=t["util_pct"])
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

