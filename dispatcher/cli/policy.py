"""`dispatch policy ...`: check a file, show, compare, apply and roll back the policy in force
(registered lazily in cli.py)."""

from __future__ import annotations

import json
import os
import time

import click

from . import _table, common, json_flag
from ..clock import now_ms


@click.group()
def policy():
    """Check, diff, apply or roll back a policy."""


@policy.command("check")
@click.argument("path", type=click.Path(dir_okay=False))
def policy_check(path):
    """Validate a policy file: exit 0 and a summary, or one line naming the bad key."""
    from ..policy.promises import short_span
    from ..policy.render import schedule_entry
    from ..scheduler.policy_source import load_policy_file

    pset, _ = load_policy_file(path)
    for name, cfg in pset.profiles.items():
        w = cfg.weights
        step = 100.0 / 3 * w.get("priority", 0.0)
        rest = 100.0 * sum(v for k, v in w.items() if k != "priority")
        tiers = len(cfg.las_thresholds_gpu_s)
        if step > rest and (cfg.preempt_by != "class+attained" or cfg.class_step > tiers):
            crossing = "classes never cross"
        else:
            crossing = (f"classes cross: one class step is worth {cfg.class_step:g} LAS tiers, and the estimate, aging "
                        f"and fair share can lift a job past a class")
        targets = ", ".join(f"{c} {short_span(t)}" for c, t in cfg.targets_s.items())
        click.echo(f"profile {name}: weights {w}; {crossing}; wait targets {targets}")
    for e in pset.schedule:
        click.echo(f"schedule: {schedule_entry(e)}")  # (its days too: a weekend rule is no all-day one)
    teams = next(iter(pset.profiles.values())).teams
    for t, q in teams.items():
        click.echo(f"team {t}: guarantee {q.guarantee_gpus} GPUs, limit {q.limit_gpus if q.limit_gpus is not None else 'none'}")
    a = pset.alerts
    click.echo(f"alerts: critical_wait {short_span(a.critical_wait_s)}, high_wait {short_span(a.high_wait_s)}, "
               f"low_util {a.low_util_pct:g}% for {short_span(a.low_util_for_s)}")
    click.echo(f"{path}: ok")


@policy.command("show")
@json_flag
@common
def policy_show(ctx, as_json):
    """The policy in force: the profile the scheduler runs now, with every setting."""
    from ..scheduler.policy_source import policy_in_force
    from ..policy.profiles import describe

    profile, config, source = policy_in_force(ctx.client, ctx.ns)
    out = {"profile": profile, "source": source, "settings": describe(config)}
    if as_json:
        click.echo(json.dumps(out, indent=1))
        return
    click.echo(f"profile {profile} from {source}")
    for k, v in out["settings"].items():
        click.echo(f"  {k}: {v}")


def print_changes(rows, a: str, b: str, as_json: bool, extra: dict | None = None) -> None:
    """The rows of diff_policies as `setting  A  B`, or JSON; "no differences" for none."""
    if as_json:
        click.echo(json.dumps({"a": a, "b": b, "differences": [{"setting": s, "a": va, "b": vb}
                                                                for s, va, vb in rows], **(extra or {})}, indent=1))
    elif rows:
        click.echo(_table([list(r) for r in rows], ["SETTING", a, b]))
    else:
        click.echo("no differences")


@policy.command("diff")
@click.argument("a", metavar="A")
@click.argument("b", metavar="B")
@json_flag
@common
def policy_diff(ctx, a, b, as_json):
    """Every setting that differs between two policies. A and B: policy files, `live` (the policy in
    force) or `default` (the built-in defaults)."""
    from ..policy.render import diff_policies
    from ..scheduler.policy_changes import named_policy

    client_of = lambda: (ctx.client, ctx.ns)  # noqa: E731 - Redis only for `live`
    pa, _ = named_policy(a, client_of)
    pb, _ = named_policy(b, client_of)
    print_changes(diff_policies(pa, pb), a, b, as_json)


def _report_apply(out: dict, what: str, as_json: bool) -> None:
    for line in out.get("warnings") or ():
        click.echo(f"dispatch: warning: {line}", err=True)
    if as_json:
        print_changes(out["changes"], "live", what, True,
                      {k: v for k, v in out.items() if k != "changes"})
        return
    if out["version"] is None:
        click.echo(f"{what} is the policy in force already; nothing to apply")
        return
    print_changes(out["changes"], "live", what, False)
    then = ("the scheduler switches to it on its next cycle; `dispatch policy show` confirms"
            if out["scheduler"] else "no scheduler is running now: the next one to lead takes it")
    click.echo(f"applied {what} (digest {out['digest']}); {then}; `dispatch policy rollback` undoes it")


@policy.command("apply")
@click.argument("path", type=click.Path(dir_okay=False))
@json_flag
@common
def policy_apply(ctx, path, as_json):
    """Switch the running scheduler to a policy file, without a restart; prints what changes. The file is
    checked first: a bad one is one line naming the key, and nothing is written."""
    from ..scheduler.policy_changes import apply
    from ..scheduler.policy_source import load_policy_file

    _, text = load_policy_file(path)
    out = apply(ctx.client, ctx.ns, text, f"{os.path.abspath(path)} (applied)", now_ms())
    _report_apply(out, path, as_json)


@policy.command("rollback")
@click.option("--to", "back", type=click.IntRange(1, 100), default=1, show_default=True, metavar="N",
              help="Go N policies back in `dispatch policy history` (1: the one before the policy in force).")
@json_flag
@common
def policy_rollback(ctx, back, as_json):
    """Return to the previous policy the scheduler ran (or the Nth back), as `apply` would."""
    from ..scheduler.policy_changes import rollback

    out = rollback(ctx.client, ctx.ns, back, now_ms())
    _report_apply(out, f"#{out['target']['number']}", as_json)


@policy.command("history")
@json_flag
@common
def policy_history(ctx, as_json):
    """The last policies the scheduler ran, newest first, and which is in force."""
    from ..scheduler.policy_changes import history

    entries = history(ctx.client, ctx.ns)
    if as_json:
        click.echo(json.dumps(entries, indent=1))
        return
    if not entries:
        click.echo("no policy recorded yet: a scheduler records each policy it runs")
        return
    rows = [[f"#{e['number']}", time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(e["loaded_ms"] / 1000)),
             e["source"], e["digest"], "in force" if e["in_force"] else
             (f"rollback --to {e['back']}" if e["back"] else "")] for e in entries]
    click.echo(_table(rows, ["#", "LOADED", "SOURCE", "DIGEST", ""]))
