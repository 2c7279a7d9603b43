"""The commands that look at or act on jobs: queue, show, cancel, preempt, wait, ... (logs: cli/logs.py)
(registered lazily in cli.py)."""

from __future__ import annotations

import json
import os
import shlex
import sys
import time
from collections import Counter

import click

from ..core import errors
from ..core.arrays import label
from . import common, exit_words, json_flag
from ..clock import now_ms
from ..core.errors import InvalidRequestError
from ..store.naming import record_id
from ..core.units import age
from ..auth.identity import current_user
from .columns import column_options, pick, table, visible
from .select import (SHOWN, STATE_GROUPS, act_each, counts, cut_last, filter_options, folded, needs_some, resolve,
                     say_not_found, selection, named as as_named)


@click.command()
@click.argument("job_ids", nargs=-1, metavar="[JOB|LOW-HIGH]...")
@click.option("--all", "show_all", is_flag=True, help="Include the ended jobs among the latest (--limit) jobs; -t all: every one.")
@click.option("--expand", is_flag=True, help="An array's pending elements a line each (else one line, 12_[3-99%8]).")
@click.option("--limit", default=SHOWN, show_default=True, type=click.IntRange(1, 10**7),
              help="The most pending jobs listed (the oldest); a line says how many more there are.")
@filter_options
@column_options
@json_flag
@common
def queue(ctx, job_ids, show_all, expand, limit, users, states, names, teams, fields, noheader, as_json):
    """Pending and running jobs, oldest first (-u, --state, --name, --team to filter)."""
    from ..store import keys, stats as published
    from ..core.accounting import queue_wait
    from ..store.quarantine import report
    from ..store.connect import tolerant
    from ..store.ended import read_first_attempts
    from ..store.jobs import index_window
    from ..views.capacity import fill_unreached

    sel = selection(job_ids, users, states, names, teams)
    missing: list[str] = []  # (ids that name no job: one line each after the table, exit 4, as squeue -j)
    if as_json and fields:
        raise InvalidRequestError("-o/--format picks the table's columns; --json gives every field: use one of "
                                  "them", field="--format")
    jobs = resolve(ctx.client, ctx.ns, sel, include_final=show_all or bool(sel.states - set(STATE_GROUPS["active"])),
                   limit=limit + 1, missing=missing)  # (one more: whether the cut falls inside an array)
    window = show_all and not (sel.ids or sel.filtered)  # (--all: the ended among the latest --limit jobs)
    n_all = (tolerant(lambda: ctx.client.zcard(keys.jobs_all(ctx.ns)), 0) or 0) if window else 0
    if n_all > limit:  # (read one past --limit, as the pending are, for the cut's note)
        latest = {i for i, _ in tolerant(lambda: index_window(ctx.client, keys.jobs_all(ctx.ns), n_all - limit,
                                                              limit), [])}
        jobs = [j for j in jobs if j["state"] not in STATE_GROUPS["done"] or j["id"] in latest]
    elif show_all and sel.filtered and not sel.ids:  # (--all -u bob: the latest --limit ended jobs it matches)
        ended = sorted((j for j in jobs if j["state"] in STATE_GROUPS["done"]), key=lambda j: j["submitted_at"] or 0)
        older = {j["id"] for j in ended[:-limit]}
        jobs, n_all = [j for j in jobs if j["id"] not in older], (limit + 1 if older else 0)
    pending = [j for j in jobs if j["state"] == "pending"]
    more = len(pending) - limit if sel.ids or sel.filtered else \
        (tolerant(lambda: ctx.client.zcard(keys.jobs_pending(ctx.ns)), 0) or 0) - min(len(pending), limit)
    cut_arrays = {j["array_of"] for j in pending[limit:] if j["array_of"]}  # shown as 12_[0-2,…]
    if len(pending) > limit:
        cut = {j["id"] for j in pending[limit:]}
        jobs = [j for j in jobs if j["id"] not in cut]
    fill_unreached(ctx.client, ctx.ns, jobs)
    if as_json:  # (the list stays a list: the cut is said on stderr, where a script's reader sees it)
        click.echo(json.dumps(jobs, indent=1))
        if more > 0:
            click.echo(f"dispatch: {_more(more, limit)}", err=True)
        return say_missing(missing)
    now = time.time()
    rows = []
    shown = [(label(j), j, [j]) for j in jobs] if expand else folded(jobs, cut_arrays)
    firsts = read_first_attempts(ctx.client, ctx.ns, [j["id"] for _, j, _ in shown if j["attempt"]])  # (requeued,
    # preempted or lost before: WAIT counts to their first start)
    for row_id, j, group in shown:
        waited = queue_wait({**j, "attempts": firsts.get(j["id"], ())})  # submit to its first start, as report's
        if waited is None and j["submitted_at"]:  # never started: to its placement or end, else to now
            waited = (j["assigned_at"] or j["finished_at"] or now) - j["submitted_at"]
        gpus = (f"{j['nodes']}x{j['gpus_per_node']}" if j["nodes"] > 1 else  # a gang (a session, --nodes 1: one
                # node's count); one of whole nodes as it runs
                f"{len(j['ranks'])}x{len(j['ranks'][0][1])}" if len(j["ranks"]) > 1 else _held(j)) \
            + (f"x{'|'.join(j['gpu_types'])}" if j["gpu_types"] else "")  # a gang: nodes x GPUs per node
        where = "+".join(n + (f":{','.join(map(str, g))}" if g else "") for n, g in j["ranks"] or
                         [[j["node"], j["gpus"]]]) if j["node"] else "-"  # a gang: every rank's node, rank 0 first
        if len(group) > 1:  # an array: where its elements run
            active = (g["node"] for g in group if g["node"] and g["state"] not in STATE_GROUPS["done"])
            where = ",".join(dict.fromkeys(active)) or "-"
        reason = j["reason"] if j["state"] in ("pending", "failed", "cancelled") else \
            f"cancelling ({cancel_sent(j)})" if j["cancel_requested"] else ""  # (Slurm's CG)
        if len(group) > 1 and all(g["hold"] for g in group):  # every element held: released by the array's id
            reason = reason.replace(f"(dispatch release {label(j)})", f"(dispatch release {j['array_of']})")
        classes = "|".join(dict.fromkeys(g["priority"] for g in group))  # (an array's elements updated apart)
        ran = "-" if len(group) > 1 or not j["started_at"] else age(now - j["started_at"]) \
            if j["state"] in ("running", "preempting") else age(j["finished_at"] - j["started_at"]) \
            if j["state"] in STATE_GROUPS["done"] and j["finished_at"] else "-"  # squeue's TIME: this attempt's
        # so far; an ended job's (-t all): its last attempt's, as sacct's Elapsed
        rows.append([row_id, j["name"] or "-", j["user"], classes, counts(group) if len(group) > 1 else j["state"],
                     gpus, where, age(waited), ran, reason if len(reason) <= 90 else reason[:89] + "…",
                     shlex.join(a if len(a) <= 60 else a[:59] + "…" for a in j["command"])])  # one line a job: a
        # long argument cut (a notebook's 600-character `python3 -c` script swamped the table; show has it whole)
    header = ["ID", "NAME", "USER", "PRIORITY", "STATE", "GPUS", "NODE", "WAIT", "TIME", "REASON", "COMMAND"]
    rows, header = pick(rows, header, fields)
    if rows or not noheader:
        click.echo(table(cut_last(rows, header), header, noheader))
    if more > 0:  # (--noheader: stdout holds rows only, for a script's loop)
        click.echo(f"... {_more(more, limit)}", err=noheader)
    if n_all > limit:
        shown = f"shows the latest {limit} ended jobs it matches" if not window else \
            f"looks at the latest {limit} jobs"
        click.echo(f"... and older ended jobs: --all {shown} (--limit N; -t all lists every one, dispatch history a "
                   "window)", err=noheader)
    notes = [(x, noheader) for x in report(ctx.client, ctx.ns)]  # (a stale scheduler's word: always on stderr)
    for line, err in notes + [(x, True) for x in pending and published.stale_lines(ctx.client, ctx.ns)]:
        click.echo(line, err=err)
    say_missing(missing)


