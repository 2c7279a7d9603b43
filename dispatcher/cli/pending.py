"""Commands that change pending jobs, as Slurm's `scontrol hold/release/update`: hold and release keep
them out of scheduling until released; update changes their priority, estimate or time limit (and a
running job's time limit) (registered lazily in cli/__init__.py; the store's side is store/pending.py)."""

from __future__ import annotations

import click

from . import common
from ..auth.identity import current_user
from ..clock import now_ms
from ..core.model import JobSpec
from .select import act_each, filter_options, needs_some, resolve, selection


def _pending(ctx, verb: str, job_ids, users, states, names, teams, missing: list) -> list[dict]:
    """The jobs a command on pending jobs means: those named (the store refuses each that is not pending,
    one line each), or the pending ones the filters pick (`release -u me` while one of mine runs is no
    error). Ids that name no job are appended to `missing`."""
    sel = needs_some(selection(job_ids, users, states, names, teams), verb)
    jobs = resolve(ctx.client, ctx.ns, sel, include_final=False, missing=missing)
    return jobs if job_ids else [j for j in jobs if j["state"] == "pending"]


def _act(ctx, action: str, job_ids, users, states, names, teams) -> None:
    from ..store.pending import hold_job

    missing: list[str] = []
    jobs = _pending(ctx, action, job_ids, users, states, names, teams, missing)
    act_each(ctx, action, jobs,
             lambda job_id: hold_job(ctx.scripts, ctx.client, ctx.ns, job_id, action, current_user(), now_ms()),
             missing=missing)


@click.command()
@click.argument("job_ids", nargs=-1, metavar="[JOB|LOW-HIGH]...")
@filter_options
@common
def hold(ctx, job_ids, users, states, names, teams):
    """Keep pending jobs from starting until `dispatch release` (by id, range or filter). A held job
    stays pending, keeps its place by submit time, and shows who held it."""
    _act(ctx, "hold", job_ids, users, states, names, teams)


@click.command()
@click.argument("job_ids", nargs=-1, metavar="[JOB|LOW-HIGH]...")
@filter_options
@common
def release(ctx, job_ids, users, states, names, teams):
    """Let held jobs be scheduled again (by id, range or filter)."""
    _act(ctx, "release", job_ids, users, states, names, teams)


@click.command()
@click.argument("job_ids", nargs=-1, metavar="[JOB|LOW-HIGH]...")
@click.option("--priority", default=None, metavar="P", help="Its new class: critical, high, normal or low.")
@click.option("--est", default=None, metavar="DURATION", help="Its new estimated run time (90s, 15m, 2h).")
@click.option("--time", default=None, metavar="DURATION",
              help="Its new run-time limit, as submit's --time takes it (3h, or Slurm's 30, 1:00:00, 2-12).")
@click.option("--begin", default=None, metavar="TIME",
              help="Its new earliest start, as submit's --begin takes it (now+1hour, 16:00; now: no wait).")
@filter_options
@common
def update(ctx, job_ids, priority, est, time, begin, users, states, names, teams):
    """Change pending jobs' priority, estimate, time limit or earliest start (by id, range or filter); a
    running job's time limit too, counted from its start (cut below what it has run, it stops now)."""
    from ..begin import parse_begin
    from ..core.updates import amended
    from ..store.pending import update_job

    changes = {k: v for k, v in (("priority", priority), ("est", est), ("time", time)) if v is not None}
    if begin is not None:  # one instant for every job updated (ms, as text: a signed request carries text)
        changes["begin"] = str(parse_begin(begin, now_ms()))
    # a bad value is refused before anything is read; against each job's own --grace as the store updates it
    amended(JobSpec(id="", command=("true",), grace_s=0.0), changes)
    missing: list[str] = []
    jobs = _pending(ctx, "update", job_ids, users, states, names, teams, missing)
    act_each(ctx, "update", jobs, lambda job_id: update_job(ctx.client, ctx.ns, job_id, changes), missing=missing,
             changes=changes)
