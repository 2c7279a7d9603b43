"""hold and release: keep pending jobs out of scheduling until released, as Slurm's `scontrol
hold/release` (registered lazily in cli/__init__.py)."""

from __future__ import annotations

import click

from . import common
from ..auth.identity import current_user
from ..clock import now_ms
from .select import act_each, filter_options, needs_some, resolve, selection


def _act(ctx, action: str, job_ids, users, states, names, teams) -> None:
    from ..store.jobs import hold_job

    sel = needs_some(selection(job_ids, users, states, names, teams), action)
    jobs = resolve(ctx.client, ctx.ns, sel, include_final=False)
    if sel.filtered and not sel.ids:
        jobs = [j for j in jobs if j["state"] == "pending"]
    act_each(ctx, action, jobs,
             lambda job_id: hold_job(ctx.scripts, ctx.client, ctx.ns, job_id, action, current_user(), now_ms()))


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
