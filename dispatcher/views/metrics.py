"""Prometheus metrics of a cluster, from the board (dispatcher/views/board.py) and the leading
scheduler's counters (store/counters.py): served at /metrics by `dispatch dashboard`. The names and
labels are listed in docs/dashboard.md.

Gauges are those of the board's read (at most a second old: views/fresh.py); the dashboard writes
a read's text once (`exposition(..., age=False)`) and each scrape adds the scheduler's age as of
itself (`stats_age`). The histograms (queue wait, start latency, run time, cycle time) and the
counters of starts, ends, preemptions and requeues are the scheduler's, kept in Redis where each
event is decided, so every dashboard process exports the same numbers, and a restart of one neither
loses nor counts them again.

Units: seconds and bytes; a share of a whole (allocation, utilization, fragmentation) is a ratio
from 0 to 1 named `_ratio`, never a percent (Prometheus's base units; docs/dashboard.md).

The text (format 0.0.4) is written here directly, line by line, as prometheus_client's generate_latest
wrote it (the same names, HELP and TYPE lines, labels sorted by name, values as its floatToGoString
formats them: 1.0, 8e+10, NaN, +Inf), without a metric object per sample: at 1,000 nodes of 8 GPUs
(46,000 lines, 2.6 MB) that took 0.5 s a scrape, this takes tens of milliseconds.
"""

from __future__ import annotations

from .. import __version__
from ..store import counters
from .fresh import PerRead
from .gzipped import Tail

ALERT_KINDS = ("wait", "low_util", "dead_node", "zombie", "idle_gpu", "scheduler")
NODE_STATES = ("free", "held", "blocked", "drained", "dead")
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
INF = float("inf")


def number(value) -> str:
    """A sample's value as prometheus_client writes it (Go's formatting): 1.0, 0.25, 8e+10, NaN, +Inf."""
    d = float(value)
    if d != d:
        return "NaN"
    if d == INF:
        return "+Inf"
    if d == -INF:
        return "-Inf"
    s = repr(d)
    if d > 0:
        dot = s.find(".")
        if dot > 6:  # Go switches to an exponent sooner than Python
            return f"{s[0]}.{s[1:dot]}{s[dot + 1:]}".rstrip("0.") + f"e+{dot - 1:02d}"
    return s


def escape(value) -> str:
    """A label value inside its double quotes: backslash, newline and double quote escaped."""
    s = value if type(value) is str else str(value)
    if "\\" in s or "\n" in s or '"' in s:
        return s.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')
    return s


def labels(pairs) -> str:
    """`{k="v",...}` of (name, value) pairs, sorted by name as prometheus_client writes them; "" for none."""
    if not pairs:
        return ""
    return "{" + ",".join(f'{k}="{escape(v)}"' for k, v in sorted(pairs)) + "}"


def family(out: list, name: str, kind: str, doc: str) -> None:
    """A family's HELP (backslash and newline escaped) and TYPE lines."""
    doc = doc.replace("\\", "\\\\").replace("\n", "\\n")
    out.append(f"# HELP {name} {doc}\n# TYPE {name} {kind}\n")


def _gauge(out: list, name: str, doc: str, label: str, rows) -> None:
    """A gauge with one label: a line per (label value, value) of `rows`."""
    family(out, name, "gauge", doc)
    out.extend(f'{name}{{{label}="{escape(k)}"}} {number(n)}\n' for k, n in rows)


def _single(out: list, name: str, kind: str, doc: str, value) -> None:
    family(out, name, kind, doc)
    out.append(f"{name} {number(value)}\n")


class ClusterCollector:
    """One scrape's text, from `board` and the counters it reads (`exposition` joins it)."""

    def __init__(self, board):
        self.board = board

    def lines(self, v: dict | None = None, *, age: bool = True) -> list[str]:
        """The families of overview `v` (the board's, as of now, by default), the scheduler's age but
        with `age` False."""
        v = self.board.overview() if v is None else v
        out: list[str] = []
        family(out, "dispatch_build_info", "gauge", "The dispatch version serving these metrics")
        out.append(f'dispatch_build_info{{version="{escape(__version__)}"}} 1.0\n')
        _counted(out, counters.read(self.board.client, self.board.ns))
        _classes(out, v)
        _nodes(out, v)
        _cluster(out, v)
        _teams(out, v)
        _scheduler(out, v, age)
        _outcomes_and_alerts(out, v)
        return out


