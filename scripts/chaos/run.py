"""The chaos suite: short resumable jobs, submitted while servers, agents, job processes and
schedulers are killed -9 or stopped, the far node is cut off and the disk under the append-only file
fills; the verdict is read from the files the jobs' attempts write, never from dispatch's state.

    python scripts/chaos/run.py [--jobs 300] [--nodes 3] [--gpus-per-node 4] [--fault-every 2.0]
                                [--faults kind,kind,...] [--up | --netns] [--seed 1] [--json FILE]

Fault kinds (default: every one this run can make; see faults.py): server, agent, agent-redis-down,
job, scheduler, agent-stop, leader-stop, partition-down and partition-drop (--netns: root, iproute2,
tc), second-up (--up), disk-full (root: a tmpfs under the server's data dir). The server runs with the
append-only file and `dispatch up`'s everysec. --up drives a real `dispatch up` (its embedded server,
scheduler and agent) beside agents on the other nodes and a standby scheduler; without it the suite runs
every process itself and restarts the server it kills on the same port and files, as `up` would.

Each attempt writes start, a tick every 0.2 s and end to its own file (attempts.py). From those files:
lost (an acknowledged job whose no attempt ended, but one the suite killed -9 itself, which fails as the OOM
killer's would: killed_failed), doubled (two attempts that both ended), overlaps
(two attempts of one job whose [start, last tick or end] intersect), reruns; dispatch's own states
are a cross-check only. A job that ended while its node was cut off and so ran again (the
at-least-once window docs/guarantees.md names) is counted apart, not as doubled, unless --strict.
Node agents, schedulers and `up` that exit without the suite killing them are counted (and started
again a second later). Exit 1 if lost, doubled, overlaps or agents (node agents and
`up`, whose agent is inside it) that died on their own are not 0, or a fault could not be made as meant
(a partition whose far node held no job); 2 on bad flags. Schedulers that died are counted and printed.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))

import attempts  # noqa: E402
import faults  # noqa: E402
from cluster import NS, TIMING, Cluster  # noqa: E402
from hostfaults import DataDisk, NetNode  # noqa: E402
from procs import alive, become_subreaper, cmdline, descendants, reap_orphans  # noqa: E402
from report import print_report  # noqa: E402
from story import bad_jobs, story  # noqa: E402
from workers.recovery import ASSIGNED_SETTLE_MS  # noqa: E402


#: A run in which no attempt wrote a line for this long while jobs had not ended is stalled: it stops
#: there and is judged (its unfinished jobs are lost). Longer than an agent takes to put back a lost
#: launch (assigned that long, no launch left in its queue, at its next reconcile: workers/recovery.py),
#: which a 60 s stall cut short, counting as lost a job dispatch was about to requeue.
STALL_S = ASSIGNED_SETTLE_MS / 1000.0 + 30.0


class Submitter(threading.Thread):
    """Submits one job at a time at its planned second; a submit that raises is refused (not acknowledged)
    and tried again 0.3 s later as a new request."""

    def __init__(self, url: str, requests: list[dict], at: list[float], t0: float):
        super().__init__(name="submitter", daemon=True)
        self.url, self.requests, self.at, self.t0 = url, requests, at, t0
        self.acked: list[str] = []
        self.ack_s: list[float] = []
        self.refused, self.errors = 0, Counter()
        self.finished = threading.Event()
        self.stop = threading.Event()

    def run(self) -> None:
        from dispatcher.api import Client
        from dispatcher.store.connect import connect

        api = Client(self.url, ns=NS)
        api.redis = connect(self.url, check=False, socket_timeout=10, socket_connect_timeout=2)
        try:
            for req, at in zip(self.requests, self.at):
                if self.stop.wait(max(0.0, self.t0 + at - time.monotonic())):
                    return
                while not self.stop.is_set():
                    try:
                        job_id = api.submit_many([req])[0]
                    except Exception as e:  # refused: the server is down, full, or cut
                        self.refused += 1
                        self.errors[type(e).__name__] += 1
                        self.stop.wait(0.3)
                        continue
                    self.acked.append(str(job_id))
                    self.ack_s.append(time.monotonic() - self.t0)
                    break
        finally:
            self.finished.set()


def parse(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=300)
    ap.add_argument("--nodes", type=int, default=3)
    ap.add_argument("--gpus-per-node", type=int, default=4)
    ap.add_argument("--fault-every", type=float, default=2.0, help="mean seconds between faults")
    ap.add_argument("--faults", default=None, help="comma-separated kinds (default: all this run can make): "
                    + ", ".join(faults.KINDS))
    ap.add_argument("--up", action="store_true", help="drive a real `dispatch up` instead of separate processes")
    ap.add_argument("--netns", action="store_true", help="one more agent as a far host in a network namespace")
    ap.add_argument("--job-s", default="1,3", help="job durations, uniform between MIN,MAX seconds of work")
    ap.add_argument("--long-jobs", type=float, default=0.15,
                    help="the share of jobs that run --long-s instead, longer than the node timeout, so that a "
                         "copy left running on a stopped or cut-off node overlaps its rerun")
    ap.add_argument("--long-s", default="7,10", help="long jobs' durations, MIN,MAX seconds")
    ap.add_argument("--submit-s", type=float, default=None,
                    help="spread the submits over this many seconds (default: about the time the nodes need)")
    ap.add_argument("--timeout", type=float, default=600.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", default=None)
    ap.add_argument("--strict", action="store_true",
                    help="count a job that ended while its node was cut off and then ran again as doubled too")
    ap.add_argument("--keep", action="store_true", help="keep the work directory (files, logs) afterwards")
    return ap.parse_args(argv)


def choose_kinds(args) -> list[str]:
    """The kinds asked for (default: all); exits 2 on an unknown one."""
    asked = [k.strip() for k in args.faults.split(",") if k.strip()] if args.faults else list(faults.KINDS)
    for k in asked:
        if k not in faults.KINDS:
            print(f"--faults: unknown kind {k!r}; kinds: {', '.join(faults.KINDS)}", file=sys.stderr)
            sys.exit(2)
    return asked


def main(argv=None) -> int:
    args = parse(argv)
    rng = random.Random(args.seed)
    lo, hi = (float(x) for x in args.job_s.split(","))
    long_lo, long_hi = (float(x) for x in args.long_s.split(","))
    mean_s = (1 - args.long_jobs) * (lo + hi) / 2 + args.long_jobs * (long_lo + long_hi) / 2
    kinds = choose_kinds(args)
    if args.netns and args.up:
        print("--up --netns: a locked `dispatch up` serves on 127.0.0.1 alone, which the far host cannot reach; "
              "run the partitions (--netns) and the second `up` (--up) as two runs", file=sys.stderr)
        return 2
    if args.netns and NetNode.missing():
        print(f"--netns: {NetNode.missing()}", file=sys.stderr)
        return 2
    disk = "disk-full" in kinds and DataDisk.missing() is None
    base = Path(tempfile.mkdtemp(prefix="dispatch-chaos-"))
    become_subreaper()
    cluster = Cluster(base, up=args.up, nodes=args.nodes, gpus=args.gpus_per_node, netns=args.netns, disk=disk)
    not_run = {k: why for k in kinds if (why := faults.unavailable(k, cluster))}
    if args.faults and not_run:
        cluster.teardown()
        print("--faults: " + "; ".join(f"{k} {why}" for k, why in not_run.items()), file=sys.stderr)
        return 2
    kinds = [k for k in kinds if k not in not_run]
    timing = {k: float(v) for k, v in TIMING.items()}
    inj = faults.Injector(cluster, rng, kinds, timing["DISPATCH_NODE_TIMEOUT_S"], timing["DISPATCH_LEASE_S"])
    nodes_total = args.nodes + (1 if args.netns else 0)
    submit_s = args.submit_s if args.submit_s is not None else \
        args.jobs * 1.25 * (mean_s + 0.5) / (nodes_total * args.gpus_per_node)

    def seconds() -> float:
        return rng.uniform(long_lo, long_hi) if rng.random() < args.long_jobs else rng.uniform(lo, hi)

    requests = [attempts.job_request(max(1, round(seconds() / attempts.TICK_S)), rng.choice((1, 1, 1, 2)),
                                     cluster.files, base) for _ in range(args.jobs)]
    plan = sorted(rng.uniform(0, submit_s) for _ in range(args.jobs))
    died: Counter = Counter()
    result = {}
    t0 = time.monotonic()
    try:
        try:
            cluster.start()
        except Exception as e:  # the cluster never came up: nothing to judge
            print(f"chaos: {e}", file=sys.stderr)
            if args.json:
                Path(args.json).write_text(json.dumps({"error": str(e), "work_dir": str(base)}, indent=1))
            return 1
        cluster.submit_as_owner()
        sub = Submitter(cluster.url, requests, plan, time.monotonic())
        sub.start()
        print(f"chaos: {cluster.mode} mode, {args.jobs} jobs over {submit_s:.0f} s to {args.nodes} nodes of "
              f"{args.gpus_per_node} fake GPUs" + (" + 1 far node in a network namespace" if args.netns else "")
              + f"; faults every {args.fault_every:g} s on average: {', '.join(kinds)}"
              + (f" (not run: {'; '.join(f'{k} {w}' for k, w in not_run.items())})" if not_run else ""), flush=True)
        # a far node can be given work only while some is still to come or waiting to be placed
        inj.work_left = lambda: not sub.finished.is_set() or (cluster.pending() or 0) > 0
        outcome = loop(args, cluster, inj, sub, died, timing)
        sub.stop.set()
        states = cluster.states(list(sub.acked))
        cluster.stop()
        leftovers = sweep_leftovers(cluster)
        cuts = [(node, t0, t1 or time.time()) for node, t0, t1 in inj.cut_off]
        result = attempts.judge(cluster.files, list(sub.acked), states, cuts, strict=args.strict,
                                killed=inj.killed)
        result.update(outcome)
        result.update({
            "mode": cluster.mode, "jobs_requested": args.jobs, "submit_refused": sub.refused,
            "submit_errors": dict(sub.errors),
            "submits_span_s": [round(sub.ack_s[0], 1), round(sub.ack_s[-1], 1)] if sub.ack_s else None,
            "faults": dict(inj.counts), "faults_total": sum(inj.counts.values()), "fault_kinds": kinds,
            "not_run": not_run, "died_on_their_own": dict(died),
            "agents_died_on_their_own": died["agent"] + died["up"],
            "failed_checks": inj.failed_checks, "skipped": dict(inj.skipped), "findings": dict(inj.findings),
            "leftover_processes": leftovers,
            "notes": inj.notes[-40:], "seed": args.seed})
    finally:
        cluster.stop()
        cluster.teardown()
    result["wall_s"] = round(time.monotonic() - t0, 1)
    bad = bool(result.get("lost") or result.get("doubled") or result.get("overlaps")
               or result.get("agents_died_on_their_own") or result.get("failed_checks"))
    result["stories"] = {job: story(base / "logs", job) for job in bad_jobs(result)[:3]}
    result["work_dir"] = str(base) if (args.keep or bad) else None
    print_report(result)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    if not (args.keep or bad):
        shutil.rmtree(base, ignore_errors=True)
    return 1 if bad else 0


def loop(args, cluster, inj, sub: Submitter, died: Counter, timing: dict) -> dict:
    """Faults until every acknowledged job ended (in its files) and dispatch is idle; then no new faults,
    the pending undos play out, and the cluster must stay quiet for a node timeout and more."""
    rng = inj.rng
    t0 = time.monotonic()
    settle_s = timing["DISPATCH_NODE_TIMEOUT_S"] + 2.0
    next_fault = t0 + rng.expovariate(1.0 / args.fault_every)
    next_check, quiet_since, phase = t0, None, "faults"
    during_submits = 0
    wall0 = time.time()
    out = {"timed_out": False, "stalled": None}
    while True:
        now = time.monotonic()
        if now - t0 > args.timeout:
            out["timed_out"] = True
            inj.note(f"timed out after {args.timeout:g} s")
            break
        for name, role, code, tail in cluster.fleet.check():
            died[role] += 1
            inj.note(f"{name} ({role}) exited {code} on its own; started again in 1 s. Its log ends:\n{tail}")
            inj.later(1.0, cluster.fleet.restart, name)
        for name, pid in cluster.up_children_died():
            died["agent" if name == "up:agent" else "scheduler"] += 1
            inj.note(f"{name} (pid {pid}) exited on its own (`up` restarts it); see logs/up.log")
        tail = cluster.server_died()
        if tail is not None:
            inj.findings["server died on its own (restarted)"] += 1
            inj.note(f"the server exited on its own; started again. Its log ends:\n{tail}")
        reap_orphans(cluster.fleet.popen_pids() | inj.own)
        inj.run_due()
        if inj.stalled:
            out["stalled"] = inj.stalled
            break
        if phase == "faults" and now >= next_fault:
            if inj.inject() is not None and not sub.finished.is_set():
                during_submits += 1
            next_fault = now + rng.expovariate(1.0 / args.fault_every)
        if now >= next_check:
            next_check = now + 1.0
            acked = list(sub.acked)
            unended, busy = len(acked) - ended(cluster, acked, inj.killed), cluster.busy()
            done = sub.finished.is_set() and unended == 0 and busy == 0
            quiet_s = time.time() - max(last_write(cluster.files), wall0)
            if unended and quiet_s > STALL_S:
                out["stalled"] = f"no attempt wrote a line for {quiet_s:.0f} s while {unended} jobs had not ended"
                inj.note(out["stalled"])
                break
            if int(now - t0) % 5 == 0:
                inj.event(f"status: {len(acked)} acknowledged, {unended} not ended, dispatch busy {busy}, "
                          f"held {sorted(inj.held)}, {inj.pending} pending")
            if done and phase == "faults":
                phase = "drain"
                inj.note(f"every job ended at {now - t0:.0f} s; no new faults")
            if phase == "drain":
                quiet = done and inj.pending == 0 and not attempts.live(cluster.files, 1.0)
                quiet_since = (quiet_since or now) if quiet else None
                if quiet_since is not None and now - quiet_since >= settle_s:
                    break
        time.sleep(0.1)
    deadline = time.monotonic() + 60.0  # a timeout or a stall: still undo what is undone (SIGCONT, links,
    while inj.pending and time.monotonic() < deadline:  # disk, a server to restart), so that dispatch's
        inj.run_due()  # own state can be read for the cross-check
        time.sleep(0.1)
    out["faults_during_submits"] = during_submits
    return out


def last_write(files: Path) -> float:
    """When an attempt file was last written (0 before any)."""
    try:
        return max((e.stat().st_mtime for e in os.scandir(files)), default=0.0)
    except OSError:
        return 0.0


def ended(cluster, acked: list[str], killed: set[str]) -> int:
    """How many of the acknowledged jobs have ended: an attempt wrote its end, or (a job the suite killed
    -9, which fails and is not rerun) dispatch records it failed. Without the second, every run with a
    job fault waited out the stall time at its end."""
    done = {j for j, atts in attempts.read_all(cluster.files).items() if any(a.end is not None for a in atts)}
    gone = [j for j in acked if j in killed and j not in done]
    if gone:
        states = cluster.states(gone) or {}
        done |= {j for j in gone if states.get(j) == "failed"}
    return sum(1 for j in acked if j in done)


def sweep_leftovers(cluster, wait_s: float = 5.0) -> list[str]:
    """Processes still alive under the suite once everything it started was stopped: job processes that
    escaped their agent, servers nobody stopped. Listed, then killed."""
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        left = [p for p in descendants(os.getpid()) if alive(p)]
        if not left:
            return []
        time.sleep(0.2)
    out = []
    for pid in left:
        line = cmdline(pid)
        out.append(f"pid {pid}: {'a chaos job' if attempts.MARK in line else line[:120]}")
        try:
            os.kill(pid, 9)
        except ProcessLookupError:
            pass
    return out


if __name__ == "__main__":
    sys.exit(main())
