"""The operators' view of a cluster, read from Redis: what the dashboard, `dispatch top` and
/metrics show. Read-only: nothing here writes.

One Board serves any number of viewers: the cluster is read (the nodes and running jobs the
leader published, store/cluster.py, or read here when none publishes; the queue as the leader
summarised it; with the scheduler's node timeout, Timing.from_env unless given) at most once per
`ttl_s`, and no view is answered from a read older than that: past it the next viewer waits for a
new read, shared by all who ask meanwhile (views/fresh.py). A long queue is paged, never sent whole.
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections import Counter

from .alerts import evaluate
from .capacity import capacity
from ..store.stats import is_stale
from .fresh import Fresh, PerRead
from .gzipped import Tail, gzip_join
from ..clock import now_ms
from ..config import Timing
from ..scheduler.policy_source import local_weekday_minute, published_policy
from ..core.arrays import label
from ..core.model import FINAL_STATES, PRIORITIES
from ..policy.score import dominant_share
from ..store import cluster, keys
from ..store import stats as published
from ..store.connect import tolerant
from ..store.decisions import read_decisions
from ..store.naming import record_id
from ..store.jobs import index_window, read_jobs, read_log_tail
from ..store.quarantine import valid_name
from ..store.samples import figures, holders, node_use, read_samples
from ..store.snapshot import read_snapshot
from ..store.spec_cache import SpecCache

#: Finished jobs the success/failure counts cover (the newest ones).
OUTCOMES_WINDOW = 1000
#: The oldest publication of the nodes and running jobs (store/cluster.py) the board shows; past it
#: (no leader runs, or it stalls) the board reads them itself.
PUBLISHED_FRESH_MS = 5000
#: The longest a job page's what-if run (?fresh=1) may take.
WHAT_IF_S = 20.0
#: Lines of a job's output its page shows.
LOG_TAIL_LINES = 200


def _holder(jobs: list, warned: dict) -> tuple:
    """What a held GPU shows of the jobs holding it: (job ids, users, shared, the idle warning and its
    time when every holder has one)."""
    idle = [warned[r.spec.id] for r in jobs if r.spec.id in warned]
    every = len(idle) == len(jobs)
    return (",".join(r.spec.id for r in jobs), sorted({r.spec.user for r in jobs}), any(r.spec.share for r in jobs),
            idle[0][0] if every else None, _secs(idle[0][1]) if every else None)


def _secs(ms: int) -> float | None:
    """Epoch seconds from a record's *_ms (job_record: 0 when absent or bad); None for none."""
    return ms / 1000.0 if ms else None


