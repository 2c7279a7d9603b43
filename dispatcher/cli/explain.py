"""The commands that explain the scheduler's choices: why a job waits, when it should start, and the
latest decisions (each start with its score terms, each preemption with victim and preemptor)."""
from __future__ import annotations

import json
import time

import click

from . import _table, common, json_flag
from ..core.arrays import label
from ..core.units import age, within
from ..store.naming import record_id


@click.command()
@click.argument("job_id")
@click.option("--fresh", is_flag=True, help="Run the policy now on the whole queue (a what-if; slow on a long "
              "queue) instead of showing what the scheduler decided at its last cycle.")
@click.option("--timeout", "timeout_s", default=60.0, show_default=True, type=click.FloatRange(0.1, 3600),
              help="With --fresh: give up after this many seconds.")
@json_flag
@common
def why(ctx, job_id, fresh, timeout_s, as_json):
    """Why a job waits: its score terms, its rank, what blocks it, and the decisions about it."""
    from ..views.explain import decision_words, heading, recorded, what_if

    given, job_id = job_id, record_id(ctx.client, ctx.ns, job_id)
    out = what_if(ctx.client, ctx.ns, job_id, timeout_s) if fresh else recorded(ctx.client, ctx.ns, job_id)
    if as_json:
        click.echo(json.dumps(out, indent=1))
        return
    job = out["job"]
    click.echo(heading(job, given))  # (an array's element as 12_5; an array's id says which element answers)
    o = out.get("outcome")
    if o:
        total = sum(out["weights"].values()) or 1.0
        if o.get("terms"):
            terms = {**o["terms"], **{k: 0.0 for k, w in out["weights"].items() if w and k not in o["terms"]}}
            parts = " + ".join(f"{k} {v:.1f}x{out['weights'].get(k, 0):g}" for k, v in terms.items())  # (fit: 0
            # until it is placed; the divisor counts every weight, so the line adds up as shown)
            click.echo(f"  score {o['score']:.1f} = ({parts}) / {total:g}")
        if o.get("rank"):  # (a recorded verdict's rank is of the queue it was judged in, not of today's)
            of = f" when judged at {time.strftime('%H:%M:%S', time.localtime(o['since']))}; {out['pending']} " \
                 "ranked now" if o.get("since") else f" of {out['pending']} ranked"  # (held jobs are not)
            click.echo(f"  rank {o['rank']}{of}, profile {out['profile']!r} "
                       f"({out['policy_source']}), {out['live_nodes']} live nodes")
        if o["code"] == "would_start":
            click.echo(f"  would start now on {o['node']} GPUs {o['gpus']} ({o['reason']}); "
                       "the scheduler places it at its next cycle")
        else:
            click.echo(f"  blocked ({o['code']}): {o['reason']}")
    if out.get("promise"):
        from ..policy.promises import describe as promised

        click.echo(f"  promise: {promised(out['promise'])}")
    for r in out.get("reservations", []):
        if r["job"] != job["id"]:
            click.echo(f"  reservation: job {r.get('label', r['job'])} holds {r['node']} GPUs {r['gpus']} {within(r['starts_in_s'])}")
    if out.get("forecast"):
        from ..views.forecast import describe

        click.echo(f"  forecast: {describe(out['forecast'], with_job=False)}")
    for d in out["decisions"]:
        click.echo(f"  decision {time.strftime('%H:%M:%S', time.localtime(d['time']))}: {decision_words(d, job['id'])}")
    if out.get("as_of"):
        a = out["as_of"]
        click.echo("  as of the scheduler's last cycle, " + (
            f"{time.strftime('%H:%M:%S', time.localtime(a['at']))} ({age(a['age_s'])} ago)" if a["at"] else "none yet")
            + ("; STALE: is the scheduler running? (dispatch top)" if a["stale"] else "")
            + f"; --fresh runs the policy now, dispatch eta {label(job)} forecasts its start")


@click.command()
@click.argument("job_id")
@json_flag
@common
def eta(ctx, job_id, as_json):
    """When a pending job is expected to start, and the quickest change that would start it sooner."""
    from ..views.forecast import describe, read_eta

    out = read_eta(ctx.client, ctx.ns, record_id(ctx.client, ctx.ns, job_id))  # (12_5: element 5 of array 12)
    click.echo(json.dumps(out, indent=1) if as_json else describe(out))


@click.command()
@click.option("--job", "job_id", default=None, help="Only decisions about this job.")
@click.option("--limit", default=20, type=click.IntRange(1, 2000), show_default=True)
@json_flag
@common
def decisions(ctx, job_id, limit, as_json):
    """The scheduler's latest decisions: each start (its score breakdown and why it won) and each
    preemption (its victim, the job it made room for, how, and why)."""
    from ..store.decisions import placed_on, read_decisions
    from ..store.dependencies import element_names
    from ..store.jobs import read_named

    if job_id is not None:  # 12_5 is element 5 of array 12; no such job is one line, not an empty table
        job_id = read_named(ctx.client, ctx.ns, [job_id])[0]["id"]
    got = read_decisions(ctx.client, ctx.ns, job_id=job_id, limit=limit)
    if as_json:
        click.echo(json.dumps(got, indent=1))
        return
    named = element_names(ctx.client, ctx.ns, {d["job"] for d in got} | {d["for_job"] for d in got if d.get("for_job")})
    rows = [[time.strftime("%H:%M:%S", time.localtime(d["time"])), d["kind"], named.get(d["job"], d["job"]),
             placed_on(d), f"{d['score']:.1f}" if d["kind"] == "start" else
             f"for {named.get(d.get('for_job'), d.get('for_job')) or '-'}",
             " ".join(f"{k[:4]}={v:.0f}" for k, v in d["terms"].items()) if d["kind"] == "start"
             else d.get("mode") or "graceful", d["profile"], d["why"][:80]] for d in got]
    click.echo(_table(rows, ["TIME", "KIND", "JOB", "ON", "SCORE/BY", "TERMS/MODE", "PROFILE", "WHY"]))
