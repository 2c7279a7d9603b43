"""`dispatch requeue`, as Slurm's `scontrol requeue`: ended jobs back in the queue under their ids
(registered lazily in cli/__init__.py; the store's side is store/ended.py, lua/requeue.lua)."""

from __future__ import annotations

import click

from . import common
from ..auth.identity import current_user
from ..clock import now_ms
from .select import act_each, resolve, selection


@click.command()
@click.argument("job_ids", nargs=-1, required=True, metavar="JOB|LOW-HIGH...")
@common
def requeue(ctx, job_ids):
    """Put ended jobs (failed, cancelled or succeeded) back in the queue under the same ids, as a new
    attempt: the same command and request, its attempts kept, its wait counted from now. By id, range
    (60-66) or array (12, 12_3). Every job named must have ended, else nothing is requeued. With
    identity on, only a job's owner or an admin may requeue it."""
    from ..core.errors import InvalidStateError
    from ..store.ended import requeue_job
    from ..store.jobs import is_final

    jobs = resolve(ctx.client, ctx.ns, selection(job_ids), include_final=True)
    for j in jobs:
        if not is_final(j["state"]):
            raise InvalidStateError(j["id"], j["state"], "requeue")
    act_each(ctx, "requeue", jobs,
             lambda job_id: requeue_job(ctx.scripts, ctx.client, ctx.ns, job_id, current_user(), now_ms()))