def say_missing(missing: list[str]) -> None:
    """After what was found: one error line per id (or run of ids) that names no job, and exit 4."""
    say_not_found(missing)
    if missing:
        sys.exit(errors.EXIT_NOT_FOUND)


def _held(j: dict) -> str:
    """A one-node job's GPUS cell: what it asked for; an elastic job that holds another count (shrunk by a
    preemption, or started on fewer): held/asked, 2/4. One larger than any node runs on whole nodes: every rank's."""
    gpus = [g for _, rank_gpus in j.get("ranks") or () for g in rank_gpus] or j["gpus"]
    held = len(gpus) if j["min_gpus"] is not None and j["state"] in ("assigned", "running", "preempting") else 0
    return f"{held}/{j['gpus_requested']}" if held and held != j["gpus_requested"] else f"{j['gpus_requested']}"


@click.command()
@click.argument("job_id")
@json_flag
@common
def show(ctx, job_id, as_json):
    """One job in full."""
    from ..store.jobs import read_job
    from ..views.capacity import fill_unreached

    job = read_job(ctx.client, ctx.ns, record_id(ctx.client, ctx.ns, job_id))
    fill_unreached(ctx.client, ctx.ns, [job])
    elements = _array_elements(ctx, job_id, job)
    if elements:  # an array's id: its first element's record, and how all of them stand
        job["array_states"] = dict(Counter(e["state"] for e in elements))
    if as_json:
        click.echo(json.dumps(job, indent=1))
        return

    def at(v):
        return f"{time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(v))} ({v:.3f})" if v else "-"

    attempts = job.pop("attempts", [])
    from ..core.predict import describe
    from ..store.dependencies import element_names

    waited = element_names(ctx.client, ctx.ns, {*job["after"], *job["after_any"]}) if job["after"] or \
        job["after_any"] else {}  # (an array's element as 12_5, not by its record's id)

    job["prediction"] = describe(job["prediction"], job.pop("prediction_error"))
    for k, v in job.items():
        if k in ("exit_status", "signal"):  # (exit_code says them: '137 (SIGKILL)')
            continue
        if k.endswith("_at") and v:
            v = at(v)
        elif k == "id" and job["array_of"]:  # an array's element: as queue names it too
            v = f"{v} (element {label(job)})"
        elif k == "env" and v:
            v = " ".join(shlex.quote(f"{name}={value}") for name, value in v.items())
        elif k == "array_states":  # (the record above is the first element's)
            v = f"{counts(elements)} (show {job['id']}_N: one of them)"
        elif k == "exit_code" and v is not None and v < 0:  # (as wait exits and $? says; --json keeps -N)
            v = exit_words(v)
        elif k in ("after", "after_any") and v:
            v = ", ".join(waited.get(i, i) for i in v)
        elif k == "ranks" and v:  # a gang: every rank's node and GPUs
            v = ", ".join(f"rank {i} on {n} GPUs {g}" for i, (n, g) in enumerate(v))
        click.echo(visible(f"{k:>16}: {v if v not in (None, '', []) else '-'}"))
    for a in attempts:  # (a gang's: every rank's node and GPUs)
        where = ", ".join(f"rank {i} on {n} GPUs {g}" for i, (n, g) in enumerate(a["ranks"])) if len(a["ranks"]) > 1 \
            else f"on {a['node'] or '-'} GPUs {a['gpus']}"
        click.echo(visible(f"{'attempt ' + str(a['attempt']):>16}: {a['outcome']} {where}, "
                           f"{at(a['started_at'])} to {at(a['ended_at'])}" + (f": {a['reason']}" if a["reason"] else "")))


