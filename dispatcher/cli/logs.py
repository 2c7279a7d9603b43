"""`dispatch logs`: a job's output from any host, an array's elements each after a header, -n and -f
(registered lazily in cli.py)."""

from __future__ import annotations

import sys

import click

from ..core import errors
from ..core.arrays import label
from ..core.errors import InvalidRequestError
from ..store.naming import record_id
from . import common
from .jobs import _array_elements, server_away


@click.command()
@click.argument("job_id")
@click.option("-f", "--follow", is_flag=True, help="Keep printing until the job ends.")
@click.option("--rank", default=0, type=click.IntRange(0, 4095), show_default=True,
              help="A multi-node job's rank whose output to print.")
@click.option("-n", "--tail", "tail", default=None, type=click.IntRange(0, 10**7), metavar="N",
              help="Only the last N lines so far (as tail -n); with -f, then what comes.")
@common
def logs(ctx, job_id, follow, rank, tail):
    """A job's output, from any host (a multi-node job's: rank 0's, or --rank's). With -f it exits
    once the job ends: 0 if it succeeded, 1 if not."""
    from ..store import keys
    from ..store.connect import ride_out
    from ..store.jobs import is_final, read_job, read_log

    first = (lambda call: ride_out(call, on_wait=server_away)) if follow else (lambda call: call())
    given, job_id = job_id, first(lambda: record_id(ctx.client, ctx.ns, job_id))  # (12_5: element 5 of array 12)
    job = first(lambda: read_job(ctx.client, ctx.ns, job_id))  # JobNotFound for a bad id
    elements = _array_elements(ctx, given, job)
    if elements and follow:
        raise InvalidRequestError(f"{given} is an array of {len(elements)} jobs: follow one of them, e.g. "
                                  f"dispatch logs -f {label(elements[0])}", field="JOB")
    if elements:  # each element's output after a header, as tail prints several files
        for n, element in enumerate(elements):
            click.echo(f"{chr(10) if n else ''}==> {label(element)} <==")
            sys.stdout.flush()
            _print_log(ctx, read_job(ctx.client, ctx.ns, element["id"]), tail, rank)  # (its whole record)
        return
    if rank >= max(1, len(job["ranks"]), job["nodes"]) and not ctx.client.exists(keys.job_log(ctx.ns, job_id, rank)):
        # (a gang larger than any node, between attempts, has no ranks listed: the output they left counts)
        raise InvalidRequestError(f"--rank {rank}: job {job_id} has no rank {rank}", field="--rank")
    out = sys.stdout.buffer
    last = _print_log(ctx, job, tail, rank, follow)
    while follow:  # through a server's restart (`dispatch up` brings it back): waited for, not an error
        got = ride_out(lambda: read_log(ctx.client, ctx.ns, job_id, last, block_ms=500, rank=rank), on_wait=server_away)
        for last, chunk in got:
            out.write(chunk)
        out.flush()
        state = None if got else ride_out(lambda: read_job(ctx.client, ctx.ns, job_id)["state"], on_wait=server_away)
        if state is not None and is_final(state):
            for last, chunk in read_log(ctx.client, ctx.ns, job_id, last, rank=rank):
                out.write(chunk)
            out.flush()
            sys.exit(0 if state == "succeeded" else errors.EXIT_FAILED)  # as `wait`: how the job ended


def _print_log(ctx, job: dict, tail: int | None, rank: int, follow: bool = False) -> str:
    """Print the job's output so far (its last `tail` lines), saying on stderr what is not there; returns
    the stream id of the last chunk printed ("-" for none), for -f to follow from."""
    from ..store.jobs import log_trimmed, read_log, read_log_tail

    out, job_id, last = sys.stdout.buffer, job["id"], "-"
    if tail is not None:
        last, chunk = read_log_tail(ctx.client, ctx.ns, job_id, tail, rank=rank)
    if (tail is None or chunk.count(b"\n") < tail) and log_trimmed(ctx.client, ctx.ns, job_id, rank):
        # (on stderr: the output itself stays as the job wrote it)
        where = (f"{job['output'] or job['log_file']} on {job['node']}" if not rank and (job["output"] or job["log_file"])
                 else "the job's log file on its node")
        click.echo(f"[dispatch: earlier output trimmed; the whole of it is in {where}]", err=True)
    if tail is not None:
        out.write(chunk)
    else:
        for last, chunk in read_log(ctx.client, ctx.ns, job_id, rank=rank):
            out.write(chunk)
    out.flush()
    if last == "-" and not job["attempts"] and job["state"] != "running":  # (on stderr, as above)
        click.echo(f"[dispatch: job {label(job)} " + (
            "has not started yet: no output" + ("; waiting for it]" if follow else "; -f waits for it]")
            if job["state"] in ("pending", "assigned") else f"{job['state']} without starting: no output]"), err=True)
    return last
