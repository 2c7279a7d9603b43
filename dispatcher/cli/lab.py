"""`dispatch simulate`, `history` and `tune`: the policy lab's commands (registered lazily in cli.py)."""

from __future__ import annotations

import json
import sys
import time

import click

from . import common, exit_words
from .select import filter_options, selection
from ..core.errors import InvalidRequestError
from ..sim.workload import MAX_CLUSTER_GPUS
from .sim_options import check_options, parse_ckpt_cost, policy_names, write_json


@click.command()
@click.argument("trace", type=click.Path(dir_okay=False), required=False)
@click.option("--gpus", type=click.IntRange(1, MAX_CLUSTER_GPUS), default=None,
              help="Untyped GPUs, in nodes of --gpus-per-node.")
@click.option("--gpus-per-node", type=click.IntRange(1, 1024), default=8, show_default=True)
@click.option("--nodes", "nodes_spec", default=None, metavar="SPEC",
              help="Typed nodes instead of --gpus: NODESxGPUSxTYPE-MEMGB, comma-separated, e.g. "
                   "2x8xA100-80GB,2x8xV100-32GB.")
@click.option("--policy", default="dispatch", show_default=True, metavar="NAME|FILE",
              help="A built-in policy or a policy file (.toml) the live scheduler accepts.")
@click.option("--compare", default=None, metavar="NAME,NAME,...",
              help="Instead of --policy, policies to compare: dispatch, fifo, fifo-strict, fifo-easy, priority, drf, "
                   "sjf, srtf, las, or files.")
@click.option("--est-error", default="lognormal:1", show_default=True, metavar="SPEC",
              help="What users' estimates look like: lognormal:SIGMA (0 < SIGMA <= 5), history, oracle or none.")
@click.option("--ckpt-cost", default="30s,30s", show_default=True, metavar="SAVE,RESTORE",
              help="Checkpoint save and restore time a preemption costs (each at most 1d).")
@click.option("--time-scale", type=click.FloatRange(0.001, 1000), default=1.0, show_default=True,
              help="Divide submit times by this (2 = arrivals twice as dense).")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of the table.")
@click.option("--plot", default=None, metavar="FILE.png",
              help="Write JCT CDF, queue and utilization plots (.png, .svg, .pdf, ...).")
@click.option("--suite", is_flag=True, help="Instead of TRACE: the workload suite (the Philly and Alibaba weeks and "
              "the generated lab weeks), every policy against fifo, fifo-easy, las and srtf, as one score card.")
@click.option("--workloads", default=None, metavar="NAME,NAME,...", help="With --suite: only these workloads.")
@click.option("--traces", "traces_dir", default=None, metavar="DIR",
              help="With --suite: where philly_week.csv and alibaba_gpu2023_week.csv are (default: the two installed with dispatch).")
@click.option("--out", "out_json", default=None, metavar="FILE.json",
              help="Also write what --json prints (with --suite, the card) to this file.")
@click.option("--export", "export_dir", default=None, metavar="DIR",
              help="With --suite: write each week as DIR/NAME.csv (the trace format) and run nothing.")