@click.command()
@click.argument("job_ids", nargs=-1, metavar="[JOB|LOW-HIGH]...")
@filter_options
@common
def cancel(ctx, job_ids, users, states, names, teams):
    """Cancel jobs: pending ones at once, running ones through their node (SIGTERM, grace, SIGKILL).
    Jobs by id or range (60-66), or every pending and running job that passes the filters."""
    from ..store.jobs import cancel_job, is_final

    sel = needs_some(selection(job_ids, users, states, names, teams), "cancel")
    missing: list[str] = []  # ids that name no job: one error line each, the others cancelled (as scancel)
    jobs = [j for j in resolve(ctx.client, ctx.ns, sel, include_final=False, missing=missing)
            if not (sel.filtered and is_final(j["state"]))]
    by = f"cancelled by {current_user()}"  # (as the leader says it of a signed cancel)
    act_each(ctx, "cancel", jobs, lambda i: cancel_job(ctx.scripts, ctx.client, ctx.ns, i, now_ms(), by), said_of_cancel, missing=missing)


def _more(more: int, limit: int) -> str:
    return (f"and {more} more pending jobs (the oldest {limit} are listed: --limit N, or a filter such as -u USER, "
            "--name GLOB)")


def said_of_cancel(outcome: str, job: dict) -> str:
    """What cancel says of a job: "cancelled", "cancel sent to its node", "already being cancelled (...)"
    (sent before, in its grace), or "already <its end>" (a job that had ended before, cancelled ones too)."""
    from ..store.jobs import is_final

    if is_final(job.get("state") or "") or outcome not in ("cancelled", "requested"):
        return f"already {outcome}"
    if outcome == "requested" and job.get("cancel_requested"):  # a second cancel within the first's grace
        return f"already being cancelled ({cancel_sent(job)})"
    return "cancelled" if outcome == "cancelled" else f"cancel sent to its {_nodes(job)}"