def _counted(out: list, got: dict) -> None:
    for name, metric, doc in HISTOGRAMS:
        per = got["histograms"].get(name, {})
        keys = sorted({k for lbl in per for k, _ in lbl} - {"le"})
        bounds = [str(float(b)) for b in counters.BUCKETS[name]] + ["+Inf"]
        family(out, metric, "histogram", doc)
        for lbl, h in sorted(per.items()):
            d = dict(lbl)
            pairs = [(k, d.get(k, "")) for k in keys]
            plain = labels(pairs)
            before = "".join(f'{k}="{escape(x)}",' for k, x in pairs if k < "le")
            after = "".join(f',{k}="{escape(x)}"' for k, x in pairs if k > "le")
            out.extend(f'{metric}_bucket{{{before}le="{b}"{after}}} {number(n)}\n'
                       for b, n in zip(bounds, h["buckets"]))
            out.append(f"{metric}_count{plain} {number(h['buckets'][-1])}\n{metric}_sum{plain} {number(h['sum'])}\n")
    for name, metric, doc in COUNTERS:
        per = got["counters"].get(name, {})
        keys = sorted({k for lbl in per for k, _ in lbl})
        family(out, metric + "_total", "counter", doc + " (the scheduler's, kept in Redis)")
        for lbl, n in sorted(per.items()):
            d = dict(lbl)
            out.append(f"{metric}_total{labels([(k, d.get(k, '')) for k in keys])} {number(n)}\n")


def _teams(out: list, v: dict) -> None:
    teams = v["usage"]["teams"]
    _gauge(out, "dispatch_team_gpus", "GPUs held by each team's running jobs", "team",
           ((t["team"], t["gpus"]) for t in teams))
    _gauge(out, "dispatch_team_gpus_pending", "GPUs asked for by each team's pending jobs", "team",
           ((t["team"], t["gpus_pending"]) for t in teams))


def _classes(out: list, v: dict) -> None:
    cs = v["classes"]
    _gauge(out, "dispatch_jobs_pending", "Pending jobs, by class (held ones included)", "class",
           ((c["class"], c["pending"]) for c in cs))
    _gauge(out, "dispatch_jobs_held", "Pending jobs held by their dependencies, by dispatch hold or until their --begin time, by class",
           "class", ((c["class"], c["held"]) for c in cs))
    _gauge(out, "dispatch_jobs_running", "Jobs holding resources (assigned, running, preempting), by class",
           "class", ((c["class"], c["running"]) for c in cs))
    _gauge(out, "dispatch_oldest_pending_wait_seconds", "Longest wait among pending jobs the scheduler may start (not held), by class", "class",
           ((c["class"], c["oldest_wait_s"]) for c in cs))
    _gauge(out, "dispatch_class_gpus", "GPUs held by each class's running jobs", "class",
           ((c["class"], c["gpus"]) for c in cs))


def _nodes(out: list, v: dict) -> None:
    """A line per node and state, and five per GPU: one pass over the nodes, each family's lines kept
    apart and written in turn."""
    gpus, util, alloc, info, used, total, age, up, drained = [], [], [], [], [], [], [], [], []
    pct, gb, models = {}, {}, {}  # each value's text, written once: GPUs share their models, sizes, readings
    for n in v["nodes"]:
        node = escape(n["name"])
        age.append(f'dispatch_node_heartbeat_age_seconds{{node="{node}"}} {number(n["seen_s_ago"])}\n')
        up.append(f'dispatch_node_up{{node="{node}"}} {"1.0" if n["alive"] else "0.0"}\n')
        drained.append(f'dispatch_node_drained{{node="{node}"}} {"0.0" if n.get("drain") is None else "1.0"}\n')
        states = [g["state"] for g in n["gpus"]]
        gpus.extend(f'dispatch_node_gpus{{node="{node}",state="{s}"}} {number(states.count(s))}\n'
                    for s in NODE_STATES)
        for g in n["gpus"]:
            gpu = g["index"]
            gpu = gpu if type(gpu) is int else escape(gpu)
            gl = f'{{gpu="{gpu}",node="{node}"}} '
            u, m, mu, mt = g["util_pct"], g["name"], g["mem_used_gb"], g["mem_total_gb"]
            if u not in pct:
                pct[u] = number(u / 100.0)
            if m not in models:
                models[m] = escape(m)
            if mu not in gb:
                gb[mu] = number(mu * 1e9)
            if mt not in gb:
                gb[mt] = number(mt * 1e9)
            util.append(f"dispatch_gpu_utilization_ratio{gl}{pct[u]}\n")
            alloc.append(f"dispatch_gpu_allocated{gl}{'1.0' if g['job'] else '0.0'}\n")
            info.append(f'dispatch_gpu_info{{gpu="{gpu}",model="{models[m]}",node="{node}"}} 1.0\n')
            used.append(f"dispatch_gpu_memory_used_bytes{gl}{gb[mu]}\n")
            total.append(f"dispatch_gpu_memory_total_bytes{gl}{gb[mt]}\n")
    for name, doc, lines in (
            ("dispatch_node_gpus", "GPUs of each node by state (free, held, blocked by a zombie, dead)", gpus),
            ("dispatch_gpu_utilization_ratio", "GPU utilization (0 to 1) as the node's agent last read it", util),
            ("dispatch_gpu_allocated", "1 while a job holds the GPU", alloc),
            ("dispatch_gpu_info", "1 for each GPU, with its model", info),
            ("dispatch_gpu_memory_used_bytes", "GPU memory in use", used),
            ("dispatch_gpu_memory_total_bytes", "GPU memory", total),
            ("dispatch_node_heartbeat_age_seconds", "Time since the node's last heartbeat", age),
            ("dispatch_node_up", "1 while the node heartbeats within the node timeout", up),
            ("dispatch_node_drained", "1 while the node is drained (dispatch drain): no new job starts there",
             drained)):
        family(out, name, "gauge", doc)
        out.extend(lines)