@click.option("--debug", is_flag=True, help="Show a traceback on an internal error.")
def simulate(trace, gpus, gpus_per_node, nodes_spec, policy, compare, est_error, ckpt_cost, time_scale, seed,
             as_json, plot, suite, workloads, traces_dir, out_json, export_dir, debug):
    """Replay a job trace through the live scheduler's policy code, and compare policies."""
    import random
    from dataclasses import replace

    from ..lab.suite_run import names_a_file, read_trace
    from ..scheduler.policy_source import load_policy_file
    from ..sim.compare import simulate as run, table
    from ..sim.nodes import make_nodes
    from ..sim.policies import resolve
    from ..sim.workload import EstimateModel

    check_options(click.get_current_context(), suite, export_dir)
    if time_scale != time_scale:  # nan passes FloatRange
        raise InvalidRequestError("--time-scale: give a number from 0.001 to 1000", field="--time-scale")
    names = policy_names(policy, compare)
    if suite and export_dir:
        from ..lab.suite_run import export

        for path, nodes in export(export_dir, workloads=workloads, traces_dir=traces_dir, seed=seed):
            click.echo(f"{path}  --nodes {nodes}")
        return
    save_s, restore_s = parse_ckpt_cost(ckpt_cost)
    estimates = EstimateModel.parse(est_error)  # a bad SPEC: one line before any run
    from ..lab.report import check_file_path, check_path

    if out_json:  # (before any run, as --plot: a long comparison is not lost to a typo)
        check_file_path(out_json, "--out", "sim.json")
    if suite:
        from ..lab.suite_run import suite_card

        card, text_ = suite_card(names, workloads=workloads, traces_dir=traces_dir, seed=seed,
                                 estimates=est_error, ckpt_s=(save_s, restore_s))
        click.echo(json.dumps(card, indent=1) if as_json else text_)  # first: a bad --out loses no run
        write_json(out_json, card)
        return
    if not trace:
        raise InvalidRequestError("give a TRACE.csv to replay, or --suite", field="TRACE")
    jobs = read_trace(trace)
    if time_scale != 1.0:
        jobs = [replace(j, submit_s=j.submit_s / time_scale) for j in jobs]
    nodes = make_nodes(nodes_spec, gpus, gpus_per_node)
    if plot:
        check_path(plot)
    files = {n: load_policy_file(n)[0] for n in names if names_a_file(n)}
    policies = [resolve(n, files) for n in names]
    t0 = time.perf_counter()
    said = (lambda name, i, n: click.echo(f"dispatch: {name} simulated ({i} of {n}, {time.perf_counter() - t0:.0f}s "
                                          "so far)", err=True)) if sys.stderr.isatty() and len(policies) > 1 else None
    out = run(jobs, nodes, policies, estimates=estimates, make_rng=random.Random, seed=seed,
              ckpt_save_s=save_s, ckpt_restore_s=restore_s, progress=said)
    out["wall_s"] = round(time.perf_counter() - t0, 2)
    results = out.pop("results")
    if as_json:
        click.echo(json.dumps(out, indent=1))
    else:
        click.echo(table(out))
    write_json(out_json, out)  # after the table or JSON, as the plot: a bad --out or --plot loses no run
    if plot:
        from ..lab.report import plot as draw

        draw(out | {"results": results}, plot)
    if not as_json:
        click.echo(f"simulated in {out['wall_s']}s" + (f"; plot in {plot}" if plot else "")
                   + (f"; JSON in {out_json}" if out_json else ""))
    out["results"] = results


@click.command()
@click.option("--csv", "as_csv", is_flag=True, help="Print them in the trace format (which `dispatch simulate` "
              "replays), with the columns state, exit_code and team after it.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON list instead of the table.")
@click.option("--since", default=None, metavar="DURATION|DATE",
              help="Only jobs submitted this long ago or later (7d), or from this date (2026-12-01, 2026-12-01T09:30).")
@click.argument("job_ids", nargs=-1, metavar="[JOB|LOW-HIGH]...")
@filter_options
@common
def history(ctx, job_ids, as_csv, as_json, since, users, states, names, teams):
    """Jobs that ended: who, what, how they ended (ids, ranges, an array's id or 12_5 as sacct's -j;
    -u, --state, --name, --team to filter, as sacct's);
    one that never started (a command that could not start, a failed dependency, cancelled while
    pending) ran '-'. --csv, the jobs that ran, replays a lab's own week in `dispatch simulate`."""
    from . import _table
    from ..core.arrays import label
    from ..core.units import rough

    if as_csv and as_json:
        raise InvalidRequestError("give --csv or --json, not both", field="--csv")
    jobs, rows = history_rows(ctx.client, ctx.ns, since, selection(job_ids, users, states, names, teams),
                              ran_only=as_csv)  # (a trace holds work: a job that never ran has none)
    if as_csv:
        from ..sim.workload import format_trace

        click.echo(format_trace(jobs, [(r["state"], "" if r["exit_code"] is None else r["exit_code"], r["team"])
                                       for r in rows]), nl=False)
    elif as_json:
        click.echo(json.dumps(rows, indent=1))
    else:
        click.echo(_table([[label({**r, "id": r["job_id"]}), r["name"] or "-", r["user"], r["team"] or "-", r["priority"], r["num_gpus"],
                            "|".join(r["gpu_type"]) or "any", rough(r["duration_s"]) if r["ran"] else "-", r["state"],
                            exit_words(r["exit_code"])] for r in rows],
                          ["ID", "NAME", "USER", "TEAM", "CLASS", "GPUS", "GPU TYPE", "RAN", "STATE", "EXIT"]))