def _nodes(job: dict) -> str:
    """A job's node, or a gang's nodes: where a cancel or a preemption is sent."""
    return "nodes" if len(job.get("ranks") or ()) > 1 or (job.get("nodes") or 1) > 1 else "node"


def cancel_sent(job: dict) -> str:
    """When a running job's cancel was sent, and its grace before SIGKILL: "sent at 17:40:12, grace 10s"."""
    return (f"sent at {time.strftime('%H:%M:%S', time.localtime(job['cancel_requested_at']))}, "
            f"grace {age(job['grace_s'] or 0)}")


@click.command()
@click.argument("job_id")
@click.option("--force", is_flag=True, help="Kill it even if it cannot checkpoint (its work since start is lost).")
@common
def preempt(ctx, job_id, force):
    """Preempt a running job: checkpoint signal, grace, SIGKILL; it goes back to the queue."""
    from ..store.jobs import preempt_job, read_job
    from ..store.requests import act_signed, identity_on

    named, job_id = job_id, record_id(ctx.client, ctx.ns, job_id)  # (12_5: element 5 of array 12)
    job = read_job(ctx.client, ctx.ns, job_id)  # JobNotFound (exit 4) here, as every command, not from the leader
    try:
        if identity_on(ctx.client, ctx.ns):
            mode = act_signed(ctx.client, ctx.ns, "preempt", current_user(), job_id, force=force)
        else:
            mode = preempt_job(ctx.scripts, ctx.client, ctx.ns, job_id, now_ms(), force=force, by=f"operator {current_user()}")
    except errors.DispatcherError as e:  # (said of 12_5, as it was named, not of its record's id)
        click.echo(f"dispatch: error: {as_named(str(e), job)}", err=True)
        sys.exit(e.exit_code)
    being = f"; it is being cancelled ({cancel_sent(job)}): it ends cancelled, not requeued" \
        if job["cancel_requested"] else ""  # (finish.lua keeps a cancel asked while it ran)
    click.echo(f"{named}: {mode} preemption sent to its {_nodes(job)}{being}")


@click.command()
@common
def checkpointed(ctx):
    """From inside a job: report that it just saved a checkpoint (less work lost if preempted)."""
    from . import jobside

    job_id, epoch = os.environ.get("DISPATCH_JOB_ID"), os.environ.get("DISPATCH_EPOCH")
    if not job_id or not epoch:
        raise InvalidRequestError("run this inside a dispatch job: DISPATCH_JOB_ID and DISPATCH_EPOCH are not set",
                                  field="DISPATCH_JOB_ID")
    if jobside.in_job():  # through the node agent: a job holds no Redis login
        jobside.checkpointed()
        return
    from ..store.scripts import Outcome

    if ctx.scripts.checkpointed(job_id, epoch, now_ms()) != Outcome.DONE:
        raise errors.InvalidStateError(job_id, "not running at this epoch", "record a checkpoint for")


def server_away(error) -> None:
    """What `wait` and `logs -f` say, once, when the server stops answering for a moment."""
    click.echo(f"dispatch: the server does not answer ({str(error).splitlines()[0]}); waiting up to a "
               "minute for it to come back", err=True)


