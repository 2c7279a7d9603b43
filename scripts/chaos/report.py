"""The chaos suite's printed report: what was done to the cluster, and the verdict from the files."""

from __future__ import annotations

import sys


def _counts(d: dict) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(d.items())) or "none"


def print_report(r: dict, out=sys.stdout) -> None:
    if "jobs" not in r:
        print("chaos: the run stopped before it could be judged", file=out)
        return
    span = r.get("submits_span_s")
    print(f"submits: {r['jobs']} acknowledged of {r['jobs_requested']}"
          + (f", from {span[0]} s to {span[1]} s" if span else "")
          + f"; {r['submit_refused']} refused on the way ({_counts(r['submit_errors'])})", file=out)
    print(f"faults: {r['faults_total']} ({_counts(r['faults'])}); {r.get('faults_during_submits', 0)} of them "
          f"while submits were still arriving", file=out)
    if r.get("skipped"):
        print(f"faults given up: {_counts(r['skipped'])}", file=out)
    if r.get("not_run"):
        print(f"fault kinds not run: {_counts(r['not_run'])}", file=out)
    print(f"verdict, from the attempt files: jobs {r['jobs']}, succeeded {r['succeeded']}, failed as the suite "
          f"killed them {r['killed_failed']}, lost {r['lost']}, "
          f"doubled {r['doubled']} ({r['doubled_from_full_checkpoint']} of them rerun from a full checkpoint; "
          f"apart: {r['doubled_in_a_cut']} that ended while cut off and ran again), "
          f"overlaps {r['overlaps']} ({r['overlap_pairs']} pairs, longest "
          f"{r['overlap_max_s']} s), reruns {r['reruns']}; agents that died on their own "
          f"{r['agents_died_on_their_own']} (every process: {_counts(r['died_on_their_own'])}); "
          f"in {r.get('wall_s', '?')} s",
          file=out)
    agree = r["dispatch_agrees"]
    if not agree.get("checked"):
        print(f"dispatch's own state: not read ({agree.get('why')})", file=out)
    elif agree["agrees"]:
        print("dispatch's own state agrees with the files", file=out)
    else:
        print(f"dispatch's own state disagrees: {agree['ended_but_not_succeeded']} ended but not succeeded, "
              f"{agree['succeeded_but_never_ended']} succeeded but never ended, {agree['unknown_to_dispatch']} "
              f"unknown to it; e.g. {'; '.join(agree['examples'][:5])}", file=out)
    if r.get("unacknowledged_jobs_that_ran"):
        print(f"jobs that ran though their submit was refused: {r['unacknowledged_jobs_that_ran']}", file=out)
    if r.get("findings"):
        print(f"seen on the way: {_counts(r['findings'])}", file=out)
    if r.get("timed_out") or r.get("stalled"):
        print(f"the run did not finish: {r.get('stalled') or 'timed out'}", file=out)
    for label, key in (("lost", "lost_jobs"), ("doubled", "doubled_jobs"), ("overlap", "overlap_jobs"),
                       ("ran again after a cut", "doubled_in_a_cut_jobs"),
                       ("check failed", "failed_checks"), ("left running", "leftover_processes")):
        for line in r.get(key) or []:
            print(f"  {label}: {line}", file=out)
    for job, lines in (r.get("stories") or {}).items():
        print(f"  job {job}'s story, from the logs:", file=out)
        for line in lines:
            print(f"    {line}", file=out)
    for note in r.get("notes") or []:
        if "on its own" in note or "did not restart" in note:
            print(f"  died: {note.splitlines()[0]}", file=out)
    if r.get("work_dir"):
        print(f"files and logs in {r['work_dir']}", file=out)