def history_rows(client, ns: str, since: str | None, sel=None, *, ran_only: bool = True) -> tuple[list, list[dict]]:
    """Jobs that ran to an end (those `sel`, a core.selection.Selection, picks; without `ran_only`, those
    that ended without starting too) as TraceJobs (submit times from the first one; the run time over
    every attempt, accounting.work_s) and as plain rows (those fields and state, exit_code, team, name,
    ran: whether it started)."""
    from dataclasses import asdict

    from ..sim.workload import TraceJob
    from ..core.arrays import label
    from ..core.accounting import first_start, work_s
    from ..lab.window import seconds_ago
    from ..store.ended import read_history

    since_ms = None
    if since is not None:  # ('' too: an empty value is refused, never taken for no window)
        now = time.time()
        since_ms = int(max(0.0, now - seconds_ago(since, now, flag="--since")) * 1000)  # (before 1970: all)
    ids = set(sel.ids) if sel is not None else set()  # a job's id, 12_5, or an array's id (all its elements)
    found = [r for r in read_history(client, ns, since_ms, ran_only=ran_only) if (sel is None or sel.matches(r))
             and (not ids or r["id"] in ids or label(r) in ids or r["array_of"] in ids)]
    first = min((r["submitted_at"] for r in found), default=0.0)
    jobs = [TraceJob(label(r), round(r["submitted_at"] - first, 3), r["user"], r["gpus_requested"],
                     round(max(0.001, work_s(r)), 3), tuple(r["gpu_types"]), r["priority"], r["team"])
            for r in found]
    names = {"job_id": "job_id", "submit_s": "submit_time_s", "gpus": "num_gpus", "gpu_types": "gpu_type"}
    rows = [{names.get(k, k): v for k, v in asdict(j).items()} | {"state": r["state"], "exit_code": r["exit_code"],
                                                                   "exit_status": r["exit_status"], "signal": r["signal"],
                                                                   "team": r["team"], "name": r["name"],
                                                                   "array_of": r["array_of"],
                                                                   "array_index": r["array_index"],
                                                                   "ran": first_start(r) is not None,
                                                                   # (epoch seconds; submit_time_s is the trace's;
                                                                   # started_at: its first attempt's start)
                                                                   "submitted_at": r["submitted_at"],
                                                                   "started_at": first_start(r),
                                                                   "finished_at": r["finished_at"], "node": r["node"]}
            for j, r in zip(jobs, found)]
    return jobs, rows


@click.command()
@click.option("--since", default="7d", show_default=True, metavar="DURATION|DATE",
              help="The window: jobs that ended this long ago or later (30d, 12h), or from this date (2026-12-01).")
@click.option("--until", default=None, metavar="DURATION|DATE",
              help="...and this long ago or earlier, or up to this date (default: now).")
@click.option("--by", default="user", show_default=True, metavar="user|team|class|gpu-type",
              help="Group by user, team, priority class, or the GPU type the job ran on.")
@click.option("--csv", "as_csv", is_flag=True, help="Print CSV (hours and seconds as numbers, the total last).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of the table.")
@common
def report(ctx, since, until, by, as_csv, as_json):
    """GPU-hours, outcomes, queue waits and lost and idle GPU-hours per user, team, class or GPU type.

    Adds up the jobs that ended in the window, as Slurm's sreport does: GPU-H is the time every attempt
    held its GPUs, preempted and lost ones included. E.g. dispatch report --since 30d --by team --csv
    """
    from . import _table
    from ..core import accounting
    from ..core.units import age
    from ..lab.window import seconds_ago
    from ..store.ended import read_accounting

    accounting.check_by(by)
    if as_csv and as_json:
        raise InvalidRequestError("give --csv or --json, not both", field="--csv")
    now = time.time()
    # A window that opens before 1970 is everything, as for history and tune (nothing is older).
    lo = max(0.0, now - seconds_ago(since, now, flag="--since"))
    hi = now - seconds_ago(until, now, flag="--until") if until else now
    if hi <= lo:
        raise InvalidRequestError(f"--until {until} is not after --since {since}" if until else
                                  f"--since {since} is not in the past", field="--until" if until else "--since")
    got = read_accounting(ctx.client, ctx.ns, int(lo * 1000), int(hi * 1000))
    rep = accounting.report(got["jobs"], by, lo, hi, types=got["types"], samples=got["samples"],
                            sample_s=got["sample_s"], skipped=got["skipped"])
    rows = [g.row() for g in rep.groups]
    if as_json:
        click.echo(json.dumps({"by": by, "since": round(lo, 3), "until": round(hi, 3), "groups": rows,
                               "total": rep.total.row(), "skipped": rep.skipped, "idle_from": rep.idle_from},
                              indent=1))
        return
    if as_csv:
        import csv
        import io

        out = io.StringIO()
        w = csv.writer(out, lineterminator="\n")
        w.writerow([by if k == "group" else k for k in rep.total.row()])
        w.writerows([["" if v is None else v for v in r.values()] for r in rows + [rep.total.row()]])
        click.echo(out.getvalue(), nl=False)
        return
    header, table = accounting.table_rows(rep, age)
    click.echo(_table(table, header))
    for line in _report_notes(rep, since, until):
        click.echo(line)


