"""The chaos suite's job and its judge: what every attempt writes, and the verdict read from it alone.

Each attempt of a job writes its own file, `$CHAOS_DIR/<job>.<attempt>.<node>.<pid>`:

    start <wall-clock time>
    tick <time> <work done>        every TICK_S while it works
    end <time>                     once it ran to completion

Work is counted in ticks and checkpointed to `$CHAOS_DIR/<job>.ckpt` (a shared file system, as a lab's
checkpoints are), so a resumed attempt skips work done before; it still writes start, ticks and end,
so every rerun, even of a job that had already ended, leaves a file. Every process of the suite runs
on this one machine, so every time stamp comes from one clock.

The verdict (judge) reads only these files, never dispatch's state:
- lost: an acknowledged job with no attempt that wrote `end`, but one the suite itself killed -9 (`killed`)
  and that dispatch then calls failed: a SIGKILL dispatch did not send fails the job once, as the OOM
  killer's does (docs/guarantees.md), counted as `killed_failed`;
- doubled: a job with two attempts that both wrote `end` (ran to completion twice; also counted apart:
  those whose later ends did no work, resumed from a checkpoint that held it all);
- overlap: two attempts of one job whose spans [start, end or last tick] intersect; a killed attempt's
  span ends at its last tick, so a copy that was killed before its end still counts.
Dispatch's own view (each job's state) is only a cross-check beside it.

One window is counted apart (docs/guarantees.md: "the one at-least-once window left"): a job whose
earlier ends all fell while their own node was cut off from Redis (a partition the suite made, given
as `cut_off` windows) ran again because no one could hear it finish. Such a job is
`doubled_in_a_cut`, not `doubled`, unless `strict`; an overlap is an overlap in any window.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path

TICK_S = 0.2
#: $0 of every job's shell; the suite kills only processes that carry it.
MARK = "chaos-job"

JOB = r'''f="$CHAOS_DIR/$DISPATCH_JOB_ID.$DISPATCH_ATTEMPT.$DISPATCH_NODE.$$"
c="$CHAOS_DIR/$DISPATCH_JOB_ID.ckpt"
now() { t=$EPOCHREALTIME; t=${t/,/.}; }
now; echo "start $t" >> "$f"
k=0
[ -f "$c" ] && read -r k < "$c"
case "$k" in ''|*[!0-9]*) k=0 ;; esac
while [ "$k" -lt "$1" ]; do
  sleep %(tick)s
  k=$((k + 1))
  now; echo "tick $t $k" >> "$f"
  echo "$k" > "$c"
done
now; echo "end $t" >> "$f"
''' % {"tick": TICK_S}


def job_request(ticks: int, gpus: int, files: Path, cwd: Path) -> dict:
    """A submit request (Client.submit_many's dict) for a job of `ticks` ticks of work."""
    return {"command": ["bash", "-c", JOB, MARK, str(ticks)], "gpus": gpus, "checkpointable": True,
            "retries": 20, "cwd": str(cwd), "env": {"CHAOS_DIR": str(files)}}


@dataclass
class Attempt:
    job: str
    attempt: int
    node: str
    pid: int
    start: float | None = None
    last: float | None = None  # the last tick, or the end
    end: float | None = None
    ticks: int = 0
    path: Path | None = field(default=None, repr=False)

    @property
    def span(self) -> tuple[float, float] | None:
        if self.start is None:
            return None
        return self.start, max(self.start, self.last or self.start)


def parse_name(name: str) -> tuple[str, int, str, int] | None:
    """`<job>.<attempt>.<node>.<pid>` (node names may hold dots) -> its parts, else None."""
    parts = name.split(".")
    if len(parts) < 4 or not parts[1].isdigit() or not parts[-1].isdigit():
        return None
    return parts[0], int(parts[1]), ".".join(parts[2:-1]), int(parts[-1])


def read_attempt(path: Path) -> Attempt | None:
    parts = parse_name(path.name)
    if parts is None:
        return None
    a = Attempt(*parts, path=path)
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return a
    for line in lines:
        words = line.split()
        if len(words) < 2:
            continue  # a line torn by a kill
        try:
            at = float(words[1])
        except ValueError:
            continue
        if words[0] == "start" and a.start is None:
            a.start = at
        elif words[0] == "tick":
            a.ticks += 1
            a.last = max(a.last or at, at)
        elif words[0] == "end":
            a.end = at
            a.last = max(a.last or at, at)
    return a


def read_all(files: Path) -> dict[str, list[Attempt]]:
    """Every attempt file under `files`, by job id, each job's attempts in order of start."""
    out: dict[str, list[Attempt]] = {}
    try:
        names = os.listdir(files)
    except OSError:
        return out
    for name in names:
        a = read_attempt(files / name)
        if a is not None:
            out.setdefault(a.job, []).append(a)
    for attempts in out.values():
        attempts.sort(key=lambda a: (a.start is None, a.start or 0.0, a.attempt, a.pid))
    return out


def live(files: Path, within_s: float = 1.0, now: float | None = None) -> list[Attempt]:
    """Attempts working right now: no end yet, and a line written within `within_s`."""
    now = time.time() if now is None else now
    out = []
    for attempts in read_all(files).values():
        for a in attempts:
            if a.end is None and a.span is not None and now - a.span[1] <= within_s:
                out.append(a)
    return out


def overlapping(attempts: list[Attempt]) -> list[tuple[Attempt, Attempt, float]]:
    """Pairs of attempts whose spans intersect, with the seconds they share."""
    spans = [(a, a.span) for a in attempts if a.span is not None]
    out = []
    for i, (a, sa) in enumerate(spans):
        for b, sb in spans[i + 1:]:
            shared = min(sa[1], sb[1]) - max(sa[0], sb[0])
            if shared > 0:
                out.append((a, b, shared))
    return out


def _name(a: Attempt) -> str:
    return f"attempt {a.attempt} on {a.node} (pid {a.pid})"


def judge(files: Path, acknowledged: list[str], states: dict[str, str] | None = None,
          cut_off: list | None = None, strict: bool = False, killed: set[str] = frozenset()) -> dict:
    """The verdict from the attempt files alone; `states` (job id -> dispatch's state, None where it could
    not be read) feeds the cross-check, and tells a job the suite killed (`killed`) that failed for it
    from a lost one. `cut_off`: (node, from, to) wall-clock windows in which a node was partitioned off."""
    def in_cut(a: Attempt) -> bool:
        return any(node == a.node and t0 <= a.end <= t1 for node, t0, t1 in cut_off or ())

    by_job = read_all(files)
    acked = set(acknowledged)
    lost, doubled, doubled_cut, overlaps, pairs, shared_max = [], [], [], [], 0, 0.0
    killed_failed = [j for j in acknowledged if j in killed and (states or {}).get(j) == "failed"]
    reruns, redone_none = 0, 0
    for j in acknowledged:
        attempts = by_job.get(j, [])
        reruns += max(0, len(attempts) - 1)
        ended = [a for a in attempts if a.end is not None]
        if not ended and j not in killed_failed:
            said = f"; dispatch says {states.get(j) or 'nothing'}" if states is not None else ""
            lost.append(f"{j}: {len(attempts)} attempts, none ended{said}")
        if len(ended) > 1:
            line = f"{j}: ended {len(ended)} times: " + ", ".join(_name(a) for a in ended)
            if not strict and all(in_cut(a) for a in ended[:-1]):
                doubled_cut.append(line + " (the first ended while its node was cut off)")
            else:
                doubled.append(line)
                if not any(a.ticks for a in ended[1:]):
                    redone_none += 1
        over = overlapping(attempts)
        if over:
            pairs += len(over)
            worst = max(over, key=lambda o: o[2])
            shared_max = max(shared_max, worst[2])
            overlaps.append(f"{j}: {_name(worst[0])} and {_name(worst[1])} ran together {worst[2]:.2f} s"
                            + (f" (+{len(over) - 1} more pairs)" if len(over) > 1 else ""))
    succeeded = sum(1 for j in acknowledged if any(a.end is not None for a in by_job.get(j, [])))
    result = {"jobs": len(acknowledged), "succeeded": succeeded, "lost": len(lost), "doubled": len(doubled),
              "killed_failed": len(killed_failed),
              "doubled_from_full_checkpoint": redone_none, "doubled_in_a_cut": len(doubled_cut),
              "overlaps": len(overlaps), "overlap_pairs": pairs, "overlap_max_s": round(shared_max, 2),
              "reruns": reruns, "attempts": sum(len(by_job.get(j, [])) for j in acknowledged),
              "unacknowledged_jobs_that_ran": len(set(by_job) - acked),
              "lost_jobs": lost[:10], "doubled_jobs": doubled[:10], "overlap_jobs": overlaps[:10],
              "doubled_in_a_cut_jobs": doubled_cut[:10]}
    result["dispatch_agrees"] = cross_check(by_job, acknowledged, states)
    return result


def cross_check(by_job: dict[str, list[Attempt]], acknowledged: list[str], states: dict | None) -> dict:
    """Where dispatch's own state disagrees with the files: a job it calls succeeded that never ended in
    its files, or one that ended there that it does not call succeeded."""
    if states is None:
        return {"checked": False, "why": "dispatch's state could not be read"}
    says_not, says_yes, unknown = [], [], []
    for j in acknowledged:
        ended = any(a.end is not None for a in by_job.get(j, []))
        state = states.get(j)
        if state is None or state == "":
            unknown.append(j)
        elif ended and state != "succeeded":
            says_not.append(f"{j}: {state}")
        elif not ended and state == "succeeded":
            says_yes.append(j)
    return {"checked": True, "agrees": not (says_not or says_yes or unknown),
            "ended_but_not_succeeded": len(says_not), "succeeded_but_never_ended": len(says_yes),
            "unknown_to_dispatch": len(unknown),
            "examples": (says_not[:5] + [f"{j}: succeeded, no end" for j in says_yes[:5]]
                         + [f"{j}: no record" for j in unknown[:5]])}