class Board:
    def __init__(self, client, ns: str, *, timing: Timing | None = None,
                 ttl_s: float = 1.0):
        self.client, self.ns = client, ns
        self.timing = timing or Timing.from_env()
        self._specs = SpecCache()
        self._specs_lock = threading.Lock()
        #: (the read, its overview): one read serves every view for ttl_s at most, then is read again
        self._read = Fresh(ttl_s, lambda: self._overview(self._read_cluster()))
        #: the overview's JSON, encoded once per read by the first /api/board that asks for it
        self._json = PerRead(self._encode)

    # -- reading ---------------------------------------------------------------------------
    def _read_cluster(self) -> dict:
        """The nodes and the running jobs as the leader published them (store/cluster.py: one value,
        O(nodes)), or read here when no leader has published lately; and the queue as the leader
        published it at its last full cycle (scheduler/summary.py): never the pending jobs one by one."""
        now = now_ms()
        seen = cluster.read(self.client, self.ns)
        if seen is None or now - seen.at_ms > PUBLISHED_FRESH_MS:  # no leader: read the nodes and jobs here
            with self._specs_lock:
                read = read_snapshot(self.client, self.ns, now, self.timing.node_timeout_s, self._specs,
                                     with_pending=False)
            seen = cluster.Published(now, sorted(read.nodes, key=lambda n: n.name), list(read.snapshot.running),
                                     cluster.read_idle(self.client, self.ns, {r.spec.id for r in read.snapshot.running}))
        indexed = tolerant(lambda: self.client.zcard(keys.jobs_pending(self.ns)), 0)
        stats = published.read(self.client, self.ns)
        running = sorted(seen.running, key=lambda r: (-r.spec.rank, r.started_ms, int(r.spec.id)))
        policy, _ = published_policy(self.client, self.ns)
        _, config = policy.config_at(*local_weekday_minute(now / 1000.0))
        queue = stats["queue"]
        return {"now_ms": now, "nodes": seen.nodes, "nodes_at_ms": seen.at_ms, "running": running,
                "taken": holders(running), "use": node_use(running),
                "queue": {**queue, "classes": pending_spells(self.client, self.ns, queue["classes"])},
                "stats": stats, "indexed": indexed if isinstance(indexed, int) else 0,
                "idle": seen.idle, "config": config, "alerts": policy.alerts}

    def _read_outcomes(self) -> dict:
        """Counts of the newest finished jobs by state (the ends the leader saw: store/cluster.py), and
        their most common reasons."""
        ends = cluster.recent_ends(self.client, self.ns)[:OUTCOMES_WINDOW]
        counts, reasons = Counter(), Counter()
        for e in ends:
            if e["state"] not in FINAL_STATES:
                continue
            counts[e["state"]] += 1
            if e["state"] != "succeeded":
                code = e["exit_code"]
                why = e["reason"] or (f"exit code {code}" if code is not None else "no reason recorded")
                reasons[(e["state"], why[:120])] += 1
        return {"window": sum(counts.values()), "counts": {s: counts.get(s, 0) for s in FINAL_STATES},
                "reasons": [{"state": s, "reason": r, "count": n} for (s, r), n in reasons.most_common(8)]}

    # -- the views -----------------------------------------------------------------------------
    def overview(self) -> dict:
        """Everything on the dashboard's front page but the job list: small whatever the queue's length.
        From a read at most ttl_s old (else read now); its `now` and the scheduler's `age_s` are those of
        this call, so the scheduler's figures show their age."""
        view = self.view()
        return {**view, **self.as_of_now(view, self.timing.tick_s)}

    def view(self) -> dict:
        """The overview as read: the same dict for every caller until the next read (its `now` and
        scheduler age are the read's; overview() gives them as of the call)."""
        return self._read.get()[1]

    def overview_json(self, gzip: bool = False) -> bytes:
        """overview() as JSON, what /api/board answers: the read's part is encoded once per read (1.8 MB
        at 1,000 nodes, ~40 ms; gzipped, ~60 KB, once too: views/gzipped.py), and each call adds only
        its `now` and the scheduler's age."""
        view = self.view()
        tail = self._json.get(view)
        head = json.dumps(self.as_of_now(view, self.timing.tick_s), separators=(",", ":")).encode()[:-1] + b","
        return gzip_join(head, tail) if gzip else head + tail.data

    @staticmethod
    def _encode(view: dict) -> Tail:
        """The read's part of /api/board's JSON (all but `now` and the scheduler, less its opening brace)."""
        rest = {k: v for k, v in view.items() if k not in ("now", "scheduler")}
        return Tail(json.dumps(rest, separators=(",", ":")).encode()[1:])

    @staticmethod
    def as_of_now(view: dict, tick_s: float) -> dict:
        """`now` and the scheduler's figures with their age, and whether that is stale (stats.is_stale:
        the page greys out, top says so), as of this call."""
        s, now = view["scheduler"], time.time()
        age_s = round(now - s["at"], 1) if s["at"] else None
        return {"now": now, "scheduler": {**s, "age_s": age_s, "stale": is_stale(age_s, tick_s)}}

    def _overview(self, c: dict) -> tuple[dict, dict]:
        """(the read, the overview built from it and the few values read beside it)."""
        now, q = c["now_ms"], c["queue"]
        view = {"now": now / 1000.0, "namespace": self.ns, "scheduler": self._scheduler(c["stats"], now),
                "classes": self._classes(c, now), "nodes": self._nodes(c, now),
                "decisions": read_decisions(self.client, self.ns, limit=20), "usage": self._usage(c),
                "outcomes": self._read_outcomes()}
        f = figures(c["nodes"], c["running"], now, self.timing.node_timeout_s, q["requests"],
                    c["config"].idle_util_pct, taken=c["taken"], use=c["use"])
        # the queue as the leader last counted it, so the total is the sum of the class and user rows (held
        # jobs, by dependencies or `dispatch hold`, in both); the pending index's size when none has
        pending = sum(k["pending"] + k["held"] for k in q["classes"].values()) if c["stats"]["at_ms"] else c["indexed"]
        view["totals"] = {"nodes": len(c["nodes"]), "nodes_dead": sum(1 for n in view["nodes"] if not n["alive"]),
                          "gpus": f["gpus"], "held": f["held"], "blocked": f["blocked"], "util_pct": f["util_pct"],
                          "frag": f["frag"], "idle_held": len(f["idle"]), "free": f["free"], "stranded": f["stranded"],
                          "pending": pending, "jobs_held": sum(k["held"] for k in q["classes"].values()),
                          "running": len(c["running"])}
        view["capacity"] = capacity(c["nodes"], c["running"], now, self.timing.node_timeout_s, taken=c["taken"],
                                    use=c["use"], stranded=f["stranded_at"])  # (the tile's own count, by model)
        # the wait alerts count the oldest jobs the leader listed (OLDEST_KEPT a class), each from when it
        # became pending (pending_spells: a requeued job's run is no wait)
        waits = {cls: [(now - t) / 1000.0 for t, _ in k["waiting"]] for cls, k in q["classes"].items()}
        window_s = c["alerts"].low_util_for_s + 60
        samples = read_samples(self.client, self.ns, int(now - window_s * 1000))
        view["alerts"] = evaluate(view, waits, samples, c["alerts"], now)
        return c, view

    @staticmethod
    def _scheduler(stats: dict, now: int) -> dict:
        def num(k, kind=int):
            return kind(stats.get(k) or 0)

        at = num("at_ms")
        return {"holder": stats.get("holder") or "", "at": at / 1000.0 if at else None, "cycles": num("cycles"),
                "placed": num("placed"), "preempted": num("preempted"), "requeued_lost": num("requeued_lost"),
                "cycle_ms": num("cycle_ms", float), "age_s": round((now - at) / 1000.0, 1) if at else None}

    @staticmethod
    def _classes(c: dict, now: int) -> list[dict]:
        out = []
        for cls in reversed(PRIORITIES):
            k = c["queue"]["classes"].get(cls) or {"pending": 0, "held": 0, "gpus_pending": 0, "oldest": [],
                                                  "reasons": [], "waiting": []}
            oldest = k["waiting"][0] if k["waiting"] else None
            out.append({"class": cls, "pending": k["pending"] + k["held"], "held": k["held"],
                        "running": sum(1 for r in c["running"] if r.spec.priority == cls),
                        "gpus": sum(len(r.gpus) for r in c["running"] if r.spec.priority == cls),
                        "gpus_pending": k["gpus_pending"],
                        "oldest_wait_s": round((now - oldest[0]) / 1000.0, 1) if oldest else 0.0,
                        "oldest_job": oldest[1] if oldest else None,
                        "reasons": [{"reason": r, "count": n} for r, n in k["reasons"]]})
        return out

    def _nodes(self, c: dict, now: int) -> list[dict]:
        """A row per node, a cell per GPU: 8,000 GPUs a read at 1,000 nodes, so one dict literal per GPU
        and what GPUs share (a job's holder cell, a model's short name) made once."""
        taken, warned, timeout_s = c["taken"], c["idle"], self.timing.node_timeout_s
        holding: dict[str, tuple] = {}  # a job's cell values, shared by the GPUs it holds alone
        short: dict[str, str] = {}  # "NVIDIA A100-SXM4-80GB" -> "A100-SXM4-80GB"
        out = []
        for n in c["nodes"]:
            alive, name = n.alive(now, timeout_s), n.name
            gpus = []
            for g in n.gpus:
                jobs = taken.get((name, g.index))
                if jobs:
                    key = jobs[0].spec.id if len(jobs) == 1 else None  # a GPU shared by jobs: not kept
                    held = holding.get(key) if key is not None else None
                    if held is None:
                        held = _holder(jobs, warned)
                        if key is not None:
                            holding[key] = held
                    job, users, shared, idle, idle_since = held
                    state = "dead" if not alive else "blocked" if g.blocked else "held"
                else:
                    job, users, shared, idle, idle_since = None, [], False, None, None
                    state = "dead" if not alive else "blocked" if g.blocked else "drained" if n.drain else "free"
                model = short.get(g.name)
                if model is None:
                    model = short[g.name] = g.name.replace("NVIDIA ", "")
                gpus.append({"index": g.index, "name": model, "util_pct": g.util_pct, "mem_used_gb": g.mem_used_gb,
                             "mem_total_gb": g.mem_total_gb, "job": job, "users": users, "shared": shared,
                             "idle": idle, "idle_since": idle_since, "blocked": g.blocked or None, "state": state})
            out.append({"name": name, "alive": alive, "seen_s_ago": round((now - n.seen_ms) / 1000.0, 1),
                        "cpus": n.cpus, "mem_gb": n.mem_gb, "gpus": gpus,
                        "drain": None if n.drain is None else {"reason": n.drain.reason, "by": n.drain.by}})
        return out

    def _usage(self, c: dict) -> dict:
        """GPUs, CPUs and memory held by each user and team; each user's dominant share against the
        equal share DRF aims at (1 / users with work), each team's against its guarantee and limit."""
        live = [n for n in c["nodes"] if n.alive(c["now_ms"], self.timing.node_timeout_s)]
        total = (sum(len([g for g in n.gpus if not g.blocked]) for n in live), sum(n.cpus for n in live),
                 sum(n.mem_gb for n in live))
        users: dict[str, dict] = {}
        teams: dict[str, dict] = {}
        for r in c["running"]:
            for row in (users.setdefault(r.spec.user, {"team": r.spec.team}), teams.setdefault(r.spec.team, {})):
                row["gpus"] = row.get("gpus", 0) + len(r.gpus)
                row["cpus"] = row.get("cpus", 0) + r.spec.cpus
                row["mem_gb"] = row.get("mem_gb", 0.0) + r.spec.mem_gb
                row["running"] = row.get("running", 0) + 1
        for user, team, n, gpus in c["queue"]["users"]:
            for row in (users.setdefault(user, {"team": team}), teams.setdefault(team, {})):
                row["pending"] = row.get("pending", 0) + n
                row["gpus_pending"] = row.get("gpus_pending", 0) + gpus
        config = c["config"]
        for t in config.teams:
            teams.setdefault(t, {})
        fair = 1.0 / len(users) if users else 0.0
        user_rows = []
        for name, u in users.items():
            used = (u.get("gpus", 0), u.get("cpus", 0), u.get("mem_gb", 0.0))
            user_rows.append({"user": name, "team": u["team"], "gpus": used[0], "cpus": used[1],
                              "mem_gb": round(used[2], 1), "running": u.get("running", 0),
                              "pending": u.get("pending", 0), "gpus_pending": u.get("gpus_pending", 0),
                              "share": round(dominant_share(used, total), 3), "fair_share": round(fair, 3)})
        team_rows = []
        for name, t in teams.items():
            q = config.teams.get(name)
            team_rows.append({"team": name or "(none)", "gpus": t.get("gpus", 0), "running": t.get("running", 0),
                              "pending": t.get("pending", 0), "gpus_pending": t.get("gpus_pending", 0),
                              "guarantee": q.guarantee_gpus if q else None, "limit": q.limit_gpus if q else None})
        return {"total": {"gpus": total[0], "cpus": total[1], "mem_gb": total[2]},
                "users": sorted(user_rows, key=lambda u: (-u["share"], u["user"])),
                "teams": sorted(team_rows, key=lambda t: (-t["gpus"], t["team"]))}

    def queue_page(self, state: str = "pending", cls: str = "", page: int = 0, per: int = 50) -> dict:
        """One page of the pending (or active) jobs; each job's full record, its wait and why it waits.
        Pending jobs of every class are paged through the pending index, oldest first (as `dispatch
        queue`); of one class, through the oldest the leader listed of it (scheduler/summary.OLDEST_KEPT),
        longest wait first, then the oldest of its held ones, `total` counting them all. Running jobs: highest class first."""
        c = self._read.get()[0]
        now, per = c["now_ms"], max(1, min(per, 200))
        if state == "pending" and not cls:
            total = listed = c["indexed"]
            pages = max(1, -(-total // per))
            page = max(0, min(page, pages - 1))
            got = tolerant(lambda: index_window(self.client, keys.jobs_pending(self.ns), page * per, per), [])
            chosen = [(int(t) if math.isfinite(t) else now, j) for j, t in got if valid_name(j)]
        else:
            if state == "pending":
                k = c["queue"]["classes"].get(cls) or {}  # (held ones after the others, as the class row counts)
                rows = list(k.get("oldest", [])) + list(k.get("held_oldest", []))
                total = k.get("pending", 0) + k.get("held", 0)
            else:
                jobs = [r for r in c["running"] if not cls or r.spec.priority == cls]
                rows, total = [(r.started_ms, r.spec.id) for r in jobs], len(jobs)
            listed = len(rows)
            pages = max(1, -(-listed // per))
            page = max(0, min(page, pages - 1))
            chosen = rows[page * per:(page + 1) * per]
        views = read_jobs(self.client, self.ns, [j for _, j in chosen])
        since = {j: t for t, j in chosen}
        for v in views:
            v["wait_s" if state == "pending" else "run_s"] = round((now - since[v["id"]]) / 1000.0, 1)
        if state == "pending":
            rest = c["stats"]["rest_reason"] or "not judged yet"
            for v in views:
                v["reason"] = v["reason"] or rest
        return {"state": state, "class": cls, "total": total, "listed": listed, "page": page, "pages": pages,
                "per": per, "jobs": views}

    def history(self, hours: float = 6.0) -> list[dict]:
        """The recorded samples of the last `hours`, without the lists of idle GPUs."""
        samples = read_samples(self.client, self.ns, int(now_ms() - hours * 3600 * 1000))
        return [{k: v for k, v in s.items() if k != "idle"} for s in samples]

    def job(self, job_id: str, fresh: bool = False) -> dict:
        """A job's page: `dispatch why` (its record, attempts, score and blocking reason, the
        decisions about it: as the scheduler recorded them, or with `fresh` a what-if run, kept until
        the scheduler's next cycle), a timeline, and the tail of its output; `label`, the job as people
        name it. `job_id` as the CLI takes it (an array's element as 12_5 too). JobNotFound for a bad id."""
        from .explain import decision_words, recorded, what_if

        job_id = record_id(self.client, self.ns, job_id)
        out = what_if(self.client, self.ns, job_id, WHAT_IF_S, self.timing) if fresh else \
            recorded(self.client, self.ns, job_id, self.timing)
        job = out["job"]
        out["label"] = label(job)
        events = [(job[k], what) for k, what in (("submitted_at", "submitted"), ("assigned_at", "assigned"),
                                                  ("started_at", "started"), ("checkpoint_at", "checkpoint"),
                                                  ("last_preempted_at", "preempted"), ("finished_at", job["state"]),
                                                  ("requeued_at", f"requeued by {job.get('requeued_by')}"),
                                                  ("cancel_requested_at", f"cancel sent to its node (grace "
                                                                          f"{job.get('grace_s') or 0:g}s)"))
                  if job.get(k)]
        for a in job["attempts"]:
            if a.get("ended_at"):
                events.append((a["ended_at"], f"attempt {a['attempt']} {a['outcome']} on {a['node'] or '-'}"
                                              + (f": {a['reason']}" if a["reason"] else "")))
        for d in out["decisions"]:
            d["words"] = decision_words(d, job_id)
            events.append((d["time"], d["words"]))
        out["timeline"] = [{"t": t, "what": w} for t, w in sorted(events, key=lambda e: e[0])]
        _, tail = tolerant(lambda: read_log_tail(self.client, self.ns, job_id, LOG_TAIL_LINES), ("-", b""))
        out["log_tail"] = "\n".join(tail.decode(errors="replace").splitlines())
        return out


def pending_spells(client, ns: str, classes: dict) -> dict:
    """Each class's summary with `waiting`: its oldest jobs as (when it became pending, id), longest
    first. The leader lists them by the time their wait counts from, which for a job requeued with its
    place kept (a preemption) is its submit: its run would count as waiting, and a critical job
    preempted after 10 minutes would raise the wait alert at once. Those that ran before (`reran`) count
    from their last attempt's end (one LINDEX each, pipelined)."""
    from ..store.jobs import attempt_view

    reran = [j for k in classes.values() for j in k.get("reran", ())]
    ended = {}
    if reran:
        pipe = client.pipeline(transaction=False)
        for job_id in reran:
            pipe.lindex(keys.job_attempts(ns, job_id), -1)
        for job_id, raw in zip(reran, tolerant(lambda: pipe.execute(raise_on_error=False), [None] * len(reran))):
            at = attempt_view(raw).get("ended_at") if isinstance(raw, bytes) else None
            if at:
                ended[job_id] = int(at * 1000)
    return {cls: {**k, "waiting": sorted(((max(t, ended.get(j, t)), j) for t, j in k["oldest"]))}
            for cls, k in classes.items()}