def _array_elements(ctx, given: str, job: dict) -> list[dict]:
    """Every element of the array `given` names by its id (its first element's), oldest first; [] when
    `given` names one job (12_5, or a job of no array, or an array of one)."""
    from ..store.jobs import read_named

    if job["array_of"] != job["id"] or job["array_count"] < 2 or given != job["id"]:
        return []
    return read_named(ctx.client, ctx.ns, [given])


@click.command()
@click.argument("step")
def progress(step):
    """From inside a job: report progress (any text, e.g. the step number); --hang-timeout counts from
    the last report. The same as appending a line to $DISPATCH_PROGRESS_FILE."""
    path = os.environ.get("DISPATCH_PROGRESS_FILE")
    if not path:
        raise InvalidRequestError("run this inside a dispatch job: DISPATCH_PROGRESS_FILE is not set",
                                  field="DISPATCH_PROGRESS_FILE")
    try:
        with open(path, "a") as f:
            f.write(" ".join(step.split())[:200] + "\n")
    except OSError as e:  # the job's own env changed it, or this is not the job that got it
        raise InvalidRequestError(f"DISPATCH_PROGRESS_FILE={path}: cannot append to it ({e.strerror or e}); run this "
                                  "inside the dispatch job that set it", field="DISPATCH_PROGRESS_FILE") from None


@click.command()
@click.argument("job_ids", nargs=-1, metavar="[JOB|LOW-HIGH]...")
@click.option("--timeout", default=None, metavar="DURATION",
              help="Give up after this long (90s, 15m, 3h; exit 5). 0: look once, without waiting.")
@filter_options
@common
def wait(ctx, job_ids, timeout, users, states, names, teams):
    """Wait for jobs to end (by id or range, or the pending and running jobs the filters pick). Prints
    nothing if all succeeded, else one line per job that did not. Exits 0 if all succeeded; for one
    job, with its own exit code (as `tsp -w`; 128 + N if signal N killed it, as a shell says; 1 if it
    was cancelled or lost). An id that names no job is one error line, and the others are waited for
    (exit 4 if they all succeeded). A job's own code may be one of wait's (2 bad input, 4 no such
    job, 5 --timeout): wait's own say so on stderr, `dispatch show JOB --json` has the job's."""
    from ..api import Client
    from ..core.units import parse_duration
    from ..store.connect import ride_out_within

    timeout_s = None if timeout is None else parse_duration(timeout, flag="--timeout", zero=True)
    sel = needs_some(selection(job_ids, users, states, names, teams), "wait for")
    missing: list[str] = []  # (ids that name no job: said first, the rest waited for, exit 4 unless one failed)

    def found() -> list[str]:  # (filters alone: the queue's)
        missing.clear()
        return [j["id"] for j in resolve(ctx.client, ctx.ns, sel, include_final=False, missing=missing)]

    try:  # (a server restarting as it starts is waited for too: a minute, or --timeout)
        ids = ride_out_within(found, timeout_s, timeout_s=timeout_s, on_wait=server_away)
        say_not_found(missing)
        if not ids and not missing:
            click.echo("dispatch: no job matches", err=True)
        client = Client(ctx.url, ctx.ns)  # (it connects: once the server answers)
        ended = client.wait(ids, timeout_s=timeout_s, on_wait=server_away)
    except TimeoutError as e:
        click.echo(f"dispatch: {e}", err=True)
        sys.exit(errors.EXIT_TIMEOUT)
    failed = [client.show(i) for i in ids if ended[i] != "succeeded"]  # (their codes and reasons)
    for j in failed:  # (a signal's -N: the reason names the signal)
        code = f" (exit {j['exit_code']})" if (j["exit_code"] or 0) > 0 else ""
        click.echo(f"{label(j)}: {j['state']}{code}" + (f": {j['reason']}" if j["reason"] else ""), err=True)
    if failed and len(ids) == 1 and failed[0]["state"] == "failed" and failed[0]["exit_code"]:
        sys.exit(min(errors.exit_status(int(failed[0]["exit_code"])), 255))  # killed by a signal N: 128 + N
    sys.exit(errors.EXIT_FAILED if failed else errors.EXIT_NOT_FOUND if missing else errors.EXIT_OK)