def _report_notes(rep, since: str, until: str | None) -> list[str]:
    """The table's footer: the window, what GPU-H counts, records skipped, what idle covers."""
    from ..core.model import IDLE_UTIL_PCT

    def when(t: float) -> str:
        return time.strftime("%Y-%m-%d %H:%M", time.localtime(t))

    lines = [f"jobs that ended from {when(rep.since)} to {when(rep.until)} (--since {since}"
             f"{f' --until {until}' if until else ''}; a running job counts once it ends)",
             "GPU-H: the time every attempt held its GPUs in the window, preempted and lost ones included; "
             "LOST: work lost to preemption and dead nodes"]
    if rep.skipped:
        lines.append(f"{rep.skipped} job record{'s' if rep.skipped != 1 else ''} could not be read: left out")
    if rep.idle_from is None:
        lines.append("IDLE: no utilization samples in the window (the scheduler keeps 12 h of them)")
    elif rep.idle_from > rep.since + 60:
        lines.append(f"IDLE: held GPUs under {IDLE_UTIL_PCT:g}% utilization in the scheduler's 15 s samples, from "
                     f"{when(rep.idle_from)} on (12 h are kept)")
    return lines


def history_csv(client, ns: str, since: str | None) -> str:
    """Jobs that ran to an end in the trace format (submit times from the first one exported)."""
    from ..sim.workload import format_trace

    return format_trace(history_rows(client, ns, since)[0])


@click.command()
@click.option("--since", default=None, metavar="DURATION",
              help="Replay the jobs submitted in this window that ran to an end, as `dispatch history --since` "
                   "lists them (default 7d; with --trace and no --since, only the traces).")
@click.option("--trace", "traces", multiple=True, type=click.Path(dir_okay=False), metavar="FILE.csv",
              help="Also replay this trace (repeatable): e.g. `dispatch history --csv` of another week.")
@click.option("--nodes", "nodes_spec", default=None, metavar="SPEC",
              help="The cluster, as for simulate: NODESxGPUSxTYPE-MEMGB,... (default: the live nodes in Redis).")
@click.option("--gpus", type=click.IntRange(1, MAX_CLUSTER_GPUS), default=None,
              help="Untyped GPUs, in nodes of --gpus-per-node.")
@click.option("--gpus-per-node", type=click.IntRange(1, 1024), default=8, show_default=True)
@click.option("--current", default="live", show_default=True, metavar="FILE|live|default",
              help="The policy to beat: a file, the policy in force, or the built-in defaults.")
@click.option("--out", default="dispatch-tuned.toml", show_default=True, type=click.Path(dir_okay=False),
              help="Where to write the best candidate.")
@click.option("--budget", type=click.IntRange(1, 10_000), default=12, show_default=True,
              help="Candidates to simulate (each on every workload, over 2 seeds).")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of the table.")