def _cluster(out: list, v: dict) -> None:
    t = v["totals"]
    _single(out, "dispatch_cluster_gpus", "gauge", "Usable GPUs on live nodes", t["gpus"])
    _single(out, "dispatch_cluster_gpu_allocation_ratio", "gauge", "GPUs held / usable GPUs, live nodes",
            t["held"] / t["gpus"] if t["gpus"] else 0.0)
    _single(out, "dispatch_cluster_gpu_utilization_ratio", "gauge", "Mean GPU utilization (0 to 1), live nodes",
            t["util_pct"] / 100.0)
    _single(out, "dispatch_cluster_fragmentation_ratio", "gauge",
            "Share of free GPUs on nodes with fewer free than the smallest pending request", t["frag"])


def _scheduler(out: list, v: dict, age: bool = True) -> None:
    s = v["scheduler"]
    for name, key, doc in (("dispatch_scheduler_cycles", "cycles", "Scheduling cycles run by the leader"),
                           ("dispatch_placements", "placed", "Jobs started by the leader"),
                           ("dispatch_preemptions", "preempted", "Preemptions started by the leader"),
                           ("dispatch_lost_requeues", "requeued_lost", "Jobs requeued from dead nodes")):
        _single(out, name + "_total", "counter", doc + " (resets when another scheduler takes the lead)", s[key])
    _single(out, "dispatch_scheduler_cycle_seconds", "gauge", "Duration of the leader's last cycle",
            s["cycle_ms"] / 1000.0)
    if age:
        _stats_age(out, s["age_s"])


def _stats_age(out: list, age_s) -> None:
    _single(out, "dispatch_scheduler_stats_age_seconds", "gauge",
            "Time since the leader last published (a stalled or absent scheduler)",
            age_s if age_s is not None else float("nan"))


def stats_age(v: dict) -> bytes:
    """The scheduler's age family alone, of overview `v` (its age as of the scrape): what each scrape
    adds to the text made once per read."""
    out: list[str] = []
    _stats_age(out, v["scheduler"]["age_s"])
    return "".join(out).encode("utf-8")


def _outcomes_and_alerts(out: list, v: dict) -> None:
    _gauge(out, "dispatch_recent_jobs_finished", "The newest finished jobs (up to 1000), by final state",
           "state", v["outcomes"]["counts"].items())
    alerts = v["alerts"]
    kinds = [a["kind"] for a in alerts]
    _gauge(out, "dispatch_alerts_active", "Alerts in force, by kind", "kind",
           ((k, kinds.count(k)) for k in ALERT_KINDS))
    family(out, "dispatch_alert", "gauge", "1 for each alert in force")
    out.extend(f"dispatch_alert{labels([(k, a[k]) for k in ('kind', 'severity', 'subject')])} 1.0\n"
               for a in alerts)


def exposition(collector: ClusterCollector, v: dict | None = None, *, age: bool = True) -> bytes:
    """The text exposition format (0.0.4) of one scrape (ClusterCollector.lines' `v` and `age`)."""
    return "".join(collector.lines(v, age=age)).encode("utf-8")


class Scrape:
    """/metrics as the dashboard answers it: the text of the board's read but the scheduler's age,
    written once per read (at 1,000 nodes ~50,000 samples, ~30 ms; gzipped once, for the scrapers that
    ask), and the age as of each scrape first."""

    def __init__(self, board):
        self.board, collector = board, ClusterCollector(board)
        self._text = PerRead(lambda view: Tail(exposition(collector, view, age=False)))

    def answer(self) -> tuple[bytes, Tail]:
        """(the age's lines, the read's text): one answer is the first then the second."""
        view = self.board.view()  # a read at most a second old (else read now)
        return stats_age({**view, **self.board.as_of_now(view, self.board.timing.tick_s)}), self._text.get(view)
