"""A bad job's story: the lines of the run's logs that name it, with the faults injected meanwhile, in
time order. The report prints it for each lost, doubled or overlapping job, so that a failure seen once
(in CI, whose work dir is gone) still says what happened to it."""

from __future__ import annotations

import re
import time
from datetime import datetime
from pathlib import Path

#: A dispatch log line: "2026-12-06 23:40:15,793 dispatch.agent INFO message".
_LINE = re.compile(r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) \S+ (\S+) (.*)")
#: A faults.log line: "<epoch seconds> <event>".
_FAULT = re.compile(r"(\d+\.\d+) (.*)")


def _events(logs: Path) -> list[tuple[float, str, str]]:
    """(time, source, text) of every timed line in the run's logs."""
    out = []
    for path in sorted(logs.glob("*.log")):
        source = path.stem
        try:
            lines = path.read_text(errors="replace").splitlines()
        except OSError:
            continue
        for line in lines:
            if source == "faults":
                m = _FAULT.match(line)
                if m:
                    out.append((float(m.group(1)), source, m.group(2)))
                continue
            m = _LINE.match(line)
            if m:
                at = datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
                out.append((at, source, f"{m.group(2)} {m.group(3)}"))
    out.sort(key=lambda e: e[0])
    return out


def _names(job: str, text: str) -> bool:
    """Whether a log line is about `job`: "job 73", or 73 in a list of ids ("...: 9, 73, 55")."""
    return bool(re.search(rf"\bjobs? {job}\b", text)) or bool(
        re.search(rf"(?:jobs?|run|requeued)\b[^:]*: (?:[\d, ]*, )?{job}(?:,|$)", text))


def story(logs: Path, job: str, limit: int = 30) -> list[str]:
    """The lines about `job`, and the faults injected between its first and last, oldest first (the last
    `limit` of them)."""
    events = _events(logs)
    mine = [i for i, (_, source, text) in enumerate(events) if source != "faults" and _names(job, text)]
    if not mine:
        return [f"job {job}: no log line names it"]
    first, last, named = events[mine[0]][0], events[mine[-1]][0], set(mine)
    keep = [e for i, e in enumerate(events) if i in named
            or e[1] == "faults" and first <= e[0] <= last and not e[2].startswith("status:")]
    return [f"{time.strftime('%H:%M:%S', time.localtime(at))}.{int(at * 1000) % 1000:03d} {source}: {text[:220]}"
            for at, source, text in keep[-limit:]]


def bad_jobs(r: dict) -> list[str]:
    """The ids of the jobs the verdict found lost, doubled or overlapping (their lines start "<id>: ")."""
    out = []
    for key in ("lost_jobs", "doubled_jobs", "overlap_jobs"):
        for line in r.get(key) or []:
            job = str(line).split(":", 1)[0].strip()
            if job.isdigit() and job not in out:
                out.append(job)
    return out