@common
def tune(ctx, since, traces, nodes_spec, gpus, gpus_per_node, current, out, budget, seed, as_json):
    """Search the policy's knobs on this lab's own history and write the best candidate as a policy file."""
    import random
    from pathlib import Path

    from . import _table
    from ..core.errors import ConnectionError as NoRedis, NoServer
    from ..lab.report import check_file_path
    from ..lab.suite_run import names_a_file, read_trace
    from ..policy.render import diff_policies, render_policy
    from ..scheduler.policy_changes import named_policy
    from ..sim.nodes import make_nodes
    from ..sim.tune import Workload, changes_table, tune as search
    from ..sim.workload import parse_trace

    check_file_path(out, "--out", "dispatch-tuned.toml")
    workloads = [Workload(path, read_trace(path, field="--trace")) for path in traces]
    if since is not None or not traces:
        window = since or "7d"
        jobs = parse_trace(history_csv(ctx.client, ctx.ns, window), name="history")
        if jobs:
            workloads.insert(0, Workload(f"history ({window})", jobs))
        elif not traces:
            raise InvalidRequestError(f"no job submitted in the last {window} ran to an end in namespace {ctx.ns} "
                                      f"(`dispatch history --since {window}` lists them): run some jobs "
                                      f"first, or pass --trace FILE.csv (e.g. a `dispatch history --csv` export)",
                                      field="--since")
    nodes = make_nodes(nodes_spec, gpus, gpus_per_node) if nodes_spec or gpus else _live_cluster(ctx)
    try:
        pset, _ = named_policy(current, lambda: (ctx.client, ctx.ns))
    except (NoRedis, NoServer) as e:  # no server at all, or one that does not answer
        e.hint = "`--current live` reads the policy in force from Redis; or give --current FILE or default"
        raise
    t0 = time.perf_counter()
    result = search(workloads, nodes, pset, budget=budget, rng=random.Random(seed), make_rng=random.Random, seed=seed)
    wall_s = round(time.perf_counter() - t0, 2)
    best = result.best
    report = {"current": result.current.figures, "candidate": best.figures if best else None,
              "out": out if best else None, "tried": len(result.trials), "wall_s": wall_s,
              "workloads": {w.name: len(w.trace) for w in workloads}, "gpus": sum(len(g) for _, g in nodes),
              "trials": [{"label": t.label, "avg_jct_s": t.figures["avg_jct_s"], "rejected": t.rejected or None}
                         for t in result.trials]}
    if best is not None:
        try:
            Path(out).write_text(render_policy(best.policy))
        except OSError as e:
            raise InvalidRequestError(f"--out: cannot write {out}: {e.strerror or e}", field="--out") from None
        report["changes"] = [{"setting": s, "a": a, "b": b} for s, a, b in diff_policies(pset, best.policy)]
    if as_json:
        click.echo(json.dumps(report, indent=1))
        return
    jobs = ", ".join(f"{n} ({c} jobs)" for n, c in report["workloads"].items())
    click.echo(f"replayed {jobs} on {report['gpus']} GPUs; {len(result.trials)} candidates against {current} "
               f"in {wall_s}s (estimates lognormal:1, checkpoints 30s,30s, 2 seeds)")
    if best is None:
        click.echo(f"no candidate beats the policy in force ({current}): nothing written")
        return
    click.echo(_table(changes_table(result.current.figures, best.figures), ["PREDICTED", current, out, "CHANGE"]))
    click.echo(_table([[c["setting"], c["a"], c["b"]] for c in report["changes"]], ["SETTING", current, out]))
    click.echo(f"wrote {out} ({best.label}); try it: dispatch policy apply {out}")


def _live_cluster(ctx):
    """The nodes in Redis as the simulator's cluster: the live ones, else every one it last heard from."""
    from dataclasses import replace

    from ..clock import now_ms
    from ..config import Timing
    from ..store.nodes import read_nodes

    from ..core.errors import ConnectionError as NoRedis, NoServer

    try:
        found, _ = read_nodes(ctx.client, ctx.ns)
    except (NoRedis, NoServer) as e:
        e.hint = "the cluster comes from the live nodes' records; without Redis give it with --nodes SPEC or --gpus N"
        raise
    timeout = Timing.from_env().node_timeout_s
    alive = [n for n in found if n.alive(now_ms(), timeout)] or found
    if not alive:
        raise InvalidRequestError(f"no nodes in namespace {ctx.ns} to replay on: give the cluster with --nodes SPEC "
                                  f"or --gpus N", field="--nodes")
    return [(n.name, tuple(replace(g, mem_used_gb=0.0, util_pct=0.0, blocked="") for g in n.gpus))
            for n in sorted(alive, key=lambda n: n.name) if n.gpus]
