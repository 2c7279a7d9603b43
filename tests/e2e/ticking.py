"""Jobs that write each attempt's life to a file of their own, for the tests of what runs where and
how often when agents, links and servers fail: every attempt writes start, ticks and end to
$OUT/<job>.<attempt>.<node>.<pid>; overlaps and reruns are judged from those files."""

from __future__ import annotations

from pathlib import Path

from dispatcher.store.jobs import read_job

FAST = {"DISPATCH_HEARTBEAT_S": "0.5", "DISPATCH_NODE_TIMEOUT_S": "5"}

#: An attempt of `ticks` x 0.2 s, each line with the time, in $OUT/<job>.<attempt>.<node>.<pid>.
TICKING = ('f="$OUT/$DISPATCH_JOB_ID.$DISPATCH_ATTEMPT.$DISPATCH_NODE.$$"; echo "start $(date +%s.%N)" >> "$f"; '
           'i=0; while [ $i -lt {ticks} ]; do echo "tick $(date +%s.%N)" >> "$f"; sleep 0.2; i=$((i+1)); done; '
           'echo "end $(date +%s.%N)" >> "$f"')


def attempts(out: Path, job_id: str) -> list[dict]:
    """Each attempt of the job: its node, first and last time seen alive, and whether it ended."""
    found = []
    for f in sorted(out.glob(f"{job_id}.*")):
        rows = [line.split() for line in f.read_text().splitlines() if len(line.split()) == 2]
        if rows:
            found.append({"node": f.name.split(".")[2], "first": float(rows[0][1]), "last": float(rows[-1][1]),
                          "ended": rows[-1][0] == "end"})
    return sorted(found, key=lambda a: a["first"])


def overlaps(runs: list[dict]) -> list[tuple]:
    return [(a["node"], b["node"], round(a["last"] - b["first"], 2))
            for i, a in enumerate(runs) for b in runs[i + 1:] if b["first"] < a["last"]]


def wait_running(cli, client, job_id, timeout=30):
    return cli.wait_for(lambda: (lambda j: j if j["state"] == "running" else None)(read_job(client, cli.ns, job_id)),
                        timeout=timeout, what=f"job {job_id} to run")
